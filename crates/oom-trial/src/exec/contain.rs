//! What a `--exec` command started, held together, so that (1) nothing it started outlives the
//! trial, however it escaped (`setsid`, a daemon that forked twice), and (2) a kill by the kernel's OOM killer is attributed to its processes and to nothing else on the host
//! (`/proc/vmstat`'s count is host-wide: a process killed in another container is not ours).
//!
//! - The holder is a subreaper (`PR_SET_CHILD_SUBREAPER`): whatever the command started and left
//!   behind becomes the holder's child, and the sweep at the end kills every descendant.
//! - Where it can, the holder makes a cgroup of the command's own (cgroup v1's memory hierarchy, or
//!   v2) and starts the command in it: its OOM-kill count is exactly the command's, and its
//!   process list catches anything that escaped the tree.
//! - Without one, the kernel log (`/dev/kmsg`, where readable) naming a process of the command
//!   seen while it ran. Without either, a SIGKILL is not called an out-of-memory.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How the command's OOM kills are counted.
enum Counter {
    /// The command's cgroup, and the file in it (and in any cgroup the command made below it)
    /// with an `oom_kill` count: `memory.oom_control` (v1, where it is not hierarchical) or
    /// `memory.events` (v2).
    Cgroup(PathBuf, &'static str),
    /// The kernel log, read from where it was when the command started.
    Kmsg(File),
    None,
}

pub struct Containment {
    cgroup: Option<PathBuf>,
    /// `cgroup.procs` of that cgroup, open for the child to write itself into before `exec`.
    procs: Option<File>,
    counter: Counter,
    /// Processes of the command seen while it ran (for the kernel log).
    seen: BTreeSet<i32>,
}

/// Whether and how the command's processes were killed by the kernel's OOM killer.
pub struct OomKills {
    pub killed: bool,
    /// How that was told; `None` when it could not be.
    pub how: Option<&'static str>,
}

impl Containment {
    /// Becomes a subreaper and prepares a cgroup (or the kernel log) for the command.
    pub fn new() -> Containment {
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER only sets a flag on this process.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        let cgroup = make_cgroup();
        let procs = cgroup.as_ref().and_then(|(d, _)| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(d.join("cgroup.procs"))
                .ok()
        });
        let counter = match &cgroup {
            Some((dir, Some(file))) if procs.is_some() => Counter::Cgroup(dir.clone(), file),
            _ => open_kmsg().map(Counter::Kmsg).unwrap_or(Counter::None),
        };
        let cgroup = cgroup.map(|(d, _)| d);
        if let Ok(mut running) = RUNNING_CGROUP.lock() {
            running.clone_from(&cgroup);
        }
        Containment {
            cgroup,
            procs,
            counter,
            seen: BTreeSet::new(),
        }
    }

    /// The descriptor the command's process writes "0" into before `exec`, joining the cgroup.
    pub fn procs_fd(&self) -> Option<i32> {
        self.procs.as_ref().map(|f| f.as_raw_fd())
    }

    /// Notes the command's processes now (only needed when the kernel log must name them).
    pub fn observe(&mut self) {
        if matches!(self.counter, Counter::Kmsg(_)) {
            self.seen.extend(descendants());
        }
    }

    /// Whether the kernel's OOM killer killed one of the command's processes.
    pub fn oom_kills(&mut self) -> OomKills {
        match &mut self.counter {
            Counter::Cgroup(dir, file) => OomKills {
                killed: oom_kills_below(dir, file) > 0,
                how: Some("the OOM-kill count of the command's own cgroup"),
            },
            Counter::Kmsg(log) => OomKills {
                killed: kmsg_names(log, &self.seen),
                how: Some("the kernel log naming one of the command's processes"),
            },
            Counter::None => OomKills {
                killed: false,
                how: None,
            },
        }
    }

    /// Kills everything the command started that still runs (its tree, and its cgroup), and
    /// reaps it; then removes the cgroup.
    pub fn sweep(&mut self) {
        sweep(self.cgroup.as_deref());
    }
}

/// The cgroup of the running command, for [`on_stop`]: a signal to the holder sweeps it too.
static RUNNING_CGROUP: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// What the holder does when it is told to stop (SIGTERM from the driver, or the driver's death):
/// every descendant and every process of the command's cgroup killed, also what escaped with
/// `setsid` (it is not in the holder's process group), and the cgroup removed. Runs on the stop
/// thread of `child.rs`, not in a signal handler.
pub fn on_stop() {
    let cgroup = RUNNING_CGROUP.try_lock().ok().and_then(|g| g.clone());
    sweep(cgroup.as_deref());
    if let Some(d) = cgroup {
        remove_cgroup(&d);
    }
}

