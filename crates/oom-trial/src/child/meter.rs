//! How a trial reads its memory on each backend (the CPU's counting allocator, a GPU's pools, a
//! virtual card's), and its stream of requests and releases: replayed through PyTorch's allocator,
//! and written out for comparison (`OOM_BISECT_STREAM_OUT`).

use anyhow::{anyhow, Result};

/// How memory is read on each backend.
pub(super) enum Meter {
    Cpu {
        replay: bool,
    },
    #[cfg(feature = "cuda")]
    Cuda {
        ceiling: crate::cuda::CudaCeiling,
        device: burn_cuda::CudaDevice,
        peak: u64,
        replay: bool,
    },
    /// A virtual card (`Engine::Stream`): the pools' own figures are the device's, as PyTorch's
    /// allocator reserves without a cap, on top of the card's context.
    #[cfg(feature = "cuda")]
    Stream {
        device: burn_cuda::CudaDevice,
        ceiling_bytes: u64,
        context_bytes: u64,
        peak: u64,
    },
}

impl Meter {
    /// (bytes held by live tensors, bytes the device handed out). Call after a device sync.
    pub(super) fn read(&mut self) -> (u64, u64) {
        match self {
            Meter::Cpu { .. } => {
                let now = crate::alloc::in_use() as u64;
                (now, now)
            }
            #[cfg(feature = "cuda")]
            Meter::Cuda {
                ceiling,
                device,
                peak,
                ..
            } => {
                use cubecl::Runtime;
                let in_use = cubecl::cuda::CudaRuntime::client(device)
                    .memory_usage()
                    .map(|u| u.bytes_in_use)
                    .unwrap_or(0);
                let used = ceiling.device_used();
                *peak = (*peak).max(used);
                (in_use, used)
            }
            #[cfg(feature = "cuda")]
            Meter::Stream {
                device,
                context_bytes,
                peak,
                ..
            } => {
                use cubecl::Runtime;
                let usage = cubecl::cuda::CudaRuntime::client(device).memory_usage();
                let (in_use, reserved) = usage
                    .map(|u| (u.bytes_in_use, u.bytes_reserved))
                    .unwrap_or((0, 0));
                let used = *context_bytes + reserved;
                *peak = (*peak).max(used);
                (in_use, used)
            }
        }
    }

    /// The ceiling the trial runs under, in the unit of [`Meter::peak`].
    pub(super) fn ceiling(&self) -> u64 {
        match self {
            Meter::Cpu { .. } => crate::alloc::limit() as u64,
            #[cfg(feature = "cuda")]
            Meter::Cuda { ceiling, .. } => ceiling.ceiling_bytes,
            #[cfg(feature = "cuda")]
            Meter::Stream { ceiling_bytes, .. } => *ceiling_bytes,
        }
    }

    /// Whether the device computes nothing (a virtual card): what is read back is zeros.
    pub(super) fn computes_nothing(&self) -> bool {
        match self {
            #[cfg(feature = "cuda")]
            Meter::Stream { .. } => true,
            _ => false,
        }
    }

    /// Requests and releases noted in the trial's stream so far.
    pub(super) fn events_noted(&self) -> usize {
        match self {
            Meter::Cpu { .. } => crate::alloc::recorder::len(),
            #[cfg(feature = "cuda")]
            Meter::Cuda { .. } | Meter::Stream { .. } => {
                cubecl_runtime::memory_management::oom_bisect::stream_len()
            }
        }
    }

    /// Whether the trial's stream is replayed through PyTorch's allocator: under the `pytorch`
    /// memory model (burn's own pools are not PyTorch's).
    pub(super) fn replays(&self) -> bool {
        match self {
            Meter::Cpu { replay, .. } => *replay,
            #[cfg(feature = "cuda")]
            Meter::Cuda { replay, .. } => *replay,
            #[cfg(feature = "cuda")]
            Meter::Stream { .. } => true,
        }
    }

