//! The diagnosis as JSON (`--json`): the same parts as the text report (`report.rs`), every figure
//! in bytes.

use super::context::Context;
use oom_search::{
    AxisSearch, AxisVerdict, Diagnosis, FixResult, Measurement, Minimal, ModulesVerdict, Neighbour,
    Outcome, Probe,
};
use serde_json::{json, Value};

fn probe_json(p: &Probe) -> Value {
    json!({
        "value": p.label,
        "candidate": p.candidate.to_sets(),
        "outcome": p.measurement.outcome,
        // An out-of-memory's figure is what it tried to hold (in use + the failed request); the
        // highest reading before the failure stays beside it.
        "peak_bytes": match p.measurement.outcome {
            Outcome::Oom => p.measurement.failed_at_bytes.or(p.measurement.peak_bytes),
            _ => p.measurement.peak_bytes,
        },
        "peak_before_failure_bytes": (p.measurement.outcome == Outcome::Oom)
            .then_some(p.measurement.peak_bytes)
            .flatten(),
        "failed_at_bytes": p.measurement.failed_at_bytes,
        "need_bytes": p.measurement.need_bytes,
        // The trial stopped after its first step, far below the ceiling: a later step may need more.
        "need_is_lower_bound": p.measurement.need_at_least,
    })
}

/// One axis search as JSON.
fn boundary_json(d: &Diagnosis, a: &AxisSearch) -> Value {
    let (kind, last_fit, first_oom, message) = match &a.verdict {
        AxisVerdict::Boundary {
            last_fit,
            first_oom,
            ..
        } => ("boundary", Some(last_fit), Some(first_oom), None),
        AxisVerdict::NotTheCause { message, lowest } => {
            ("not_the_cause", None, Some(lowest), Some(message))
        }
        AxisVerdict::AllFit { message, highest } => ("all_fit", Some(highest), None, Some(message)),
        AxisVerdict::Inconclusive {
            message, lo, hi, ..
        } => ("inconclusive", lo.as_ref(), hi.as_ref(), Some(message)),
        AxisVerdict::Unstable {
            message,
            last_fit,
            first_oom,
        } => ("unstable", Some(last_fit), Some(first_oom), Some(message)),
    };
    json!({
        "axis": a.axis,
        "kind": kind,
        "capacity": d.capacity.contains(a),
        "last_fit": last_fit.map(probe_json),
        "first_oom": first_oom.map(probe_json),
        "message": message,
        "trials": a.trials,
        "confirmations": a.confirmations,
        "reruns": {"last_fit": a.reruns.last_fit, "first_oom": a.reruns.first_oom},
        "plain_bisection_trials": a.plain_bisection,
    })
}

fn minimal_json(m: &Minimal, cx: &Context<'_>) -> Value {
    json!({
        "candidate": m.candidate.to_sets(),
        "config": cx.minimal_config,
        "file": cx.minimal_path,
        "outcome": m.measurement.outcome,
        "one_minimal": m.one_minimal,
        "neighbours": m.neighbours.iter().map(neighbour_json).collect::<Vec<_>>(),
    })
}

/// A neighbour's own figures; one implied by a larger fit has none, and names that fit with its.
fn neighbour_json(n: &Neighbour) -> Value {
    let by = n
        .implied_by
        .as_ref()
        .map(|c| ("candidate", json!(c.to_sets())));
    let (own, implied_by) = own_or_implied(&n.measurement, by);
    json!({
        "change": n.change,
        "candidate": n.candidate.to_sets(),
        "outcome": n.measurement.outcome,
        "peak_bytes": own["peak_bytes"],
        "need_bytes": own["need_bytes"],
        "need_is_lower_bound": n.implied_by.is_none() && n.measurement.need_at_least,
        "implied_by": implied_by,
    })
}

/// A fix's own figures; one implied by a fix that holds at least as much has none, and names that
/// fix with its.
fn fix_json(f: &FixResult) -> Value {
    let by = f.implied_by.as_ref().map(|c| ("change", json!(c)));
    let (own, implied_by) = own_or_implied(&f.measurement, by);
    json!({
        "change": f.change,
        "candidate": f.candidate.to_sets(),
        "outcome": f.measurement.outcome,
        "peak_bytes": own["peak_bytes"],
        "need_bytes": own["need_bytes"],
        "implied_by": implied_by,
        "not_run": f.not_run,
    })
}

