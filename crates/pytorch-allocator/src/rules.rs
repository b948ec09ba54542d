//! The constants and size rules of `CUDACachingAllocator.cpp`, with its names.

/// Every request is rounded up to a multiple of this (`kMinBlockSize`).
pub const MIN_BLOCK: u64 = 512;
/// The largest request served from the small pool (`kSmallSize`).
pub const SMALL_SIZE: u64 = 1 << 20;
/// The segment made for a small request (`kSmallBuffer`).
pub const SMALL_BUFFER: u64 = 2 << 20;
/// The segment made for a large request below [`MIN_LARGE_ALLOC`] (`kLargeBuffer`).
pub const LARGE_BUFFER: u64 = 20 << 20;
/// Large requests at or above this get a segment of their own size (`kMinLargeAlloc`).
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// The granularity of a large request's own segment (`kRoundLarge`).
pub const ROUND_LARGE: u64 = 2 << 20;

/// Every segment is a multiple of this, so a cap between two multiples behaves as the lower one.
pub const SEGMENT_GRANULE: u64 = 2 << 20;

/// Under `expandable_segments:True`, the page an expandable segment of the small pool maps at a
/// time (`kSmallBuffer`); the large pool's is [`LARGE_BUFFER`].
pub fn page_size(pool: Pool) -> u64 {
    match pool {
        Pool::Small => SMALL_BUFFER,
        Pool::Large => LARGE_BUFFER,
    }
}

/// The allocator's settings that change its decisions (`PYTORCH_CUDA_ALLOC_CONF`); the default is
/// PyTorch's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocConf {
    /// `expandable_segments:True`.
    pub expandable_segments: bool,
}

/// The two pools: a freed block is only reused by a request of its own pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pool {
    Small,
    Large,
}

/// `round_size`: the bytes a request of `size` takes.
pub fn round_size(size: u64) -> u64 {
    size.max(1).next_multiple_of(MIN_BLOCK)
}

/// Which pool serves a rounded request.
pub fn pool_of(rounded: u64) -> Pool {
    match rounded <= SMALL_SIZE {
        true => Pool::Small,
        false => Pool::Large,
    }
}

/// `get_allocation_size`: the segment made when no free block serves a rounded request.
pub fn segment_size(rounded: u64) -> u64 {
    if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        rounded.next_multiple_of(ROUND_LARGE)
    }
}

/// `should_split`: whether a block of `pool` keeps `remaining` bytes apart after serving a request.
/// A large block is split only when more than [`SMALL_SIZE`] remain: a smaller remainder is handed
/// out with the block. Under expandable segments every block splits as a small one does.
pub fn should_split(pool: Pool, remaining: u64, expandable: bool) -> bool {
    match (pool, expandable) {
        (Pool::Small, _) | (_, true) => remaining >= MIN_BLOCK,
        (Pool::Large, false) => remaining > SMALL_SIZE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_and_pick_their_segment_as_pytorch_does() {
        assert_eq!(round_size(0), 512);
        assert_eq!(round_size(513), 1024);
        assert_eq!(segment_size(round_size(1 << 20)), SMALL_BUFFER);
        assert_eq!(segment_size(round_size((1 << 20) + 1)), LARGE_BUFFER);
        assert_eq!(segment_size(10 << 20), 10 << 20);
        assert_eq!(segment_size((10 << 20) + 512), 12 << 20);
        assert!(!should_split(Pool::Large, 1 << 20, false));
        assert!(should_split(Pool::Large, (1 << 20) + 512, false));
        assert!(should_split(Pool::Large, 512, true));
        assert!(should_split(Pool::Small, 512, false));
    }
}
