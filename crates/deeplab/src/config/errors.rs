//! Reading a config with errors a user can act on: the error type (the dotted key and what is
//! allowed), every key a config may hold and the closest one to a typo, where in the TOML text a
//! syntax error is, and `--set key=value`.

use super::*;

/// A configuration problem tied to one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted key, e.g. `model.output_stride`.
    pub key: String,
    pub message: String,
}

impl ConfigError {
    /// Key and message are cut short: whatever a user typed may be echoed in them.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            key: cut_line(&key.into(), 80),
            message: cut(&message.into(), 400),
        }
    }
}

/// `text` cut after `max` characters (with how many there were), so that an error message that
/// echoes what a user typed cannot flood a screen. Making it safe for a terminal is the CLI's job,
/// done once where it prints.
pub fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!(
            "{}… ({} characters in all)",
            &text[..at],
            text.chars().count()
        ),
        None => text.to_string(),
    }
}

/// A value a user wrote, as an error echoes it: cut as [`cut`] does, and on one line, since a
/// newline in it would print a line of its own (a forged `error:`).
pub fn cut_line(text: &str, max: usize) -> String {
    cut(text, max).replace('\n', "\\n").replace('\r', "\\r")
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`: {}", self.key, self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Every key a config may hold, by section. Used for unknown-key errors and `--set`.
pub const KEYS: &[(&str, &[&str])] = &[
    (
        "model",
        &[
            "backbone",
            "output_stride",
            "classes",
            "aspp_rates",
            "aspp_channels",
            "separable",
            "attention_heads",
            "attention_kernel",
            "aux_head",
            "identity",
            "truncate_after",
            "batch_norm",
        ],
    ),
    ("data", &["batch", "size"]),
    (
        "train",
        &[
            "optimizer",
            "learning_rate",
            "momentum",
            "weight_decay",
            "loss_resolution",
            "precision",
            "checkpointing",
            "phase",
            "steps",
            "premade_state",
            "one_step_below",
        ],
    ),
    (
        "device",
        &[
            "backend",
            "memory_limit",
            "memory_fraction",
            "gpu",
            "memory_model",
            "fusion",
            "convolution",
        ],
    ),
];

pub(crate) fn all_keys() -> impl Iterator<Item = String> {
    KEYS.iter()
        .flat_map(|(s, ks)| ks.iter().map(move |k| format!("{s}.{k}")))
}

/// Levenshtein distance, for "did you mean" suggestions.
pub(crate) fn distance(a: &str, b: &str) -> usize {
    // The distance is at least the difference in length: a key of megabytes is far from every
    // key without the quadratic table.
    let apart = a.chars().count().abs_diff(b.chars().count());
    if apart > 16 {
        return apart;
    }
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The valid key closest to `key` (a dotted key), if any is reasonably close.
pub fn closest_key(key: &str) -> Option<String> {
    if !key.contains('.') {
        return KEYS
            .iter()
            .map(|(s, _)| (distance(key, s), s.to_string()))
            .filter(|(d, _)| *d <= 2)
            .min_by_key(|(d, _)| *d)
            .map(|(_, s)| s);
    }
    let leaf = key.rsplit('.').next().unwrap_or(key);
    all_keys()
        .map(|k| {
            let kleaf = k.rsplit('.').next().unwrap_or(&k).to_string();
            (distance(key, &k).min(distance(leaf, &kleaf)), k)
        })
        .filter(|(d, k)| *d <= 3.max(k.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// A `--set` key without its section (`batch=4`): the full key that ends in it, else the closest.
fn bare_key(key: &str) -> ConfigError {
    let whole = all_keys().find(|k| k.rsplit('.').next() == Some(key));
    match whole.or_else(|| closest_key(&format!("?.{key}"))) {
        Some(k) => ConfigError::new(
            key,
            format!("a key names its section too: did you mean `{k}`? (see configs/README.md)"),
        ),
        None => unknown_key(key),
    }
}

pub(crate) fn unknown_key(key: &str) -> ConfigError {
    let hint = match closest_key(key) {
        Some(k) => format!("; did you mean `{k}`?"),
        None => String::new(),
    };
    ConfigError::new(
        key,
        format!("unknown key{hint} (see configs/README.md for every key)"),
    )
}

/// Refuses keys no config may hold, naming the closest valid key.
pub(crate) fn check_keys(table: &toml::Table) -> Result<(), ConfigError> {
    for (section, value) in table {
        let Some((_, keys)) = KEYS.iter().find(|(s, _)| s == section) else {
            return Err(unknown_key(section));
        };
        let Some(inner) = value.as_table() else {
            return Err(ConfigError::new(
                section.as_str(),
                format!("must be a table (`[{section}]`)"),
            ));
        };
        for key in inner.keys() {
            if !keys.contains(&key.as_str()) {
                return Err(unknown_key(&format!("{section}.{key}")));
            }
        }
    }
    for required in ["model", "data"] {
        if !table.contains_key(required) {
            return Err(ConfigError::new(required, "missing section"));
        }
    }
    Ok(())
}

/// serde's message on one line: it quotes the offending value, whose control characters (a newline
/// starting a line that reads like oom-bisect's own `error:`) are written as escapes.
fn one_line(msg: &str) -> String {
    msg.trim()
        .chars()
        .flat_map(|c| match c.is_control() {
            true => c.escape_default().collect::<Vec<_>>(),
            false => vec![c],
        })
        .collect()
}

/// Turns serde's message into a key-naming error.
pub(crate) fn type_error(table: &toml::Table, err: toml::de::Error) -> ConfigError {
    // serde does not say which key failed for nested tables; find it by deserialising each section.
    let msg = one_line(err.message());
    for (section, value) in table {
        let Some(inner) = value.as_table() else {
            continue;
        };
        for (key, v) in inner {
            let mut probe = Config::example().to_table();
            probe
                .entry(section.as_str())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                .as_table_mut()
                .map(|s| s.insert(key.clone(), v.clone()));
            if let Err(e) = toml::Value::Table(probe).try_into::<Config>() {
                return ConfigError::new(format!("{section}.{key}"), one_line(e.message()));
            }
        }
    }
    ConfigError::new("config", msg)
}

/// The dotted key whose line holds byte `offset` (`model.classes` for `classes = 1e99` under
/// `[model]`), when that line is a plain `key = value`.
pub(crate) fn key_at(text: &str, offset: usize) -> Option<String> {
    let mut section = None;
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        if trimmed.starts_with('[') && !trimmed.starts_with("[[") {
            let name = trimmed.trim_start_matches('[').split(']').next();
            section = name.map(|n| n.trim().to_string());
        }
        if offset < start + line.len() {
            let (key, _) = trimmed.split_once('=')?;
            let key = key.trim();
            let plain = |c: char| c.is_ascii_alphanumeric() || c == '_';
            let section = section?;
            return (!key.is_empty() && key.chars().all(plain)).then(|| format!("{section}.{key}"));
        }
        start += line.len();
    }
    None
}

/// ` at line L, column C` of byte `offset` in `text` (both from 1).
pub(crate) fn line_column(text: &str, offset: usize) -> String {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!(" at line {line}, column {column}")
}

/// Sets one dotted key in a TOML table. The value is read as TOML (`16`, `true`, `[256, 256]`,
/// `"x"`), and as a bare string when it is not valid TOML (`resnet50`).
pub fn apply_set(table: &mut toml::Table, set: &str) -> Result<(), ConfigError> {
    let Some((key, raw)) = set.split_once('=') else {
        return Err(ConfigError::new(
            set,
            "expected key=value, e.g. model.output_stride=16",
        ));
    };
    let key = key.trim();
    let raw = raw.trim();
    // `v = 1\n[y]` would parse as a value and a table, and what follows the line would vanish.
    if raw.contains(['\n', '\r']) {
        return Err(ConfigError::new(
            key,
            "a --set value is one line; set each key with its own --set",
        ));
    }
    let Some((section, leaf)) = key.split_once('.') else {
        return Err(bare_key(key));
    };
    let known = KEYS
        .iter()
        .any(|(s, ks)| *s == section && ks.contains(&leaf));
    if !known {
        return Err(unknown_key(key));
    }
    let value = format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()));
    let entry = table
        .entry(section.to_string())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let Some(inner) = entry.as_table_mut() else {
        return Err(ConfigError::new(section, "must be a table"));
    };
    inner.insert(leaf.to_string(), value);
    Ok(())
}
