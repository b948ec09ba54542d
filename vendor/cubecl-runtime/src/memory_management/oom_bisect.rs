//! oom-bisect's change to cubecl-runtime (see `vendor/README.md` in oom-bisect).
//!
//! With `OOM_BISECT_MEMORY_MODEL=pytorch`, the device memory manager hands out memory as PyTorch's
//! caching allocator does: one [`TorchPool`], built on the `pytorch-allocator` crate (oom-bisect's
//! one statement of those rules), replaces cubecl's pools and its persistent pool. Besides:
//!
//! - every request and release is noted in order ([`stream`]), so that the trial can replay the
//!   same stream under any cap and say the smallest ceiling it fits under;
//! - a cap on the bytes reserved in segments ([`set_cap`]) refuses a segment before the device is
//!   asked, as PyTorch's per-process memory fraction does; a refusal by the device itself (a card
//!   filled with ballast) is `cudaMalloc`'s failure;
//! - before the allocator's one retry, the whole free segments it released are returned to the
//!   device ([`settle_with`]), as `release_cached_blocks` synchronises and frees;
//! - a block is freed in the order the program released it ([`next_task`]), not as threads
//!   happened to drop its last reference, so that the stream is the same in every run and on a
//!   virtual card (vendored cubecl-cuda) as on the GPU.

use super::memory_pool::{ManagedMemoryBinding, ManagedMemoryHandle, MemoryPool, Slice};
use super::{MemoryLocation, MemoryUsage};
use crate::server::IoError;
use crate::storage::{ComputeStorage, StorageHandle, StorageUtilization};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use cubecl_common::backtrace::BackTrace;
use cubecl_common::stub::Mutex;
use pytorch_allocator::{Allocator, BlockId, Device, Event, SegmentId};

/// The name cubecl-cuda gives the memory manager of device memory (`compute/stream.rs`); the
/// pinned host memory manager beside it keeps cubecl's own pools.
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

/// Whether the memory manager called `name` gets a [`TorchPool`].
pub(super) fn torch_pool_for(name: &str) -> bool {
    pytorch() && name == DEVICE_MANAGER
}

/// The cap on reserved bytes (`u64::MAX`: none).
static CAP: AtomicU64 = AtomicU64::new(u64::MAX);

/// Refuse any segment that would take the bytes reserved past `bytes` (`None`: no cap). Segments
/// already made stay.
pub fn set_cap(bytes: Option<u64>) {
    CAP.store(bytes.unwrap_or(u64::MAX), Ordering::SeqCst);
}

fn cap() -> Option<u64> {
    let cap = CAP.load(Ordering::SeqCst);
    (cap != u64::MAX).then_some(cap)
}

/// Makes the segments just released free on the device: on CUDA, synchronise (cubecl's frees are
/// stream-ordered) and trim the stream-ordered memory pool, as `cudaFree` does in PyTorch.
pub type Settle = fn();

static SETTLE: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Run `settle` after the allocator released its cached segments, before it retries.
pub fn settle_with(settle: Settle) {
    SETTLE.store(settle as *mut (), Ordering::SeqCst);
}

fn settle() {
    let p = SETTLE.load(Ordering::SeqCst);
    if !p.is_null() {
        // SAFETY: the only non-null value stored is a `Settle` (`settle_with`).
        unsafe { core::mem::transmute::<*mut (), Settle>(p)() }
    }
}

/// The task clock. The client submits tasks to the device's thread, which runs them in that order,
/// while the program drops tensors on its own thread: which drops a task's request sees depends on
/// how far the device's thread lags (a GPU's launches take time, a virtual card's none). So every
/// task is numbered as it is submitted, every release of a reference is stamped, and a block is
/// free for a task only if its last reference was released before that task in the program's own
/// order: `2n` after the client submitted `n` tasks, `2k - 1` on the device's thread during task
/// `k`; task `k` sees the releases stamped below `2k`.
static SUBMITTED: AtomicU64 = AtomicU64::new(0);

