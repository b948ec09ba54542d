//! The journal: every finished trial appended as one JSON line the moment it is known, so an
//! interrupted search loses nothing and the same command run again resumes from it. Results are keyed
//! by the canonical config, the attempt number, the backend and the ceiling: a different ceiling or
//! backend is a different experiment.

use anyhow::Result;
use oom_search::Candidate;
use oom_trial::TrialReport;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    key: String,
    attempt: u32,
    experiment: String,
    candidate: Candidate,
    report: TrialReport,
}

pub struct Journal {
    file: Option<File>,
    experiment: String,
    known: HashMap<(String, u32), TrialReport>,
}

impl Journal {
    /// Opens (creating) `path`; earlier entries of the same `experiment` are loaded unless `fresh`.
    pub fn open(path: &Path, experiment: &str, fresh: bool) -> Result<Journal> {
        let mut known = HashMap::new();
        if !fresh {
            if let Ok(f) = File::open(path) {
                for line in BufReader::new(f).lines().map_while(|l| l.ok()) {
                    // A line cut short by a crash is skipped, not fatal.
                    if let Ok(e) = serde_json::from_str::<Entry>(&line) {
                        if e.experiment == experiment {
                            known.insert((e.key, e.attempt), e.report);
                        }
                    }
                }
            }
        }
        let file = crate::settings::open_append(path)?;
        Ok(Journal {
            file: Some(file),
            experiment: experiment.to_string(),
            known,
        })
    }

    /// Entries loaded from an earlier run.
    pub fn loaded(&self) -> usize {
        self.known.len()
    }

    pub fn lookup(&self, key: &str, attempt: u32) -> Option<TrialReport> {
        self.known.get(&(key.to_string(), attempt)).cloned()
    }

    pub fn append(&mut self, key: &str, attempt: u32, candidate: &Candidate, report: &TrialReport) {
        let Some(f) = self.file.as_mut() else { return };
        let e = Entry {
            key: key.to_string(),
            attempt,
            experiment: self.experiment.clone(),
            candidate: candidate.clone(),
            report: report.clone(),
        };
        let mut line = serde_json::to_string(&e).expect("journal entries serialise");
        line.push('\n');
        // The whole line in one write(2), flushed: an interruption loses at most the line being written,
        // and the loader skips a line cut short.
        if let Err(err) = f.write_all(line.as_bytes()).and_then(|_| f.flush()) {
            eprintln!("oom-bisect: warning: could not append to the journal: {err}");
        }
    }
}