    /// The trial's stream so far: its events, the bytes held before it, the device streams that
    /// made it, and whether the device itself holds the ceiling.
    pub(super) fn stream(&self) -> Result<(Vec<pytorch_allocator::Event>, u64, u32, bool)> {
        match self {
            Meter::Cpu { .. } => {
                let stream = crate::alloc::recorder::stream()
                    .ok_or_else(|| anyhow!("the trial's stream outgrew the room noted for it"))?;
                // Nothing held before it counts: the process's own heap (about 11 KiB) is no
                // device's context, and it moves by a few bytes with what its threads did
                // meanwhile; the need is the stream's alone, so that it repeats to the byte.
                Ok((stream, 0, 1, false))
            }
            #[cfg(feature = "cuda")]
            Meter::Cuda { ceiling, .. } => {
                let (stream, streams) = cubecl_runtime::memory_management::oom_bisect::stream();
                Ok((stream, ceiling.context_bytes, streams, true))
            }
            // Nothing held the ceiling: the replay is the verdict.
            #[cfg(feature = "cuda")]
            Meter::Stream { context_bytes, .. } => {
                let (stream, streams) = cubecl_runtime::memory_management::oom_bisect::stream();
                Ok((stream, *context_bytes, streams, false))
            }
        }
    }

    /// The trial's stream replayed under its ceiling, or why it cannot be.
    pub(super) fn replayed(&self) -> Result<crate::protocol::Replayed> {
        let (stream, before, streams, held) = self.stream()?;
        if let Some(path) = std::env::var_os(STREAM_OUT) {
            write_stream(std::path::Path::new(&path), &stream, before)?;
        }
        #[cfg(feature = "cuda")]
        if let Some(path) = std::env::var_os(CUDNN_OUT) {
            write_cudnn_answers(std::path::Path::new(&path))?;
        }
        Ok(crate::replayed::replayed(
            &stream,
            before,
            self.ceiling(),
            held,
            streams,
            pytorch_allocator::AllocConf::default(),
        ))
    }

    /// The most bytes PyTorch's allocator reserved for the stream so far, without a cap, with the
    /// bytes before it: what a step's peak is, as PyTorch would hold it.
    pub(super) fn reserved_so_far(&self) -> u64 {
        if !self.replays() {
            return 0;
        }
        match self.stream() {
            Ok((stream, before, _, _)) => {
                before + pytorch_allocator::replay(&stream, None).stats.peak_reserved
            }
            Err(_) => u64::MAX,
        }
    }

    /// Most memory handed out: the most PyTorch's allocator reserved for the stream (with the
    /// bytes before it), or, where more, the allocator's own peak on the CPU and on CUDA the highest
    /// device reading (pools do not shrink, so the reading after the last step bounds them).
    pub(super) fn peak(&mut self) -> u64 {
        // A reading now: on CUDA it raises the highest reading to the present one.
        self.read();
        let measured = match self {
            Meter::Cpu { .. } => crate::alloc::peak() as u64,
            #[cfg(feature = "cuda")]
            Meter::Cuda { peak, .. } | Meter::Stream { peak, .. } => *peak,
        };
        measured.max(self.reserved_so_far())
    }
}

/// Names a file to write the trial's stream to, for comparing it with a PyTorch trace
/// (docs/fidelity.md): a diagnostic, not part of the protocol.
pub(super) const STREAM_OUT: &str = "OOM_BISECT_STREAM_OUT";

/// Writes `stream` as JSON: `{"before": bytes, "events": [["alloc", id, size] | ["free", id] |
/// ["workspace", id, size, plan, engine], …]}`.
pub(super) fn write_stream(
    path: &std::path::Path,
    stream: &[pytorch_allocator::Event],
    before: u64,
) -> Result<()> {
    use pytorch_allocator::Event;
    let events: Vec<serde_json::Value> = stream
        .iter()
        .map(|e| match *e {
            Event::Alloc { id, size } => serde_json::json!(["alloc", id, size]),
            Event::Free { id } => serde_json::json!(["free", id]),
            Event::Workspace {
                id,
                size,
                plan,
                engine,
            } => serde_json::json!(["workspace", id, size, plan, engine]),
        })
        .collect();
    let text = serde_json::json!({ "before": before, "events": events }).to_string();
    write_diagnostic(path, &text, STREAM_OUT)
}

