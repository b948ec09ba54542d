//! The candidate's config for a `--exec` command, in a directory only this user can enter. On a
//! shared node another user can pre-create any predictable path (with a symlink into the victim's
//! home), so the directory has a random name, is made with `mkdir` (which never follows a link),
//! mode 0700, and is checked to be ours before the file is written with `O_EXCL | O_NOFOLLOW`. A
//! marker names the holder; the sweep of orphans removes only directories with our owner and
//! marker whose holder is gone.

use anyhow::{bail, Context as _, Result};
use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

const DIR_PREFIX: &str = "oom-bisect-exec-";
/// Inside each of our directories: the holder's pid.
const MARKER: &str = "holder.pid";

/// The config file and its directory, removed when the trial ends. A holder killed outright leaves
/// it behind; the next holder removes those of dead processes.
pub struct ConfigFile {
    dir: PathBuf,
    pub path: PathBuf,
}

impl ConfigFile {
    pub fn write(config: &str) -> Result<ConfigFile> {
        let tmp = temp_dir()?;
        remove_orphans(&tmp);
        let dir = tmp.join(format!(
            "{DIR_PREFIX}{}-{}",
            std::process::id(),
            random_hex()
        ));
        DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("could not create the private directory {}", dir.display()))?;
        let file = ConfigFile {
            path: dir.join("config.toml"),
            dir,
        };
        check_private(&file.dir)?;
        create_new(&file.dir.join(MARKER), &std::process::id().to_string())?;
        create_new(&file.path, config)?;
        Ok(file)
    }
}

impl ConfigFile {
    /// A file of its own beside the config, in the same private directory (removed with it).
    pub fn beside(&self, name: &str, text: &str) -> Result<PathBuf> {
        let path = self.dir.join(name);
        create_new(&path, text)?;
        Ok(path)
    }

    /// The private directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `$TMPDIR`, or `/tmp`: an existing directory, never created (a missing `$TMPDIR` is a mistake
/// to report, not a path to make).
pub fn temp_dir() -> Result<PathBuf> {
    // An empty `$TMPDIR` is unset, as for other tools: the system's.
    let tmp = match std::env::var_os("TMPDIR").filter(|v| v.is_empty()) {
        Some(_) => PathBuf::from("/tmp"),
        None => std::env::temp_dir(),
    };
    // The command's `{config}` is a path in here, and a shell reads it in whatever quotes the
    // command puts around it: `$(…)`, quotes or spaces in it would run or split.
    let plain = |s: &str| {
        s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,@%=:~".contains(c))
    };
    if !tmp.to_str().is_some_and(plain) {
        bail!(
            "the temporary directory {} (TMPDIR) holds characters a shell would read (`$`, \
             quotes, spaces, or bytes that are not UTF-8), and --exec hands your command a \
             config path inside it: set TMPDIR to a plain path",
            tmp.to_string_lossy().escape_debug()
        );
    }
    match std::fs::metadata(&tmp) {
        Ok(m) if m.is_dir() => Ok(tmp),
        Ok(_) => bail!(
            "the temporary directory {} is not a directory (TMPDIR)",
            tmp.display()
        ),
        Err(e) => bail!(
            "the temporary directory {} cannot be used (TMPDIR): {e}",
            tmp.display()
        ),
    }
}

/// Refuses a directory that is not ours alone: not a real directory, another owner, or open to
/// others.
fn check_private(dir: &Path) -> Result<()> {
    let m = std::fs::symlink_metadata(dir).with_context(|| format!("stat {}", dir.display()))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !m.file_type().is_dir() || m.uid() != me || m.mode() & 0o077 != 0 {
        bail!(
            "{} is not a private directory of this user (owner {}, mode {:o}); refusing to write \
             the trial's config there",
            dir.display(),
            m.uid(),
            m.mode() & 0o7777
        );
    }
    Ok(())
}

/// Creates `path` with `text`: never an existing file, never through a symlink.
fn create_new(path: &Path, text: &str) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("could not create {}", path.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("could not write {}", path.display()))
}

/// 64 random bits, as hex.
pub fn random_hex() -> String {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most `len` bytes into the buffer it is given.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        // Without the kernel's randomness, time and pid still make the name unpredictable enough
        // for `mkdir`, which fails on any existing name rather than follow it.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        b = (t ^ (std::process::id() as u64).rotate_left(40)).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Removes our directories whose holder no longer runs: our owner, our marker, a dead pid. Other
/// users' directories, and anything without the marker, are left alone.
fn remove_orphans(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with(DIR_PREFIX) {
            continue;
        }
        let path = e.path();
        let ours =
            std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_dir() && m.uid() == me);
        let holder = ours
            .then(|| std::fs::read_to_string(path.join(MARKER)).ok())
            .flatten()
            .and_then(|p| p.trim().parse::<i32>().ok());
        if holder.is_some_and(gone) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// Whether no process `pid` exists. Only "no such process" means gone: EPERM is another user's
/// live process.
fn gone(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only asks whether the process exists.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    !alive && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("oom-bisect-cfgtest-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_file_is_private_and_never_written_through_a_link() {
        let d = scratch("link");
        let victim = d.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = d.join("config.toml");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(create_new(&link, "x").is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let f = ConfigFile::write("a = 1\n").unwrap();
        let m = std::fs::symlink_metadata(f.path.parent().unwrap()).unwrap();
        assert_eq!(m.mode() & 0o777, 0o700);
        assert_eq!(std::fs::read_to_string(&f.path).unwrap(), "a = 1\n");
        let dir = f.path.parent().unwrap().to_path_buf();
        drop(f);
        assert!(!dir.exists());
    }

    #[test]
    fn only_our_marked_directories_of_dead_holders_are_swept() {
        let d = scratch("sweep");
        let dead = d.join(format!("{DIR_PREFIX}1-aa"));
        let unmarked = d.join(format!("{DIR_PREFIX}2-bb"));
        let live = d.join(format!("{DIR_PREFIX}3-cc"));
        for x in [&dead, &unmarked, &live] {
            std::fs::create_dir(x).unwrap();
        }
        // A pid beyond pid_max never runs; ours does.
        std::fs::write(dead.join(MARKER), "2147483600").unwrap();
        std::fs::write(live.join(MARKER), std::process::id().to_string()).unwrap();
        remove_orphans(&d);
        assert!(!dead.exists() && unmarked.exists() && live.exists());
    }
}
