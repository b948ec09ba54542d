//! `inspect`: the module tree, shapes, parameters and the estimate, without running anything.

use crate::cli::InspectArgs;
use crate::exit_codes::{self as code, user};
use crate::files::{check_outputs, write_file};
use crate::output;
use crate::settings::Workload;
use anyhow::Result;
use deeplab::Architecture;

pub fn inspect(args: &InspectArgs) -> Result<i32> {
    let w = Workload::load(&args.config)?;
    if let Some(j) = &args.json {
        check_outputs(&[("config", w.path.as_path())], &[("--json", j.as_path())])?;
    }
    let (ceiling, notes) = crate::settings::check_device_section(&w.config, &args.ceiling)?;
    let arch =
        Architecture::new(&w.config).map_err(|e| user(code::CONFIG_INVALID, e.to_string()))?;
    for n in notes {
        tell!("oom-bisect: note: {n}");
    }
    show!("{}", output::inspect::inspect(&w.config, &arch, ceiling));
    if let Some(j) = &args.json {
        let v = output::inspect::json(&w.config, &arch, ceiling);
        let v = output::stamped(v, w.config.device.memory_model());
        write_file(j, &serde_json::to_string_pretty(&v).expect("json"))?;
    }
    Ok(code::SUCCESS)
}
