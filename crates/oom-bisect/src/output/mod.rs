//! Everything a user reads: the diagnosis (text and JSON), a trial's table, `inspect`'s tree,
//! `bench`'s timings, the progress on stderr, and the one-line title of a workload. Only this module
//! formats; the commands orchestrate.

pub mod bench;
pub mod compiling;
pub mod context;
pub mod diagnosis;
pub mod evidence;
pub mod html;
pub mod inspect;
pub mod memory;
pub mod progress;
pub mod report;
pub mod report_json;
pub mod trial_table;

use deeplab::{Config, Optimizer};

/// The version of the JSON outputs' layout: raised when a field changes meaning or goes away.
pub const SCHEMA_VERSION: u32 = 1;

/// Every JSON output (`trial`, `bisect`, `bench`) as written: the tool, its version, the layout's
/// version and the memory model first, then the command's own fields.
pub fn stamped(v: serde_json::Value, memory_model: deeplab::MemoryModel) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    out.insert("schema_version".into(), SCHEMA_VERSION.into());
    out.insert("tool".into(), "oom-bisect".into());
    out.insert("version".into(), env!("CARGO_PKG_VERSION").into());
    out.insert("memory_model".into(), memory_model.name().into());
    if let serde_json::Value::Object(fields) = v {
        out.extend(fields);
    }
    serde_json::Value::Object(out)
}

/// A count with thousands separators, as a user reads it: `40,352,181`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub use oom_trial::shell_word;

/// How an outcome is written in every table and progress line: `fits`, `OOM`, `??`.
pub fn outcome_word(o: oom_search::Outcome) -> &'static str {
    match o {
        oom_search::Outcome::Fits => "fits",
        oom_search::Outcome::Oom => "OOM",
        oom_search::Outcome::Inconclusive => "??",
    }
}

/// A measurement in a table row: `fits   peak 1.2 GiB`, `OOM`, or `??     why`.
pub fn outcome_cell(m: &oom_search::Measurement) -> String {
    use oom_search::Outcome;
    let word = outcome_word(m.outcome);
    match (m.outcome, figure(m)) {
        (Outcome::Inconclusive, _) => format!("??     {}", m.note),
        (Outcome::Fits, Some(f)) if !m.note.is_empty() => format!("{word:<6} {f} ({})", m.note),
        (_, Some(f)) => format!("{word:<6} {f}"),
        (_, None) => word.to_string(),
    }
}

/// The one number a trial is shown by: what it needs where its run was replayed through the
/// caching allocator (whatever its outcome), else the peak of a fit.
pub enum Figure {
    Need(u64),
    /// The need of a trial that stopped after its first step ([`oom_search::Measurement::need_at_least`]).
    AtLeast(u64),
    Peak(u64),
}

impl Figure {
    pub fn of(m: &oom_search::Measurement) -> Option<Figure> {
        match (m.need_bytes, m.outcome, m.peak_bytes) {
            (Some(n), _, _) if m.need_at_least => Some(Figure::AtLeast(n)),
            (Some(n), _, _) => Some(Figure::Need(n)),
            (None, oom_search::Outcome::Fits, Some(p)) => Some(Figure::Peak(p)),
            _ => None,
        }
    }
}

/// A trial's figure in a row: "needs 24.10 GiB" or "peak 23.1 GiB".
pub fn figure(m: &oom_search::Measurement) -> Option<String> {
    Some(match Figure::of(m)? {
        Figure::Need(n) => format!("needs {}", oom_trial::fmt_bytes(n)),
        Figure::AtLeast(n) => format!("needs at least {}", oom_trial::fmt_bytes(n)),
        Figure::Peak(p) => format!("peak {}", oom_trial::fmt_bytes(p)),
    })
}

/// How to call this program in a line the user can paste: the path it was started by when that
/// was a path (`target/release/oom-bisect`), else its name.
pub fn program() -> String {
    match std::env::args_os()
        .next()
        .map(|a| a.to_string_lossy().into_owned())
    {
        Some(a) if a.contains('/') => shell_word(&a),
        _ => "oom-bisect".into(),
    }
}

/// `text` made safe for a terminal: control and bidirectional-override characters escaped
/// (`\u{202e}`; newlines and tabs kept), cut after `max` characters. Everything this program prints
/// passes through it once (`show!`, `tell!`), so that nothing echoed from a config, a command or
/// its output can rewrite the terminal.
pub fn printable(text: &str, max: usize) -> String {
    // The embeddings, overrides and isolates, and the marks that reorder text without them.
    let bidi = |c: char| matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}');
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == max {
            out += &format!("… ({} characters in all)", text.chars().count());
            break;
        }
        match c {
            '\n' | '\t' => out.push(c),
            c if c.is_control() || bidi(c) => out += &c.escape_unicode().to_string(),
            c => out.push(c),
        }
    }
    out
}

/// `text` on one line, as a comment or a log line may hold it: control characters (newlines
/// included) and bidirectional overrides escaped, cut after `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    printable(text, max)
        .replace('\n', "\\n")
        .replace('\t', "\\t")
}

/// `DeepLabV3+ resnet18 OS8, batch 4, 96×96, 21 classes, f32, SGD, attention ×4`.
pub fn title(c: &Config) -> String {
    let m = &c.model;
    let mut extras = vec![];
    if c.train.checkpointing {
        extras.push("checkpointing".to_string());
    }
    if m.separable {
        extras.push("separable".to_string());
    }
    if m.attention_heads > 0 {
        extras.push(format!("attention ×{}", m.attention_heads));
    }
    if m.aux_head {
        extras.push("aux head".into());
    }
    if !m.identity.is_empty() {
        extras.push(format!("identity {:?}", m.identity));
    }
    if let Some(t) = &m.truncate_after {
        extras.push(format!("truncated after {t}"));
    }
    let optimizer = match c.train.optimizer {
        Optimizer::Sgd => "SGD",
        Optimizer::Adamw => "AdamW",
    };
    let mut s = format!(
        "DeepLabV3+ {} OS{}, batch {}, {}×{}, {} classes, {}, {optimizer}",
        m.backbone.name(),
        m.output_stride,
        c.data.batch,
        c.data.size[0],
        c.data.size[1],
        m.classes,
        c.train.precision.name(),
    );
    for e in extras {
        s += ", ";
        s += &e;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::shell_word;

    #[test]
    fn shell_words_survive_the_shell() {
        assert_eq!(shell_word("configs/a.toml"), "configs/a.toml");
        assert_eq!(
            shell_word("model.identity=[\"decoder\"]"),
            "'model.identity=[\"decoder\"]'"
        );
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word(""), "''");
    }

    /// A need from a trial that stopped after its first step is read as a lower bound.
    #[test]
    fn a_need_from_one_step_is_at_least() {
        let mut m = oom_search::Measurement::new(oom_search::Outcome::Fits);
        m.need_bytes = Some(200 << 20);
        assert_eq!(super::figure(&m).unwrap(), "needs 200.0 MiB");
        m.need_at_least = true;
        assert_eq!(super::figure(&m).unwrap(), "needs at least 200.0 MiB");
        assert_eq!(super::outcome_cell(&m), "fits   needs at least 200.0 MiB");
    }
}

#[cfg(test)]
mod count_tests {
    #[test]
    fn counts_have_thousands_separators() {
        assert_eq!(super::count(0), "0");
        assert_eq!(super::count(999), "999");
        assert_eq!(super::count(1000), "1,000");
        assert_eq!(super::count(40_352_181), "40,352,181");
    }
}
