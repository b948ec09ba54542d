//! Output files: every path is checked before the first trial, and every failure names the path
//! with exit code 14.

use crate::exit_codes::{self as code, user};
use anyhow::Result;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Creates the directory `path` will be written in.
pub fn create_parent(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            user(
                code::UNWRITABLE,
                format!("cannot create directory {}: {e}", dir.display()),
            )
        })?;
    }
    Ok(())
}

/// Opens `path` for appending, creating it and its directory.
pub fn open_append(path: &Path) -> Result<std::fs::File> {
    create_parent(path)?;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| {
            user(
                code::UNWRITABLE,
                format!("cannot write {}: {e}", path.display()),
            )
        })
}

/// Checks that a file can be written at `path` before hours of trials are spent, without leaving an
/// empty file behind when none was there.
pub fn check_writable(path: &Path) -> Result<()> {
    let existed = path.exists();
    open_append(path)?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Writes `text` to `path`, creating its directory.
pub fn write_file(path: &Path, text: &str) -> Result<()> {
    create_parent(path)?;
    std::fs::write(path, text).map_err(|e| {
        user(
            code::UNWRITABLE,
            format!("cannot write {}: {e}", path.display()),
        )
    })
}

/// What a path names, for comparing two: the file itself where it exists (links and `..` see
/// through), else its absolute spelling in the real parent directory.
fn identity(path: &Path) -> Identity {
    if let Ok(m) = std::fs::metadata(path) {
        return Identity::File(m.dev(), m.ino());
    }
    let parent = path.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = std::fs::canonicalize(parent.unwrap_or(Path::new("."))).unwrap_or_default();
    Identity::Path(dir.join(path.file_name().unwrap_or_default()))
}

#[derive(PartialEq)]
enum Identity {
    File(u64, u64),
    Path(PathBuf),
}

/// Refuses an output that is an input or another output (`--json` naming the config or the
/// journal would silently replace it), then checks that every output can be written, all before
/// the first trial. Each path comes with the flag or role a user knows it by.
pub fn check_outputs(inputs: &[(&str, &Path)], outputs: &[(&str, &Path)]) -> Result<()> {
    for (i, (what, out)) in outputs.iter().enumerate() {
        let id = identity(out);
        let earlier = inputs.iter().chain(&outputs[..i]);
        if let Some((other, _)) = earlier.clone().find(|(_, p)| identity(p) == id) {
            return Err(user(
                code::UNWRITABLE,
                format!(
                    "{what} {} is also the {other}: writing it would replace that; give it \
                     another path",
                    out.display()
                ),
            ));
        }
    }
    for (_, out) in outputs {
        check_writable(out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_may_not_be_an_input_or_another_output() {
        let d = std::env::temp_dir().join(format!("oom-bisect-files-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let config = d.join("c.toml");
        std::fs::write(&config, "x").unwrap();
        let via_dots = d.join("sub/../c.toml");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        let json = d.join("r.json");
        let inputs = [("config", config.as_path())];
        let err = check_outputs(&inputs, &[("--json", via_dots.as_path())]).unwrap_err();
        assert!(err.to_string().contains("is also the config"), "{err}");
        let twice = [("--json", json.as_path()), ("--html", json.as_path())];
        let err = check_outputs(&inputs, &twice).unwrap_err();
        assert!(err.to_string().contains("is also the --json"), "{err}");
        assert!(check_outputs(&inputs, &[("--json", json.as_path())]).is_ok());
        assert_eq!(std::fs::read_to_string(&config).unwrap(), "x");
    }
}
