//! The journal: every finished trial appended as one JSON line the moment it is known, so an
//! interrupted search loses nothing and the same command run again resumes from it. Results are keyed
//! by the candidate's canonical config and attempt number within an experiment (`experiment.rs`:
//! everything else that changes a measurement). Only conclusive results are replayed: a timeout or
//! an error (a transient failure, a too-short `--trial-timeout`) is measured again on resume.
//!
//! One run at a time: the file is locked (`flock`) while a run appends to it. A line cut short by a
//! crash or a full disk is terminated before the next record is appended, so it cannot swallow it.
//! Records are written in ASCII (other characters as JSON escapes), so a cut can never leave half
//! a character; a line that is not UTF-8 anyway (written by something else) is counted and
//! skipped, never the end of reading.

use crate::exit_codes::{self as code, user};
use anyhow::Result;
use oom_search::Candidate;
use oom_trial::{TrialOutcome, TrialReport};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The journal's format: 2 since a trial's verdict carries its evidence and payload
/// (`oom_trial::Verdict`). Lines without a version are the first format, read through
/// [`upgrade_v1`].
const VERSION: u32 = 2;

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    #[serde(default = "first_format")]
    version: u32,
    key: String,
    attempt: u32,
    experiment: String,
    candidate: Candidate,
    report: TrialReport,
}

fn first_format() -> u32 {
    1
}

/// A line of the first format made the current one. Its report wrote every verdict's fields side
/// by side (`oom`, `error`, `diverged` as null where they did not apply), a served answer as
/// `served: true`, and, before certificates, no `evidence`: a fit or an out-of-memory without one
/// gets the evidence that decided it then (a replay of a run nothing held to the ceiling, a served
/// answer, a command's exit, else the device).
fn upgrade_v1(mut entry: serde_json::Value) -> serde_json::Value {
    let Some(report) = entry.get_mut("report").and_then(|r| r.as_object_mut()) else {
        return entry;
    };
    let outcome = report.get("outcome").and_then(|o| o.as_str()).unwrap_or("");
    let verdict = matches!(outcome, "fits" | "oom");
    let has_evidence = report
        .get("evidence")
        .and_then(|e| e.get("kind"))
        .is_some_and(|k| k != "none");
    if verdict && !has_evidence {
        let replayed = report
            .get("allocator")
            .is_some_and(|a| a.get("device_held_ceiling") == Some(&serde_json::json!(false)));
        let served = report.get("served") == Some(&serde_json::json!(true));
        let exec = report.get("peak_source").is_some_and(|p| !p.is_null());
        let kind = match (replayed, served, exec) {
            (true, _, _) => "replayed",
            (_, true, _) => "served",
            (_, _, true) => "exit",
            _ => "device",
        };
        report.insert("evidence".into(), serde_json::json!({ "kind": kind }));
    }
    if !verdict {
        report.remove("evidence");
        // An error or a timeout always said why; a line that did not is read as saying nothing.
        if report.get("error").is_none_or(|e| e.is_null()) {
            report.insert("error".into(), serde_json::json!(""));
        }
    }
    // Started: all four of the device's figures, or none.
    for key in ["backend", "device", "ceiling_bytes", "context_bytes"] {
        if report.get(key).is_some_and(|v| v.is_null()) {
            report.remove(key);
        }
    }
    entry
}

/// The largest journal read back: hundreds of thousands of trials.
const MAX_JOURNAL_BYTES: u64 = 1 << 30;

pub struct Journal {
    file: Option<File>,
    /// Records that could not be written, and the first reason: the run's exit code says so.
    pub unwritten: usize,
    pub unwritten_why: Option<String>,
    experiment: String,
    known: HashMap<(String, u32), TrialReport>,
    /// Lines that were not journal records (cut short, or not ours), skipped when loading.
    pub skipped: usize,
    /// Of those, lines that were not even UTF-8.
    pub undecodable: usize,
}