#[cfg(feature = "std")]
std::thread_local! {
    /// The task this thread runs (the device's thread), 0 elsewhere.
    static RUNNING: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

#[cfg(feature = "std")]
fn running() -> u64 {
    RUNNING.with(|r| r.get())
}

#[cfg(not(feature = "std"))]
fn running() -> u64 {
    0
}

/// The number of a task the client is about to submit.
pub fn next_task() -> u64 {
    SUBMITTED.fetch_add(1, Ordering::SeqCst) + 1
}
/// The device's thread starts task `k`.
pub fn enter_task(k: u64) {
    #[cfg(feature = "std")]
    RUNNING.with(|r| r.set(k));
    #[cfg(not(feature = "std"))]
    let _ = k;
}

/// Stamps a reference's release on the task clock: the latest release of a block is its own.
pub(crate) fn note_release(released: &AtomicU64) {
    let now = match running() {
        0 => 2 * SUBMITTED.load(Ordering::SeqCst),
        k => 2 * k - 1,
    };
    released.fetch_max(now, Ordering::SeqCst);
}

/// Whether a block whose last reference was released at `released` is free for the task running
/// now (outside a task: always).
fn released_before_now(released: u64) -> bool {
    match running() {
        0 => true,
        k => released < 2 * k,
    }
}

/// What the pools of this process were asked, in order.
struct Noted {
    events: Vec<Event>,
    next_id: u64,
    /// Pools (one per cubecl stream) that were asked for memory.
    pools: u32,
}

static NOTED: Mutex<Noted> = Mutex::new(Noted {
    events: Vec::new(),
    next_id: 0,
    pools: 0,
});

fn noted<R>(f: impl FnOnce(&mut Noted) -> R) -> R {
    let mut guard = NOTED
        .lock()
        .expect("the notes' lock is never poisoned: noting cannot panic");
    f(&mut guard)
}

/// The requests and releases noted so far, and how many pools (cubecl streams) made them.
pub fn stream() -> (Vec<Event>, u32) {
    noted(|n| (n.events.clone(), n.pools))
}

/// How many requests and releases were noted so far: a place in [`stream`].
pub fn stream_len() -> usize {
    noted(|n| n.events.len())
}

/// A convolution as cuDNN is asked about it (NCHW shapes, as PyTorch lays them out): `pass` 0 is
/// the forward pass (`x` in, `y` out), 1 the data gradient (`x` is dx), 2 the weight gradient
/// (`w` is dw); `dtype_bytes` 2 means f16 when `bf16` is false.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conv {
    /// 0 forward, 1 data gradient, 2 weight gradient.
    pub pass: u8,
    /// The input (its gradient in pass 1), `[N, C, H, W]`.
    pub x: [usize; 4],
    /// The weight (its gradient in pass 2), `[K, C / groups, R, S]`.
    pub w: [usize; 4],
    /// The output (its gradient in passes 1 and 2), `[N, K, P, Q]`.
    pub y: [usize; 4],
    /// Stride of the filter.
    pub stride: [usize; 2],
    /// Padding on each side.
    pub padding: [usize; 2],
    /// Dilation of the filter.
    pub dilation: [usize; 2],
    /// Groups.
    pub groups: usize,
    /// Bytes per element: 8, 4 or 2.
    pub dtype_bytes: u8,
    /// With 2 bytes: bfloat16 (else float16).
    pub bf16: bool,
}

/// What the trial answers for a convolution: the workspace of each engine PyTorch would try, in
/// its order (empty: none known).
pub type Workspaces = fn(&Conv) -> Vec<u64>;

#[cfg(feature = "std")]
static WORKSPACES: std::sync::OnceLock<Workspaces> = std::sync::OnceLock::new();

/// Installs the trial's answer for convolution workspaces (once per process).
#[cfg(feature = "std")]
pub fn set_workspaces(f: Workspaces) {
    let _ = WORKSPACES.set(f);
}

