//! oom-bisect's change to cubecl-runtime (see `vendor/README.md` in oom-bisect).
//!
//! - With `OOM_BISECT_MEMORY_MODEL=pytorch` in the environment, the pools mimic PyTorch's caching
//!   allocator where it decides the peak: its size classes ([`pytorch_pools`]) and its release of
//!   free cached blocks before an out-of-memory is reported (`MemoryManagement::alloc_or_release`).
//! - [`DEVICE_POOLS`]: what the device pools of this process hold, across every stream, and an
//!   optional cap. A trial that shares its GPU with other trials caps the device memory its process
//!   uses at its ceiling (a [`Probe`] measures it), so that a page past the ceiling is refused as
//!   the driver refuses one on a card of that size ([`Capped`] says how).

use super::{MemoryPoolOptions, PoolType};
use crate::server::IoError;
use crate::storage::{ComputeStorage, StorageHandle, StorageId};
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use cubecl_common::backtrace::BackTrace;
use cubecl_ir::MemoryDeviceProperties;

const MIB: u64 = 1024 * 1024;
/// Growth between two large size classes: at most 1/16 of a large request is padding. Public for
/// oom-bisect's search, which predicts a boundary from it (`oom_trial::pool_padding`).
pub const CLASS_RATIO: f64 = 1.0625;

/// The name cubecl-cuda gives the memory manager of device memory (`compute/stream.rs`); the
/// pinned host memory manager beside it is not counted against a device ceiling.
const DEVICE_MANAGER: &str = "Main GPU Memory";

/// Whether `OOM_BISECT_MEMORY_MODEL` asks for PyTorch's behaviour (read once per process).
#[cfg(feature = "std")]
pub fn pytorch() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("OOM_BISECT_MEMORY_MODEL").is_ok_and(|v| v == "pytorch"))
}

#[cfg(not(feature = "std"))]
pub fn pytorch() -> bool {
    false
}

/// PyTorch's layout (`c10/cuda/CUDACachingAllocator.cpp`): requests up to 1 MiB share 2 MiB
/// segments, up to 10 MiB share 20 MiB segments, larger ones get a segment of their own rounded
/// to 2 MiB. cubecl cannot split one large segment between tensors as PyTorch does, so each
/// large request gets its own page from a size class at most 1/16 above it; with free pages
/// released before a failure is reported, a class's leftovers never block a request.
pub(super) fn pytorch_pools(properties: &MemoryDeviceProperties) -> Vec<MemoryPoolOptions> {
    let align = |x: u64| x.next_multiple_of(properties.alignment);
    let mut pools = Vec::new();
    let mut add = |pool_type| {
        pools.push(MemoryPoolOptions {
            pool_type,
            dealloc_period: None,
        })
    };
    add(PoolType::ExclusivePages { max_alloc_size: 0 });
    add(PoolType::SlicedPages {
        page_size: align(2 * MIB),
        max_slice_size: align(MIB),
    });
    add(PoolType::SlicedPages {
        page_size: align(20 * MIB),
        max_slice_size: align(10 * MIB),
    });
    let (mut class, mut last) = (10.0 * MIB as f64, 0);
    let max_page = properties.max_page_size;
    while last < max_page {
        class *= CLASS_RATIO;
        let size = align((class as u64).next_multiple_of(2 * MIB)).min(max_page);
        if size > last {
            add(PoolType::ExclusivePages {
                max_alloc_size: size,
            });
            last = size;
        }
    }
    pools
}

/// Bytes held by a set of pools (every page they allocated and have not released), their peak,
/// and a cap that no page may take them past.
#[derive(Debug)]
pub struct Budget {
    cap: AtomicU64,
    held: AtomicU64,
    peak: AtomicU64,
    /// A [`Probe`] ([`Budget::measure_with`]), or null: the cap is then on what is held.
    probe: AtomicPtr<()>,
    /// A [`Settle`] ([`Budget::settle_with`]), or null.
    settle: AtomicPtr<()>,
}

/// Waits until the pages the pools released are back with the device: on CUDA, synchronise (the
/// stream-ordered frees complete) and trim the stream-ordered memory pool to nothing. PyTorch's
/// caching allocator does the same before its retry (`cudaFree` synchronises), so a request no
/// released block covers gets fresh memory instead of an out-of-memory.
pub type Settle = fn();