impl Journal {
    /// Opens (creating) `path`, locked for this run; earlier entries of the same `experiment` are
    /// loaded unless `fresh`.
    pub fn open(path: &Path, experiment: &str, fresh: bool) -> Result<Journal> {
        let mut file = crate::files::open_append(path)?;
        lock_file(&file, path)?;
        terminate_last_line(&mut file, path).map_err(|e| {
            user(
                code::UNWRITABLE,
                format!("cannot write {}: {e}", path.display()),
            )
        })?;
        let loaded = if fresh {
            Loaded::default()
        } else {
            load(path, experiment)
        };
        Ok(Journal {
            file: Some(file),
            unwritten: 0,
            unwritten_why: None,
            experiment: experiment.to_string(),
            known: loaded.known,
            skipped: loaded.skipped,
            undecodable: loaded.undecodable,
        })
    }

    /// Entries loaded from an earlier run.
    pub fn loaded(&self) -> usize {
        self.known.len()
    }

    /// A conclusive earlier result of this candidate and attempt.
    pub fn lookup(&self, key: &str, attempt: u32) -> Option<TrialReport> {
        let r = self.known.get(&(key.to_string(), attempt))?;
        matches!(r.outcome(), TrialOutcome::Fits | TrialOutcome::Oom).then(|| r.clone())
    }

    pub fn append(&mut self, key: &str, attempt: u32, candidate: &Candidate, report: &TrialReport) {
        let Some(f) = self.file.as_mut() else { return };
        let e = Entry {
            version: VERSION,
            key: key.to_string(),
            attempt,
            experiment: self.experiment.clone(),
            candidate: candidate.clone(),
            report: report.clone(),
        };
        let mut line = ascii(&serde_json::to_string(&e).expect("journal entries serialise"));
        line.push('\n');
        // The whole line in one write(2), flushed: an interruption loses at most the line being written,
        // and the loader skips a line cut short.
        if let Err(err) = f.write_all(line.as_bytes()).and_then(|_| f.flush()) {
            // Said once; the run's exit code says it again after the report.
            if self.unwritten_why.is_none() {
                tell!("oom-bisect: warning: could not append to the journal: {err}");
                self.unwritten_why = Some(err.to_string());
            }
            self.unwritten += 1;
        }
    }
}

/// A trial as the pool knows it: the candidate, its attempt, and the config's canonical key (what
/// the journal files it under).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Job {
    pub candidate: Candidate,
    pub attempt: u32,
    pub key: String,
}

/// The pool's journal hook: every trial is journaled on the worker that ran it, the moment it ends,
/// whether the search has asked for it yet or not; nothing measured is lost to an interruption.
pub fn journal_on_finish(journal: Arc<Mutex<Journal>>) -> oom_trial::pool::OnFinish<Job> {
    Box::new(move |job: &Job, report: &TrialReport| {
        oom_trial::sync::lock(&journal).append(&job.key, job.attempt, &job.candidate, report)
    })
}

/// Refuses a journal another run is appending to (both would run every trial).
fn lock_file(file: &File, path: &Path) -> Result<()> {
    // SAFETY: flock on a descriptor we own; the lock lives as long as the file stays open.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(());
    }
    Err(user(
        code::UNWRITABLE,
        format!(
            "another oom-bisect is using the journal {}; wait for it to finish, or give this run \
             another --journal directory",
            path.display()
        ),
    ))
}

/// Ends a last line that a crash or a full disk cut short, so that the next record starts a line.
fn terminate_last_line(file: &mut File, path: &Path) -> std::io::Result<()> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let mut last = [0u8];
    // The append handle cannot read: a reader of its own.
    let mut reader = File::open(path)?;
    reader.seek(SeekFrom::Start(len - 1))?;
    reader.read_exact(&mut last)?;
    if last[0] != b'\n' {
        file.write_all(b"\n")?;
    }
    Ok(())
}

