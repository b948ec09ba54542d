//! The replay of a recorded stream: one uncapped run answers "does it fit under C?" for every C.

use crate::allocator::{Allocator, BlockId, OutOfMemory, Stats, Unbounded};
use crate::rules::{round_size, segment_size, AllocConf, SEGMENT_GRANULE};
use alloc::collections::BTreeMap;

/// One request or release of a stream, in the order the program made them. `id` names the buffer
/// (an address in PyTorch's trace, a handle in a trial); a release of an id that is not live is
/// ignored, as PyTorch's trace holds frees of blocks made before recording began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Alloc { id: u64, size: u64 },
    Free { id: u64 },
}

/// What the allocator did with a stream under one cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replay {
    /// The counters at the end, or at the out-of-memory.
    pub stats: Stats,
    /// The request that could not be served, if one could not, and its place in the stream.
    pub oom: Option<(usize, OutOfMemory)>,
    /// Bytes held in free blocks of partly used segments when the reserved bytes peaked.
    pub held_at_peak: u64,
}

impl Replay {
    pub fn fits(&self) -> bool {
        self.oom.is_none()
    }
}

/// Replays `events` under `cap` (reserved bytes; `None`: no cap).
pub fn replay<'a>(events: impl IntoIterator<Item = &'a Event>, cap: Option<u64>) -> Replay {
    replay_with(events, cap, AllocConf::default())
}

/// Replays `events` under `cap` with the allocator configured as `conf` says.
pub fn replay_with<'a>(
    events: impl IntoIterator<Item = &'a Event>,
    cap: Option<u64>,
    conf: AllocConf,
) -> Replay {
    let mut a = Allocator::configured(cap, conf);
    let mut live: BTreeMap<u64, BlockId> = BTreeMap::new();
    let mut held_at_peak = 0;
    for (index, event) in events.into_iter().enumerate() {
        match *event {
            Event::Alloc { id, size } => {
                let before = a.stats().peak_reserved;
                match a.malloc(size, &mut Unbounded) {
                    Ok(block) => live.insert(id, block.id),
                    Err(oom) => {
                        return Replay {
                            stats: a.stats(),
                            oom: Some((index, oom)),
                            held_at_peak,
                        }
                    }
                };
                if a.stats().peak_reserved > before {
                    held_at_peak = a.held_in_split_segments();
                }
            }
            Event::Free { id } => {
                if let Some(block) = live.remove(&id) {
                    a.free(block);
                }
            }
        }
    }
    Replay {
        stats: a.stats(),
        oom: None,
        held_at_peak,
    }
}

/// The smallest cap a stream fits under, and how the allocator held it there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    /// The smallest cap (reserved bytes) under which the stream runs to its end. Segments are
    /// whole multiples of 2 MiB, so every cap up to the next multiple behaves the same.
    pub cap: u64,
    /// The replay under that cap.
    pub at_cap: Replay,
    /// The replay without a cap.
    pub uncapped: Replay,
}

impl Need {
    /// Bytes at the smallest cap that are not in use at the peak of allocated bytes: segments
    /// split by earlier requests, which the retry cannot give back.
    pub fn held(&self) -> u64 {
        self.cap.saturating_sub(self.at_cap.stats.peak_allocated)
    }
}

/// Bisects the cap over whole segment granules for the smallest one the stream fits under. The
/// uncapped peak reserved always fits. A cap can fail where a smaller one fits (the retry releases
/// different segments), rarely: the bisection finds a cap that fits with one granule less failing.
pub fn smallest_cap(events: &[Event]) -> Need {
    smallest_cap_with(events, AllocConf::default())
}

/// [`smallest_cap`] with the allocator configured as `conf` says. Under expandable segments the
/// cap is compared with the request's whole segment while fewer or more pages are mapped, so the
/// uncapped peak may not fit; that peak plus the largest segment a request asks for always does
/// (no check fails below it, so the run is the uncapped one).
pub fn smallest_cap_with(events: &[Event], conf: AllocConf) -> Need {
    let replay = |cap| replay_with(events, cap, conf);
    let uncapped = replay(None);
    let mut fits = uncapped.stats.peak_reserved.div_ceil(SEGMENT_GRANULE);
    if !replay(Some(fits * SEGMENT_GRANULE)).fits() {
        let largest = events.iter().map(|e| match *e {
            Event::Alloc { size, .. } => segment_size(round_size(size)),
            Event::Free { .. } => 0,
        });
        fits += largest.max().unwrap_or(0).div_ceil(SEGMENT_GRANULE);
    }
    // A cap of 0 fails any stream that allocates.
    let mut fails = 0u64;
    while fits - fails > 1 {
        let mid = fails + (fits - fails) / 2;
        match replay(Some(mid * SEGMENT_GRANULE)).fits() {
            true => fits = mid,
            false => fails = mid,
        }
    }
    let cap = fits * SEGMENT_GRANULE;
    Need {
        cap,
        at_cap: replay(Some(cap)),
        uncapped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_smallest_cap_fits_and_one_granule_less_does_not() {
        let events = [
            Event::Alloc {
                id: 1,
                size: 30 * MIB,
            },
            Event::Alloc {
                id: 2,
                size: 12 * MIB,
            },
            Event::Free { id: 1 },
            Event::Alloc {
                id: 3,
                size: 31 * MIB,
            },
            Event::Free { id: 9 },
        ];
        let need = smallest_cap(&events);
        assert_eq!(need.uncapped.stats.peak_reserved, 74 * MIB);
        assert_eq!(
            need.cap,
            44 * MIB,
            "the 30 MiB segment released for the 32 MiB one"
        );
        assert_eq!(need.at_cap.stats.retries, 1);
        assert!(!replay(&events, Some(need.cap - 1)).fits());
        assert_eq!(need.held(), 0);
    }
}
