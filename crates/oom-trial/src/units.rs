//! Sizes as people write and read them.

/// `1.50 GiB`, `512.0 MiB`, `20 KiB`, `12 B`.
pub fn fmt_bytes(b: u64) -> String {
    const K: f64 = 1024.0;
    let f = b as f64;
    if f >= K * K * K {
        format!("{:.2} GiB", f / (K * K * K))
    } else if f >= K * K {
        format!("{:.1} MiB", f / (K * K))
    } else if f >= K {
        format!("{:.0} KiB", f / K)
    } else {
        format!("{b} B")
    }
}

/// A size exactly, as a config writes it: in the largest binary unit that divides it (`245MiB`),
/// else in bytes (`85018897623B`). [`parse_size`] reads it back to the byte.
pub fn exact_size(b: u64) -> String {
    let units = [
        (50, "PiB"),
        (40, "TiB"),
        (30, "GiB"),
        (20, "MiB"),
        (10, "KiB"),
    ];
    units
        .iter()
        .find(|(shift, _)| b > 0 && b.is_multiple_of(1u64 << shift))
        .map_or(format!("{b}B"), |(shift, unit)| {
            format!("{}{unit}", b >> shift)
        })
}

/// Parses `24GiB`, `24000MiB`, `1.5 GB`, `512M`, or plain bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (examples: 24GiB, 24000MiB, 1073741824)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024f64.powi(4),
        "p" | "pib" => 1024f64.powi(5),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "pb" => 1e15,
        other => {
            return Err(format!(
                "`{s}`: unknown unit `{other}` (allowed: B, KiB, MiB, GiB, TiB, PiB, KB, MB, GB, TB, PB)"
            ))
        }
    };
    let v = n * mult;
    if !(v.is_finite() && v >= 1.0) {
        return Err(format!("`{s}` is not a positive size"));
    }
    Ok(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_sizes_read_back_to_the_byte() {
        assert_eq!(exact_size(245 << 20), "245MiB");
        assert_eq!(exact_size(24 << 30), "24GiB");
        assert_eq!(exact_size(1536 << 20), "1536MiB");
        assert_eq!(exact_size(1000), "1000B");
        for b in [245u64 << 20, 85_018_897_623, 3 << 10, 1] {
            assert_eq!(parse_size(&exact_size(b)).unwrap(), b);
        }
    }

    #[test]
    fn sizes_read_and_written() {
        assert_eq!(parse_size("24GiB").unwrap(), 24 << 30);
        assert_eq!(parse_size("24000MiB").unwrap(), 24000 << 20);
        assert_eq!(parse_size("1073741824").unwrap(), 1 << 30);
        assert_eq!(parse_size("1.5 GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("2GB").unwrap(), 2_000_000_000);
        // The largest ceiling taken is 1 PiB: its own unit reads.
        assert_eq!(parse_size("1PiB").unwrap(), 1 << 50);
        assert!(parse_size("24 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0").is_err());
        assert_eq!(fmt_bytes(3 << 29), "1.50 GiB");
    }
}
