//! The estimate engine: a trial answered by the model's own memory estimate
//! ([`deeplab::Architecture::memory_estimate`]) instead of training, as the same events a training
//! child prints. The fake trials behind the search's tests: fast, deterministic, and through the
//! same classification as real ones. A run past the ceiling ends the way the CPU ceiling's
//! allocator ends a real trial: its refusal line on stderr and the exit code of an OOM.

use crate::classify::CPU_REFUSAL;
use crate::protocol::{exit, ChildEvent, Location, Request};
use deeplab::{Architecture, Config, Phase};

/// What the engine "printed": stdout events, stderr, exit code.
pub struct Answer {
    pub events: Vec<ChildEvent>,
    pub stderr: String,
    pub exit_code: i32,
}

/// The device name estimate trials report.
pub const DEVICE: &str = "estimate (no model runs)";

/// Answers `req` from the estimate.
pub fn answer(req: &Request) -> Answer {
    let parsed =
        Config::from_toml_str(&req.config).and_then(|c| Architecture::new(&c).map(|a| (c, a)));
    let (config, arch) = match parsed {
        Ok(x) => x,
        Err(e) => {
            return Answer {
                events: vec![],
                stderr: format!("oom-bisect __trial: config: {e}"),
                exit_code: exit::INCONCLUSIVE,
            }
        }
    };
    let est = arch.memory_estimate(&config);
    let ceiling = req.ceiling.bytes(crate::device::host_total());
    let mut events = vec![
        ChildEvent::Start {
            backend: req.backend,
            device: DEVICE.into(),
            ceiling_bytes: ceiling,
            context_bytes: 0,
            total_bytes: crate::device::host_total(),
            seconds: 0.0,
        },
        ChildEvent::Built {
            in_use_bytes: est.between_steps,
            params: est.params as usize,
            seconds: 0.0,
        },
    ];
    // The forward stages of one step: what is held after each, until the ceiling.
    let mut held = est.between_steps;
    for s in est.stages.iter().filter(|s| s.runs) {
        held += s.saved_bytes;
        if held > ceiling {
            return refused(events, held - s.saved_bytes, s.saved_bytes);
        }
        events.push(mark(&s.id, held));
    }
    let peak = est.peak.total();
    if peak > ceiling {
        events.push(mark("loss", held));
        return refused(events, held, peak - held);
    }
    let mut step = 0;
    while !config.enough_steps(step, peak, ceiling) {
        events.push(ChildEvent::Step {
            step,
            seconds: 0.0,
            in_use_bytes: est.between_steps,
            loss: 0.0,
        });
        step += 1;
    }
    events.push(ChildEvent::Done {
        check: 0.0,
        peak_bytes: peak,
        peak_in_use_bytes: peak,
    });
    Answer {
        events,
        stderr: String::new(),
        exit_code: exit::FITS,
    }
}

fn mark(stage: &str, held: u64) -> ChildEvent {
    ChildEvent::Mark {
        at: Location {
            step: 0,
            phase: Phase::Forward,
            stage: stage.into(),
        },
        in_use_bytes: held,
        device_bytes: held,
        seconds: 0.0,
        events: None,
    }
}

/// Ends the answer as the CPU ceiling's allocator ends a trial: `request` bytes refused while
/// `in_use` were held.
fn refused(events: Vec<ChildEvent>, in_use: u64, request: u64) -> Answer {
    Answer {
        events,
        stderr: format!("{CPU_REFUSAL} {request} bytes (in use {in_use}) [estimate]"),
        exit_code: exit::OOM,
    }
}

/// `OOM_BISECT_FAKE_TRIAL_SECONDS`: a fake trial takes this long, as a real one would, so that the
/// scheduling of trials (parallel workers, trials started ahead) can be timed without a GPU.
pub const FAKE_SECONDS_ENV: &str = "OOM_BISECT_FAKE_TRIAL_SECONDS";

/// How long a fake trial takes (`OOM_BISECT_FAKE_TRIAL_SECONDS`, unset or empty: no time), or
/// why the variable's value is not one: the parent checks it before the first trial.
pub fn fake_seconds() -> Result<Option<f64>, String> {
    match std::env::var(FAKE_SECONDS_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Ok(v) if v.is_empty() => Ok(None),
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && (0.0..=3600.0).contains(&s) => Ok(Some(s)),
            _ => Err(format!(
                "{FAKE_SECONDS_ENV} is {v:?}: give seconds from 0 to 3600 (e.g. 0.5), or unset it"
            )),
        },
        Err(std::env::VarError::NotUnicode(v)) => Err(format!(
            "{FAKE_SECONDS_ENV} is {v:?}: give seconds from 0 to 3600 (e.g. 0.5), or unset it"
        )),
    }
}

pub fn pretend_to_train() {
    if let Ok(Some(s)) = fake_seconds() {
        std::thread::sleep(std::time::Duration::from_secs_f64(s));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::assemble;
    use crate::protocol::{BackendKind, Ceiling, Engine, Request};
    use crate::trial_report::{ChildExit, TrialOutcome, TrialReport};

    fn request(ceiling: Ceiling) -> Request {
        let mut c = deeplab::Config::example();
        c.model.backbone = deeplab::Backbone::Resnet18;
        c.data.size = [128, 128];
        Request {
            config: c.to_toml_string(),
            backend: BackendKind::Cpu,
            ceiling,
            engine: Engine::Estimate,
            fault: None,
            timeout_seconds: None,
            switches: Default::default(),
            ceiling_by: Default::default(),
            serve: false,
            probe: false,
            fresh: false,
            ahead: false,
        }
    }

    /// The estimate's answer, classified as a child's is: a fit with its peak, an OOM with the
    /// stage it reached and the refused size, an invalid config an error.
    fn run(request: &Request) -> TrialReport {
        let a = answer(request);
        assemble(&a.events, ChildExit::Code(a.exit_code), &a.stderr, 0.0)
    }

    #[test]
    fn the_estimate_classifies_like_a_child() {
        let fits = run(&request(Ceiling::Bytes(64 << 30)));
        assert_eq!(fits.outcome(), TrialOutcome::Fits, "{fits:?}");
        let peak = fits.memory.peak_bytes.unwrap();
        assert!(peak > 10 << 20, "{peak}");
        let oom = run(&request(Ceiling::Bytes(peak / 2)));
        assert_eq!(oom.outcome(), TrialOutcome::Oom, "{oom:?}");
        let info = oom.oom().unwrap();
        assert!(info.bytes.unwrap() > 0 && info.stage.is_some(), "{info:?}");
        let bad = Request {
            config: "[model]".into(),
            ..request(Ceiling::None)
        };
        assert_eq!(run(&bad).outcome(), TrialOutcome::Error);
    }
}
