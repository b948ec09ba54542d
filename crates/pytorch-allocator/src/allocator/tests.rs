//! The allocator's rules, each on a stream worked out by hand from PyTorch's C++.

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

const EXPANDABLE: AllocConf = AllocConf {
    expandable_segments: true,
};

fn expandable(cap: Option<u64>) -> Allocator {
    Allocator::configured(cap, EXPANDABLE)
}

#[test]
fn an_expandable_segment_grows_by_whole_pages_from_its_free_end() {
    let mut a = expandable(None);
    let x = a.malloc(30 * MIB, &mut Unbounded).unwrap();
    assert_eq!(
        (x.offset, x.size, a.stats().reserved),
        (0, 30 * MIB, 40 * MIB)
    );
    let y = a.malloc(12 * MIB, &mut Unbounded).unwrap();
    assert_eq!(
        (y.segment, y.offset),
        (x.segment, 30 * MIB),
        "the free 10 MiB grew by one 20 MiB page"
    );
    assert_eq!(a.stats().reserved, 60 * MIB);
    assert_eq!(a.stats().segments, 1);
    assert_eq!(a.held_in_split_segments(), 18 * MIB);
}

#[test]
fn best_fit_prefers_a_block_that_holds_the_request_to_the_growing_end() {
    let mut a = expandable(None);
    let x = a.malloc(20 * MIB, &mut Unbounded).unwrap();
    a.malloc(4 * MIB, &mut Unbounded).unwrap();
    a.free(x.id);
    let w = a.malloc(12 * MIB, &mut Unbounded).unwrap();
    assert_eq!(
        w.offset, 0,
        "the 20 MiB block, not the 16 MiB before unmapped pages"
    );
}

#[test]
fn the_retry_unmaps_free_pages_and_the_cap_checks_the_requests_segment() {
    let mut a = expandable(Some(50 * MIB));
    let x = a.malloc(20 * MIB, &mut Unbounded).unwrap();
    a.malloc(20 * MIB, &mut Unbounded).unwrap();
    a.free(x.id);
    let c = a.malloc(30 * MIB, &mut Unbounded).unwrap();
    assert_eq!(a.stats().retries, 1, "40 + 30 MiB is past the cap");
    assert_eq!(
        c.offset,
        40 * MIB,
        "the unmapped 20 MiB at the start is too small"
    );
    assert_eq!(
        a.stats().reserved,
        60 * MIB,
        "two pages mapped where the cap was checked for 30 MiB"
    );
}

#[test]
fn a_segment_with_nothing_mapped_is_released() {
    let mut a = expandable(None);
    let x = a.malloc(4 * MIB, &mut Unbounded).unwrap();
    a.free(x.id);
    a.empty_cache(&mut Unbounded);
    assert_eq!((a.stats().reserved, a.held_in_split_segments()), (0, 0));
    a.malloc(4 * MIB, &mut Unbounded).unwrap();
    assert_eq!(a.stats().segments, 2, "a new segment for the next request");
}
