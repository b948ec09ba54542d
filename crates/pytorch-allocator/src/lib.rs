//! PyTorch's CUDA caching allocator (`c10/cuda/CUDACachingAllocator.cpp`, default configuration) as a
//! pure decision procedure: which block serves a request, when a new segment is made, when the cap
//! refuses one, what is released before the one retry, and what stays held in split segments.
//!
//! This crate is the project's only statement of those rules. Two users share it:
//! - the CUDA device pools of a trial under the `pytorch` memory model (the vendored
//!   cubecl-runtime), where each new segment is a real page on the device ([`Device`]);
//! - the replay of a recorded stream of requests and releases ([`replay`], [`smallest_cap`]), which
//!   answers "does it fit under C?" for every C from one uncapped run.
//!
//! Given the same stream, both make the same decisions, so a capped run on the device and the
//! replay of its stream give the same verdict. The allocator is deterministic given the order of
//! requests: addresses are modelled, not read from the device (`cudaMalloc` hands out decreasing
//! addresses, and best fit breaks ties by the lower address, which decides which segments stay
//! split).
//!
//! One setting of `PYTORCH_CUDA_ALLOC_CONF` is modelled, for the replay: `expandable_segments:True`
//! ([`AllocConf`]), where each pool grows one segment by pages (2 MiB small, 20 MiB large) as
//! requests need them and the retry unmaps the free pages instead of releasing whole segments.
//! Not modelled (each needs rules of its own): `max_split_size_mb`, `roundup_power2_divisions`,
//! `garbage_collection_threshold`, several streams, CUDA graphs, and cuDNN's benchmark mode (its
//! workspace trials allocate and fail by design). The default path's convolution workspaces are
//! ([`Event::Workspace`]): each engine's workspace tried in the heuristics' order, a failure the
//! next engine's turn.

#![no_std]
extern crate alloc;

mod allocator;
mod replay;
pub mod rules;

pub use allocator::{Allocator, Block, BlockId, Device, OutOfMemory, SegmentId, Stats, Unbounded};
pub use replay::{replay, replay_with, smallest_cap, smallest_cap_with, Event, Need, Replay};

pub use rules::AllocConf;
