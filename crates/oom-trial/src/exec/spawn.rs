//! Starting the command and reading its two streams.

use super::contain::Containment;
use super::held::Held;
use super::{command_line, figures, Line, CONFIG_ENV, FIGURES_LINE, SERVE_ENV};
use crate::lines::{read_lines, MAX_LINE};
use anyhow::{Context as _, Result};
use std::io::{BufWriter, PipeReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};

/// Starts the command through `sh -c`, stdout and stderr on pipes of the holder's (so that nothing
/// it leaves behind holds the parent's pipes), one each, so that its failure is read stream by
/// stream; in the command's own cgroup where there is one; a served command's stdin is a pipe for
/// its trials.
pub(super) fn spawn(
    command: &str,
    config: &Path,
    held: &Held,
    env: &[(String, String)],
    contain: &Containment,
    serve: bool,
) -> Result<(Child, [PipeReader; 2])> {
    let (read, write) = std::io::pipe().context("could not make a pipe for the command")?;
    let (err_read, err_write) = std::io::pipe().context("could not make a pipe for the command")?;
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(command_line(command, config))
        .env(CONFIG_ENV, config)
        .envs(held.env.iter().chain(env).map(|(k, v)| (k, v)))
        .stdin(if serve { Stdio::piped() } else { Stdio::null() })
        .stdout(write)
        .stderr(err_write);
    if serve {
        cmd.env(SERVE_ENV, "1");
    }
    if let Some(fd) = contain.procs_fd() {
        // SAFETY: runs in the forked child before exec and calls only write(2), which is
        // async-signal-safe: "0" moves the writing process into the cgroup.
        unsafe {
            cmd.pre_exec(move || {
                libc::write(fd, b"0".as_ptr().cast(), 1);
                Ok(())
            })
        };
    }
    let child = cmd
        .spawn()
        .context("could not start /bin/sh for the command")?;
    // The holder keeps no write end: the pipe ends when the command's last process closes it.
    drop(cmd);
    Ok((child, [read, err_read]))
}

/// Reads the command's stdout and stderr, each on a thread: its figures lines come back on the
/// channel, every other line goes to the holder's stderr (where the parent reads out-of-memory
/// messages and error tails), in blocks, lines cut and decoded lossily ([`crate::lines`]), and
/// comes back too with its stream, as each trial's failure is read stream by stream.
pub(super) fn read_output<R: Read + Send + 'static>(outs: [R; 2]) -> Receiver<Line> {
    let (tx, rx) = mpsc::channel();
    for (out, err) in outs.into_iter().zip([false, true]) {
        read_stream(out, err, tx.clone());
    }
    rx
}

/// One of [`read_output`]'s streams (`err`: the command's stderr).
fn read_stream<R: Read + Send + 'static>(out: R, err: bool, tx: mpsc::Sender<Line>) {
    std::thread::spawn(move || {
        // Two streams forward at once: each writes its blocks through the handle, which locks
        // per write (a lock held for a thread's life would stop the other stream's thread).
        let forward = std::cell::RefCell::new(BufWriter::with_capacity(1 << 16, std::io::stderr()));
        read_lines(
            out,
            FIGURES_LINE,
            |line| match figures(&line) {
                // How many become events is bounded per trial (`Peak::take`).
                Some(f) => {
                    let _ = tx.send(Line::Figures(f));
                }
                // A parent that stopped reading costs the forwarded lines, never the trial.
                None => {
                    let line = crate::lines::cut(line, MAX_LINE);
                    let _ = writeln!(forward.borrow_mut(), "{line}");
                    let _ = tx.send(Line::Other(line, err));
                }
            },
            || {
                let _ = forward.borrow_mut().flush();
            },
        );
        let _ = forward.borrow_mut().flush();
    });
}