/// The workspace request the next device request is (see [`conv_workspace`]): its plan and the
/// workspace of each engine.
#[cfg(feature = "std")]
static PENDING: std::sync::Mutex<Option<(u64, Vec<u64>)>> = std::sync::Mutex::new(None);

/// A convolution's workspace request: the bytes its handle stands for, the plan, and the
/// workspace of each engine in PyTorch's order.
pub struct WorkspaceRequest {
    /// The first engine's workspace (at least 1 byte: a handle holds a block).
    pub bytes: u64,
    /// The convolution, hashed: cuDNN's engine list is a function of it.
    pub plan: u64,
    /// The workspace of each engine.
    pub sizes: Vec<u64>,
}

/// Called by the vendored burn-cubecl once a convolution's output exists, where PyTorch's cuDNN
/// path asks its caching allocator for the workspace: the request to hand to
/// `ComputeClient::oom_bisect_workspace`, which asks the device for it in the program's order
/// (on the device's thread, among the other requests), the pool noting it and serving it engine
/// after engine as PyTorch does ([`TorchPool`]). `None`: nothing to ask (no answer installed, or
/// no engine known).
#[cfg(feature = "std")]
pub fn conv_workspace(conv: &Conv) -> Option<WorkspaceRequest> {
    let answer = WORKSPACES.get()?;
    let sizes = answer(conv);
    let first = *sizes.first()?;
    let plan = {
        use core::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        conv.hash(&mut h);
        h.finish()
    };
    Some(WorkspaceRequest {
        bytes: first.max(1),
        plan,
        sizes,
    })
}

/// Makes the device request about to be served on this (the device's) thread the workspace
/// request `(plan, sizes)`: set and taken within one task of the device's thread.
#[cfg(feature = "std")]
pub(crate) fn set_pending_workspace(plan: u64, sizes: Vec<u64>) {
    *PENDING.lock().unwrap_or_else(|e| e.into_inner()) = Some((plan, sizes));
}

/// The workspace request the caller of [`conv_workspace`] is making now, if it is one.
fn pending_workspace() -> Option<(u64, Vec<u64>)> {
    #[cfg(feature = "std")]
    return PENDING.lock().unwrap_or_else(|e| e.into_inner()).take();
    #[cfg(not(feature = "std"))]
    None
}

/// PyTorch's caching allocator as a cubecl pool: a segment is a page of the storage, a block a
/// slice of it. A slice's location is (segment, block). A block whose handles are all dropped is
/// freed when the pool is next asked for memory, before the request: the allocator sees the same
/// state as if it had been freed at the drop.
pub(super) struct TorchPool {
    allocator: Allocator,
    /// The storage of each live segment, by segment index.
    segments: Vec<Option<StorageHandle>>,
    /// The slice of each block handed out, by block index.
    slices: Vec<Option<Slice>>,
    /// Blocks handed out, with the id their request was noted under.
    live: Vec<(BlockId, u64)>,
    location: MemoryLocation,
    /// Bytes asked for by the blocks handed out (each block may be larger).
    in_use: u64,
    asked: bool,
    /// The engine each convolution plan's workspace was last served for (PyTorch's plan cache).
    plans: alloc::collections::BTreeMap<u64, u32>,
}

/// The device under the allocator: the storage, where each segment is one page.
struct OnStorage<'a, S> {
    storage: &'a mut S,
    segments: &'a mut Vec<Option<StorageHandle>>,
}

impl<S: ComputeStorage> Device for OnStorage<'_, S> {
    fn allocate(&mut self, segment: SegmentId, size: u64) -> bool {
        let Ok(handle) = self.storage.alloc(size) else {
            return false;
        };
        let i = segment.index();
        if self.segments.len() <= i {
            self.segments.resize(i + 1, None);
        }
        self.segments[i] = Some(handle);
        true
    }

    fn release(&mut self, segment: SegmentId) {
        if let Some(handle) = self.segments[segment.index()].take() {
            self.storage.dealloc(handle.id);
        }
    }

    fn released(&mut self) {
        self.storage.flush();
        settle();
    }
}

