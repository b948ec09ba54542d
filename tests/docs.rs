//! The docs say what the repository holds: every shipped config is described as it is, and every
//! link and anchor in the README and `docs/` leads somewhere. Reads files only; runs nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The rows of `configs/README.md`'s table of shipped configs: file name → description.
fn shipped_rows() -> BTreeMap<String, String> {
    read("configs/README.md")
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let file = cells.get(1)?.strip_prefix('`')?.strip_suffix(".toml`")?;
            Some((format!("{file}.toml"), cells.get(2)?.to_string()))
        })
        .collect()
}

/// What a description must say of a config: backbone, stride, input size, batch and ceiling, as
/// the config sets them.
fn expected_words(config: &toml::Table) -> Vec<String> {
    let get = |section: &str, key: &str| config.get(section).and_then(|s| s.get(key)).cloned();
    let backbone = get("model", "backbone").unwrap();
    let depth = backbone.as_str().unwrap().trim_start_matches("resnet");
    let size = get("data", "size").unwrap();
    let size = size.as_array().unwrap();
    let mut words = vec![
        format!("ResNet-{depth}"),
        format!("OS{}", get("model", "output_stride").unwrap()),
        format!("{}×{}", size[0], size[1]),
        format!("batch {}", get("data", "batch").unwrap()),
    ];
    if let Some(limit) = get("device", "memory_limit") {
        // "245MiB" is written "245 MiB" in prose.
        let limit = limit.as_str().unwrap();
        let unit = limit.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
        words.push(format!("{} {unit}", &limit[..limit.len() - unit.len()]));
    }
    if let Some(gpu) = get("device", "gpu") {
        // "rtx3090" is written "RTX 3090".
        let gpu = gpu.as_str().unwrap();
        let digits = gpu.trim_start_matches(|c: char| c.is_ascii_alphabetic());
        let name = gpu[..gpu.len() - digits.len()].to_uppercase();
        words.push(format!("{name} {digits}"));
    }
    words
}

#[test]
fn every_shipped_config_is_described_as_it_is() {
    let rows = shipped_rows();
    let mut files: Vec<String> = std::fs::read_dir(root().join("configs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    files.sort();
    let listed: Vec<&String> = rows.keys().collect();
    assert_eq!(
        listed,
        files.iter().collect::<Vec<_>>(),
        "configs/README.md's table and configs/"
    );
    for (file, description) in &rows {
        let config: toml::Table = read(&format!("configs/{file}")).parse().unwrap();
        for word in expected_words(&config) {
            assert!(
                description.contains(&word),
                "configs/README.md describes {file} as \"{description}\", which does not say \"{word}\""
            );
        }
    }
}

/// The quickstart's comment gives the need and the overshoot the README's report shows.
#[test]
fn the_quickstarts_comment_matches_its_report() {
    let readme = read("README.md");
    let verdict = readme
        .lines()
        .find(|l| l.starts_with("Verdict: the original configuration"))
        .expect("the README shows the quickstart's verdict");
    let need = verdict.split("it needs ").nth(1).unwrap();
    let need = need.split(" MiB").next().unwrap();
    let over = verdict.rsplit('(').next().unwrap().trim_end_matches(").");
    let over = over.trim_start_matches('+');
    let comment: String = read("configs/quickstart.toml")
        .lines()
        .filter(|l| l.starts_with('#'))
        .collect::<Vec<_>>()
        .join(" ");
    for word in [format!("{need} MiB"), over.to_string()] {
        assert!(
            comment.contains(&word),
            "configs/quickstart.toml's comments do not say \"{word}\" as the README's report does: {verdict}"
        );
    }
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The lines of a Markdown text outside its fenced code blocks.
fn outside_code(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The anchors a Markdown file's headings make.
fn anchors(text: &str) -> Vec<String> {
    outside_code(text)
        .into_iter()
        .filter(|l| l.starts_with('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

/// The targets of a Markdown file's inline links `[text](target)`, outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = vec![];
    for line in outside_code(text) {
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_string());
                rest = &rest[end..];
            }
        }
    }
    out
}

/// Whether a link from `from` (a path relative to the root) leads to a file and, with `#anchor`,
/// to a heading of it; web addresses are not followed.
fn broken(from: &str, target: &str) -> Option<String> {
    if target.starts_with("http://") || target.starts_with("https://") || target.contains(' ') {
        return None;
    }
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    let file = if path.is_empty() {
        root().join(from)
    } else {
        root().join(from).parent().unwrap().join(path)
    };
    if !file.exists() {
        return Some(format!("{from}: {target}: no such file"));
    }
    let is_md = file.extension().is_some_and(|e| e == "md");
    if anchor.is_empty() || !is_md {
        return None;
    }
    let text = std::fs::read_to_string(&file).unwrap();
    (!anchors(&text).iter().any(|a| a == anchor))
        .then(|| format!("{from}: {target}: no heading makes #{anchor}"))
}

#[test]
fn every_link_and_anchor_in_the_docs_leads_somewhere() {
    let mut files = vec!["README.md".to_string(), "configs/README.md".to_string()];
    for dir in ["docs", "vendor"] {
        for e in std::fs::read_dir(root().join(dir)).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            if name.ends_with(".md") {
                files.push(format!("{dir}/{name}"));
            }
        }
    }
    let dead: Vec<String> = files
        .iter()
        .flat_map(|f| links(&read(f)).into_iter().map(move |t| (f.clone(), t)))
        .filter_map(|(f, t)| broken(&f, &t))
        .collect();
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
}

#[test]
fn the_slug_is_githubs() {
    assert_eq!(
        slug(" The cap, against the ballast"),
        "the-cap-against-the-ballast"
    );
    assert_eq!(slug("`--exec`: your own script"), "--exec-your-own-script");
}
