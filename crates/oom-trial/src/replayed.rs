//! A built-in trial's stream, replayed through PyTorch's caching allocator: the trial's need (the
//! smallest ceiling it fits under), how that need splits into allocated and held bytes, and the
//! verdict under the trial's own ceiling.

use crate::protocol::{FailedRequest, Replayed};
use pytorch_allocator::{replay_with, smallest_cap_with, AllocConf, Event};

/// Replays `stream`, noted after the device held `before` bytes, against a ceiling of `ceiling`
/// bytes (the allocator's cap is what the ceiling leaves after `before`), with the allocator
/// configured as `conf` says (a built-in trial's: PyTorch's default).
pub fn replayed(
    stream: &[Event],
    before: u64,
    ceiling: u64,
    device_held_ceiling: bool,
    streams: u32,
    conf: AllocConf,
) -> Replayed {
    let need = smallest_cap_with(stream, conf);
    let expandable = AllocConf {
        expandable_segments: true,
    };
    let at_ceiling = replay_with(stream, Some(ceiling.saturating_sub(before)), conf);
    let workspaces = workspace_requests(stream);
    Replayed {
        events: stream.len(),
        need_bytes: before + need.cap,
        allocated_bytes: need.at_cap.stats.peak_allocated,
        retries: need.at_cap.stats.retries,
        reserved_bytes: before + need.uncapped.stats.peak_reserved,
        before_bytes: before,
        fails_at: at_ceiling.oom.map(|(index, oom)| FailedRequest {
            index,
            bytes: oom.requested,
            allocated_bytes: oom.stats.allocated,
        }),
        retries_at_ceiling: at_ceiling.stats.retries,
        device_held_ceiling,
        workspaces,
        streams,
        source: None,
        expandable_need_bytes: Some(before + smallest_cap_with(stream, expandable).cap),
        expandable_segments: conf.expandable_segments,
    }
}

/// How many convolution workspace requests `stream` makes (one per request, whatever the number
/// of engines it offers).
fn workspace_requests(stream: &[Event]) -> u64 {
    let mut last = None;
    let mut n = 0;
    for e in stream {
        if let Event::Workspace { id, .. } = *e {
            n += u64::from(last != Some(id));
            last = Some(id);
        } else {
            last = None;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_need_counts_what_was_held_before_the_stream() {
        let stream = [
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
        ];
        let r = replayed(
            &stream,
            500 * MIB,
            543 * MIB,
            false,
            1,
            AllocConf::default(),
        );
        assert_eq!(r.need_bytes, 544 * MIB);
        assert_eq!(r.reserved_bytes, 574 * MIB);
        assert_eq!((r.allocated_bytes, r.retries), (44 * MIB, 1));
        assert_eq!(
            r.expandable_need_bytes,
            Some(572 * MIB),
            "the third request's 32 MiB checked against the 40 MiB left mapped once the retry unmapped a free page"
        );
        let fails = r.fails_at.expect("a 43 MiB cap is 1 MiB short");
        assert_eq!(
            (fails.index, fails.bytes, fails.allocated_bytes),
            (3, 31 * MIB, 12 * MIB)
        );
        assert_eq!(
            replayed(
                &stream,
                500 * MIB,
                544 * MIB,
                false,
                1,
                AllocConf::default()
            )
            .fails_at,
            None
        );
    }

    /// Two convolutions' workspace requests (one of two engines, one of one) are counted once
    /// each.
    #[test]
    fn workspace_requests_are_counted_once_each() {
        let ws = |id, size, engine| Event::Workspace {
            id,
            size,
            plan: 7,
            engine,
        };
        let stream = [
            Event::Alloc { id: 1, size: MIB },
            ws(2, 64 * MIB, 0),
            ws(2, 0, 1),
            Event::Free { id: 2 },
            ws(3, 8 * MIB, 0),
            Event::Free { id: 3 },
        ];
        let r = replayed(&stream, 0, 100 * MIB, true, 1, AllocConf::default());
        assert_eq!(r.workspaces, 2);
        let plain = replayed(&stream[..1], 0, 100 * MIB, true, 1, AllocConf::default());
        assert_eq!(plain.workspaces, 0);
    }
}
