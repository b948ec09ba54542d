//! The allocator: segments split into blocks, two pools of free blocks, the cap and the retry.

use crate::rules::{self, Pool};
use alloc::collections::BTreeSet;
use alloc::vec::Vec;

/// A block handed out by [`Allocator::malloc`]; valid until it is freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockId(u32);

/// A segment (one `cudaMalloc`); its id is reused once the segment is released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentId(u32);

impl BlockId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl SegmentId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Where a request landed: `size` bytes (the rounded request, or the whole block when the rest was
/// too small to split off) at `offset` in `segment`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub id: BlockId,
    pub segment: SegmentId,
    pub offset: u64,
    pub size: u64,
}

/// The device under the allocator: where segments really come from. The replay's device never
/// refuses ([`Unbounded`]); a trial's device is the GPU, which refuses when the card is full.
pub trait Device {
    /// Makes a segment of `size` bytes; `false` when the device has no room (`cudaMalloc` failed).
    fn allocate(&mut self, _segment: SegmentId, _size: u64) -> bool {
        true
    }

    /// Gives a whole free segment back to the device (`cudaFree`).
    fn release(&mut self, _segment: SegmentId) {}

    /// Called once the cached segments are released, before the one retry: a device whose frees
    /// are queued makes them take effect here (`release_cached_blocks` synchronises first).
    fn released(&mut self) {}
}

/// A device that never refuses a segment: what the allocator's own cap leaves is all there is.
#[derive(Debug, Default)]
pub struct Unbounded;

impl Device for Unbounded {}

/// The allocator's counters, as `torch.cuda.memory_stats` names them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes in blocks handed out and not freed (`allocated_bytes.all.current`).
    pub allocated: u64,
    /// Bytes in segments (`reserved_bytes.all.current`).
    pub reserved: u64,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    /// Times the cached segments were released to retry a segment (`num_alloc_retries`).
    pub retries: u64,
    /// Segments made (`segment.all.allocated`).
    pub segments: u64,
}

/// A request neither the pools, a new segment nor the retry could serve: PyTorch's
/// "CUDA out of memory. Tried to allocate …".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfMemory {
    /// The bytes asked for.
    pub requested: u64,
    /// The segment that could not be made.
    pub segment: u64,
    /// The counters when it happened.
    pub stats: Stats,
}

#[derive(Clone, Debug)]
struct BlockState {
    addr: u64,
    size: u64,
    segment: u32,
    prev: Option<u32>,
    next: Option<u32>,
    allocated: bool,
    pool: Pool,
}

#[derive(Clone, Copy, Debug)]
struct SegmentState {
    addr: u64,
}

/// Where the first segment starts; each new segment lies below the last (`cudaMalloc` hands out
/// decreasing addresses), with a gap so that no two segments touch.
const TOP: u64 = 1 << 44;
const GAP: u64 = 2 << 20;

/// PyTorch's caching allocator for one device and one stream.
#[derive(Clone, Debug)]
pub struct Allocator {
    blocks: Vec<BlockState>,
    vacant_blocks: Vec<u32>,
    segments: Vec<Option<SegmentState>>,
    vacant_segments: Vec<u32>,
    /// Free blocks of each pool by (size, address): best fit, ties to the lower address.
    free: [BTreeSet<(u64, u64, u32)>; 2],
    next_addr: u64,
    cap: Option<u64>,
    stats: Stats,
}

impl Allocator {
    /// An empty allocator; with `cap`, no segment may take the reserved bytes past it (PyTorch's
    /// per-process memory fraction, checked before `cudaMalloc`).
    pub fn new(cap: Option<u64>) -> Allocator {
        Allocator {
            blocks: Vec::new(),
            vacant_blocks: Vec::new(),
            segments: Vec::new(),
            vacant_segments: Vec::new(),
            free: [BTreeSet::new(), BTreeSet::new()],
            next_addr: TOP,
            cap,
            stats: Stats::default(),
        }
    }

    pub fn set_cap(&mut self, cap: Option<u64>) {
        self.cap = cap;
    }

