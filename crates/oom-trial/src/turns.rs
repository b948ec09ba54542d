//! Taking turns on a shared card: trials under the ceiling share it, a trial without the ceiling
//! waits until it has the card alone (one lock file per card, and a gate that holds newcomers back
//! meanwhile).

use crate::protocol::Ceiling;

/// Where workers share a GPU, the path of the card's lock file, through which their trials take
/// turns: a trial under the ceiling runs beside the others (a shared lock), a trial without it (a
/// need, a probe past a boundary) waits until it has the card alone (an exclusive lock) and may
/// then take all the card has free. So it can neither crowd a neighbour held to its ceiling into
/// the driver's out-of-memory, nor be crowded out by one: its need is the card's to give, not a
/// share of it. Not set where a worker has its card to itself.
pub const CARD_LOCK_ENV: &str = "OOM_BISECT_CARD_LOCK";

/// A trial's turn on a card it shares ([`CARD_LOCK_ENV`]), held until dropped.
#[derive(Debug)]
pub struct CardTurn {
    _card: std::fs::File,
}

/// Waits for this trial's turn on its card where workers share it: `None` where they do not.
pub fn take_turn(ceiling: Ceiling) -> anyhow::Result<Option<CardTurn>> {
    let Some(path) = std::env::var_os(CARD_LOCK_ENV) else {
        return Ok(None);
    };
    turn(std::path::Path::new(&path), ceiling == Ceiling::None).map(Some)
}

/// A shared turn on the card of `path`, or the card alone (`alone`). Every trial passes a gate
/// first, which a trial waiting to be alone holds: no trial starts after it, so the running ones
/// finish and it is not kept waiting by a stream of newcomers.
fn turn(path: &std::path::Path, alone: bool) -> anyhow::Result<CardTurn> {
    use anyhow::Context;
    let open = |p: &std::path::Path| {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(p)
            .with_context(|| format!("the shared GPU's lock file {}", p.display()))
    };
    let gate = open(&path.with_extension("gate"))?;
    let card = open(path)?;
    gate.lock().context("the shared GPU's gate")?;
    match alone {
        true => card.lock(),
        false => card.lock_shared(),
    }
    .context("the shared GPU's lock")?;
    Ok(CardTurn { _card: card })
}

#[cfg(test)]
mod tests {
    use std::fs::{File, TryLockError};

    fn blocked(r: Result<(), TryLockError>) -> bool {
        matches!(r, Err(TryLockError::WouldBlock))
    }

    /// Trials under the ceiling share the card; one without it waits until they are done, keeps
    /// newcomers at the gate meanwhile, and then has the card alone.
    #[test]
    fn a_trial_without_a_ceiling_waits_to_have_the_card_alone() {
        let dir = std::env::temp_dir().join(format!("oom-bisect-turn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("card.lock");
        let a = super::turn(&path, false).unwrap();
        let b = super::turn(&path, false).unwrap();
        let probe = File::open(&path).unwrap();
        assert!(blocked(probe.try_lock()), "two shared turns at once");
        let alone = {
            let path = path.clone();
            std::thread::spawn(move || super::turn(&path, true).unwrap())
        };
        // Once the lone trial waits at the card, the gate is shut to newcomers.
        let gate = File::open(path.with_extension("gate")).unwrap();
        while gate.try_lock().is_ok() {
            gate.unlock().unwrap();
            std::thread::yield_now();
        }
        drop((a, b));
        let turn = alone.join().unwrap();
        assert!(
            blocked(probe.try_lock_shared()),
            "a shared turn beside the lone one"
        );
        drop(turn);
        assert!(probe.try_lock_shared().is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