/// What the device says of this process now: (bytes it uses, context and everything included;
/// bytes of those its stream-ordered memory pool holds spare, released pages not yet returned to
/// the device).
pub type Probe = fn() -> (u64, u64);

/// The device pools of this process, across every stream and memory manager.
pub static DEVICE_POOLS: Budget = Budget::new(u64::MAX);

impl Budget {
    /// A budget with nothing held and the given cap (`u64::MAX`: none).
    pub const fn new(cap: u64) -> Budget {
        Budget {
            cap: AtomicU64::new(cap),
            held: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            probe: AtomicPtr::new(core::ptr::null_mut()),
            settle: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// Run `settle` after the pools released their free pages, before the allocation is retried.
    pub fn settle_with(&self, settle: Settle) {
        self.settle.store(settle as *mut (), Ordering::SeqCst);
    }

    fn settle(&self) -> Option<Settle> {
        let p = self.settle.load(Ordering::SeqCst);
        // SAFETY: the only non-null value stored is a `Settle` (`settle_with`).
        (!p.is_null()).then(|| unsafe { core::mem::transmute::<*mut (), Settle>(p) })
    }

    /// Measure the device with `probe` before each page instead of counting the pools' pages.
    pub fn measure_with(&self, probe: Probe) {
        self.probe.store(probe as *mut (), Ordering::SeqCst);
    }

    fn probe(&self) -> Option<Probe> {
        let p = self.probe.load(Ordering::SeqCst);
        // SAFETY: the only non-null value stored is a `Probe` (`measure_with`).
        (!p.is_null()).then(|| unsafe { core::mem::transmute::<*mut (), Probe>(p) })
    }

    /// Refuse pages that would take what is held past `bytes` (`u64::MAX`: no cap). Pages already
    /// held stay; the cap may move while the pools are in use.
    pub fn set_cap(&self, bytes: u64) {
        self.cap.store(bytes, Ordering::SeqCst);
    }

    /// The cap now (`u64::MAX`: none).
    pub fn cap(&self) -> u64 {
        self.cap.load(Ordering::SeqCst)
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::SeqCst)
    }

    /// Most bytes held at once.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::SeqCst)
    }

    fn hold(&self, size: u64) {
        let now = self.held.fetch_add(size, Ordering::SeqCst) + size;
        self.peak.fetch_max(now, Ordering::SeqCst);
    }

    fn release(&self, size: u64) {
        self.held.fetch_sub(size, Ordering::SeqCst);
    }
}

/// A storage whose pages count against a [`Budget`] (device memory only: see [`DEVICE_MANAGER`]).
/// A page the budget refuses fails as the driver's out-of-memory does (`IoError::BufferTooBig`),
/// so the memory manager's release-and-retry and the trial's classification see no difference.
///
/// With a probe, a page is admitted where the driver would give it on a card of the cap's size:
/// from a page this storage released that the stream-ordered pool still holds spare (the pool
/// reuses such a block for a request it covers, so the device gives nothing new), or else from the
/// device, when what the process uses plus the page stays within the cap. Spare blocks are
/// forgotten once the pool holds nothing spare (it returned them to the device at a
/// synchronisation).
pub(super) struct Capped<S> {
    inner: S,
    budget: Option<&'static Budget>,
    sizes: BTreeMap<StorageId, u64>,
    /// Pages released while the pool may still hold them spare (sizes).
    spare: Vec<u64>,
}

impl<S> Capped<S> {
    /// Counts against [`DEVICE_POOLS`] when `manager` is cubecl-cuda's device memory manager.
    pub(super) fn new(inner: S, manager: &str) -> Capped<S> {
        Capped::with_budget(inner, (manager == DEVICE_MANAGER).then_some(&DEVICE_POOLS))
    }

    pub(super) fn with_budget(inner: S, budget: Option<&'static Budget>) -> Capped<S> {
        Capped {
            inner,
            budget,
            sizes: BTreeMap::new(),
            spare: Vec::new(),
        }
    }