/// Writes `text` to `path`, named by the variable `var`, never through a final link: one planted
/// there would have the trial replace another file.
fn write_diagnostic(path: &std::path::Path, text: &str, var: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| anyhow!("{var}: cannot write {}: {e}", path.display()))
}

/// Names a file to write each convolution cuDNN was asked about, with the workspace of each
/// engine in PyTorch's order (docs/fidelity.md): a diagnostic, not part of the protocol.
#[cfg(feature = "cuda")]
pub(super) const CUDNN_OUT: &str = "OOM_BISECT_CUDNN_OUT";

/// Writes what `crate::cudnn` was asked, one JSON object per convolution.
#[cfg(feature = "cuda")]
fn write_cudnn_answers(path: &std::path::Path) -> Result<()> {
    let lines: Vec<serde_json::Value> = crate::cudnn::asked()
        .into_iter()
        .map(|(c, sizes)| {
            let pass = ["forward", "data", "weight"][usize::from(c.pass.min(2))];
            serde_json::json!({
                "pass": pass,
                "x": c.x, "w": c.w, "y": c.y, "stride": c.stride, "padding": c.padding,
                "dilation": c.dilation, "groups": c.groups, "dtype_bytes": c.dtype_bytes,
                "workspaces": sizes,
            })
        })
        .collect();
    let text = serde_json::json!({
        "cudnn": crate::cudnn::available().unwrap_or_else(|e| e),
        "convolutions": lines,
    })
    .to_string();
    write_diagnostic(path, &text, CUDNN_OUT)
}

/// A stream a trial wrote under `OOM_BISECT_STREAM_OUT`: the bytes held before it, and its events.
pub fn read_stream(path: &std::path::Path) -> Result<(u64, Vec<pytorch_allocator::Event>)> {
    use pytorch_allocator::Event;
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Line {
        Workspace(String, u64, u64, u64, u32),
        Alloc(String, u64, u64),
        Free(String, u64),
    }
    #[derive(serde::Deserialize)]
    struct File {
        before: u64,
        events: Vec<Line>,
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow!("cannot read the stream {}: {e}", path.display()))?;
    let file: File = serde_json::from_str(&text)
        .map_err(|e| anyhow!("{} is not a stream {STREAM_OUT} wrote: {e}", path.display()))?;
    let events = file.events.into_iter().map(|l| match l {
        Line::Alloc(a, id, size) if a == "alloc" => Ok(Event::Alloc { id, size }),
        Line::Free(a, id) if a == "free" => Ok(Event::Free { id }),
        Line::Workspace(a, id, size, plan, engine) if a == "workspace" => Ok(Event::Workspace {
            id,
            size,
            plan,
            engine,
        }),
        _ => Err(anyhow!(
            "{}: an event is neither alloc, free nor workspace",
            path.display()
        )),
    });
    Ok((file.before, events.collect::<Result<_>>()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_stream_reads_back_in_order() {
        use pytorch_allocator::Event;
        let path =
            std::env::temp_dir().join(format!("oom-bisect-stream-{}.json", std::process::id()));
        let stream = [
            Event::Alloc { id: 7, size: 512 },
            Event::Alloc { id: 8, size: 2048 },
            Event::Free { id: 7 },
            Event::Workspace {
                id: 9,
                size: 4096,
                plan: 3,
                engine: 0,
            },
            Event::Free { id: 9 },
        ];
        let _ = std::fs::remove_file(&path);
        write_stream(&path, &stream, 100).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let read = read_stream(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(read, (100, stream.to_vec()));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"before": 100, "events": [["alloc", 7, 512], ["alloc", 8, 2048], ["free", 7],
                ["workspace", 9, 4096, 3, 0], ["free", 9]]})
        );
    }
}