impl TorchPool {
    pub(super) fn new(pool_pos: u8) -> TorchPool {
        TorchPool {
            allocator: Allocator::new(None),
            segments: Vec::new(),
            slices: Vec::new(),
            live: Vec::new(),
            location: MemoryLocation::new(pool_pos, 0, 0),
            in_use: 0,
            asked: false,
            plans: alloc::collections::BTreeMap::new(),
        }
    }

    /// Frees the blocks whose handles were all dropped, noting each release.
    fn free_dropped(&mut self) {
        let mut i = 0;
        while i < self.live.len() {
            let (block, id) = self.live[i];
            let slice = self.slices[block.index()]
                .as_ref()
                .expect("a live block has a slice");
            if !slice.is_free() || !released_before_now(slice.handle.descriptor().released()) {
                i += 1;
                continue;
            }
            self.in_use -= slice.storage.size();
            self.slices[block.index()] = None;
            self.allocator.free(block);
            self.live.swap_remove(i);
            noted(|n| n.events.push(Event::Free { id }));
        }
    }

    /// `malloc` on `storage`: a block of `size` bytes as PyTorch's allocator places it, or, for a
    /// convolution's workspace request ([`conv_workspace`]), the first engine's workspace it can
    /// serve.
    fn malloc<S: ComputeStorage>(
        &mut self,
        storage: &mut S,
        size: u64,
    ) -> Result<ManagedMemoryHandle, IoError> {
        self.free_dropped();
        let workspace = pending_workspace();
        let id = noted(|n| {
            n.pools += u32::from(!self.asked);
            n.next_id += 1;
            let id = n.next_id;
            match &workspace {
                None => n.events.push(Event::Alloc { id, size }),
                Some((plan, sizes)) => {
                    n.events
                        .extend(sizes.iter().enumerate().map(|(engine, &size)| {
                            Event::Workspace {
                                id,
                                size,
                                plan: *plan,
                                engine: engine as u32,
                            }
                        }))
                }
            }
            id
        });
        self.asked = true;
        self.allocator.set_cap(cap());
        let (block, size) = match workspace {
            None => (self.place(storage, size)?, size),
            Some((plan, sizes)) => self.workspace(storage, plan, &sizes)?,
        };
        Ok(self.hand_out(block, size, id))
    }

    /// A block of `size` from the allocator, or the device's refusal as an error.
    fn place<S: ComputeStorage>(
        &mut self,
        storage: &mut S,
        size: u64,
    ) -> Result<pytorch_allocator::Block, IoError> {
        let mut device = OnStorage {
            storage,
            segments: &mut self.segments,
        };
        self.allocator
            .malloc(size, &mut device)
            .map_err(|oom| IoError::BufferTooBig {
                size: oom.requested,
                backtrace: BackTrace::capture(),
            })
    }

