//! The replay of a recorded stream: one uncapped run answers "does it fit under C?" for every C.

use crate::allocator::{Allocator, BlockId, OutOfMemory, Stats, Unbounded};
use crate::rules::{round_size, segment_size, AllocConf, SEGMENT_GRANULE};
use alloc::collections::BTreeMap;
use alloc::vec::Vec;

/// One request or release of a stream, in the order the program made them. `id` names the buffer
/// (an address in PyTorch's trace, a handle in a trial); a release of an id that is not live is
/// ignored, as PyTorch's trace holds frees of blocks made before recording began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Alloc {
        id: u64,
        size: u64,
    },
    Free {
        id: u64,
    },
    /// A convolution's workspace, as PyTorch's cuDNN path asks for it
    /// (`aten/src/ATen/native/cudnn/Conv_v8.cpp`, `cudnn.benchmark` off): consecutive events of
    /// one `id` are the engines cuDNN's heuristics return for the convolution `plan` (its shape,
    /// dtype and direction), in their order, each with its workspace `size`. The allocator serves
    /// the first it can (a failure, after the release and retry, is an `ooms` and the next
    /// engine's turn); the engine that ran is kept for `plan`, and the next convolution of that
    /// plan asks for its workspace first (on failure the plan is forgotten and the engines are
    /// tried in order again). Only when no engine's workspace can be served does the stream run
    /// out of memory. A size of 0 takes no memory. `Free { id }` releases what was taken.
    Workspace {
        id: u64,
        size: u64,
        plan: u64,
        engine: u32,
    },
}

impl Event {
    /// Whether it is one of the engines of workspace request `id`.
    fn workspace_of(&self, id: u64) -> bool {
        matches!(*self, Event::Workspace { id: i, .. } if i == id)
    }

    /// The bytes the event asks for (0 for a release).
    pub fn size(&self) -> u64 {
        match *self {
            Event::Alloc { size, .. } | Event::Workspace { size, .. } => size,
            Event::Free { .. } => 0,
        }
    }
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
    let mut r = Replayer {
        a: Allocator::configured(cap, conf),
        live: BTreeMap::new(),
        plans: BTreeMap::new(),
        held_at_peak: 0,
    };
    let mut events = events.into_iter().enumerate().peekable();
    while let Some((index, event)) = events.next() {
        let served = match *event {
            Event::Alloc { id, size } => r.alloc(id, size).map_err(|oom| (index, oom)),
            Event::Free { id } => {
                if let Some(block) = r.live.remove(&id) {
                    r.a.free(block);
                }
                Ok(())
            }
            Event::Workspace {
                id,
                size,
                plan,
                engine,
            } => {
                // The engines of this request: the `Workspace` events of `id` that follow.
                let mut group = Vec::from([(plan, engine, size)]);
                while let Some((_, e)) = events.next_if(|(_, e)| e.workspace_of(id)) {
                    if let Event::Workspace {
                        size, plan, engine, ..
                    } = *e
                    {
                        group.push((plan, engine, size));
                    }
                }
                r.workspace(id, &group)
                    .map_err(|(at, oom)| (index + at, oom))
            }
        };
        if let Err(oom) = served {
            return Replay {
                stats: r.a.stats(),
                oom: Some(oom),
                held_at_peak: r.held_at_peak,
            };
        }
    }
    Replay {
        stats: r.a.stats(),
        oom: None,
        held_at_peak: r.held_at_peak,
    }
}

/// The state of one replay: the allocator, the live buffers, and the engine each convolution plan
/// ran with.
struct Replayer {
    a: Allocator,
    live: BTreeMap<u64, BlockId>,
    plans: BTreeMap<u64, u32>,
    held_at_peak: u64,
}

impl Replayer {
    /// One request.
    fn alloc(&mut self, id: u64, size: u64) -> Result<(), OutOfMemory> {
        let before = self.a.stats().peak_reserved;
        let block = self.a.malloc(size, &mut Unbounded)?;
        self.live.insert(id, block.id);
        if self.a.stats().peak_reserved > before {
            self.held_at_peak = self.a.held_in_split_segments();
        }
        Ok(())
    }

    /// A workspace request (see [`Event::Workspace`]) for buffer `id`, its engines as
    /// `(plan, engine, size)`: the engine kept for its plan first, then each engine in order;
    /// where none can be served, the out-of-memory of the last one tried, at its place in the
    /// group.
    fn workspace(
        &mut self,
        id: u64,
        group: &[(u64, u32, u64)],
    ) -> Result<(), (usize, OutOfMemory)> {
        let Some(&(plan, _, _)) = group.first() else {
            return Ok(());
        };
        let kept = self.plans.get(&plan).copied();
        if let Some(at) = kept.and_then(|e| group.iter().position(|g| g.1 == e)) {
            if self.take(id, group[at].2).is_ok() {
                return Ok(());
            }
            // PyTorch forgets a cached plan that ran out of memory and asks the heuristics again.
            self.plans.remove(&plan);
        }
        let mut last = None;
        for (at, &(_, engine, size)) in group.iter().enumerate() {
            match self.take(id, size) {
                Ok(()) => {
                    self.plans.insert(plan, engine);
                    return Ok(());
                }
                Err(oom) => last = Some((at, oom)),
            }
        }
        Err(last.expect("a workspace group has an engine"))
    }

