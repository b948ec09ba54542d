//! A card as the host knows it before anything runs on it: what a stream-only trial builds its
//! virtual device from (`Engine::Stream`). Read from this host's GPU by a probe ([`probe`]: a child
//! of its own, so that the context it measures is not held for the whole diagnosis), or taken from
//! a card's published specification (`--gpu NAME` without a GPU).

use serde::{Deserialize, Serialize};

/// What the host asks of a card to decide a training step's buffers: its compute capability and
/// limits pick the kernels and their metadata, and so every request; its memory and the context's
/// size set the ceiling and what a need starts from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CardProps {
    pub name: String,
    /// Compute capability, major and minor.
    pub compute_capability: (u32, u32),
    /// The memory CUDA reports for it.
    pub total_bytes: u64,
    /// What the CUDA context of a trial holds on it: part of every need.
    pub context_bytes: u64,
    pub multiprocessors: u32,
    pub max_shared_memory_per_block: u64,
    pub warp_size: u32,
    pub max_threads_per_block: u32,
    pub max_block_dim: [u32; 3],
    pub max_grid_dim: [u32; 3],
    /// Where the figures come from: this host's card, or a specification (and what the context's
    /// size is assumed from).
    pub source: CardSource,
}

/// Where a card's figures come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CardSource {
    /// Read from this host's GPU: its driver's properties and its context measured.
    Probed,
    /// A card's published specification; the context's size is an assumption, said here.
    Specified { context: String },
}

impl CardProps {
    /// The limits every CUDA card since compute capability 3.0 shares (warp, block and grid), with
    /// a card's own capability, memory, multiprocessors and shared memory.
    pub fn specified(
        name: &str,
        compute_capability: (u32, u32),
        total_bytes: u64,
        multiprocessors: u32,
        max_shared_memory_per_block: u64,
        context: (u64, &str),
    ) -> CardProps {
        CardProps {
            name: name.to_string(),
            compute_capability,
            total_bytes,
            context_bytes: context.0,
            multiprocessors,
            max_shared_memory_per_block,
            warp_size: 32,
            max_threads_per_block: 1024,
            max_block_dim: [1024, 1024, 64],
            max_grid_dim: [i32::MAX as u32, 65535, 65535],
            source: CardSource::Specified {
                context: context.1.to_string(),
            },
        }
    }

    /// How a report names the card a stream was issued for: `a virtual NVIDIA H100 80GB HBM3
    /// (this host's card)`.
    pub fn label(&self) -> String {
        match &self.source {
            CardSource::Probed => format!("a virtual {} (this host's card)", self.name),
            CardSource::Specified { context } => {
                format!(
                    "a virtual {} (its specification; CUDA context {context})",
                    self.name
                )
            }
        }
    }
}

/// The card's properties as the vendored cubecl-cuda takes them.
#[cfg(feature = "cuda")]
pub fn virtual_card(p: &CardProps) -> cubecl::cuda::oom_bisect::VirtualCard {
    cubecl::cuda::oom_bisect::VirtualCard {
        compute_capability: p.compute_capability,
        total_bytes: p.total_bytes,
        warp_size: p.warp_size,
        max_shared_memory_per_block: p.max_shared_memory_per_block as usize,
        max_threads_per_block: p.max_threads_per_block,
        max_block_dim: p.max_block_dim.into(),
        max_grid_dim: p.max_grid_dim.into(),
        multiprocessors: p.multiprocessors,
    }
}

/// Reads this host's first visible card (the driver's properties) and what its CUDA context holds
/// (measured by NVML for this process alone). Runs in a probe child ([`probe`]): the context is
/// freed when it exits.
#[cfg(feature = "cuda")]
pub fn read_here() -> anyhow::Result<CardProps> {
    use anyhow::{anyhow, Context};
    let name = crate::cuda::probe()?;
    let v = cubecl::cuda::oom_bisect::read_card(0).map_err(|e| anyhow!("{e}"))?;
    let context_bytes =
        crate::cuda::own_context_bytes().context("the probe could not measure its CUDA context")?;
    Ok(CardProps {
        name,
        compute_capability: v.compute_capability,
        total_bytes: v.total_bytes,
        context_bytes,
        multiprocessors: v.multiprocessors,
        max_shared_memory_per_block: v.max_shared_memory_per_block as u64,
        warp_size: v.warp_size,
        max_threads_per_block: v.max_threads_per_block,
        max_block_dim: v.max_block_dim.into(),
        max_grid_dim: v.max_grid_dim.into(),
        source: CardSource::Probed,
    })
}

#[cfg(not(feature = "cuda"))]
pub fn read_here() -> anyhow::Result<CardProps> {
    anyhow::bail!("this binary was built without the `cuda` feature")
}

/// The probe's answer on its stdout, one JSON line.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ProbeAnswer {
    Card(CardProps),
    Failed(String),
}

/// The probe child's side (`oom-bisect __trial` given [`crate::protocol::Engine::Card`]): prints
/// this host's card, or why it cannot.
pub fn answer_probe() -> i32 {
    let answer = match read_here() {
        Ok(card) => ProbeAnswer::Card(card),
        Err(e) => ProbeAnswer::Failed(format!("{e:#}")),
    };
    let line = serde_json::to_string(&answer).expect("a card serialises");
    println!("{line}");
    match answer {
        ProbeAnswer::Card(_) => crate::protocol::exit::FITS,
        ProbeAnswer::Failed(_) => crate::protocol::exit::INCONCLUSIVE,
    }
}

/// How long the probe may take: a CUDA context takes under a second.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// This host's card, read by a child of `exe` (its CUDA context then holds no memory for the rest
/// of the run). `cuda_visible_devices` names the GPU the trials will see.
pub fn probe(
    exe: &std::path::Path,
    cuda_visible_devices: Option<&str>,
) -> anyhow::Result<CardProps> {
    use anyhow::{anyhow, bail, Context};
    use std::io::Write;
    use std::process::{Command, Stdio};
    let request = crate::protocol::Request::probe();
    let mut cmd = Command::new(exe);
    cmd.arg(crate::protocol::SUBCOMMAND)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(v) = cuda_visible_devices {
        cmd.env("CUDA_VISIBLE_DEVICES", v);
    }
    let mut child = cmd.spawn().context("could not start the card probe")?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(serde_json::to_string(&request)?.as_bytes())?;
    }
    let output = wait_at_most(child, PROBE_TIMEOUT)?;
    let text = String::from_utf8_lossy(&output.stdout);
    let answer = text
        .lines()
        .find_map(|l| serde_json::from_str::<ProbeAnswer>(l).ok());
    match answer {
        Some(ProbeAnswer::Card(c)) => Ok(c),
        Some(ProbeAnswer::Failed(why)) => bail!("the card probe failed: {why}"),
        None => Err(anyhow!(
            "the card probe gave no answer: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )),
    }
}

/// The child's output once it ends, or an error once `limit` has passed (the child killed).
fn wait_at_most(
    mut child: std::process::Child,
    limit: std::time::Duration,
) -> anyhow::Result<std::process::Output> {
    let start = std::time::Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            return Ok(child.wait_with_output()?);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("the card probe did not answer within {} s", limit.as_secs());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
