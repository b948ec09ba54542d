//! What a finished diagnosis prints and writes: the report, the JSON, the HTML, the minimal failing
//! configuration as a file the tool takes back, and the exit code (`bisect` and `bench`).

use super::bisect::{minimal_path, unjournaled_error, BisectRun};
use crate::exit_codes as code;
use crate::files::write_file;
use crate::output::{self, report};
use crate::settings::BisectSettings;
use anyhow::Result;
use oom_search::Outcome;
use oom_trial::fmt_bytes;
use std::path::PathBuf;

/// The minimal failing configuration as a file the tool accepts back: its path, its config, its
/// text and the line that reproduces it. Written after the report is printed.
struct MinimalFile {
    path: PathBuf,
    config: toml::Table,
    text: String,
    reproduce: String,
}

fn minimal_file(run: &BisectRun) -> Option<MinimalFile> {
    let (st, d) = (&run.settings, &run.diagnosis);
    let m = d.minimal_failing.as_ref()?;
    let w = &st.workload;
    let (mut c, _) = crate::candidate::resolve(&w.config, &m.candidate).ok()?;
    // The file reproduces on its own: the backend and the ceiling in force are written in.
    c.device = deeplab::DeviceConfig {
        backend: Some(st.device.backend.name().to_string()),
        memory_limit: run.ceiling.map(oom_trial::exact_size),
        memory_fraction: None,
        gpu: None,
        memory_model: Some(w.config.device.memory_model()),
        fusion: w.config.device.fusion,
        convolution: w.config.device.convolution,
    };
    let path = minimal_path(&st.journal);
    let text = format!(
        "# The smallest configuration that still runs out of memory under {} on {},\n\
         # found by `oom-bisect bisect --config {}`. Overrides of the original: {}\n{}",
        run.ceiling
            .map(fmt_bytes)
            .unwrap_or_else(|| "an unknown ceiling".into()),
        st.device.label(),
        // A file name may hold a newline: it must not start a line of the config.
        output::one_line(&w.path.display().to_string(), 400),
        m.candidate,
        c.to_full_toml_string()
    );
    let reproduce = format!(
        "{} trial --config {} {}",
        output::program(),
        output::shell_word(&path.display().to_string()),
        st.device.reproduce_flags()
    );
    Some(MinimalFile {
        path,
        config: c.to_table(),
        text,
        reproduce,
    })
}

/// Under `--estimate`, the command that measures the same diagnosis on a GPU.
fn confirm(st: &BisectSettings, sets: &str) -> String {
    let ceiling = st.device.ceiling_arg.as_ref();
    format!(
        "{} bisect --config {}{sets} --backend cuda{}",
        output::program(),
        output::shell_word(&st.workload.path.display().to_string()),
        ceiling.map(|c| format!(" {c}")).unwrap_or_default()
    )
}

