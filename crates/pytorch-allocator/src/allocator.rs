//! The allocator: segments split into blocks, two pools of free blocks, the cap and the retry.

use crate::rules::{self, AllocConf, Pool};
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
    /// Requests that failed after the retry (`num_ooms`): a stream's out-of-memory, or a
    /// convolution workspace whose engine then gave way to the next ([`crate::Event::Workspace`]).
    pub ooms: u64,
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
    /// Backed by memory; `false` only for the unmapped pages of an expandable segment.
    mapped: bool,
}

#[derive(Clone, Copy, Debug)]
struct SegmentState {
    addr: u64,
}

/// Where the first segment starts; each new segment lies below the last (`cudaMalloc` hands out
/// decreasing addresses), with a gap so that no two segments touch.
const TOP: u64 = 1 << 56;
const GAP: u64 = 2 << 20;

/// The pages of address space an expandable segment reserves (PyTorch reserves 1⅛ of the card):
/// 32 GiB for the small pool, 320 GiB for the large, more than any card maps.
const EXPANDABLE_PAGES: u64 = 1 << 14;

/// PyTorch's caching allocator for one device and one stream.
#[derive(Clone, Debug)]
pub struct Allocator {
    blocks: Vec<BlockState>,
    vacant_blocks: Vec<u32>,
    segments: Vec<Option<SegmentState>>,
    vacant_segments: Vec<u32>,
    /// Free blocks of each pool by (size, address): best fit, ties to the lower address.
    free: [BTreeSet<(u64, u64, u32)>; 2],
    /// Unmapped pages of each pool's expandable segments by address: the lowest is grown first.
    unmapped: [BTreeSet<(u64, u32)>; 2],
    next_addr: u64,
    cap: Option<u64>,
    expandable: bool,
    stats: Stats,
}

impl Allocator {
    /// An empty allocator; with `cap`, no segment may take the reserved bytes past it (PyTorch's
    /// per-process memory fraction, checked before `cudaMalloc`).
    pub fn new(cap: Option<u64>) -> Allocator {
        Allocator::configured(cap, AllocConf::default())
    }

