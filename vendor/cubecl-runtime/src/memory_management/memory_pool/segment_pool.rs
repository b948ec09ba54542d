//! oom-bisect: a pool of segments split between tensors as PyTorch's caching allocator splits them
//! (`BlockPool` in `c10/cuda/CUDACachingAllocator.cpp`). A request takes the smallest free block
//! that holds it, from any segment of the pool; what is left of the block becomes a free block of
//! its own when the pool's [`SegmentKind`] says it is worth splitting, else it stays with the
//! request. Freed neighbours merge. A new segment, sized as PyTorch sizes it, is allocated only
//! when no free block holds the request, and only a segment with nothing in use can be released:
//! a small tensor in a large cached segment strands the rest of it, as in PyTorch.

use crate::{
    memory_management::{
        BytesFormat, ManagedMemoryHandle, MemoryLocation, MemoryUsage,
        memory_pool::{MemoryPage, MemoryPool, Slice},
        oom_bisect::SegmentKind,
    },
    server::IoError,
    storage::{ComputeStorage, StorageId},
};
use alloc::vec::Vec;
use core::fmt::Display;

pub struct SegmentPool {
    kind: SegmentKind,
    segments: Vec<(MemoryPage, StorageId)>,
    alignment: u64,
    location_base: MemoryLocation,
}

impl SegmentPool {
    pub fn new(kind: SegmentKind, alignment: u64, pool_pos: u8) -> Self {
        Self {
            kind,
            segments: Vec::new(),
            alignment,
            location_base: MemoryLocation::new(pool_pos, 0, 0),
        }
    }

    /// The free block that best fits `size`: the smallest that holds it, the first of equals
    /// (PyTorch orders free blocks by size, then address).
    fn best_fit(&mut self, size: u64) -> Option<(usize, usize, u64)> {
        let mut best: Option<(usize, usize, u64)> = None;
        for (s, (segment, _)) in self.segments.iter_mut().enumerate() {
            segment.coalesce();
            for (b, extent) in segment.free_extents() {
                if extent >= size && best.is_none_or(|(_, _, e)| extent < e) {
                    best = Some((s, b, extent));
                }
            }
        }
        best
    }

    fn reserve_in(&mut self, at: (usize, usize), extent: u64, size: u64) -> ManagedMemoryHandle {
        let used = self.rounded(size);
        let split = self.kind.splits(extent - used);
        self.segments[at.0].0.reserve_at(at.1, size, used, split)
    }

    /// The request rounded as PyTorch rounds it (`round_size`: to the 512-byte block), at least
    /// the storage's alignment.
    fn rounded(&self, size: u64) -> u64 {
        size.max(1)
            .next_multiple_of(self.alignment.max(SegmentKind::BLOCK))
    }
}

impl MemoryPool for SegmentPool {
    fn accept(&self, size: u64) -> bool {
        self.kind.accepts(size)
    }

    fn bind(
        &mut self,
        reserved: ManagedMemoryHandle,
        assigned: ManagedMemoryHandle,
        cursor: u64,
    ) -> Result<(), IoError> {
        let (segment, _) = &mut self.segments[reserved.descriptor().page()];
        segment.bind(reserved, assigned, cursor)
    }

    fn find(&self, binding: &super::ManagedMemoryBinding) -> Result<&Slice, IoError> {
        let (segment, _) = &self.segments[binding.descriptor().page()];
        segment.find(binding)
    }

    fn try_reserve(&mut self, size: u64) -> Option<ManagedMemoryHandle> {
        let (segment, block, extent) = self.best_fit(self.rounded(size))?;
        Some(self.reserve_in((segment, block), extent, size))
    }

    fn alloc<Storage: ComputeStorage>(
        &mut self,
        storage: &mut Storage,
        size: u64,
    ) -> Result<ManagedMemoryHandle, IoError> {
        let bytes = self.kind.segment_size(self.rounded(size));
        let handle = storage.alloc(bytes)?;
        let mut location = self.location_base;
        location.page = self.segments.len() as u16;
        let id = handle.id;
        self.segments
            .push((MemoryPage::new(handle, self.alignment, location), id));
        let segment = self.segments.len() - 1;
        Ok(self.reserve_in((segment, 0), bytes, size))
    }

    fn get_memory_usage(&self) -> MemoryUsage {
        let none = MemoryUsage {
            number_allocs: 0,
            bytes_in_use: 0,
            bytes_padding: 0,
            bytes_reserved: 0,
        };
        self.segments.iter().fold(none, |usage, (segment, _)| {
            usage.combine(segment.memory_usage())
        })
    }

