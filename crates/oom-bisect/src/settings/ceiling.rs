//! The memory ceiling: given by a flag or the config (`--memory-limit`, `--memory-fraction`,
//! `--gpu`, each excluding the others), checked against the device, and how it is held.

use crate::cli::{CeilingArgs, CeilingByArg};
use crate::exit_codes::{self as code, user};
use crate::gpus;
use anyhow::Result;
use deeplab::config::MemoryModel;
use deeplab::Config;
use oom_trial::{fmt_bytes, parse_size, BackendKind, Ceiling, CeilingBy, Engine};

/// A ceiling the user gave: how, its value as written, and the flag that gives it again.
pub(super) struct Given {
    kind: CeilingKind,
    value: String,
    pub arg: String,
}

impl Given {
    /// The note for a size in decimal units near a card's (`24GB`), where `ceiling` is one.
    pub fn decimal_warning(&self, ceiling: Ceiling) -> Option<String> {
        match (self.kind, ceiling) {
            (CeilingKind::Limit, Ceiling::Bytes(b)) => gpus::decimal_warning(&self.arg, b),
            _ => None,
        }
    }

    /// The card it names (`--gpu`, `device.gpu`).
    pub fn card(&self) -> Option<&'static gpus::Card> {
        match self.kind {
            CeilingKind::Gpu => gpus::by_name(&self.value),
            _ => None,
        }
    }
}

/// The three ways to give a ceiling, with their flag and their config key.
#[derive(Clone, Copy)]
pub(super) enum CeilingKind {
    Limit,
    Fraction,
    Gpu,
}

impl CeilingKind {
    const ALL: [CeilingKind; 3] = [CeilingKind::Limit, CeilingKind::Fraction, CeilingKind::Gpu];

    fn flag(self) -> &'static str {
        match self {
            CeilingKind::Limit => "--memory-limit",
            CeilingKind::Fraction => "--memory-fraction",
            CeilingKind::Gpu => "--gpu",
        }
    }

    fn key(self) -> &'static str {
        match self {
            CeilingKind::Limit => "device.memory_limit",
            CeilingKind::Fraction => "device.memory_fraction",
            CeilingKind::Gpu => "device.gpu",
        }
    }

    /// What the flags and the file say for this kind.
    fn given(self, args: &CeilingArgs, file: &deeplab::DeviceConfig) -> [Option<String>; 2] {
        match self {
            CeilingKind::Limit => [args.memory_limit.clone(), file.memory_limit.clone()],
            CeilingKind::Fraction => [
                args.memory_fraction.map(|f| f.to_string()),
                file.memory_fraction.map(|f| f.to_string()),
            ],
            CeilingKind::Gpu => [args.gpu.clone(), file.gpu.clone()],
        }
    }
}

/// Checks the config's `[device]` ceiling keys as a trial would (without looking for a device), so
/// that `inspect` refuses what `trial` refuses; the ceiling they give, or the one `memory_limit`
/// or `gpu` (inspect's flags) give instead, with the notes a trial would print about it.
pub fn check_device_section(
    config: &Config,
    flags: &CeilingArgs,
) -> Result<(Ceiling, Vec<String>)> {
    let (ceiling, given) = choose_ceiling(flags, config)?;
    let notes = given
        .and_then(|g| g.decimal_warning(ceiling))
        .into_iter()
        .collect();
    Ok((ceiling, notes))
}

/// The ceiling the user asked for: a flag (they exclude each other) over the file's one key; how
/// it was given, and the flag that gives it again.
pub(super) fn choose_ceiling(
    args: &CeilingArgs,
    config: &Config,
) -> Result<(Ceiling, Option<Given>)> {
    let given = |from: usize| -> Vec<(CeilingKind, String, &'static str)> {
        CeilingKind::ALL
            .into_iter()
            .filter_map(|k| {
                let name = if from == 0 { k.flag() } else { k.key() };
                k.given(args, &config.device)[from]
                    .clone()
                    .map(|v| (k, v, name))
            })
            .collect()
    };
    let (flags, file) = (given(0), given(1));
    if flags.is_empty() && file.len() > 1 {
        let keys: Vec<&str> = file.iter().map(|s| s.2).collect();
        return Err(user(
            code::CONFIG_INVALID,
            format!(
                "the config sets {} at once; set only one ceiling",
                keys.join(" and ")
            ),
        ));
    }
    match flags.into_iter().next().or(file.into_iter().next()) {
        None => Ok((Ceiling::None, None)),
        Some((kind, value, name)) => {
            let c = parse_ceiling(kind, &value, name)?;
            let word = crate::output::shell_word(&value);
            let arg = format!("{} {word}", kind.flag());
            Ok((c, Some(Given { kind, value, arg })))
        }
    }
}

