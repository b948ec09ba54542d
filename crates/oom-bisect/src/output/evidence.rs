//! Where each verdict comes from, as the report says it: the line under the header, the mark beside
//! a certified verdict, and the certificates' table (stream against GPU), in text and JSON.

use super::context::Context;
use crate::certify::Certificate;
use oom_search::{Candidate, Measurement};
use serde_json::json;

/// The line under the header where the search ran on stream-only trials; nothing otherwise.
pub fn line(cx: &Context<'_>) -> String {
    let Some(card) = &cx.streams else {
        return String::new();
    };
    let streams = format!(
        "Evidence: every probe of the search is a stream-only trial: the training issued for \
         {card}, nothing computed and no device memory taken, its stream of requests replayed \
         through PyTorch's caching allocator"
    );
    let certs = &cx.certified.certificates;
    if !cx.certify {
        return format!(
            "{streams}. No GPU certified them: the report is the streams' alone, and it leaves \
             out the convolution workspaces cuDNN takes on a card.\n\n"
        );
    }
    let disagree = certs.iter().filter(|c| c.agrees() == Some(false)).count();
    let failed = certs.iter().filter(|c| c.agrees().is_none()).count();
    let mut s = format!(
        "{streams}; the GPU ran {} of its verdicts again under the ceiling: {}",
        certs.len(),
        match (disagree, failed) {
            (0, 0) => "each agreed with its stream".to_string(),
            (0, f) => format!("{f} could not be certified (see Certificates)"),
            (d, _) => format!(
                "{d} disagreed, and the search ran again from the GPU's verdicts (see Certificates)"
            ),
        }
    );
    if !cx.certified.uncertified.is_empty() {
        s += &format!(
            "; after {} searches the GPU still moved verdicts, and these, which the report rests \
             on, are the streams' alone: {}",
            cx.certified.rounds,
            cx.certified.uncertified.join("; ")
        );
    }
    s += ".\n\n";
    s
}

/// ` (certified on the GPU)` beside a verdict the GPU ran again and agreed with; ` (the GPU's
/// verdict; its stream said otherwise)` where it disagreed; nothing where it did not run.
pub fn mark(cx: &Context<'_>, candidate: &Candidate) -> &'static str {
    match cx.certified.of(candidate).map(Certificate::agrees) {
        Some(Some(true)) => " (certified on the GPU)",
        Some(Some(false)) => " (the GPU's verdict; its stream said otherwise)",
        Some(None) | None => "",
    }
}

/// The certificates, each beside its stream: what it is, the stream's verdict and need, the GPU's.
pub fn table(cx: &Context<'_>) -> String {
    let certs = &cx.certified.certificates;
    if certs.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "\nCertificates (run on the GPU under the ceiling; {} search{}):\n",
        cx.certified.rounds,
        if cx.certified.rounds == 1 { "" } else { "es" }
    );
    for c in certs {
        let word = |m: &Measurement| super::outcome_word(m.outcome);
        let device = crate::oracle::measurement(&c.device);
        let verdict = match c.agrees() {
            Some(true) => "agrees",
            Some(false) => "DISAGREES",
            None => "not certified",
        };
        s += &format!(
            "  {:<44} stream {:<4} {:<22} GPU {:<4} {:<22} {verdict}\n",
            super::printable(&c.what, 44),
            word(&c.stream),
            super::figure(&c.stream).unwrap_or_default(),
            word(&device),
            super::figure(&device).unwrap_or_else(|| device.note.clone()),
        );
    }
    s
}

/// The certificates as JSON.
pub fn json(cx: &Context<'_>) -> serde_json::Value {
    let certs: Vec<serde_json::Value> = cx
        .certified
        .certificates
        .iter()
        .map(|c| {
            json!({
                "what": c.what,
                "candidate": c.candidate.to_sets(),
                "stream": c.stream,
                "device": crate::oracle::measurement(&c.device),
                "agrees": c.agrees(),
            })
        })
        .collect();
    json!({
        "search": if cx.streams.is_some() { "stream" } else { "trials" },
        "card": cx.streams,
        "certified": cx.certify,
        "searches": cx.certified.rounds,
        "certificates": certs,
        "uncertified": cx.certified.uncertified,
    })
}