/// Kills, until none is left, every descendant of this process and every process of `cgroup`.
fn sweep(cgroup: Option<&Path>) {
    for _ in 0..50 {
        let mut left: BTreeSet<i32> = descendants().into_iter().collect();
        if let Some(d) = cgroup {
            left.extend(cgroup_procs(d));
        }
        left.remove(&(std::process::id() as i32));
        let running: Vec<i32> = left.into_iter().filter(|p| !zombie(*p)).collect();
        for p in &running {
            // SAFETY: signals a process the command started (our descendant or in its cgroup).
            unsafe { libc::kill(*p, libc::SIGKILL) };
        }
        reap();
        if running.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Containment {
    /// The cgroup goes when the trial does (the counts were read): with any the command made
    /// below it, deepest first, as a cgroup with children cannot be removed.
    fn drop(&mut self) {
        self.procs = None;
        if let Ok(mut running) = RUNNING_CGROUP.lock() {
            *running = None;
        }
        if let Some(d) = self.cgroup.take() {
            remove_cgroup(&d);
        }
    }
}

fn remove_cgroup(dir: &Path) {
    for sub in subdirectories(dir) {
        remove_cgroup(&sub);
    }
    let _ = std::fs::remove_dir(dir);
}

fn subdirectories(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|es| {
            es.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// The OOM kills counted in `dir` and every cgroup below it.
fn oom_kills_below(dir: &Path, file: &str) -> u64 {
    let own = read_oom_kill(&dir.join(file)).unwrap_or(0);
    own + subdirectories(dir)
        .iter()
        .map(|d| oom_kills_below(d, file))
        .sum::<u64>()
}

/// Reaps every child that has ended (adopted orphans included).
fn reap() {
    // SAFETY: waitpid with WNOHANG on any child; the status is ours to discard.
    unsafe { while libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) > 0 {} }
}

/// A cgroup of our own beside this process's: its directory, and the name of the file with its
/// OOM-kill count when the memory controller is there.
fn make_cgroup() -> Option<(PathBuf, Option<&'static str>)> {
    let table = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let name = format!("oom-bisect-trial-{}", std::process::id());
    // cgroup v1's memory hierarchy first: it counts OOM kills in `memory.oom_control`.
    for line in table.lines() {
        let mut f = line.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        if controllers.split(',').any(|c| c == "memory") {
            let base = Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/'));
            remove_stale_cgroups(&base);
            let dir = base.join(&name);
            if std::fs::create_dir(&dir).is_ok() {
                return Some((dir, Some("memory.oom_control")));
            }
        }
    }
    // cgroup v2: `memory.events` exists only where the parent enables the memory controller.
    let path = table.lines().find_map(|l| l.strip_prefix("0::"))?;
    for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        let base = Path::new(root).join(path.trim_start_matches('/'));
        if !base.join("cgroup.procs").exists() {
            continue;
        }
        remove_stale_cgroups(&base);
        let dir = base.join(&name);
        if std::fs::create_dir(&dir).is_ok() {
            let events = dir.join("memory.events").exists();
            return Some((dir, events.then_some("memory.events")));
        }
    }
    None
}

/// Removes the cgroups of holders that are gone (killed outright, with no chance to remove their
/// own): an empty cgroup is only a directory, but they would pile up.
fn remove_stale_cgroups(base: &Path) {
    for dir in subdirectories(base) {
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let Some(pid) = name
            .strip_prefix("oom-bisect-trial-")
            .and_then(|p| p.parse().ok())
        else {
            continue;
        };
        // SAFETY: signal 0 only asks whether the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            remove_cgroup(&dir);
        }
    }
}

/// `oom_kill N` from a cgroup's `memory.oom_control` or `memory.events`.
fn read_oom_kill(file: &Path) -> Option<u64> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

fn cgroup_procs(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// `/proc/PID/stat`'s fields after the command name (which may hold spaces and parentheses).
pub(super) fn stat_fields(pid: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

fn zombie(pid: i32) -> bool {
    stat_fields(&pid.to_string()).is_none_or(|f| f.first().map(String::as_str) == Some("Z"))
}

/// Whether `pid` descends from this process, by its parent links in `/proc` (what escaped into a
/// `setsid` group of its own still does: the holder is a subreaper).
// Only the CUDA watch (`--ceiling-by command`) asks.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub fn descends_from_me(pid: u32) -> bool {
    let me = std::process::id();
    let mut p = pid;
    // Deeper than any real process tree; a cycle (a PID reused mid-walk) ends here too.
    for _ in 0..64 {
        match stat_fields(&p.to_string()).and_then(|f| f.get(1)?.parse::<u32>().ok()) {
            Some(parent) if parent == me => return true,
            Some(parent) if parent > 1 => p = parent,
            _ => return false,
        }
    }
    false
}

/// Every descendant of this process, from the parent links in `/proc`.
pub fn descendants() -> Vec<i32> {
    let mut parent_of = vec![];
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(pid) = name.parse::<i32>() else {
                continue;
            };
            if let Some(ppid) = stat_fields(&name).and_then(|f| f.get(1)?.parse::<i32>().ok()) {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut found = vec![std::process::id() as i32];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

/// `/dev/kmsg`, positioned at its end: only what the kernel logs from now on is read.
fn open_kmsg() -> Option<File> {
    // SAFETY: opens a path we own the string of; the descriptor is owned by the File.
    let fd = unsafe {
        libc::open(
            c"/dev/kmsg".as_ptr(),
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: fd is a descriptor we just opened and own.
    let f = unsafe { File::from_raw_fd(fd) };
    // SAFETY: lseek on our own descriptor; SEEK_END on /dev/kmsg skips to the newest record.
    (unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_END) } >= 0).then_some(f)
}

/// Whether the kernel logged an OOM kill of one of `pids` since the log was opened
/// (`Out of memory: Killed process 1234 (python3)`, or `oom-kill:…,pid=1234,…`).
fn kmsg_names(log: &mut File, pids: &BTreeSet<i32>) -> bool {
    let mut record = vec![0u8; 8192];
    let mut named = false;
    // One record per read; EAGAIN at the end, EPIPE when records were overwritten (read on).
    loop {
        match log.read(&mut record) {
            Ok(0) => break,
            Ok(n) => named |= names_a_kill(&String::from_utf8_lossy(&record[..n]), pids),
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(_) => break,
        }
    }
    named
}

fn names_a_kill(record: &str, pids: &BTreeSet<i32>) -> bool {
    let pid_after = |marker: &str| {
        let i = record.find(marker)? + marker.len();
        let digits: String = record[i..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse::<i32>().ok()
    };
    [pid_after("Killed process "), pid_after(",pid=")]
        .into_iter()
        .flatten()
        .any(|p| pids.contains(&p))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests that start children: the sweep reaps any child of this process (`waitpid(-1)`),
    /// so one test's sweep must not reap the child another test waits for.
    static CHILDREN: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn the_kernel_log_names_a_kill_of_our_processes_only() {
        let ours: BTreeSet<i32> = [4242].into();
        let killed = "3,1234,5678,-;Out of memory: Killed process 4242 (python3) total-vm:1kB";
        let other = "3,1234,5678,-;Out of memory: Killed process 4243 (python3) total-vm:1kB";
        let summary = "6,1,2,-;oom-kill:constraint=CONSTRAINT_MEMCG,task=python3,pid=4242,uid=0";
        assert!(names_a_kill(killed, &ours));
        assert!(!names_a_kill(other, &ours));
        assert!(names_a_kill(summary, &ours));
    }

    #[test]
    fn an_orphan_in_a_new_session_is_found_and_swept() {
        let _children = CHILDREN.lock().unwrap_or_else(|e| e.into_inner());
        let mut c = Containment::new();
        // A grandchild gone with `setsid`, whose parent exits at once: an escaped daemon.
        let status = std::process::Command::new("/bin/sh")
            .args(["-c", "setsid sleep 6021 </dev/null >/dev/null 2>&1 &"])
            .status()
            .unwrap();
        assert!(status.success());
        std::thread::sleep(Duration::from_millis(200));
        let sleeping = |d: &[i32]| {
            d.iter().any(|p| {
                std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.contains("6021"))
            })
        };
        assert!(sleeping(&descendants()), "the orphan was not adopted");
        c.sweep();
        assert!(!sleeping(&descendants()));
    }

    /// The watch of `--ceiling-by command` counts a grandchild's device memory, and nothing of a
    /// process outside the tree.
    #[test]
    fn a_grandchild_descends_and_the_parent_does_not() {
        let _children = CHILDREN.lock().unwrap_or_else(|e| e.into_inner());
        // Nothing of ours on its pipes: a `sleep` left behind must not hold the test's output open.
        let mut sh = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 7031 & wait"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let grandchild = descendants()
            .into_iter()
            .find(|p| {
                let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
                stat_fields(&p.to_string())
                    .and_then(|f| f.get(1)?.parse::<u32>().ok())
                    .is_some_and(|parent| parent == sh.id())
                    && comm.trim() == "sleep"
            })
            .expect("the grandchild runs");
        assert!(descends_from_me(grandchild as u32));
        assert!(descends_from_me(sh.id()));
        assert!(!descends_from_me(std::process::id()));
        assert!(!descends_from_me(1));
        // SAFETY: kill on a PID of our own tree.
        unsafe { libc::kill(grandchild, libc::SIGKILL) };
        sh.wait().unwrap();
    }
}
