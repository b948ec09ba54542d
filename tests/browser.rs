//! The HTML report in a real browser (headless Chromium, Debian's `chromium`): the page renders,
//! every plot has its axes and the ceiling line, and the browser logs no error. Skipped where
//! Chromium is missing, unless `OOM_BISECT_TEST_CHROMIUM=1` (CI installs it and sets that).

use crate::common::*;
use std::process::Command;

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// Chromium's DOM of `page` after it loaded, and what it logged.
fn load(browser: &str, page: &std::path::Path, dir: &std::path::Path) -> (String, String) {
    let o = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let log = String::from_utf8_lossy(&o.stderr).into_owned();
    (String::from_utf8_lossy(&o.stdout).into_owned(), log)
}

#[test]
fn the_html_report_renders_in_a_browser_with_axes_and_ceilings() {
    let browser = chromium();
    if !can_run("CHROMIUM", browser.is_some(), "no chromium on this machine") {
        return;
    }
    let d = tmp("browser");
    let page = d.join("report.html");
    let cfg = root().join("configs/forum-r101-os8-1024.toml");
    let o = run(
        &[
            "bisect",
            "--config",
            cfg.to_str().unwrap(),
            "--estimate",
            "-q",
        ]
        .into_iter()
        .chain(["--journal", d.join("j").to_str().unwrap()])
        .chain(["--html", page.to_str().unwrap()])
        .collect::<Vec<_>>(),
        &d,
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let (dom, log) = load(browser.unwrap(), &page, &d);
    let figures: Vec<&str> = dom.split("<figure>").skip(1).collect();
    assert!(figures.len() >= 4, "{} figures in {dom}", figures.len());
    for f in &figures {
        let svg = f.split("</svg>").next().unwrap();
        assert!(svg.contains("<svg"), "a figure without its plot: {f}");
        // Axes: plotters draws tick labels as text; every plot has several, and the ceiling.
        assert!(
            svg.matches("<text").count() >= 4,
            "a plot without axis labels: {svg}"
        );
        // Every plot against the ceiling; the breakdown's parts are not.
        let composition = svg.contains("what the peak is made of");
        let ceiling = svg.contains(">ceiling<") || svg.contains(">\nceiling\n<");
        assert!(ceiling || composition, "no ceiling: {svg}");
    }
    for bad in [
        "CONSOLE",
        "Uncaught",
        "ERR_FILE_NOT_FOUND",
        "Failed to load",
    ] {
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(bad)).collect();
        assert!(lines.is_empty(), "the browser logged {bad}: {lines:?}");
    }
}