    /// A workspace as the replay serves `Event::Workspace` (`pytorch_allocator::replay`): the
    /// engine kept for `plan` first, then each engine in order, a failure (after the allocator's
    /// release and retry) the next engine's turn. An engine without a workspace takes the
    /// smallest block, as a handle must hold one (PyTorch's takes nothing).
    fn workspace<S: ComputeStorage>(
        &mut self,
        storage: &mut S,
        plan: u64,
        sizes: &[u64],
    ) -> Result<(pytorch_allocator::Block, u64), IoError> {
        let kept = self.plans.get(&plan).map(|&e| e as usize);
        if let Some(e) = kept.filter(|&e| e < sizes.len()) {
            if let Ok(block) = self.place(storage, sizes[e].max(1)) {
                return Ok((block, sizes[e].max(1)));
            }
            self.plans.remove(&plan);
        }
        let mut last = None;
        for (engine, &size) in sizes.iter().enumerate() {
            match self.place(storage, size.max(1)) {
                Ok(block) => {
                    self.plans.insert(plan, engine as u32);
                    return Ok((block, size.max(1)));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(IoError::BufferTooBig {
            size: 0,
            backtrace: BackTrace::capture(),
        }))
    }

    /// The handle of `block`, `size` bytes of it asked for under `id`.
    fn hand_out(&mut self, block: pytorch_allocator::Block, size: u64, id: u64) -> ManagedMemoryHandle {
        let segment = self.segments[block.segment.index()]
            .as_ref()
            .expect("a block's segment has its storage");
        let slice = Slice::new(
            StorageHandle {
                id: segment.id,
                utilization: StorageUtilization {
                    offset: block.offset,
                    size,
                },
            },
            block.size - size,
        );
        let mut location = self.location;
        location.page = block.segment.index() as u16;
        location.slice = block.id.index() as u32;
        slice.handle.descriptor().update_location(location);
        let handle = slice.handle.clone();
        if self.slices.len() <= block.id.index() {
            self.slices.resize_with(block.id.index() + 1, || None);
        }
        self.slices[block.id.index()] = Some(slice);
        self.live.push((block.id, id));
        self.in_use += size;
        handle
    }

    fn slice(&self, binding: &ManagedMemoryBinding) -> Result<&Slice, IoError> {
        let i = binding.descriptor().slice();
        self.slices
            .get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| IoError::NotFound {
                backtrace: BackTrace::capture(),
                reason: alloc::format!("Memory block {i} doesn't exist").into(),
            })
    }
}

impl MemoryPool for TorchPool {
    fn accept(&self, _size: u64) -> bool {
        true
    }

    fn bind(
        &mut self,
        reserved: ManagedMemoryHandle,
        assigned: ManagedMemoryHandle,
        cursor: u64,
    ) -> Result<(), IoError> {
        let i = reserved.descriptor().slice();
        let slice = self
            .slices
            .get_mut(i)
            .and_then(Option::as_mut)
            .ok_or_else(|| IoError::NotFound {
                backtrace: BackTrace::capture(),
                reason: alloc::format!("Memory block {i} doesn't exist").into(),
            })?;
        assigned
            .descriptor()
            .update_location(reserved.descriptor().location());
        slice.handle = assigned;
        slice.cursor = cursor;
        Ok(())
    }

    fn find(&self, binding: &ManagedMemoryBinding) -> Result<&Slice, IoError> {
        self.slice(binding)
    }

    /// Never: the allocator decides in one step whether a free block or a new segment serves a
    /// request ([`MemoryPool::alloc`]).
    fn try_reserve(&mut self, _size: u64) -> Option<ManagedMemoryHandle> {
        None
    }

    fn alloc<Storage: ComputeStorage>(
        &mut self,
        storage: &mut Storage,
        size: u64,
    ) -> Result<ManagedMemoryHandle, IoError> {
        self.malloc(storage, size)
    }

    fn get_memory_usage(&self) -> MemoryUsage {
        let stats = self.allocator.stats();
        MemoryUsage {
            number_allocs: self.live.len() as u64,
            bytes_in_use: self.in_use,
            bytes_padding: stats.allocated - self.in_use,
            bytes_reserved: stats.reserved,
        }
    }

