//! Reading what another process prints, safely: bytes split on newlines, each line cut to a bound
//! and decoded lossily (a command may print invalid UTF-8, a 20 MB line or 100 MB of short ones),
//! and a bounded tail of the last lines for classification and error messages.

use crate::sync::lock;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

/// Longest line of a command's output kept, in bytes; the rest of a longer line is dropped and
/// counted.
pub const MAX_LINE: usize = 4096;

/// Reads `r` to its end as lines (see the module documentation), giving each to `on_line`, and
/// calling `on_idle` whenever what was read so far is used up, before the next read may block:
/// the place to flush what was forwarded, in blocks rather than a write per line.
pub fn read_lines<R: Read>(
    r: R,
    max_line: usize,
    mut on_line: impl FnMut(String),
    mut on_idle: impl FnMut(),
) {
    let mut reader = BufReader::with_capacity(1 << 16, r);
    let mut lines = Splitter::new(max_line);
    loop {
        let buf = match reader.fill_buf() {
            Ok([]) => break,
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let n = buf.len();
        lines.feed(buf, &mut on_line);
        reader.consume(n);
        on_idle();
    }
    lines.finish(&mut on_line);
}

/// Lines out of bytes as they come, in chunks of any size: each line cut after `max_line` bytes
/// (saying how much was cut) and decoded lossily.
pub struct Splitter {
    max_line: usize,
    line: Vec<u8>,
    dropped: usize,
}

impl Splitter {
    pub fn new(max_line: usize) -> Splitter {
        Splitter {
            max_line,
            line: Vec::with_capacity(256),
            dropped: 0,
        }
    }

    /// The lines `buf` completes, each to `on_line`; the rest waits for the next chunk.
    pub fn feed(&mut self, buf: &[u8], on_line: &mut impl FnMut(String)) {
        for part in buf.split_inclusive(|b| *b == b'\n') {
            let (body, ends) = match part.strip_suffix(b"\n") {
                Some(body) => (body, true),
                None => (part, false),
            };
            let room = self
                .max_line
                .saturating_sub(self.line.len())
                .min(body.len());
            self.line.extend_from_slice(&body[..room]);
            self.dropped += body.len() - room;
            if ends {
                on_line(self.take());
            }
        }
    }

    /// At the end of the input: its last line, where it did not end in a newline.
    pub fn finish(&mut self, on_line: &mut impl FnMut(String)) {
        if !self.line.is_empty() || self.dropped > 0 {
            on_line(self.take());
        }
    }

    fn take(&mut self) -> String {
        let mut text = String::from_utf8_lossy(&self.line).into_owned();
        if self.dropped > 0 {
            text.push_str(&format!(" … [{} more bytes cut]", self.dropped));
        }
        self.line.clear();
        self.dropped = 0;
        text
    }
}

/// `line` cut to at most `max` bytes (on a character's boundary), saying how much was cut.
pub fn cut(mut line: String, max: usize) -> String {
    if line.len() <= max {
        return line;
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    let dropped = line.len() - end;
    line.truncate(end);
    line.push_str(&format!(" … [{dropped} more bytes cut]"));
    line
}

/// The last lines of a stream, at most `max_bytes` of them together.
#[derive(Debug, Default)]
pub struct Tail {
    lines: VecDeque<String>,
    bytes: usize,
    max_bytes: usize,
    /// Lines that fell out of the tail.
    pub dropped: usize,
}

impl Tail {
    pub fn new(max_bytes: usize) -> Tail {
        Tail {
            max_bytes,
            ..Tail::default()
        }
    }

    pub fn push(&mut self, line: String) {
        self.bytes += line.len() + 1;
        self.lines.push_back(line);
        while self.bytes > self.max_bytes && self.lines.len() > 1 {
            let gone = self.lines.pop_front().expect("more than one line");
            self.bytes -= gone.len() + 1;
            self.dropped += 1;
        }
    }

    pub fn text(&self) -> String {
        let mut s = String::with_capacity(self.bytes);
        for l in &self.lines {
            s.push_str(l);
            s.push('\n');
        }
        s
    }
}

/// A pipe drained on a thread of its own into a bounded tail, so that a full pipe never blocks
/// the writer; [`Drain::take`] waits for its end only until a deadline, because a process that
/// escaped may hold the pipe open forever.
pub struct Drain {
    tail: Arc<Mutex<Tail>>,
    done: mpsc::Receiver<()>,
}

impl Drain {
    /// Drains `r`, lines cut at `max_line` bytes, the last `max_bytes` kept.
    pub fn start<R: Read + Send + 'static>(
        r: Option<R>,
        max_line: usize,
        max_bytes: usize,
    ) -> Drain {
        let tail = Arc::new(Mutex::new(Tail::new(max_bytes)));
        let (tx, done) = mpsc::channel();
        let t = Arc::clone(&tail);
        std::thread::spawn(move || {
            if let Some(r) = r {
                read_lines(r, max_line, |l| lock(&t).push(l), || {});
            }
            let _ = tx.send(());
        });
        Drain { tail, done }
    }

    /// What was read, once the pipe ended or at `deadline`, whichever comes first.
    pub fn take(self, deadline: Instant) -> String {
        let _ = self
            .done
            .recv_timeout(deadline.saturating_duration_since(Instant::now()));
        let text = lock(&self.tail).text();
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(bytes: &[u8]) -> Vec<String> {
        let mut out = vec![];
        read_lines(bytes, MAX_LINE, |l| out.push(l), || {});
        out
    }

    #[test]
    fn invalid_utf8_is_decoded_lossily_and_reading_goes_on() {
        let got = lines_of(b"ok\n\xff\xfe bad\nCUDA out of memory\n");
        assert_eq!(got, ["ok", "\u{fffd}\u{fffd} bad", "CUDA out of memory"]);
    }

    #[test]
    fn long_lines_are_cut_and_a_last_line_without_newline_is_kept() {
        let mut input = vec![b'x'; MAX_LINE + 10];
        input.extend_from_slice(b"\nend");
        let got = lines_of(&input);
        assert_eq!(got.len(), 2);
        assert!(got[0].starts_with(&"x".repeat(MAX_LINE)));
        assert!(
            got[0].ends_with("[10 more bytes cut]"),
            "{}",
            &got[0][MAX_LINE..]
        );
        assert_eq!(got[1], "end");
    }

    #[test]
    fn a_tail_keeps_the_last_lines_within_its_bound() {
        let mut t = Tail::new(10);
        for l in ["aaaa", "bbbb", "cccc"] {
            t.push(l.into());
        }
        assert_eq!(t.text(), "bbbb\ncccc\n");
        assert_eq!(t.dropped, 1);
    }
}