    /// An empty allocator configured as `conf` says. Under expandable segments each pool grows
    /// one segment page by page and the retry unmaps free pages; that is modelled for the replay
    /// only: its [`Device`] is never asked (a device pool would need virtual memory to grow a
    /// segment in place).
    pub fn configured(cap: Option<u64>, conf: AllocConf) -> Allocator {
        Allocator {
            blocks: Vec::new(),
            vacant_blocks: Vec::new(),
            segments: Vec::new(),
            vacant_segments: Vec::new(),
            free: [BTreeSet::new(), BTreeSet::new()],
            unmapped: [BTreeSet::new(), BTreeSet::new()],
            next_addr: TOP,
            cap,
            expandable: conf.expandable_segments,
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
        if let Some(id) = self.alloc_block(rounded, pool, device) {
            return Ok(id);
        }
        self.release_cached(device);
        self.stats.retries += 1;
        let served = self.alloc_block(rounded, pool, device);
        if served.is_none() {
            self.stats.ooms += 1;
        }
        served.ok_or(OutOfMemory {
            requested: size,
            segment: rules::segment_size(rounded),
            stats: self.stats,
        })
    }

    /// `get_free_block`: the smallest free block of `pool` that holds `rounded`, lowest address
    /// first among equals. Under expandable segments a block followed by unmapped pages counts as
    /// what it can grow to, so a block that holds the request as it is comes first.
    fn take_free(&mut self, pool: Pool, rounded: u64) -> Option<u32> {
        let mut fitting = self.free[pool as usize].range((rounded, 0, 0)..);
        let mut key = *fitting.next()?;
        if self.expandable {
            for next in fitting {
                if self.growable(next.2) >= self.growable(key.2) {
                    break;
                }
                key = *next;
            }
        }
        self.free[pool as usize].remove(&key);
        Some(key.2)
    }

    /// A free block's size with the unmapped pages right after it.
    fn growable(&self, id: u32) -> u64 {
        let b = &self.blocks[id as usize];
        let next = b.next.map(|n| &self.blocks[n as usize]);
        b.size + next.filter(|n| !n.mapped).map_or(0, |n| n.size)
    }

    /// `alloc_block`: refused when the request's segment (`get_allocation_size`) would take the
    /// reserved bytes past the cap, even where expandable segments map less or more; else a new
    /// segment (`None` when the device has no room), or the pages expandable segments need.
    fn alloc_block(&mut self, rounded: u64, pool: Pool, device: &mut impl Device) -> Option<u32> {
        let size = rules::segment_size(rounded);
        if self.cap.is_some_and(|cap| self.stats.reserved + size > cap) {
            return None;
        }
        if self.expandable {
            return Some(self.grow(pool, rounded));
        }
        let segment = self.next_segment();
        if !device.allocate(SegmentId(segment), size) {
            return None;
        }
        self.reserve(size);
        Some(self.open_segment(segment, size, pool, true))
    }

    fn next_segment(&self) -> u32 {
        match self.vacant_segments.last() {
            Some(&s) => s,
            None => self.segments.len() as u32,
        }
    }

    /// Gives `segment` (from [`Self::next_segment`]) `size` bytes of address space below the
    /// last segment's, held by one block not in use (`mapped` or not); returns that block.
    fn open_segment(&mut self, segment: u32, size: u64, pool: Pool, mapped: bool) -> u32 {
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
        self.stats.segments += 1;
        self.new_block(BlockState {
            addr: state.addr,
            size,
            segment,
            prev: None,
            next: None,
            allocated: false,
            pool,
            mapped,
        })
    }

    fn reserve(&mut self, bytes: u64) {
        self.stats.reserved += bytes;
        self.stats.peak_reserved = self.stats.peak_reserved.max(self.stats.reserved);
    }

    /// `try_allocate_expandable_block`: the lowest free address range of the pool's expandable
    /// segments that holds `rounded` (free blocks and unmapped pages), its pages mapped; taken.
    fn grow(&mut self, pool: Pool, rounded: u64) -> u32 {
        let mut id = self.expandable_start(pool, rounded);
        if !self.blocks[id as usize].mapped {
            id = self.map(id, rounded.min(self.blocks[id as usize].size));
        }
        while self.blocks[id as usize].size < rounded {
            let b = &self.blocks[id as usize];
            let next = b.next.expect("the range found holds the request");
            let more = (rounded - b.size).min(self.blocks[next as usize].size);
            id = self.map(next, more);
        }
        self.unshelve(id);
        id
    }

    /// `find_expandable_block`: the first unmapped range, by address, that with the free block
    /// before it and what follows holds `rounded`; else a new expandable segment.
    fn expandable_start(&mut self, pool: Pool, rounded: u64) -> u32 {
        let start = |u: u32| match self.blocks[u as usize].prev {
            Some(p) if !self.blocks[p as usize].allocated => p,
            _ => u,
        };
        let found = self.unmapped[pool as usize]
            .iter()
            .map(|&(_, u)| start(u))
            .find(|&c| self.room_from(c) >= rounded);
        if let Some(c) = found {
            return c;
        }
        let size = rules::page_size(pool) * EXPANDABLE_PAGES;
        let id = self.open_segment(self.next_segment(), size, pool, false);
        self.shelve(id);
        id
    }

    /// The bytes of the blocks not in use from `id` on, up to the first in use.
    fn room_from(&self, id: u32) -> u64 {
        let mut room = 0;
        let mut at = Some(id);
        while let Some(b) = at.map(|i| &self.blocks[i as usize]) {
            if b.allocated {
                break;
            }
            room += b.size;
            at = b.next;
        }
        room
    }

    /// `map_block`: maps the pages that hold the first `bytes` of the unmapped block `id` (which
    /// starts on a page); the rest stays unmapped. The mapped block merges with its free
    /// neighbours and is free; returns it.
    fn map(&mut self, id: u32, bytes: u64) -> u32 {
        let b = self.blocks[id as usize].clone();
        let mapped = bytes.next_multiple_of(rules::page_size(b.pool));
        self.unshelve(id);
        if mapped < b.size {
            let rest = self.carve(id, mapped);
            self.shelve(rest);
        }
        self.blocks[id as usize].mapped = true;
        self.merge_idle_neighbours(id);
        self.shelve(id);
        self.reserve(mapped);
        id
    }

    /// `unmap_block`: the whole pages inside the free block `id` are unmapped and merge with
    /// unmapped neighbours; what lies before and after them stays free. Returns the block that
    /// holds those pages (`id` itself when none lie inside).
    fn unmap(&mut self, id: u32) -> u32 {
        let b = self.blocks[id as usize].clone();
        let base = self.segments[b.segment as usize].expect("live").addr;
        let page = rules::page_size(b.pool);
        let begin = base + (b.addr - base).next_multiple_of(page);
        let end = base + (b.addr + b.size - base) / page * page;
        if begin >= end {
            return id;
        }
        self.unshelve(id);
        let mut inner = id;
        if begin > b.addr {
            inner = self.carve(id, begin - b.addr);
            self.shelve(id);
        }
        if end < b.addr + b.size {
            let after = self.carve(inner, end - begin);
            self.shelve(after);
        }
        self.blocks[inner as usize].mapped = false;
        self.merge_idle_neighbours(inner);
        self.shelve(inner);
        self.stats.reserved -= end - begin;
        inner
    }

    /// Unmaps the free pages of `pool`'s expandable segments (`release_blocks`); a segment left
    /// with nothing mapped is released.
    fn unmap_free(&mut self, pool: Pool) {
        let free: Vec<u32> = self.free[pool as usize].iter().map(|k| k.2).collect();
        for id in free {
            let id = self.unmap(id);
            let b = self.blocks[id as usize].clone();
            if !b.mapped && b.prev.is_none() && b.next.is_none() {
                self.unshelve(id);
                self.segments[b.segment as usize] = None;
                self.vacant_segments.push(b.segment);
                self.vacant_blocks.push(id);
            }
        }
    }

    /// `empty_cache` (`torch.cuda.empty_cache()`): the cached whole segments go back to the device.
    pub fn empty_cache(&mut self, device: &mut impl Device) {
        self.release_cached(device);
    }

    /// `release_cached_blocks`: every free block that is a whole segment goes back to the device;
    /// segments with a block in use stay, with their free blocks.
    fn release_cached(&mut self, device: &mut impl Device) {
        for pool in [Pool::Large, Pool::Small] {
            if self.expandable {
                self.unmap_free(pool);
                continue;
            }
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
        let b = &self.blocks[id as usize];
        if rules::should_split(b.pool, b.size - rounded, self.expandable) {
            let rest = self.carve(id, rounded);
            self.shelve(rest);
        }
    }

    /// Cuts block `id` after its first `at` bytes: the rest becomes a block of its own, not in
    /// use, mapped as `id` is, next to it in the segment, and not yet in a set; returns it.
    fn carve(&mut self, id: u32, at: u64) -> u32 {
        let b = self.blocks[id as usize].clone();
        let rest = self.new_block(BlockState {
            addr: b.addr + at,
            size: b.size - at,
            prev: Some(id),
            allocated: false,
            ..b
        });
        if let Some(n) = b.next {
            self.blocks[n as usize].prev = Some(rest);
        }
        let block = &mut self.blocks[id as usize];
        block.next = Some(rest);
        block.size = at;
        rest
    }

    /// `free_block`: the block merges with its free neighbours in its segment (blocks of two
    /// segments never merge) and returns to its pool.
    pub fn free(&mut self, id: BlockId) {
        let id = id.0;
        let b = &mut self.blocks[id as usize];
        debug_assert!(b.allocated, "a block is freed once");
        b.allocated = false;
        self.stats.allocated -= b.size;
        self.merge_idle_neighbours(id);
        self.shelve(id);
    }

    /// `try_merge_blocks` with both neighbours of the block `id`, which is not in use: each that
    /// is not in use either and mapped as it is merges into it.
    fn merge_idle_neighbours(&mut self, id: u32) {
        let b = &self.blocks[id as usize];
        for n in [b.prev, b.next].into_iter().flatten() {
            let (o, b) = (&self.blocks[n as usize], &self.blocks[id as usize]);
            if !o.allocated && o.mapped == b.mapped {
                self.merge(id, n);
            }
        }
    }

    /// Merges the block `other`, a neighbour of `id` not in use, into `id`.
    fn merge(&mut self, id: u32, other: u32) {
        self.unshelve(other);
        let o = self.blocks[other as usize].clone();
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

    /// Puts the block `id`, not in use, in its pool's set: free blocks by size, unmapped pages by
    /// address.
    fn shelve(&mut self, id: u32) {
        let b = &self.blocks[id as usize];
        match b.mapped {
            true => self.free[b.pool as usize].insert((b.size, b.addr, id)),
            false => self.unmapped[b.pool as usize].insert((b.addr, id)),
        };
    }

    fn unshelve(&mut self, id: u32) {
        let b = &self.blocks[id as usize];
        match b.mapped {
            true => self.free[b.pool as usize].remove(&(b.size, b.addr, id)),
            false => self.unmapped[b.pool as usize].remove(&(b.addr, id)),
        };
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
mod tests;
