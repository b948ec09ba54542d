//! Output files: every path is checked before the first trial, and every failure names the path
//! with exit code 14.

use crate::exit_codes::{self as code, user};
use anyhow::Result;
use std::path::Path;

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