/// The smallest and largest ceilings taken: below a MiB nothing trains, and no device has a PiB.
const MIN_CEILING: u64 = 1 << 20;
const MAX_CEILING: u64 = 1 << 50;
/// The smallest share of a device taken as a ceiling.
const MIN_FRACTION: f64 = 1e-4;

/// One ceiling parsed; errors name where it came from (`name`: the flag or the config key).
pub(super) fn parse_ceiling(kind: CeilingKind, value: &str, name: &str) -> Result<Ceiling> {
    let bad = |m: String| user(code::BAD_CEILING, format!("{name}: {m}"));
    let shown = deeplab::config::cut_line(value, 80);
    match kind {
        // `none` removes a ceiling the config sets (the flag wins over the file).
        CeilingKind::Limit if value.trim().eq_ignore_ascii_case("none") => Ok(Ceiling::None),
        CeilingKind::Limit if value.trim().chars().all(|c| c.is_ascii_digit() || c == '.') => {
            Err(bad(format!(
                "`{shown}` has no unit: write {0}GiB, {0}MiB or {0}GB (decimal), or {0}B for \
                 bytes",
                shown.trim()
            )))
        }
        CeilingKind::Limit => {
            let size = parse_size(value).map_err(|m| bad(m.replace(value, &shown)))?;
            match size {
                MIN_CEILING..=MAX_CEILING => Ok(Ceiling::Bytes(size)),
                _ => Err(bad(format!(
                    "{shown} is outside what a device can be ({} to {})",
                    fmt_bytes(MIN_CEILING),
                    fmt_bytes(MAX_CEILING)
                ))),
            }
        }
        CeilingKind::Fraction => match value.parse::<f64>() {
            Ok(f) if (MIN_FRACTION..=1.0).contains(&f) => Ok(Ceiling::Fraction(f)),
            _ => Err(bad(format!("{shown} is not in [{MIN_FRACTION}, 1]"))),
        },
        CeilingKind::Gpu => match gpus::lookup(value) {
            Some((b, _)) => Ok(Ceiling::Bytes(b)),
            None => Err(bad(format!("unknown card `{shown}`\n{}", gpus::table()))),
        },
    }
}

/// A card's memory as sold is a little more than what CUDA counts of it (an H200's "141 GB" is
/// 139.8 GiB to CUDA): a `--gpu` card up to this share larger than the device is the device itself.
const SAME_CARD_MARGIN: u64 = 50;

