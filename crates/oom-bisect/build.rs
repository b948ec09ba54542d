//! The commit the binary is built from, for `--version`: a benchmark table is stamped with the
//! binary that measured, not with whatever checkout lies beside it.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short=10", "HEAD"]);
    let commit = commit.as_deref().unwrap_or("unknown");
    println!("cargo:rustc-env=OOM_BISECT_COMMIT={commit}");
    // Built again when HEAD moves (a commit, a checkout); files that do not exist are not named,
    // or the script would run on every build.
    let Some(dir) = git(&["rev-parse", "--git-dir"]) else {
        return;
    };
    let head = git(&["symbolic-ref", "-q", "HEAD"]);
    let files = ["HEAD".to_string(), "packed-refs".to_string()]
        .into_iter()
        .chain(head);
    for f in files {
        let path = std::path::Path::new(&dir).join(f);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