/// Prints the report of a finished diagnosis, then writes its JSON and the minimal failing config
/// (a file that cannot be written never costs the report), and gives the exit code; shared by
/// `bisect` and `bench`.
pub(super) fn report_run(run: &BisectRun) -> Result<i32> {
    let (st, d) = (&run.settings, &run.diagnosis);
    let w = &st.workload;
    let minimal = minimal_file(run);
    let sets: String = st
        .sets
        .iter()
        .map(|s| format!(" --set {}", output::shell_word(s)))
        .collect();
    let reproduce = minimal
        .as_ref()
        .map(|m| m.reproduce.clone())
        .unwrap_or_else(|| {
            let flags = st.device.reproduce_flags();
            format!(
                "{} trial --config {}{sets} {flags}",
                output::program(),
                output::shell_word(&w.path.display().to_string())
            )
        });
    let cx = output::context::Context {
        title: output::title(&w.config),
        backend: st.device.label(),
        memory_model: w.config.device.memory_model(),
        steps: w.config.steps(),
        reports: &run.reports,
        config: &w.config,
        minimal_path: minimal.as_ref().map(|m| m.path.display().to_string()),
        minimal_config: minimal.as_ref().map(|m| m.config.clone()),
        reproduce: Some(reproduce),
        journal: Some(st.journal.display().to_string()),
        resumed: run.resumed,
        wall_seconds: run.wall_seconds,
        estimate: st.device.engine == oom_trial::Engine::Estimate,
        confirm: (st.device.engine == oom_trial::Engine::Estimate).then(|| confirm(st, &sets)),
        exec: st.device.exec_command(),
        served: run.reports.values().any(|r| r.served()),
        verbose: st.verbose,
        ceiling: run.ceiling,
        notes: notes(st, d, &run.reports),
        streams: st.device.streams.as_ref().map(|s| s.card.label()),
        certify: st.device.streams.as_ref().is_some_and(|s| s.certify),
        certified: &run.certified,
    };
    let text = report::text(d, &cx);
    show!("{text}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    // Each file is written whatever became of the others; the first failure is the exit code.
    let mut written = vec![];
    if let Some(m) = &minimal {
        written.push(write_file(&m.path, &m.text));
    }
    if let Some(j) = &st.json {
        let v = output::stamped(
            output::report_json::json(d, &cx),
            w.config.device.memory_model(),
        );
        written.push(write_file(
            j,
            &serde_json::to_string_pretty(&v).expect("json"),
        ));
    }
    if let Some(h) = &st.html {
        written.push(write_file(h, &output::html::page(d, &cx, &text)));
    }
    written.extend(unjournaled_error(run).map(Err));
    let mut failures = written.into_iter().filter_map(Result::err);
    if let Some(first) = failures.next() {
        failures.for_each(|e| tell!("error: {e}"));
        return Err(first);
    }
    Ok(match d.original.outcome {
        Outcome::Inconclusive => code::INCONCLUSIVE_ORIGINAL,
        _ => code::SUCCESS,
    })
}

/// Configurations that fit here but that PyTorch refuses to train (see
/// [`deeplab::Architecture::pytorch_refusal`]), once per reason, naming the first such candidate.
fn refusals(base: &deeplab::Config, d: &oom_search::Diagnosis) -> Vec<String> {
    let mut notes: Vec<String> = vec![];
    for c in answers(d) {
        let arch = crate::candidate::resolve(base, c).ok();
        if let Some(why) = arch.and_then(|(_, a)| a.pytorch_refusal()) {
            if !notes.iter().any(|n| n.contains(&why)) {
                notes.push(format!("{c} fits here, but {why}"));
            }
        }
    }
    notes
}

/// What the report notes under its header: configurations it offers that PyTorch refuses (not
/// under --exec, whose trials are PyTorch's own: what fits there, PyTorch trained), what a
/// built-in trial's need leaves out of PyTorch's, and bf16 fixes on a card without bf16.
fn notes(
    st: &BisectSettings,
    d: &oom_search::Diagnosis,
    reports: &std::collections::HashMap<(oom_search::Candidate, u32), oom_trial::TrialReport>,
) -> Vec<String> {
    let mut notes = match st.device.engine {
        oom_trial::Engine::Exec { .. } => vec![],
        _ => refusals(&st.workload.config, d),
    };
    notes.extend(workspaces(st, reports));
    notes.extend(without_bf16(st.device.card, &d.fixes));
    notes
}

/// Whether a built-in trial's needs hold cuDNN's convolution workspaces (docs/fidelity.md,
/// "Convolution workspaces"): asked of this machine's cuDNN where one was found, said so, with the
/// card it answered for; else that PyTorch may need more, and by how much it did where measured.
fn workspaces(
    st: &BisectSettings,
    reports: &std::collections::HashMap<(oom_search::Candidate, u32), oom_trial::TrialReport>,
) -> Option<String> {
    let built_in = matches!(
        st.device.engine,
        oom_trial::Engine::Train | oom_trial::Engine::Stream { .. }
    );
    let pytorch = st.workload.config.device.memory_model() == deeplab::MemoryModel::Pytorch;
    if !(built_in && pytorch) {
        return None;
    }
    let asked = reports.values().any(|r| {
        r.memory
            .allocator
            .as_ref()
            .is_some_and(|a| a.workspaces > 0)
    });
    if asked {
        return Some(
            "the needs hold the convolution workspaces PyTorch asks for (cuDNN's engines in \
             PyTorch's order, asked of this machine's cuDNN for its own GPU)"
                .to_string(),
        );
    }
    let why = match st.device.backend {
        oom_trial::BackendKind::Cuda => "no cuDNN was found here; OOM_BISECT_CUDNN names one",
        oom_trial::BackendKind::Cpu => "a CUDA trial asks this machine's cuDNN for them",
    };
    Some(format!(
        "the needs are without cuDNN's convolution workspaces, which PyTorch asks for on a GPU \
         ({why}): PyTorch may need more (on an H100 at R50 OS16 512² under 24 GiB, the built-in \
         trial without them allows batch 34, PyTorch 32; docs/fidelity.md). For PyTorch's own \
         answer, give it as the trial (--exec)"
    ))
}

/// The bf16 fixes that fit, where the ceiling is a card without bf16 arithmetic: they hold what
/// they measured, but the card computes bf16 slowly, if at all.
fn without_bf16(card: Option<&str>, fixes: &[oom_search::FixResult]) -> Option<String> {
    let card = crate::gpus::by_name(card?).filter(|c| !c.has_bf16())?;
    let bf16 = |f: &&oom_search::FixResult| {
        f.measurement.outcome == Outcome::Fits
            && crate::kinds::FixKind::of(f.tag).is_some_and(crate::kinds::FixKind::is_bf16)
    };
    let changes: Vec<&str> = fixes
        .iter()
        .filter(bf16)
        .map(|f| f.change.as_str())
        .collect();
    (!changes.is_empty()).then(|| {
        format!(
            "{} fit{} the memory, but the {} has no bf16 arithmetic (it came with Ampere): it \
             runs bf16 slowly, if at all; f16 holds as little",
            changes.join(" and "),
            if changes.len() == 1 { "s" } else { "" },
            card.desc
        )
    })
}

/// The fitting configurations the report offers as answers: each axis's last fit, the fixes that
/// fit, the minimal configuration's neighbours that fit. A refusal matters only there.
fn answers(d: &oom_search::Diagnosis) -> Vec<&oom_search::Candidate> {
    use oom_search::AxisVerdict;
    let fits = |m: &oom_search::Measurement| m.outcome == Outcome::Fits;
    let axes = d
        .axes
        .iter()
        .chain(&d.capacity)
        .filter_map(|a| match &a.verdict {
            AxisVerdict::Boundary { last_fit, .. } => Some(&last_fit.candidate),
            AxisVerdict::AllFit { highest, .. } => Some(&highest.candidate),
            _ => None,
        });
    let fixes = d.fixes.iter().filter(|f| fits(&f.measurement));
    let neighbours = d.minimal_failing.iter().flat_map(|m| &m.neighbours);
    axes.chain(fixes.map(|f| &f.candidate))
        .chain(
            neighbours
                .filter(|n| fits(&n.measurement))
                .map(|n| &n.candidate),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::kinds::FixKind;
    use oom_search::{FixResult, Measurement, Outcome};

    fn fix(kind: FixKind, outcome: Outcome) -> FixResult {
        FixResult {
            change: kind.label().into(),
            tag: kind.tag(),
            candidate: oom_search::Candidate::original(),
            measurement: Measurement::new(outcome),
            implied_by: None,
            not_run: None,
        }
    }

    /// On a T4 the bf16 fixes that fit are said to fit the memory only; on a 3090, or a ceiling
    /// that is no card, nothing is said.
    #[test]
    fn a_bf16_fix_on_a_card_without_bf16_says_so() {
        let fixes = [
            fix(FixKind::MixedBf16, Outcome::Fits),
            fix(FixKind::PureBf16, Outcome::Oom),
            fix(FixKind::MixedF16, Outcome::Fits),
        ];
        let note = super::without_bf16(Some("t4"), &fixes).unwrap();
        assert!(
            note.starts_with("mixed precision bf16 fits the memory, but the NVIDIA T4 16 GB has"),
            "{note}"
        );
        assert!(!note.contains("pure bf16"), "{note}");
        assert_eq!(super::without_bf16(Some("rtx3090"), &fixes), None);
        assert_eq!(super::without_bf16(None, &fixes), None);
    }
}
