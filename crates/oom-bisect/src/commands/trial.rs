//! `trial`: one measured trial with its per-stage table; its exit code is `git bisect run`'s.

use super::shared::{runner, say};
use crate::cli::{FaultArg, TrialArgs};
use crate::exit_codes as code;
use crate::files::{check_outputs, write_file};
use crate::oracle::request;
use crate::output;
use crate::settings::{DeviceSettings, Workload};
use anyhow::Result;
use deeplab::Architecture;
use oom_trial::{Fault, TrialOutcome, TrialRunner};

pub fn trial(args: &TrialArgs) -> Result<i32> {
    let w = Workload::load(&args.config)?;
    let device = DeviceSettings::resolve(&args.device, &w.config)?;
    say(&device.notes, false);
    if let Some(j) = &args.json {
        check_outputs(
            &[("config", args.config.config.as_path())],
            &[("--json", j)],
        )?;
    }
    let fault = args.fault.map(|f| match f {
        FaultArg::Sleep => Fault::Sleep,
        FaultArg::BrokenModule => Fault::BrokenModule,
        FaultArg::DeviceThreadOom => Fault::DeviceThreadOom,
    });
    let answered_by = match device.exec_command() {
        Some(command) => format!("your command: {}", output::one_line(&command, 400)),
        None => format!("memory model {}", w.config.device.memory_model().name()),
    };
    tell!(
        "oom-bisect: {} on {}, {answered_by}",
        output::title(&w.config),
        device.label(),
    );
    if let Some(why) = Architecture::new(&w.config)
        .ok()
        .and_then(|a| a.pytorch_refusal())
    {
        tell!("oom-bisect: note: {why}");
    }
    // One trial is read for its need, which a run stopped after one step would understate:
    // every step runs, unless the config says otherwise.
    let config = match w.config.train.one_step_below {
        Some(_) => w.config.clone(),
        None => w.config.measuring_need(),
    };
    let req = request(&config, &device, device.trial_engine(), fault);
    // Served, the command gets its trial as a served one: a check of its side of the protocol.
    // One trial gains nothing from a command that serves: served only where asked for, as a
    // check of the command's side; otherwise in a process of its own, whose peak is its largest
    // resident set rather than a sampled one.
    let r = match device.serve {
        oom_trial::Serves::Yes => {
            oom_trial::ServedRunner::new(runner(&device), None, device.serve).run(&req)
        }
        _ => runner(&device).run(&req),
    };
    let estimate = device.engine == oom_trial::Engine::Estimate;
    show!("{}", output::trial_table::trial_table(&r, estimate));
    if let Some(j) = &args.json {
        let v = serde_json::to_value(&r).expect("a trial report serialises");
        let v = output::stamped(v, w.config.device.memory_model());
        write_file(j, &serde_json::to_string_pretty(&v).expect("json"))?;
    }
    Ok(match r.outcome() {
        TrialOutcome::Fits => code::SUCCESS,
        TrialOutcome::Oom => code::OOM,
        TrialOutcome::Error | TrialOutcome::Timeout => code::INCONCLUSIVE,
    })
}
