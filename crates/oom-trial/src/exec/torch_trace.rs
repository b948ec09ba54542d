//! A PyTorch command's allocator trace (`--exec`): the `sitecustomize.py` that records it without
//! a change to the script, and the trace read back as the stream `pytorch-allocator` replays.
//! A served command's sitecustomize writes each trial's events as the trial is answered; each
//! trace is taken (read and removed) once.

use super::config_file::ConfigFile;
use anyhow::{bail, Context as _, Result};
use pytorch_allocator::Event;
use serde::Deserialize;
use std::collections::BTreeSet;
use std::io::Read;
use std::path::PathBuf;

/// Where the command's sitecustomize writes the trace, in its environment.
pub const TRACE_ENV: &str = "OOM_BISECT_TORCH_TRACE";
const SITECUSTOMIZE: &str = include_str!("sitecustomize.py");
/// A trace larger than this is not read (a trial's is a few MB).
const MAX_TRACE: u64 = 512 << 20;

/// The recording set up for one command.
pub struct TorchTrace {
    path: PathBuf,
    dir: PathBuf,
}

/// What a trace says: the requests and releases in order, the device streams that made them, and
/// whether the allocator ran out of memory (the stream then stops short of the run's end).
pub struct Traced {
    pub events: Vec<Event>,
    pub streams: u32,
    pub oom: bool,
}

#[derive(Deserialize)]
struct TraceFile {
    /// `[action, address, size, stream]`, as `torch.cuda.memory._snapshot()` lists them.
    events: Vec<(String, u64, u64, u64)>,
}

impl TorchTrace {
    /// Writes the sitecustomize beside the trial's config.
    pub fn prepare(file: &ConfigFile) -> Result<TorchTrace> {
        file.beside("sitecustomize.py", SITECUSTOMIZE)?;
        Ok(TorchTrace {
            path: file.dir().join("torch-trace.json"),
            dir: file.dir().to_path_buf(),
        })
    }

    /// The command's environment: the sitecustomize's directory first on `PYTHONPATH` (what the
    /// user set stays after it), and where to write the trace.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut path = self.dir.display().to_string();
        if let Some(user) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
            path = format!("{path}:{}", user.to_string_lossy());
        }
        vec![
            ("PYTHONPATH".into(), path),
            (TRACE_ENV.into(), self.path.display().to_string()),
        ]
    }

    /// The trace the command wrote since the last one was taken, if it wrote one (it imported
    /// torch with CUDA); removed, so that it is never read for a later trial.
    pub fn take(&self) -> Option<Result<Traced>> {
        let f = std::fs::File::open(&self.path).ok()?;
        let _ = std::fs::remove_file(&self.path);
        Some(read_trace(f).with_context(|| format!("the allocator trace {}", self.path.display())))
    }
}

/// A trace file written by the sitecustomize (what `--exec` replays), read as the stream.
pub fn read_file(path: &std::path::Path) -> Result<Traced> {
    std::fs::File::open(path)
        .map_err(anyhow::Error::from)
        .and_then(read_trace)
        .with_context(|| format!("the allocator trace {}", path.display()))
}

fn read_trace(f: std::fs::File) -> Result<Traced> {
    if f.metadata()?.len() > MAX_TRACE {
        bail!("larger than {} MiB", MAX_TRACE >> 20);
    }
    let mut text = String::new();
    f.take(MAX_TRACE).read_to_string(&mut text)?;
    parse(&text)
}

/// The stream of a trace's text: its allocations and completed frees.
fn parse(text: &str) -> Result<Traced> {
    let file: TraceFile = serde_json::from_str(text)?;
    let mut streams = BTreeSet::new();
    let mut oom = false;
    let mut events = Vec::with_capacity(file.events.len());
    for (action, addr, size, stream) in file.events {
        match action.as_str() {
            "alloc" => {
                streams.insert(stream);
                events.push(Event::Alloc { id: addr, size });
            }
            "free_completed" => events.push(Event::Free { id: addr }),
            "oom" => oom = true,
            _ => {}
        }
    }
    Ok(Traced {
        events,
        streams: streams.len().max(1) as u32,
        oom,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_is_its_allocations_and_completed_frees() {
        let t = parse(
            r#"{"events": [["segment_alloc", 0, 2097152, 0], ["alloc", 16, 600, 0],
                ["free_requested", 16, 600, 0], ["free_completed", 16, 600, 0],
                ["alloc", 32, 1048577, 7], ["oom", 0, 31457280, 0]]}"#,
        )
        .unwrap();
        assert_eq!(
            t.events,
            [
                Event::Alloc { id: 16, size: 600 },
                Event::Free { id: 16 },
                Event::Alloc {
                    id: 32,
                    size: 1048577
                }
            ]
        );
        assert_eq!((t.streams, t.oom), (2, true));
        assert!(parse("{\"events\": 3}").is_err());
    }
}