    /// Whether `budget` admits a page of `size` (see the type's documentation).
    fn admits(&mut self, budget: &Budget, size: u64) -> bool {
        let Some(probe) = budget.probe() else {
            return budget.held().saturating_add(size) <= budget.cap();
        };
        let (used, spare) = probe();
        if spare == 0 {
            self.spare.clear();
        }
        // The smallest spare block that covers the request; the pool keeps the rest of it.
        let fit = (0..self.spare.len())
            .filter(|&i| self.spare[i] >= size)
            .min_by_key(|&i| self.spare[i]);
        if let Some(i) = fit {
            let rest = self.spare.swap_remove(i) - size;
            if rest > 0 {
                self.spare.push(rest);
            }
            return true;
        }
        used.saturating_add(size) <= budget.cap()
    }

    pub(super) fn inner(&mut self) -> &mut S {
        &mut self.inner
    }
}

impl<S: ComputeStorage> Capped<S> {
    /// Makes the pages released since the last flush free on the device: cubecl's storages only
    /// queue a release until they flush, and the driver's pool keeps freed blocks until it
    /// synchronises ([`Settle`]). Once settled, the pool holds nothing spare.
    pub(super) fn release_now(&mut self) {
        self.inner.flush();
        if let Some(settle) = self.budget.and_then(Budget::settle) {
            settle();
            self.spare.clear();
        }
    }
}

impl<S: ComputeStorage> ComputeStorage for Capped<S> {
    type Resource = S::Resource;

    fn alignment(&self) -> usize {
        self.inner.alignment()
    }

    fn get(&mut self, handle: &StorageHandle) -> Self::Resource {
        self.inner.get(handle)
    }

    fn alloc(&mut self, size: u64) -> Result<StorageHandle, IoError> {
        let Some(budget) = self.budget else {
            return self.inner.alloc(size);
        };
        if !self.admits(budget, size) {
            return Err(IoError::BufferTooBig {
                size,
                backtrace: BackTrace::capture(),
            });
        }
        let handle = self.inner.alloc(size)?;
        budget.hold(size);
        self.sizes.insert(handle.id, size);
        Ok(handle)
    }

    fn dealloc(&mut self, id: StorageId) {
        if let (Some(budget), Some(size)) = (self.budget, self.sizes.remove(&id)) {
            budget.release(size);
            if budget.probe().is_some() {
                self.spare.push(size);
            }
        }
        self.inner.dealloc(id);
    }

    fn flush(&mut self) {
        self.inner.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::BytesStorage;

    const MIB: u64 = 1024 * 1024;
    static USED: AtomicU64 = AtomicU64::new(0);
    static SPARE: AtomicU64 = AtomicU64::new(0);

    /// Allocates and returns a 10 MiB page's id within the cap (the fake device holds nothing).
    fn page2_id(s: &mut Capped<BytesStorage>) -> StorageId {
        USED.store(0, Ordering::SeqCst);
        s.alloc(10 * MIB).unwrap().id
    }

    fn fake_device() -> (u64, u64) {
        (USED.load(Ordering::SeqCst), SPARE.load(Ordering::SeqCst))
    }

    /// Under a probe, a page comes from a released block the pool still holds when one covers it,
    /// else from the device within the cap; blocks are forgotten once the pool holds none spare.
    #[test]
    fn oom_bisect_cap_reuses_only_spare_blocks_that_cover_a_page() {
        let budget = alloc::boxed::Box::leak(alloc::boxed::Box::new(Budget::new(100 * MIB)));
        budget.measure_with(fake_device);
        let mut s = Capped::with_budget(BytesStorage::default(), Some(budget));
        let set = |used: u64, spare: u64| {
            USED.store(used * MIB, Ordering::SeqCst);
            SPARE.store(spare * MIB, Ordering::SeqCst);
        };
        set(0, 0);
        let page = s.alloc(30 * MIB).unwrap();
        set(90, 0);
        assert!(s.alloc(20 * MIB).is_err(), "90 + 20 MiB passes the 100 MiB cap");
        assert!(s.alloc(10 * MIB).is_ok(), "90 + 10 MiB is within it");
        s.dealloc(page.id);
        set(95, 30);
        assert!(s.alloc(20 * MIB).is_ok(), "the released 30 MiB block covers 20 MiB");
        assert!(s.alloc(20 * MIB).is_err(), "its 10 MiB rest does not cover 20 MiB");
        assert!(s.alloc(10 * MIB).is_ok(), "but covers 10 MiB");
        let id = page2_id(&mut s);
        s.dealloc(id);
        set(95, 0);
        assert!(
            s.alloc(10 * MIB).is_err(),
            "the pool returned its spare blocks: 95 + 10 MiB passes the cap"
        );
    }
}