    pub fn cap(&self) -> Option<u64> {
        self.cap
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The block `id` now (its size grows when a freed neighbour merges into it).
    pub fn block(&self, id: BlockId) -> Block {
        let b = &self.blocks[id.index()];
        let segment = self.segments[b.segment as usize].expect("a block's segment is live");
        Block {
            id,
            segment: SegmentId(b.segment),
            offset: b.addr - segment.addr,
            size: b.size,
        }
    }

    /// Bytes held in free blocks of segments that are partly in use: what the retry cannot give
    /// back, and why reserved exceeds allocated.
    pub fn held_in_split_segments(&self) -> u64 {
        self.free_blocks()
            .filter(|b| b.prev.is_some() || b.next.is_some())
            .map(|b| b.size)
            .sum()
    }

    fn free_blocks(&self) -> impl Iterator<Item = &BlockState> {
        self.free
            .iter()
            .flat_map(|set| set.iter().map(|&(_, _, i)| &self.blocks[i as usize]))
    }

    /// `malloc`: the best free block of the request's pool, else a new segment, else the cached
    /// whole segments released and one retry.
    pub fn malloc(&mut self, size: u64, device: &mut impl Device) -> Result<Block, OutOfMemory> {
        let rounded = rules::round_size(size);
        let pool = rules::pool_of(rounded);
        let id = match self.take_free(pool, rounded) {
            Some(id) => id,
            None => self.new_segment_or_retry(size, rounded, pool, device)?,
        };
        self.split(id, rounded);
        let b = &mut self.blocks[id as usize];
        b.allocated = true;
        self.stats.allocated += b.size;
        self.stats.peak_allocated = self.stats.peak_allocated.max(self.stats.allocated);
        Ok(self.block(BlockId(id)))
    }

    fn new_segment_or_retry(
        &mut self,
        size: u64,
        rounded: u64,
        pool: Pool,
        device: &mut impl Device,
    ) -> Result<u32, OutOfMemory> {
        let segment = rules::segment_size(rounded);
        if let Some(id) = self.alloc_segment(segment, pool, device) {
            return Ok(id);
        }
        self.release_cached(device);
        self.stats.retries += 1;
        self.alloc_segment(segment, pool, device)
            .ok_or(OutOfMemory {
                requested: size,
                segment,
                stats: self.stats,
            })
    }

    /// `get_free_block`: the smallest free block of `pool` that holds `rounded`, lowest address
    /// first among equals.
    fn take_free(&mut self, pool: Pool, rounded: u64) -> Option<u32> {
        let set = &mut self.free[pool as usize];
        let key = *set.range((rounded, 0, 0)..).next()?;
        set.remove(&key);
        Some(key.2)
    }

    /// `alloc_block`: a new segment, refused when it would take the reserved bytes past the cap
    /// or when the device has no room.
    fn alloc_segment(&mut self, size: u64, pool: Pool, device: &mut impl Device) -> Option<u32> {
        if self.cap.is_some_and(|cap| self.stats.reserved + size > cap) {
            return None;
        }
        let segment = match self.vacant_segments.last() {
            Some(&s) => s,
            None => self.segments.len() as u32,
        };
        if !device.allocate(SegmentId(segment), size) {
            return None;
        }
        if self.vacant_segments.last() == Some(&segment) {
            self.vacant_segments.pop();
        }
        self.next_addr -= size + GAP;
        let state = SegmentState {
            addr: self.next_addr,
        };
        match self.segments.get_mut(segment as usize) {
            Some(slot) => *slot = Some(state),
            None => self.segments.push(Some(state)),
        }
        self.stats.reserved += size;
        self.stats.peak_reserved = self.stats.peak_reserved.max(self.stats.reserved);
        self.stats.segments += 1;
        Some(self.new_block(BlockState {
            addr: state.addr,
            size,
            segment,
            prev: None,
            next: None,
            allocated: false,
            pool,
        }))
    }

    /// `empty_cache` (`torch.cuda.empty_cache()`): the cached whole segments go back to the device.
    pub fn empty_cache(&mut self, device: &mut impl Device) {
        self.release_cached(device);
    }

    /// `release_cached_blocks`: every free block that is a whole segment goes back to the device;
    /// segments with a block in use stay, with their free blocks.
    fn release_cached(&mut self, device: &mut impl Device) {
        for pool in [Pool::Large, Pool::Small] {
            let whole: Vec<(u64, u64, u32)> = self.free[pool as usize]
                .iter()
                .filter(|&&(_, _, i)| {
                    let b = &self.blocks[i as usize];
                    b.prev.is_none() && b.next.is_none()
                })
                .copied()
                .collect();
            for key in whole {
                self.free[pool as usize].remove(&key);
                let segment = self.blocks[key.2 as usize].segment;
                self.stats.reserved -= key.0;
                self.segments[segment as usize] = None;
                self.vacant_segments.push(segment);
                self.vacant_blocks.push(key.2);
                device.release(SegmentId(segment));
            }
        }
        device.released();
    }

    /// Splits the rest of block `id` off as a free block when `should_split` says so.
    fn split(&mut self, id: u32, rounded: u64) {
        let b = self.blocks[id as usize].clone();
        let remaining = b.size - rounded;
        if !rules::should_split(b.pool, remaining) {
            return;
        }
        let rest = self.new_block(BlockState {
            addr: b.addr + rounded,
            size: remaining,
            segment: b.segment,
            prev: Some(id),
            next: b.next,
            allocated: false,
            pool: b.pool,
        });
        if let Some(n) = b.next {
            self.blocks[n as usize].prev = Some(rest);
        }
        let block = &mut self.blocks[id as usize];
        block.next = Some(rest);
        block.size = rounded;
        self.insert_free(rest);
    }

    /// `free_block`: the block merges with its free neighbours in its segment (blocks of two
    /// segments never merge) and returns to its pool.
    pub fn free(&mut self, id: BlockId) {
        let id = id.0;
        let b = &mut self.blocks[id as usize];
        debug_assert!(b.allocated, "a block is freed once");
        b.allocated = false;
        self.stats.allocated -= b.size;
        for neighbour in [b.prev, b.next].into_iter().flatten() {
            if !self.blocks[neighbour as usize].allocated {
                self.merge(id, neighbour);
            }
        }
        self.insert_free(id);
    }

    /// Merges the free block `other`, a neighbour of `id`, into `id`.
    fn merge(&mut self, id: u32, other: u32) {
        let o = self.blocks[other as usize].clone();
        self.free[o.pool as usize].remove(&(o.size, o.addr, other));
        let b = &mut self.blocks[id as usize];
        if b.prev == Some(other) {
            b.addr = o.addr;
            b.prev = o.prev;
            if let Some(p) = o.prev {
                self.blocks[p as usize].next = Some(id);
            }
        } else {
            b.next = o.next;
            if let Some(n) = o.next {
                self.blocks[n as usize].prev = Some(id);
            }
        }
        self.blocks[id as usize].size += o.size;
        self.vacant_blocks.push(other);
    }

    fn insert_free(&mut self, id: u32) {
        let b = &self.blocks[id as usize];
        self.free[b.pool as usize].insert((b.size, b.addr, id));
    }

    fn new_block(&mut self, state: BlockState) -> u32 {
        match self.vacant_blocks.pop() {
            Some(i) => {
                self.blocks[i as usize] = state;
                i
            }
            None => {
                self.blocks.push(state);
                (self.blocks.len() - 1) as u32
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_freed_block_is_reused_by_best_fit_and_merges_with_its_free_neighbours() {
        let mut a = Allocator::new(None);
        let x = a.malloc(30 * MIB, &mut Unbounded).unwrap();
        a.free(x.id);
        let y = a.malloc(12 * MIB, &mut Unbounded).unwrap();
        let z = a.malloc(12 * MIB, &mut Unbounded).unwrap();
        assert_eq!(a.stats().reserved, 30 * MIB, "both fit the freed segment");
        assert_eq!((y.segment, y.offset), (x.segment, 0));
        assert_eq!((z.segment, z.offset), (x.segment, 12 * MIB));
        assert_eq!(a.held_in_split_segments(), 6 * MIB);
        a.free(y.id);
        a.free(z.id);
        assert_eq!(
            a.held_in_split_segments(),
            0,
            "merged back into one whole segment"
        );
        assert_eq!(a.malloc(30 * MIB, &mut Unbounded).unwrap().size, 30 * MIB);
    }

    #[test]
    fn a_rest_of_a_mib_or_less_goes_with_the_block() {
        let mut a = Allocator::new(None);
        let x = a.malloc(12 * MIB, &mut Unbounded).unwrap();
        a.free(x.id);
        assert_eq!(a.malloc(11 * MIB, &mut Unbounded).unwrap().size, 12 * MIB);
        assert_eq!(a.stats().allocated, 12 * MIB);
    }

    #[test]
    fn the_cap_releases_whole_segments_then_retries_once() {
        let mut a = Allocator::new(Some(40 * MIB));
        let x = a.malloc(20 * MIB, &mut Unbounded).unwrap();
        let y = a.malloc(12 * MIB, &mut Unbounded).unwrap();
        a.free(x.id);
        a.malloc(22 * MIB, &mut Unbounded).unwrap();
        assert_eq!(
            a.stats().retries,
            1,
            "the whole free 20 MiB segment made room"
        );
        assert_eq!(a.stats().reserved, 34 * MIB);
        a.free(y.id);
        a.malloc(4 * MIB, &mut Unbounded).unwrap();
        assert_eq!(a.held_in_split_segments(), 8 * MIB);
        let err = a.malloc(10 * MIB, &mut Unbounded).unwrap_err();
        assert_eq!(err.segment, 10 * MIB);
        assert_eq!(a.stats().retries, 2, "a split segment is not released");
        assert_eq!(err.stats.allocated, 26 * MIB);
    }
}
