//! The verdicts a report rests on. Where the search ran on stream-only trials (each verdict its
//! stream replayed), the device runs these again under the real ceiling, as certificates: the
//! original, both sides of every boundary found, the minimal failing configuration, and every other
//! answer (a fix, a module, a neighbour) whose need lies so near the ceiling that a stream's need
//! and the device's could fall on either side of it.

use crate::bisect::{AxisVerdict, Probe};
use crate::diagnosis::Diagnosis;
use crate::vocabulary::{Candidate, Measurement, Outcome};

/// A verdict the device is to certify: its configuration, what the report calls it, and what its
/// stream said.
#[derive(Debug, Clone, PartialEq)]
pub struct ToCertify {
    pub candidate: Candidate,
    pub what: String,
    pub stream: Measurement,
}

/// Every verdict of `d` the device should certify under `ceiling` bytes: those the report rests
/// on, and those whose need lies within `near` (a share) of the ceiling. Each candidate once, in
/// the report's order; run under the ceiling (never without it).
pub fn to_certify(d: &Diagnosis, ceiling: u64, near: f64) -> Vec<ToCertify> {
    let mut list = Vec::new();
    let mut add = |candidate: &Candidate, what: String, m: &Measurement| {
        let candidate = Candidate {
            unbounded: false,
            ..candidate.clone()
        };
        if m.outcome != Outcome::Inconclusive
            && !list.iter().any(|c: &ToCertify| c.candidate == candidate)
        {
            list.push(ToCertify {
                candidate,
                what,
                stream: m.clone(),
            });
        }
    };
    add(&Candidate::original(), "the original".into(), &d.original);
    for a in d.axes.iter().chain(&d.capacity) {
        if let Some((fit, oom)) = sides(&a.verdict) {
            add(
                &fit.candidate,
                format!("{}: last fit {}", a.axis, fit.label),
                &fit.measurement,
            );
            add(
                &oom.candidate,
                format!("{}: first out-of-memory {}", a.axis, oom.label),
                &oom.measurement,
            );
        }
    }
    if let Some(m) = &d.minimal_failing {
        add(
            &m.candidate,
            "the minimal failing configuration".into(),
            &m.measurement,
        );
    }
    let close = |m: &Measurement| {
        m.need_bytes
            .is_some_and(|n| n.abs_diff(ceiling) as f64 <= near * ceiling as f64)
    };
    for f in d
        .fixes
        .iter()
        .filter(|f| f.implied_by.is_none() && f.not_run.is_none())
    {
        if close(&f.measurement) {
            add(&f.candidate, format!("fix: {}", f.change), &f.measurement);
        }
    }
    for m in d.module_costs.iter().filter(|m| m.not_run.is_none()) {
        if close(&m.measurement) {
            add(&m.candidate, format!("module: {}", m.label), &m.measurement);
        }
    }
    let neighbours = d.minimal_failing.iter().flat_map(|m| &m.neighbours);
    for n in neighbours.filter(|n| n.implied_by.is_none()) {
        if close(&n.measurement) {
            add(
                &n.candidate,
                format!("neighbour: {}", n.change),
                &n.measurement,
            );
        }
    }
    list
}

/// The last fit and first out-of-memory of an axis that has them (a boundary, stable or not).
fn sides(v: &AxisVerdict) -> Option<(&Probe, &Probe)> {
    match v {
        AxisVerdict::Boundary {
            last_fit,
            first_oom,
            ..
        }
        | AxisVerdict::Unstable {
            last_fit,
            first_oom,
            ..
        } => Some((last_fit, first_oom)),
        _ => None,
    }
}
