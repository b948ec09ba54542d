//! A PyTorch command's allocator trace (`--exec`): the `sitecustomize.py` that records it without
//! a change to the script, and the trace read back as the stream `pytorch-allocator` replays.
//! A served command's sitecustomize writes each trial's events as the trial is answered; each
//! trace is taken (read and removed) once.

use super::config_file::ConfigFile;
use anyhow::{bail, Context as _, Result};
use pytorch_allocator::{AllocConf, Event};
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

/// What a trace says: the requests and releases in order, the device streams that made them,
/// whether the allocator ran out of memory (the stream then stops short of the run's end), and how
/// the command's allocator was configured.
pub struct Traced {
    pub events: Vec<Event>,
    pub streams: u32,
    pub oom: bool,
    /// The settings of `PYTORCH_CUDA_ALLOC_CONF` the replay follows.
    pub conf: AllocConf,
    /// Settings the replay does not model (`max_split_size_mb:128`): its need would not be what
    /// the command's allocator holds.
    pub unmodelled: Vec<String>,
}

#[derive(Deserialize)]
struct TraceFile {
    /// `[action, address, size, stream]`, as `torch.cuda.memory._snapshot()` lists them.
    events: Vec<(String, u64, u64, u64)>,
    /// `PYTORCH_ALLOC_CONF` and `PYTORCH_CUDA_ALLOC_CONF` in the command's environment, joined.
    #[serde(default)]
    alloc_conf: String,
    /// What the allocator itself says of expandable segments (the snapshot's
    /// `allocator_settings`; absent before PyTorch 2.5), which a script may have set.
    #[serde(default)]
    expandable_segments: Option<bool>,
}

/// Settings that change nothing the replay decides: the lock around `cudaMalloc`, pinned host
/// memory, and the native allocator named as such.
const NEUTRAL: [&str; 5] = [
    "release_lock_on_cudamalloc",
    "pinned_use_cuda_host_register",
    "pinned_num_register_threads",
    "pinned_use_background_threads",
    "backend:native",
];

/// `key:value,key:value` as PyTorch reads it (a list value in brackets may hold commas): the
/// configuration the replay follows, and the settings it does not model.
fn settings(conf: &str, expandable: Option<bool>) -> (AllocConf, Vec<String>) {
    let (mut depth, mut start, mut parts) = (0i32, 0, vec![]);
    for (i, c) in conf.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&conf[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&conf[start..]);
    let mut from_env = false;
    let mut unmodelled = vec![];
    for part in parts.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        match part.split_once(':').map(|(k, v)| (k.trim(), v.trim())) {
            Some(("expandable_segments", v)) => from_env = v == "True",
            Some((k, v))
                if NEUTRAL.contains(&k) || NEUTRAL.contains(&format!("{k}:{v}").as_str()) => {}
            _ => unmodelled.push(part.to_string()),
        }
    }
    let conf = AllocConf {
        expandable_segments: expandable.unwrap_or(from_env),
    };
    (conf, unmodelled)
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
    let (conf, unmodelled) = settings(&file.alloc_conf, file.expandable_segments);
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
        conf,
        unmodelled,
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
        assert_eq!((t.conf, t.unmodelled.len()), (AllocConf::default(), 0));
        assert!(parse("{\"events\": 3}").is_err());
    }

    #[test]
    fn the_allocators_settings_are_read_and_those_not_modelled_named() {
        let expandable = AllocConf {
            expandable_segments: true,
        };
        assert_eq!(settings("expandable_segments:True", None).0, expandable);
        assert_eq!(
            settings("expandable_segments:True", Some(false)).0,
            AllocConf::default(),
            "the allocator's own word wins"
        );
        let (conf, other) = settings(
            "release_lock_on_cudamalloc:True, roundup_power2_divisions:[256:1,512:2],\
             expandable_segments:False,backend:native,max_split_size_mb:128",
            None,
        );
        assert_eq!(conf, AllocConf::default());
        assert_eq!(
            other,
            [
                "roundup_power2_divisions:[256:1,512:2]",
                "max_split_size_mb:128"
            ]
        );
        assert_eq!(settings("backend:cudaMallocAsync", None).1.len(), 1);
    }
}
