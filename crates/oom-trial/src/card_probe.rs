//! The card probe: this host's card read by a child of its own (`oom-bisect __trial` given
//! [`crate::protocol::Engine::Card`]), so that the CUDA context it measures is not held for the whole diagnosis.

use crate::card::{CardProps, CardSource};
use crate::protocol::{exit, Request, SUBCOMMAND};
use serde::{Deserialize, Serialize};

/// Reads this host's first visible card (the driver's properties) and what its CUDA context holds
/// (measured by NVML for this process alone). Runs in a probe child ([`probe`]): the context is
/// freed when it exits.
#[cfg(feature = "cuda")]
pub fn read_here() -> anyhow::Result<CardProps> {
    use anyhow::{anyhow, Context};
    let name = crate::cuda::probe()?;
    let v = cubecl::cuda::oom_bisect::read_card(0).map_err(|e| anyhow!("{e}"))?;
    let context_bytes =
        crate::cuda::own_context_bytes().context("the probe could not measure its CUDA context")?;
    Ok(CardProps {
        name,
        compute_capability: v.compute_capability,
        total_bytes: v.total_bytes,
        context_bytes,
        multiprocessors: v.multiprocessors,
        max_shared_memory_per_block: v.max_shared_memory_per_block as u64,
        warp_size: v.warp_size,
        max_threads_per_block: v.max_threads_per_block,
        max_block_dim: v.max_block_dim.into(),
        max_grid_dim: v.max_grid_dim.into(),
        source: CardSource::Probed,
    })
}

#[cfg(not(feature = "cuda"))]
pub fn read_here() -> anyhow::Result<CardProps> {
    anyhow::bail!("this binary was built without the `cuda` feature")
}

/// The probe's answer on its stdout, one JSON line.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ProbeAnswer {
    Card(CardProps),
    Failed(String),
}

/// The probe child's side (`oom-bisect __trial` given [`crate::protocol::Engine::Card`]): prints
/// this host's card, or why it cannot.
pub fn answer_probe() -> i32 {
    let answer = match read_here() {
        Ok(card) => ProbeAnswer::Card(card),
        Err(e) => ProbeAnswer::Failed(format!("{e:#}")),
    };
    let line = serde_json::to_string(&answer).expect("a card serialises");
    println!("{line}");
    match answer {
        ProbeAnswer::Card(_) => exit::FITS,
        ProbeAnswer::Failed(_) => exit::INCONCLUSIVE,
    }
}

/// How long the probe may take: a CUDA context takes under a second.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// This host's card, read by a child of `exe` (its CUDA context then holds no memory for the rest
/// of the run). `cuda_visible_devices` names the GPU the trials will see.
pub fn probe(
    exe: &std::path::Path,
    cuda_visible_devices: Option<&str>,
) -> anyhow::Result<CardProps> {
    use anyhow::{anyhow, bail, Context};
    use std::io::Write;
    use std::process::{Command, Stdio};
    let request = Request::probe();
    let mut cmd = Command::new(exe);
    cmd.arg(SUBCOMMAND)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(v) = cuda_visible_devices {
        cmd.env("CUDA_VISIBLE_DEVICES", v);
    }
    let mut child = cmd.spawn().context("could not start the card probe")?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(serde_json::to_string(&request)?.as_bytes())?;
    }
    let output = wait_at_most(child, PROBE_TIMEOUT)?;
    let text = String::from_utf8_lossy(&output.stdout);
    let answer = text
        .lines()
        .find_map(|l| serde_json::from_str::<ProbeAnswer>(l).ok());
    match answer {
        Some(ProbeAnswer::Card(c)) => Ok(c),
        Some(ProbeAnswer::Failed(why)) => bail!("the card probe failed: {why}"),
        None => Err(anyhow!(
            "the card probe gave no answer: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )),
    }
}

/// The child's output once it ends, or an error once `limit` has passed (the child killed).
fn wait_at_most(
    mut child: std::process::Child,
    limit: std::time::Duration,
) -> anyhow::Result<std::process::Output> {
    let start = std::time::Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            return Ok(child.wait_with_output()?);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("the card probe did not answer within {} s", limit.as_secs());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