    /// Releases every segment with nothing in use (PyTorch's `release_cached_blocks`), only when
    /// asked to: PyTorch keeps its cache until an allocation fails or the user empties it.
    fn cleanup<Storage: ComputeStorage>(
        &mut self,
        storage: &mut Storage,
        _alloc_nr: u64,
        explicit: bool,
    ) {
        if !explicit {
            return;
        }
        let mut kept = Vec::with_capacity(self.segments.len());
        for (mut segment, id) in self.segments.drain(..) {
            segment.coalesce();
            let summary = segment.summary(false);
            if summary.amount_free == summary.amount_total {
                storage.dealloc(id);
            } else {
                segment.update_page(kept.len() as u16);
                kept.push((segment, id));
            }
        }
        self.segments = kept;
    }
}

impl Display for SegmentPool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.segments.is_empty() {
            return Ok(());
        }
        f.write_fmt(format_args!(" - Segment pool {:?}\n", self.kind))?;
        for (segment, id) in self.segments.iter() {
            let summary = segment.summary(false);
            f.write_fmt(format_args!(
                "   - Segment {id} blocks={} => {} free - {} total\n",
                summary.num_total,
                BytesFormat::new(summary.amount_free),
                BytesFormat::new(summary.amount_total),
            ))?;
        }
        f.write_fmt(format_args!("\n{}\n", self.get_memory_usage()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::BytesStorage;

    const MIB: u64 = 1024 * 1024;

    fn large() -> (SegmentPool, BytesStorage) {
        let pool = SegmentPool::new(SegmentKind::Large, 512, 0);
        (pool, BytesStorage::default())
    }

    fn reserved(pool: &SegmentPool) -> u64 {
        pool.get_memory_usage().bytes_reserved
    }

    /// A freed block serves a smaller request and is split; the block in use then strands the
    /// rest of its segment, which cannot be released or serve a request larger than the rest.
    #[test]
    fn oom_bisect_a_cached_segment_is_split_and_stranded_as_in_pytorch() {
        let (mut pool, mut storage) = large();
        drop(pool.alloc(&mut storage, 40 * MIB).unwrap());
        let small = pool
            .try_reserve(12 * MIB)
            .expect("the free 40 MiB block holds 12 MiB");
        let rest = pool.try_reserve(28 * MIB).expect("the rest was split off");
        drop(rest);
        assert!(
            pool.try_reserve(40 * MIB).is_none(),
            "12 MiB in use strand 28"
        );
        pool.cleanup(&mut storage, 0, true);
        assert_eq!(reserved(&pool), 40 * MIB, "a segment in use is kept");
        drop(small);
        let whole = pool.try_reserve(40 * MIB);
        assert!(whole.is_some(), "freed neighbours merge");
        pool.cleanup(&mut storage, 0, true);
        assert_eq!(
            reserved(&pool),
            40 * MIB,
            "the merged block is in use again"
        );
    }

    /// The smallest free block that holds a request serves it; a leftover of 1 MiB or less stays
    /// with the request; requests under 10 MiB share 20 MiB segments.
    #[test]
    fn oom_bisect_best_fit_splits_only_more_than_a_mebibyte() {
        let (mut pool, mut storage) = large();
        let a = pool.alloc(&mut storage, 30 * MIB).unwrap();
        let b = pool.alloc(&mut storage, 14 * MIB).unwrap();
        drop((a, b));
        let c = pool
            .try_reserve(13 * MIB + MIB / 2)
            .expect("best fit: the 14 MiB block");
        let usage = pool.get_memory_usage();
        assert_eq!(
            usage.bytes_in_use + usage.bytes_padding,
            14 * MIB,
            "0.5 MiB not split"
        );
        let d = pool.try_reserve(29 * MIB).expect("the 30 MiB block");
        assert!(
            pool.try_reserve(2 * MIB).is_none(),
            "its 1 MiB leftover stayed with it"
        );
        drop((c, d));
        pool.cleanup(&mut storage, 0, true);
        assert_eq!(reserved(&pool), 0);
        let small = [(); 3].map(|_| {
            (pool.try_reserve(5 * MIB)).or_else(|| pool.alloc(&mut storage, 5 * MIB).ok())
        });
        assert!(small.iter().all(Option::is_some));
        assert_eq!(
            reserved(&pool),
            20 * MIB,
            "three 5 MiB requests in one 20 MiB segment"
        );
    }
}
