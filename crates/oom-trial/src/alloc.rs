//! The CPU backend's memory ceiling: a counting global allocator that refuses allocations past the
//! ceiling, so that the same search runs on a machine without a GPU. The binary installs it with
//! `#[global_allocator]`; it costs two atomic operations per allocation.
//!
//! A refusal returns null, and Rust then aborts the process (`handle_alloc_error`). Before returning,
//! the allocator writes one line to stderr with `write(2)` directly: it must not allocate, and the
//! process is about to die, so that line is what the parent classifies the trial from.
//!
//! Once [`recorder::record`] is called, every allocation and release is also noted in order (the trial's
//! stream, which PyTorch's allocator replays: `pytorch-allocator`). The notes go to memory mapped
//! for them, never through the allocator itself.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Set by the first request admitted: whether this allocator serves the process.
static SERVED: AtomicBool = AtomicBool::new(false);

pub struct CountingAlloc;

/// Bytes currently allocated through the counting allocator.
pub fn in_use() -> usize {
    CURRENT.load(Ordering::Relaxed)
}

/// Most bytes allocated at once since the process started.
pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// Whether the counting allocator is the global allocator of this process.
pub fn installed() -> bool {
    // Not read from the bytes in use: another thread releasing memory meanwhile made a 4 KiB
    // request look unserved, and the trial stopped with "not installed".
    // black_box: an optimised build may otherwise elide an allocation nobody uses (it did: the release
    // binary reported the allocator as missing).
    let v: Vec<u8> = std::hint::black_box(Vec::with_capacity(4096));
    drop(std::hint::black_box(v));
    SERVED.load(Ordering::Relaxed)
}

/// The ceiling [`set_limit`] set (`usize::MAX` until then).
pub fn limit() -> usize {
    LIMIT.load(Ordering::SeqCst)
}

/// Refuse allocations that would take the total past `bytes`.
pub fn set_limit(bytes: usize) {
    LIMIT.store(bytes, Ordering::SeqCst);
}

/// Formats `n` into `buf` without allocating; returns the digits.
fn digits(mut n: usize, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

fn refuse(size: usize, current: usize, limit: usize) {
    let mut line = [0u8; 160];
    let mut len = 0;
    let mut push = |bytes: &[u8]| {
        let n = bytes.len().min(line.len() - len);
        line[len..len + n].copy_from_slice(&bytes[..n]);
        len += n;
    };
    let mut buf = [0u8; 20];
    push(crate::classify::CPU_REFUSAL.as_bytes());
    push(b" ");
    push(digits(size, &mut buf));
    push(b" bytes (in use ");
    push(digits(current, &mut buf));
    push(b", ceiling ");
    push(digits(limit, &mut buf));
    push(b")\n");
    // SAFETY: writes `len` initialised bytes from a live stack buffer to fd 2; the result is ignored
    // because there is nothing better to do in an allocator that is about to report failure.
    unsafe {
        libc::write(2, line.as_ptr().cast(), len);
    }
}

impl CountingAlloc {
    fn admit(&self, size: usize) -> bool {
        let limit = LIMIT.load(Ordering::Relaxed);
        let now = CURRENT.fetch_add(size, Ordering::Relaxed) + size;
        if now > limit {
            CURRENT.fetch_sub(size, Ordering::Relaxed);
            refuse(size, now - size, limit);
            return false;
        }
        PEAK.fetch_max(now, Ordering::Relaxed);
        if !SERVED.load(Ordering::Relaxed) {
            SERVED.store(true, Ordering::Relaxed);
        }
        true
    }
}

// SAFETY: every method forwards to `System` with the same layout, and only adds bookkeeping.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !self.admit(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract for `layout`.
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
        } else {
            recorder::note_alloc(p, layout);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !self.admit(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
        } else {
            recorder::note_alloc(p, layout);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Noted before the memory is given back: whoever gets the same address next is noted
        // after this release.
        recorder::note_free(ptr, layout);
        // SAFETY: `ptr` was allocated by `System` with `layout` (through this allocator).
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = layout.size();
        if new_size > old && !self.admit(new_size - old) {
            return std::ptr::null_mut();
        }
        // A caching allocator has no realloc: the old block is released, a new one requested.
        recorder::note_free(ptr, layout);
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        // `new_size` with `layout`'s alignment is a valid layout (`realloc`'s contract).
        match p.is_null() {
            true => recorder::note_alloc(ptr, layout),
            false => recorder::note_alloc(
                p,
                Layout::from_size_align(new_size, layout.align()).unwrap_or(layout),
            ),
        }
        if p.is_null() {
            if new_size > old {
                CURRENT.fetch_sub(new_size - old, Ordering::Relaxed);
            }
        } else if new_size < old {
            CURRENT.fetch_sub(old - new_size, Ordering::Relaxed);
        }
        p
    }
}

