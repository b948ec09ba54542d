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

/// Opens `path` for writing, creating it and its directory: appending, or from its start,
/// emptied. A final symbolic link is refused rather than followed: in a shared directory (or as
/// root) a link planted where an output goes would have it replace or grow another file.
fn open_output(path: &Path, append: bool) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    create_parent(path)?;
    std::fs::OpenOptions::new()
        .create(true)
        .append(append)
        .write(true)
        .truncate(!append)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| {
            let why = match e.raw_os_error() {
                Some(libc::ELOOP) => {
                    "it is a symbolic link, and oom-bisect writes no file through a link: give \
                     the file's own path"
                        .to_string()
                }
                _ => e.to_string(),
            };
            user(
                code::UNWRITABLE,
                format!("cannot write {}: {why}", path.display()),
            )
        })
}

/// Opens `path` for appending, creating it and its directory (never through a final link).
pub fn open_append(path: &Path) -> Result<std::fs::File> {
    open_output(path, true)
}

/// Checks that a file can be written at `path` before hours of trials are spent, without leaving an
/// empty file behind when none was there. Only a regular file will do: opening a FIFO would wait for
/// a reader forever, and a device (`/dev/full`, through a link or not) swallows or refuses records.
pub fn check_writable(path: &Path) -> Result<()> {
    not_special(path).map_err(|e| user(code::UNWRITABLE, e))?;
    let existed = path.exists();
    let file = open_append(path)?;
    let room = free_bytes(&file);
    drop(file);
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    match room {
        Some(free) if free < MIN_FREE => Err(user(
            code::UNWRITABLE,
            format!(
                "cannot write {}: its file system has {free} bytes free, too few for the \
                 trials' records (free some space, or give another directory)",
                path.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// Room a diagnosis's files need at the start: a few journal records (a record is a few KiB).
const MIN_FREE: u64 = 64 << 10;

/// The bytes an unprivileged writer may still add to the file system holding `file`.
fn free_bytes(file: &std::fs::File) -> Option<u64> {
    use std::os::fd::AsRawFd;
    let mut s = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: fstatvfs fills the struct for an open descriptor; it is read only on success.
    let ok = unsafe { libc::fstatvfs(file.as_raw_fd(), s.as_mut_ptr()) } == 0;
    ok.then(|| {
        // SAFETY: initialised by the successful call above.
        let s = unsafe { s.assume_init() };
        s.f_bavail * s.f_frsize
    })
}

/// `Err` with the reason where `path` exists (through links) and is not a regular file.
fn not_special(path: &Path) -> std::result::Result<(), String> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() && !m.is_dir() => Err(format!(
            "{} is not a regular file (a FIFO, socket or device): give a file's path",
            path.display()
        )),
        _ => Ok(()),
    }
}

/// The bytes of the regular file at `path`, at most `max` of them: a FIFO is refused without
/// waiting for a writer, a device or a file larger than `max` by name, so that `--config /dev/zero`
/// ends with an error instead of filling the memory.
pub fn read_bounded(path: &Path, max: u64) -> std::result::Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let m = f.metadata().map_err(|e| e.to_string())?;
    if !m.is_file() {
        return Err("not a regular file (a FIFO, socket, device or directory)".into());
    }
    let mut bytes = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    match bytes.len() as u64 > max {
        true => Err(format!("larger than {} bytes, the most it may be", max)),
        false => Ok(bytes),
    }
}

/// Writes `text` to `path`, creating its directory (never through a final link).
pub fn write_file(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    open_output(path, false)?
        .write_all(text.as_bytes())
        .map_err(|e| {
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