/// JSON text with every character outside ASCII written as a `\uXXXX` escape: outside strings a
/// JSON text is ASCII already, so this is the same value.
fn ascii(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            for unit in c.encode_utf16(&mut [0; 2]) {
                out += &format!("\\u{unit:04x}");
            }
        }
    }
    out
}

#[derive(Default)]
struct Loaded {
    known: HashMap<(String, u32), TrialReport>,
    skipped: usize,
    undecodable: usize,
}

/// The records of `experiment` in the file, and how many lines were not records at all (and of
/// those, how many not UTF-8). Read as bytes: one bad line hides no later record.
fn load(path: &Path, experiment: &str) -> Loaded {
    let mut l = Loaded::default();
    let Ok(bytes) = crate::files::read_bounded(path, MAX_JOURNAL_BYTES) else {
        return l;
    };
    for line in bytes.split(|b| *b == b'\n') {
        let Ok(line) = std::str::from_utf8(line) else {
            l.skipped += 1;
            l.undecodable += 1;
            continue;
        };
        if line.trim().is_empty() {
            continue;
        }
        let entry =
            serde_json::from_str::<serde_json::Value>(line).and_then(|v| match v.get("version") {
                Some(_) => serde_json::from_value::<Entry>(v),
                None => serde_json::from_value::<Entry>(upgrade_v1(v)),
            });
        match entry {
            Ok(e) if e.experiment == experiment => {
                l.known.insert((e.key, e.attempt), e.report);
            }
            Ok(_) => {}
            Err(_) => l.skipped += 1,
        }
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A journal of the first format (written before verdicts carried their evidence, one line
    /// from before evidence existed at all) reads back: every verdict with its evidence, an error
    /// with its reason; and what this version writes reads back the same.
    #[test]
    fn the_first_format_reads_back_and_the_current_round_trips() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/journal-v1.jsonl");
        let first = std::fs::read_to_string(&path).unwrap();
        let experiment = serde_json::from_str::<serde_json::Value>(first.lines().next().unwrap())
            .unwrap()["experiment"]
            .as_str()
            .unwrap()
            .to_string();
        let loaded = load(&path, &experiment);
        assert_eq!((loaded.known.len(), loaded.skipped), (4, 0));
        let report = |attempt: u32| {
            let found = loaded.known.iter().find(|((_, a), _)| *a == attempt);
            found.unwrap().1
        };
        let oom = report(0);
        assert_eq!(oom.outcome(), TrialOutcome::Oom);
        assert!(oom.oom().is_some_and(|o| o.replayed) && oom.started.is_some());
        assert_eq!(oom.evidence(), Some(&oom_trial::Evidence::Replayed));
        assert_eq!(report(5).outcome(), TrialOutcome::Fits);
        // Without an evidence key: a run nothing held to the ceiling, so its replay decided.
        assert_eq!(report(7).evidence(), Some(&oom_trial::Evidence::Replayed));
        let error = report(8);
        assert_eq!(error.outcome(), TrialOutcome::Error);
        assert_eq!(
            error.error(),
            Some("the trial process was killed by signal 9")
        );
        assert_eq!(error.evidence(), None);
        for r in loaded.known.values() {
            let e = Entry {
                version: VERSION,
                key: "k".into(),
                attempt: 0,
                experiment: experiment.clone(),
                candidate: Candidate::default(),
                report: r.clone(),
            };
            let back: Entry = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
            assert_eq!(&back.report, r);
        }
    }

    #[test]
    fn records_are_ascii_and_read_back_the_same() {
        let json = serde_json::to_string("tqdm ▏█ 中 🦀 \u{202e}").unwrap();
        let a = ascii(&json);
        assert!(a.is_ascii(), "{a}");
        assert_eq!(
            serde_json::from_str::<String>(&a).unwrap(),
            "tqdm ▏█ 中 🦀 \u{202e}"
        );
    }
}
