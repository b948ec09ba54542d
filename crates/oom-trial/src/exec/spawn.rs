//! Starting the command and reading its two streams.

use super::contain::Containment;
use super::held::Held;
use super::{command_line, figures, Line, CONFIG_ENV, FIGURES_LINE, SERVE_ENV};
use crate::lines::{Splitter, MAX_LINE};
use anyhow::{Context as _, Result};
use std::io::{BufWriter, ErrorKind, PipeReader, Read, Write};
use std::os::fd::AsRawFd;
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

/// Reads the command's stdout and stderr on one thread: its figures lines come back on the
/// channel, every other line goes to the holder's stderr (where the parent reads out-of-memory
/// messages and error tails), in blocks, lines cut and decoded lossily ([`crate::lines`]), and
/// comes back too with its stream, as each trial's failure is read stream by stream.
///
/// The two pipes are read in the order the command wrote them where that matters: whenever stdout
/// gives something, stderr is drained before it is passed on. What a command printed to stderr
/// before a line on stdout (a served trial's out-of-memory message, then its `trial_done`) was in
/// the stderr pipe by the time that line could be read, so it stays with its trial; read on
/// threads of their own, it could come after the answer and be taken for the next trial's.
pub(super) fn read_output(outs: [PipeReader; 2]) -> Receiver<Line> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut pipes = outs.map(Pipe::new);
        pipes[1].err = true;
        let mut forward = BufWriter::with_capacity(1 << 16, std::io::stderr());
        while pipes.iter().any(|p| p.open) {
            wait_readable(&pipes);
            let mut lines = vec![];
            // stdout first, then everything stderr holds by now, which goes before it.
            let stdout = pipes[0].drain();
            lines.extend(pipes[1].drain());
            lines.extend(stdout);
            for (line, err) in lines {
                pass_on(line, err, &tx, &mut forward);
            }
            let _ = forward.flush();
        }
    });
    rx
}

/// A line of the command's: its figures to the parent, any other line forwarded to the holder's
/// stderr and to the parent with its stream. A parent that stopped reading costs the forwarded
/// lines, never the trial.
fn pass_on(line: String, err: bool, tx: &mpsc::Sender<Line>, forward: &mut impl Write) {
    match figures(&line) {
        // How many become events is bounded per trial (`Peak::take`).
        Some(f) => {
            let _ = tx.send(Line::Figures(f));
        }
        None => {
            let line = crate::lines::cut(line, MAX_LINE);
            let _ = writeln!(forward, "{line}");
            let _ = tx.send(Line::Other(line, err));
        }
    }
}

/// One of the command's output pipes, read without blocking, and its lines so far.
struct Pipe {
    reader: PipeReader,
    lines: Splitter,
    err: bool,
    open: bool,
}

impl Pipe {
    fn new(reader: PipeReader) -> Pipe {
        // SAFETY: fcntl on a descriptor this value owns; O_NONBLOCK only changes how reads wait.
        unsafe {
            let fd = reader.as_raw_fd();
            libc::fcntl(
                fd,
                libc::F_SETFL,
                libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
            );
        }
        Pipe {
            reader,
            lines: Splitter::new(FIGURES_LINE),
            err: false,
            open: true,
        }
    }

    /// Every complete line the pipe holds now (and at its end, the last one), with its stream.
    fn drain(&mut self) -> Vec<(String, bool)> {
        let mut out = vec![];
        let err = self.err;
        let mut take = |line: String| out.push((line, err));
        let mut buf = [0u8; 1 << 16];
        while self.open {
            match self.reader.read(&mut buf) {
                Ok(0) => {
                    self.open = false;
                    self.lines.finish(&mut take);
                }
                Ok(n) => self.lines.feed(&buf[..n], &mut take),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.open = false;
                    self.lines.finish(&mut take);
                }
            }
        }
        out
    }
}

/// Blocks until one of the open pipes has something to read or has ended.
fn wait_readable(pipes: &[Pipe; 2]) {
    let mut fds: Vec<libc::pollfd> = (pipes.iter().filter(|p| p.open))
        .map(|p| libc::pollfd {
            fd: p.reader.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `fds` is a live array of `fds.len()` pollfd structures.
    let _ = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
}