    /// Only an explicit cleanup (`torch.cuda.empty_cache()`) gives whole free segments back;
    /// PyTorch's allocator keeps its cache otherwise.
    fn cleanup<Storage: ComputeStorage>(
        &mut self,
        storage: &mut Storage,
        _alloc_nr: u64,
        explicit: bool,
    ) {
        if explicit {
            self.free_dropped();
            self.allocator.empty_cache(&mut OnStorage {
                storage,
                segments: &mut self.segments,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::BytesStorage;

    const MIB: u64 = 1024 * 1024;

    /// The notes are the process's: one test at a time counts them.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// The pool places blocks where the allocator does, frees a block once its handle is dropped,
    /// notes the stream, and under a cap releases a whole free segment before it fails.
    #[test]
    fn oom_bisect_torch_pool_follows_the_allocator_and_notes_its_stream() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let (mut pool, mut storage) = (TorchPool::new(0), BytesStorage::default());
        let before = stream_len();
        let a = pool.alloc(&mut storage, 30 * MIB).unwrap();
        let b = pool.alloc(&mut storage, 12 * MIB).unwrap();
        assert_eq!(pool.get_memory_usage().bytes_reserved, 42 * MIB);
        drop(a);
        set_cap(Some(44 * MIB));
        let c = pool.alloc(&mut storage, 31 * MIB).unwrap();
        assert_eq!(pool.allocator.stats().retries, 1, "30 MiB released for 32");
        assert_eq!(pool.get_memory_usage().bytes_reserved, 44 * MIB);
        assert!(
            pool.alloc(&mut storage, 4 * MIB).is_err(),
            "a 20 MiB segment is past the cap"
        );
        set_cap(None);
        let binding = c.clone().binding();
        assert_eq!(pool.find(&binding).unwrap().storage.size(), 31 * MIB);
        drop((b, c, binding));
        let (events, _) = stream();
        assert_eq!(
            events.len() - before,
            5,
            "four requests, and the release of `a`"
        );
        assert!(matches!(events[before + 2], Event::Free { .. }));
    }

    /// A workspace request is noted as its engines and served as the replay serves it: under a
    /// cap the first engine's workspace gives way to the second's, which is then kept for the plan.
    #[test]
    fn oom_bisect_a_workspace_request_tries_the_engines_in_order() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let (mut pool, mut storage) = (TorchPool::new(0), BytesStorage::default());
        let held = pool.alloc(&mut storage, 30 * MIB).unwrap();
        // 64 MiB more is past the cap; 4 MiB takes a 20 MiB segment, which fits.
        set_cap(Some(60 * MIB));
        let before = stream_len();
        set_pending_workspace(9, alloc::vec![64 * MIB, 4 * MIB, 0]);
        let ws = pool.alloc(&mut storage, 64 * MIB).unwrap();
        assert_eq!(pool.find(&ws.clone().binding()).unwrap().storage.size(), 4 * MIB);
        drop(ws);
        set_pending_workspace(9, alloc::vec![64 * MIB, 4 * MIB, 0]);
        let again = pool.alloc(&mut storage, 64 * MIB).unwrap();
        let retries = pool.allocator.stats().retries;
        assert_eq!(retries, 1, "the kept engine is served without trying the first again");
        set_cap(None);
        drop((again, held));
        let (events, _) = stream();
        let engines: Vec<u64> = events[before..]
            .iter()
            .filter_map(|e| match *e {
                Event::Workspace { size, plan: 9, .. } => Some(size),
                _ => None,
            })
            .collect();
        assert_eq!(engines, [64 * MIB, 4 * MIB, 0, 64 * MIB, 4 * MIB, 0]);
        let replayed = pytorch_allocator::replay(events[before..].iter(), Some(30 * MIB));
        assert!(replayed.fits(), "the replay serves the second engine too");
    }

    /// A block the program released after submitting a task is not free for that task, however
    /// late the device's thread runs it, and is for the next: the order of the stream is the
    /// program's, not the threads'.
    #[test]
    fn oom_bisect_a_block_is_freed_in_the_programs_order() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let (mut pool, mut storage) = (TorchPool::new(0), BytesStorage::default());
        let a = pool.alloc(&mut storage, 12 * MIB).unwrap();
        let late = next_task();
        // Released on the program's thread after task `late` was submitted...
        drop(a);
        // ...which the device's thread runs only now: its request must not reuse `a`'s block.
        enter_task(late);
        let before = stream_len();
        let b = pool.alloc(&mut storage, 12 * MIB).unwrap();
        let (events, _) = stream();
        assert!(
            matches!(events[before..], [Event::Alloc { .. }]),
            "no release before the request"
        );
        assert_eq!(pool.get_memory_usage().bytes_reserved, 24 * MIB, "a second segment");
        enter_task(next_task());
        let c = pool.alloc(&mut storage, 12 * MIB).unwrap();
        let (events, _) = stream();
        assert!(matches!(events[before + 1], Event::Free { .. }), "released before this task");
        enter_task(0);
        drop((b, c));
    }
}
