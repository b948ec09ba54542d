//! A card as the host knows it before anything runs on it: what a stream-only trial builds its
//! virtual device from (`Engine::Stream`). Read from this host's GPU by a probe
//! (`card_probe.rs`), or taken from a card's published specification (`--gpu NAME` without a GPU).

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