/// The figures of `m` as a result's own, or, where `by` (a key and the result that settles it)
/// is given, none of its own and `{key: by, "figures": …}` as its `implied_by`.
fn own_or_implied(m: &Measurement, by: Option<(&str, Value)>) -> (Value, Value) {
    let figures = json!({"peak_bytes": m.peak_bytes, "need_bytes": m.need_bytes});
    match by {
        None => (figures, Value::Null),
        Some((key, by)) => (
            json!({"peak_bytes": null, "need_bytes": null}),
            json!({key: by, "figures": figures}),
        ),
    }
}

pub fn json(d: &Diagnosis, cx: &Context<'_>) -> Value {
    let boundaries: Vec<Value> = d
        .axes
        .iter()
        .chain(d.capacity.iter())
        .map(|a| boundary_json(d, a))
        .collect();
    json!({
        "original": {
            "outcome": d.original.outcome,
            "peak_bytes": d.original.peak_bytes,
            "note": d.original.note,
            "oom": cx.original_report().and_then(|r| r.oom()),
            "stages": cx.original_report().map(|r| r.memory.stages.clone()),
            // The original's own replayed need, else measured without the ceiling; null when not
            // measured or when even that ran out.
            "needed_bytes": d.original.need_bytes.or_else(|| d.need.as_ref().and_then(|m| match m.outcome {
                Outcome::Fits => m.need_bytes.or(m.peak_bytes),
                _ => None,
            })),
            "need": d.need,
            "breakdown": cx.breakdown(),
        },
        "ceiling_bytes": cx.ceiling,
        "backend": cx.backend,
        "memory_model": cx.memory_model.name(),
        "steps_per_trial": cx.steps,
        "one_step_below": cx.config.one_step_below(),
        "notes": cx.notes,
        "estimate": cx.estimate,
        // The flag's former name, kept for scripts that read it.
        "fake_trials": cx.estimate,
        "exec": cx.exec,
        "boundaries": boundaries,
        "modules": {
            "verdict": d.modules,
            // The smallest set measured to fit, as module ids; empty when none fits.
            "culprits": match &d.modules {
                Some(ModulesVerdict::Culprits { candidate, .. }) => swapped_ids(candidate, cx),
                _ => vec![],
            },
            "costs": d.module_costs.iter().map(|c| json!({
                "item": c.label,
                "ids": c.ids,
                "outcome": c.measurement.outcome,
                "peak_bytes": c.measurement.peak_bytes,
                "not_run": c.not_run,
            })).collect::<Vec<_>>(),
        },
        "fixes": d.fixes.iter().map(fix_json).collect::<Vec<_>>(),
        "minimal_failing": d.minimal_failing.as_ref().map(|m| minimal_json(m, cx)),
        "trials": {
            "count": d.trials.len(),
            "resumed_from_journal": cx.resumed,
            "budget_exhausted": d.budget_exhausted,
            "list": d.trials.iter().map(|t| trial_json(t, cx)).collect::<Vec<_>>(),
        },
        "evidence": super::evidence::json(cx),
        "wall_seconds": cx.wall_seconds,
        "reproduce": cx.reproduce,
    })
}

/// One trial of the list, with what decided its verdict (its report's evidence).
fn trial_json(t: &oom_search::TrialRecord, cx: &Context<'_>) -> Value {
    let mut v = serde_json::to_value(t).expect("a trial record serialises");
    let evidence = cx
        .reports
        .get(&(t.candidate.clone(), t.attempt))
        .map(|r| r.evidence());
    // An error or a timeout is no verdict: its evidence is null.
    if let (Value::Object(fields), Some(e)) = (&mut v, evidence) {
        fields.insert("evidence".into(), json!(e));
    }
    v
}

/// The module ids a candidate swaps for identity (its `model.identity` list).
fn swapped_ids(c: &oom_search::Candidate, cx: &Context<'_>) -> Vec<String> {
    crate::candidate::resolve(cx.config, c)
        .map(|(config, _)| config.model.identity)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result settled by another has no figures of its own; that one is named under the key
    /// given, with its figures.
    #[test]
    fn an_implied_result_names_what_settles_it() {
        let mut m = Measurement::new(Outcome::Fits);
        m.need_bytes = Some(7);
        let (own, by) = own_or_implied(&m, None);
        assert_eq!((own["need_bytes"].clone(), by), (json!(7), Value::Null));
        let (own, by) = own_or_implied(&m, Some(("change", json!("pure f16"))));
        assert_eq!(own["need_bytes"], Value::Null);
        assert_eq!(
            by,
            json!({"change": "pure f16", "figures": {"peak_bytes": null, "need_bytes": 7}})
        );
    }
}