    /// A workspace of `size` for `id`; an engine without a workspace takes nothing.
    fn take(&mut self, id: u64, size: u64) -> Result<(), OutOfMemory> {
        match size {
            0 => Ok(()),
            size => self.alloc(id, size),
        }
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
        let largest = events.iter().map(|e| match e.size() {
            0 => 0,
            size => segment_size(round_size(size)),
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
    use alloc::vec;

    const MIB: u64 = 1 << 20;

    /// The engines of one convolution's workspace: `sizes` in the heuristics' order.
    fn engines(id: u64, plan: u64, sizes: &[u64]) -> Vec<Event> {
        (sizes.iter().enumerate())
            .map(|(engine, &size)| Event::Workspace {
                id,
                size,
                plan,
                engine: engine as u32,
            })
            .collect()
    }

    /// A stream of two convolutions of one plan, each with its workspace, between 40 MiB of
    /// activations: 64 MiB for the first engine, 8 MiB for the second, none for the third.
    fn two_convolutions() -> Vec<Event> {
        let mut events = vec![Event::Alloc {
            id: 1,
            size: 40 * MIB,
        }];
        events.extend(engines(10, 7, &[64 * MIB, 8 * MIB, 0]));
        events.push(Event::Free { id: 10 });
        events.extend(engines(11, 7, &[64 * MIB, 8 * MIB, 0]));
        events.push(Event::Free { id: 11 });
        events
    }

    /// Uncapped, the first engine runs; under a cap its workspace fails (after the release and the
    /// retry, an `ooms`) and the next engine's is served: no out-of-memory of the stream, and the
    /// second convolution of the plan asks for the kept engine's workspace only.
    #[test]
    fn a_workspace_that_does_not_fit_gives_way_to_the_next_engine() {
        let events = two_convolutions();
        let free = replay(&events, None);
        assert!(free.fits());
        assert_eq!(free.stats.peak_reserved, 104 * MIB);
        assert_eq!(free.stats.ooms, 0);
        let capped = replay(&events, Some(60 * MIB));
        assert!(capped.fits(), "{capped:?}");
        assert_eq!(capped.stats.peak_allocated, 48 * MIB);
        // One failed try for the first convolution; the second asks for the kept engine only.
        assert_eq!((capped.stats.ooms, capped.stats.retries), (1, 1));
        // Under 40 MiB only the engine without a workspace runs: still no out-of-memory.
        let tight = replay(&events, Some(40 * MIB));
        assert!(tight.fits(), "{tight:?}");
        assert_eq!(tight.stats.ooms, 2);
    }

    /// Where no engine's workspace can be served, the stream runs out of memory at the last
    /// engine tried; the smallest cap is the one under which some engine runs.
    #[test]
    fn without_an_engine_that_fits_the_stream_runs_out_of_memory() {
        let mut events = vec![Event::Alloc {
            id: 1,
            size: 40 * MIB,
        }];
        events.extend(engines(10, 7, &[64 * MIB, 8 * MIB]));
        let r = replay(&events, Some(44 * MIB));
        assert_eq!(r.oom.map(|(at, o)| (at, o.requested)), Some((2, 8 * MIB)));
        assert_eq!(r.stats.ooms, 2);
        // 40 MiB and the 8 MiB engine's 20 MiB segment (requests under 10 MiB share segments of 20).
        let need = smallest_cap(&events);
        assert_eq!(need.cap, 60 * MIB);
        assert_eq!(need.at_cap.stats.peak_allocated, 48 * MIB);
    }

    /// A kept engine whose workspace no longer fits is forgotten, and the engines are tried in
    /// order again (PyTorch erases the plan from its cache).
    #[test]
    fn a_kept_engine_that_no_longer_fits_is_forgotten() {
        let mut events = engines(10, 7, &[64 * MIB, 8 * MIB]);
        events.push(Event::Free { id: 10 });
        events.push(Event::Alloc {
            id: 1,
            size: 40 * MIB,
        });
        events.extend(engines(11, 7, &[64 * MIB, 8 * MIB]));
        let r = replay(&events, Some(80 * MIB));
        assert!(r.fits(), "{r:?}");
        // The kept 64 MiB engine fails (its cached segment went to the activations), then the
        // first in order fails again, and the 8 MiB one runs.
        assert_eq!(r.stats.ooms, 2);
        assert_eq!(r.stats.peak_allocated, 64 * MIB);
    }

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