/// The stream of allocations and releases, noted into memory of its own (`mmap`) so that noting
/// never allocates: one pair of words an event, the index taken atomically, so that threads note
/// in one order that agrees with each thread's own.
pub mod recorder {
    use pytorch_allocator::Event;
    use std::alloc::Layout;
    use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

    static BUF: AtomicPtr<u64> = AtomicPtr::new(std::ptr::null_mut());
    static CAPACITY: AtomicUsize = AtomicUsize::new(0);
    static LEN: AtomicUsize = AtomicUsize::new(0);
    /// A release is noted with this in place of a size.
    const FREE: u64 = u64::MAX;
    /// Requests below this are not noted: the host's bookkeeping (graph nodes, shapes, strings),
    /// which a GPU keeps in host memory and not in the device's pool, and which threads make at
    /// moments that vary with timing, so that noting them made one trial's replay differ from run
    /// to run by a 2 MiB segment. Tensors this small (a bias, a statistic) are left out with them:
    /// the quickstart at output stride 16 allocates 2.9 MiB fewer in the replay (198.4 MiB).
    pub const SMALLEST: usize = 4096;
    /// Requests aligned to this or more are not noted either: the matrix kernels' packing scratch
    /// (gemm's, 128-aligned; tensors are 64-aligned), which gemm sizes from the host's cache sizes
    /// and vector width. Noted, it made the host part of the answer: the quickstart's trial
    /// needed 248.0 MiB here and 266.0 MiB with the same CPU's L2 and L3 read as 2 and 8 MiB.
    pub const SCRATCH_ALIGN: usize = 128;

    /// Starts noting, with room for `events` (mapped lazily: pages the notes never reach cost
    /// nothing). Once only; later calls change nothing.
    pub fn record(events: usize) {
        if !BUF.load(Ordering::SeqCst).is_null() {
            return;
        }
        let bytes = events * 16;
        // SAFETY: an anonymous private mapping, never unmapped: the notes live as long as the
        // process.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return;
        }
        CAPACITY.store(events, Ordering::SeqCst);
        BUF.store(p.cast(), Ordering::SeqCst);
    }

    fn note(ptr: *mut u8, size: u64) {
        let buf = BUF.load(Ordering::Relaxed);
        if buf.is_null() {
            return;
        }
        let i = LEN.fetch_add(1, Ordering::Relaxed);
        if i < CAPACITY.load(Ordering::Relaxed) {
            // SAFETY: `i` is below the mapping's capacity, and each index is written once.
            unsafe {
                *buf.add(2 * i) = ptr as u64;
                *buf.add(2 * i + 1) = size;
            }
        }
    }

    /// Whether a request of `layout` is part of the stream (see [`SMALLEST`], [`SCRATCH_ALIGN`]).
    fn noted(layout: Layout) -> bool {
        layout.size() >= SMALLEST && layout.align() < SCRATCH_ALIGN
    }

    pub(super) fn note_alloc(ptr: *mut u8, layout: Layout) {
        if noted(layout) {
            note(ptr, layout.size() as u64);
        }
    }

    /// The release of a block of `layout` (left out where its request was).
    pub(super) fn note_free(ptr: *mut u8, layout: Layout) {
        if noted(layout) {
            note(ptr, FREE);
        }
    }

    /// Events noted so far.
    pub fn len() -> usize {
        LEN.load(Ordering::SeqCst)
    }

    /// The stream noted so far, or `None` when nothing was noted or the notes overflowed.
    pub fn stream() -> Option<Vec<Event>> {
        let buf = BUF.load(Ordering::SeqCst);
        let len = LEN.load(Ordering::SeqCst);
        if buf.is_null() || len > CAPACITY.load(Ordering::SeqCst) {
            return None;
        }
        let mut events = Vec::with_capacity(len);
        for i in 0..len {
            // SAFETY: every index below `len` lies within the mapping.
            let (id, size) = unsafe { (*buf.add(2 * i), *buf.add(2 * i + 1)) };
            events.push(match size {
                FREE => Event::Free { id },
                size => Event::Alloc { id, size },
            });
        }
        Some(events)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn digits_without_allocating() {
        let mut b = [0u8; 20];
        assert_eq!(super::digits(0, &mut b), b"0");
        assert_eq!(super::digits(1234567890123, &mut b), b"1234567890123");
        assert_eq!(
            super::digits(usize::MAX, &mut b),
            usize::MAX.to_string().as_bytes()
        );
    }
}
