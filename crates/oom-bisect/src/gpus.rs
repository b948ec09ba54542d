//! Common cards for `--gpu NAME`: a ceiling by name ("behave like a 24 GiB RTX 3090").

/// (name, aliases, memory in MiB, description). Cards sold by binary size (GDDR: "24 GB" is
/// 24 GiB) are that size; an H200's "141 GB" is what CUDA reports on our H200, 139.80 GiB
/// (docs/runs/h200, PyTorch's "total capacity"). A card a little larger than the device it is asked
/// of is that device (`settings::check_ceiling`).
pub const GPUS: &[(&str, &[&str], u64, &str)] = &[
    ("rtx3060", &["3060"], 12288, "NVIDIA GeForce RTX 3060 12 GB"),
    ("rtx3080", &["3080"], 10240, "NVIDIA GeForce RTX 3080 10 GB"),
    ("rtx3090", &["3090"], 24576, "NVIDIA GeForce RTX 3090 24 GB"),
    (
        "rtx4060ti",
        &["4060ti"],
        16384,
        "NVIDIA GeForce RTX 4060 Ti 16 GB",
    ),
    ("rtx4070", &["4070"], 12288, "NVIDIA GeForce RTX 4070 12 GB"),
    ("rtx4080", &["4080"], 16384, "NVIDIA GeForce RTX 4080 16 GB"),
    ("rtx4090", &["4090"], 24576, "NVIDIA GeForce RTX 4090 24 GB"),
    ("rtx5090", &["5090"], 32768, "NVIDIA GeForce RTX 5090 32 GB"),
    ("t4", &[], 16384, "NVIDIA T4 16 GB"),
    ("v100-16", &["v100"], 16384, "NVIDIA V100 16 GB"),
    ("v100-32", &[], 32768, "NVIDIA V100 32 GB"),
    ("a10", &["a10g"], 24576, "NVIDIA A10 / A10G 24 GB"),
    ("l4", &[], 24576, "NVIDIA L4 24 GB"),
    ("a100-40", &["a100"], 40960, "NVIDIA A100 40 GB"),
    ("a100-80", &[], 81920, "NVIDIA A100 80 GB"),
    ("h100", &["h100-80"], 81920, "NVIDIA H100 80 GB"),
    ("h200", &[], 143_155, "NVIDIA H200 141 GB"),
];

/// A warning when a size given in decimal units (`24GB`) lands just under a card's memory: cards
/// are sold in binary sizes ("24 GB" is 24 GiB), so `24GB` (22.35 GiB) is not what the box says.
/// `given`: the text as typed; `bytes`: what it was read as.
pub fn decimal_warning(given: &str, bytes: u64) -> Option<String> {
    let unit = given.trim().trim_end_matches(|c: char| c.is_whitespace());
    let lower = unit.to_ascii_lowercase();
    let decimal = ["kb", "mb", "gb", "tb"].iter().any(|u| lower.ends_with(u));
    if !decimal || bytes == 0 {
        return None;
    }
    let (name, _, mib, desc) = GPUS.iter().find(|(_, _, mib, _)| {
        let ratio = (mib << 20) as f64 / bytes as f64;
        (1.0..1.1).contains(&ratio)
    })?;
    Some(format!(
        "{given} is read in decimal units: {} bytes = {}. The {desc} has {} (cards are sold in \
         binary sizes); for that card write {}GiB or --gpu {name}",
        bytes,
        oom_trial::fmt_bytes(bytes),
        oom_trial::fmt_bytes(mib << 20),
        mib / 1024,
    ))
}

fn norm(s: &str) -> String {
    s.to_ascii_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect::<String>()
        .trim_start_matches("nvidia")
        .trim_start_matches("geforce")
        .trim_start_matches('-')
        .to_string()
}

/// Bytes of the named card.
pub fn lookup(name: &str) -> Option<(u64, &'static str)> {
    let n = norm(name);
    GPUS.iter()
        .find(|(k, aliases, _, _)| *k == n || aliases.contains(&n.as_str()))
        .map(|(_, _, mib, desc)| (mib << 20, *desc))
}

pub fn table() -> String {
    let mut s = String::from("Cards for --gpu (the ceiling is the card's memory):\n");
    for (k, aliases, mib, desc) in GPUS {
        let a = if aliases.is_empty() {
            String::new()
        } else {
            format!(" (also {})", aliases.join(", "))
        };
        let gib = *mib as f64 / 1024.0;
        s.push_str(&format!("  {k:<10} {gib:>6.1} GiB  {desc}{a}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    /// `24GB` is a 3090 owner typing the box; `24GiB`, and decimal sizes far from a card, are not.
    #[test]
    fn decimal_sizes_near_a_card_are_questioned() {
        let w = super::decimal_warning("--memory-limit 24GB", 24_000_000_000).unwrap();
        assert!(w.contains("22.35 GiB") && w.contains("24GiB"), "{w}");
        assert!(super::decimal_warning("--memory-limit 24GiB", 24 << 30).is_none());
        assert!(super::decimal_warning("--memory-limit 5GB", 5_000_000_000).is_none());
    }

    #[test]
    fn names() {
        assert_eq!(super::lookup("RTX 3090").unwrap().0, 24 << 30);
        assert_eq!(super::lookup("rtx3090").unwrap().0, 24 << 30);
        assert_eq!(super::lookup("a100").unwrap().0, 40 << 30);
        assert!(super::lookup("voodoo2").is_none());
        // What CUDA reports of an H200, not its "141 GB" read as GiB (more than the card has).
        assert_eq!(super::lookup("h200").unwrap().0, 143_155 << 20);
    }
}