/// The ceiling, and its bytes where they can be known now, refusing one larger than the device or
/// host. A `--gpu` card (`card`) a little larger than the device is taken as the whole device.
pub(super) fn check_ceiling(
    ceiling: Ceiling,
    card: bool,
    backend: BackendKind,
    engine: &Engine,
    (device_name, virtual_total): (Option<&str>, Option<u64>),
    notes: &mut Vec<String>,
) -> Result<(Ceiling, Option<u64>)> {
    let as_given = |ceiling: Ceiling| {
        let bytes = match ceiling {
            Ceiling::Bytes(b) => Some(b),
            _ => None,
        };
        Ok((ceiling, bytes))
    };
    let (total, what) = match (engine, backend) {
        (Engine::Estimate, _) => return as_given(ceiling),
        // A command on the CPU gets the ceiling to honour ($OOM_BISECT_MEMORY_LIMIT); nothing here
        // enforces it, so it may be any size, a GPU's on a smaller host included.
        (Engine::Exec { .. }, BackendKind::Cpu) => {
            notes.push(
                "--exec on the CPU: the ceiling is passed on to your command \
                 ($OOM_BISECT_MEMORY_LIMIT), not enforced"
                    .to_string(),
            );
            return as_given(ceiling);
        }
        // A virtual card (stream-only trials without a GPU): the memory CUDA reports for it.
        (_, BackendKind::Cuda) if virtual_total.is_some() => (
            virtual_total.unwrap_or_default(),
            "the virtual card".to_string(),
        ),
        (_, BackendKind::Cuda) => {
            let total = oom_trial::cuda_total_bytes().map_err(|e| {
                user(
                    code::NO_DEVICE,
                    format!("cannot read the device's memory: {e}"),
                )
            })?;
            (
                total,
                format!("the device ({})", device_name.unwrap_or("CUDA device 0")),
            )
        }
        (_, BackendKind::Cpu) => (oom_trial::host_total(), "this host's memory".to_string()),
    };
    if let Ceiling::Bytes(b) = ceiling {
        let same_card = card && backend == BackendKind::Cuda;
        if same_card && b > total && b - total <= total / SAME_CARD_MARGIN {
            notes.push(format!(
                "the card's {} as sold are {} as CUDA counts this device: the ceiling is the whole \
                 device",
                fmt_bytes(b),
                fmt_bytes(total)
            ));
            return Ok((Ceiling::None, Some(total)));
        }
        if b > total {
            // A GPU-sized ceiling on a machine without one: what can answer here instead.
            let instead = match backend {
                BackendKind::Cpu => {
                    ". Without a GPU, --estimate answers every trial from the model's own \
                     estimate in seconds, and --exec runs your own training command"
                }
                BackendKind::Cuda => "",
            };
            return Err(user(
                code::BAD_CEILING,
                format!(
                    "the ceiling {} is larger than {what} ({}); choose at most {}{instead}",
                    fmt_bytes(b),
                    fmt_bytes(total),
                    fmt_bytes(total)
                ),
            ));
        }
    }
    Ok((ceiling, Some(ceiling.bytes(total))))
}

/// `--ceiling-by`, or its default: the cap for built-in trials under the `pytorch` memory model
/// (trials share a GPU); the ballast under `burn`, whose pools hold no cap, and for a command run
/// by `--exec`, a process the holder cannot cap, unless it holds its ceiling itself.
pub(super) fn ceiling_by(
    arg: Option<CeilingByArg>,
    engine: &Engine,
    model: MemoryModel,
) -> Result<CeilingBy> {
    let exec = matches!(engine, Engine::Exec { .. });
    match arg {
        Some(CeilingByArg::Cap) if model == MemoryModel::Burn => Err(user(
            code::USAGE,
            "--ceiling-by cap caps PyTorch's caching allocator, which the `burn` memory model \
             does not use (cubecl's own pools hold no cap): use the ballast, or \
             `device.memory_model = \"pytorch\"`"
                .to_string(),
        )),
        Some(CeilingByArg::Cap) if exec => Err(user(
            code::USAGE,
            "--ceiling-by cap: a command run by --exec is a process of its own, which the \
             allocator's cap cannot reach. Where the command keeps to $OOM_BISECT_MEMORY_LIMIT \
             itself, use --ceiling-by command; else the ballast holds it (one trial per GPU)"
                .to_string(),
        )),
        Some(CeilingByArg::Command) if !exec => Err(user(
            code::USAGE,
            "--ceiling-by command is for a command run by --exec that holds its ceiling itself; \
             the built-in trial is held by `ballast` or `cap`"
                .to_string(),
        )),
        Some(CeilingByArg::Cap) => Ok(CeilingBy::Cap),
        Some(CeilingByArg::Ballast) => Ok(CeilingBy::Ballast),
        Some(CeilingByArg::Command) => Ok(CeilingBy::Command),
        // The cap gave the ballast's verdicts on every configuration compared (docs/fidelity.md)
        // and lets trials share a GPU; where nothing can cap (burn's pools, a command's own
        // process) the ballast holds.
        None if model == MemoryModel::Pytorch && !exec => Ok(CeilingBy::Cap),
        None => Ok(CeilingBy::Ballast),
    }
}
