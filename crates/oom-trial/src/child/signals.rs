//! How a trial's process ends: every panic reported, and the process ended soon after one (a
//! panicked device thread can leave the main thread blocked or computing garbage); the parent's
//! stop (or its death) takes the whole group with it.

use crate::classify::{classify_message, MessageKind};
use crate::emit::emit;
use crate::protocol::{exit, ChildEvent};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

pub(super) static PANICKED: AtomicBool = AtomicBool::new(false);
/// The first panic's message, for the exit code.
static FIRST_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Whether the first panic was an allocation refused (the trial's out-of-memory).
pub(super) fn first_panic_is_oom() -> bool {
    let first = FIRST_PANIC.lock().map(|g| g.clone()).unwrap_or(None);
    matches!(
        first.as_deref().map(classify_message),
        Some(MessageKind::AllocationFailure { .. })
    )
}

pub(super) fn panic_exit_code() -> i32 {
    match first_panic_is_oom() {
        true => exit::OOM,
        false => exit::INCONCLUSIVE,
    }
}

/// How long the watchdog lets other threads report after the first panic. An allocation refused
/// first is the verdict (the parent takes the first refusal among the panics), so the process
/// ends at once: under the cap a third of a diagnosis's trials end this way, and the 1.5 s they
/// waited held a slot. Any other first panic waits as before: a refusal reported after it still
/// makes the trial an out-of-memory rather than an error.
pub(super) fn grace_after_panic(oom_first: bool) -> Duration {
    match oom_first {
        true => Duration::from_millis(20),
        false => Duration::from_millis(1500),
    }
}

/// Reports every panic on every thread, and ends the process shortly after one: a panicked device
/// thread can leave the main thread blocked forever or computing garbage.
pub(super) fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_string();
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(non-text panic payload)".into());
        let message = match info.location() {
            Some(l) => format!("{payload} (at {}:{})", l.file(), l.line()),
            None => payload,
        };
        if let Ok(mut first) = FIRST_PANIC.lock() {
            first.get_or_insert_with(|| message.clone());
        }
        emit(&ChildEvent::Panic { thread, message });
        PANICKED.store(true, Ordering::SeqCst);
    }));
    // The watchdog: once anything panicked, give follow-on messages their moment (none after an
    // out-of-memory), then end the process whatever the main thread is doing.
    std::thread::Builder::new()
        .name("oom-bisect-watchdog".into())
        .spawn(|| loop {
            std::thread::sleep(Duration::from_millis(50));
            if PANICKED.load(Ordering::SeqCst) {
                std::thread::sleep(grace_after_panic(first_panic_is_oom()));
                let _ = std::io::stdout().lock().flush();
                // SAFETY: `_exit` ends the process at once without running destructors or atexit
                // handlers, which may wait on the dead device thread.
                unsafe { libc::_exit(panic_exit_code()) };
            }
        })
        .expect("spawn watchdog");
}

/// The write end of the stop thread's pipe; -1 until it runs.
static STOP_PIPE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_stop_signal(_: libc::c_int) {
    let fd = STOP_PIPE.load(Ordering::SeqCst);
    // SAFETY: write, alarm and kill are async-signal-safe. The stop thread does the work; should it
    // not finish in 10 s, SIGALRM (below) ends the group anyway. Not sooner: the group's end leaves
    // running what left the group (a `setsid` child), which only the stop thread's sweep finds, and
    // that sweep needs room on a machine loaded with other work.
    unsafe {
        libc::alarm(10);
        if fd < 0 || libc::write(fd, b"x".as_ptr().cast(), 1) != 1 {
            libc::kill(0, libc::SIGKILL);
        }
    }
}

extern "C" fn end_group(_: libc::c_int) {
    // SAFETY: kill is async-signal-safe; group 0 is our own, created for this trial by the parent.
    unsafe { libc::kill(0, libc::SIGKILL) };
}

/// The parent sends SIGTERM to stop a trial, and arranges it for when it dies
/// (`PR_SET_PDEATHSIG`), as SIGINT and SIGHUP may come from a terminal: the trial then takes with
/// it whatever it started, also what left its process group (a `--exec` command's `setsid`
/// children, its cgroup: `exec::on_stop`), then its whole group (helpers, a compiler), so that
/// nothing keeps the card or the CPU. The work is done on a thread woken through a pipe, as a
/// signal handler may not allocate.
pub(super) fn die_with_parent() {
    let mut fds = [0; 2];
    // SAFETY: pipe fills the two descriptors it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == 0 {
        let read_end = fds[0];
        let stop = std::thread::Builder::new()
            .name("oom-bisect-stop".into())
            .spawn(move || {
                let mut byte = 0u8;
                loop {
                    // SAFETY: reads one byte into a local from the pipe this thread owns.
                    match unsafe { libc::read(read_end, (&mut byte as *mut u8).cast(), 1) } {
                        1 => break,
                        0 => return,
                        _ => continue, // interrupted
                    }
                }
                crate::exec::on_stop();
                end_group(0);
            });
        if stop.is_ok() {
            STOP_PIPE.store(fds[1], Ordering::SeqCst);
        }
    }
    // SAFETY: installs handlers that only call async-signal-safe functions.
    unsafe {
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::signal(sig, on_stop_signal as *const () as libc::sighandler_t);
        }
        libc::signal(libc::SIGALRM, end_group as *const () as libc::sighandler_t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_out_of_memory_ends_the_trial_without_waiting_for_follow_ons() {
        assert!(grace_after_panic(true) <= Duration::from_millis(50));
        // Any other first panic still waits for an allocation refused after it.
        assert!(grace_after_panic(false) >= Duration::from_secs(1));
    }
}
