//! The CUDA ceiling, in one of two ways (`CeilingBy`):
//!
//! - **Ballast**: before burn touches the device, allocate "ballast" so that exactly the ceiling is
//!   left to the trial, and the driver's own out-of-memory fires there. Measured on the H200: after
//!   `cuMemAlloc` of the free memory minus 8 GiB in 1 GiB chunks, `cuMemGetInfo` reported 8.00 GiB
//!   free and burn's allocations failed at that ceiling (docs/gpu-results.md). The trial owns the GPU.
//! - **Cap**: the vendored cubecl-runtime refuses a page when the device memory this process uses
//!   (NVML's per-process figure: context, loaded kernels and pools) plus the page would pass the
//!   ceiling, and reports it as the driver's out-of-memory. Nothing else is held, so several
//!   trials share a GPU.

use crate::nvml::Gpu;
use crate::protocol::{Ceiling, CeilingBy};
use anyhow::{bail, Context, Result};
use cudarc::driver::result;
use std::sync::OnceLock;

const CHUNK: usize = 1 << 30;
/// More than a CUDA context takes (527 MiB on the H200, docs/gpu-results.md): memory in use beyond
/// this before the trial allocates is another process's, e.g. a trial left running.
const FOREIGN_USE: u64 = 2 << 30;

/// The device after the ballast is in place.
pub struct CudaCeiling {
    pub device_name: String,
    pub total_bytes: u64,
    /// What the device held before the trial (our context, other processes).
    pub context_bytes: u64,
    pub ceiling_bytes: u64,
    ballast_bytes: u64,
    /// Set under a cap: device use is read per process.
    capped: bool,
}

/// The GPU a capped trial runs on, for the allocator's probe (a plain `fn`, so statics).
static CAPPED_GPU: OnceLock<Gpu> = OnceLock::new();
/// The device's current memory pool (`cuDeviceGetMemPool`, as an address), which cubecl's
/// stream-ordered allocations come from.
static MEMPOOL: OnceLock<usize> = OnceLock::new();

/// Bytes the stream-ordered memory pool holds but has no allocation in: pages cubecl released,
/// which the pool may reuse for the next allocation on the stream, and returns to the device at
/// the next synchronisation. NVML counts them as the process's.
fn mempool_spare() -> u64 {
    use cudarc::driver::sys::{cuMemPoolGetAttribute, CUmemPool_attribute as A};
    let Some(&pool) = MEMPOOL.get() else {
        return 0;
    };
    let read = |attr| {
        let mut v: u64 = 0;
        // SAFETY: `pool` is the device's memory pool (it lives as long as the device); the
        // attribute is a 64-bit counter written to `v`.
        let r = unsafe { cuMemPoolGetAttribute(pool as _, attr, (&mut v as *mut u64).cast()) };
        (r == cudarc::driver::sys::CUresult::CUDA_SUCCESS).then_some(v)
    };
    match (
        read(A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
        read(A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
    ) {
        (Some(reserved), Some(used)) => reserved.saturating_sub(used),
        _ => 0,
    }
}

/// The device memory this process uses: NVML's per-process figure (context, loaded kernels, pages,
/// the memory pool's spare). `u64::MAX` (refuse every page) when it cannot be read, so that a
/// capped trial never grows past a ceiling it cannot see.
fn process_used() -> u64 {
    let Some(gpu) = CAPPED_GPU.get() else {
        return u64::MAX;
    };
    match gpu.process_used(std::process::id()) {
        Ok(Some(b)) => b,
        _ => u64::MAX,
    }
}

/// The allocator's probe under a cap (`oom_bisect::Probe`).
fn device_now() -> (u64, u64) {
    (process_used(), mempool_spare())
}

/// Remembers the device's memory pool for [`mempool_spare`].
fn remember_mempool(dev: cudarc::driver::sys::CUdevice) {
    let mut pool: cudarc::driver::sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: `dev` is a valid device and `pool` a valid out-pointer.
    let r = unsafe { cudarc::driver::sys::cuDeviceGetMemPool(&mut pool, dev) };
    if r == cudarc::driver::sys::CUresult::CUDA_SUCCESS && !pool.is_null() {
        let _ = MEMPOOL.set(pool as usize);
    }
}

/// Makes the allocator's release-and-retry return released pages to the device before it retries
/// (`oom_bisect::Settle`), under either ceiling, as PyTorch's caching allocator does.
fn settle_before_retry(dev: cudarc::driver::sys::CUdevice) {
    remember_mempool(dev);
    cubecl_runtime::memory_management::oom_bisect::DEVICE_POOLS.settle_with(settle);
}

/// The frees cubecl queued on its streams complete, and the memory pool hands every block it holds
/// spare back to the device. Runs on cubecl's device thread, where the context is current.
fn settle() {
    // SAFETY: plain driver calls; `MEMPOOL` holds the device's pool, which lives as long as it.
    unsafe {
        let _ = cudarc::driver::sys::cuCtxSynchronize();
        if let Some(&pool) = MEMPOOL.get() {
            let _ = cudarc::driver::sys::cuMemPoolTrimTo(pool as _, 0);
        }
    }
}

/// Whether a CUDA driver and at least one device are present.
pub fn probe() -> Result<String> {
    // cudarc panics when it cannot load the driver; ask first.
    // SAFETY: only tries to load the shared library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        bail!("no CUDA driver: libcuda.so could not be loaded");
    }
    result::init().context("no CUDA driver (libcuda.so.1) could be initialised")?;
    let n = result::device::get_count().context("could not count CUDA devices")?;
    if n < 1 {
        bail!("the CUDA driver reports no device");
    }
    let dev = result::device::get(0).context("could not open CUDA device 0")?;
    result::device::get_name(dev).context("could not read the device name")
}

/// Reads `(free, total)` of the current context's device.
pub fn mem_info() -> Result<(u64, u64)> {
    let (free, total) = result::mem_get_info().context("cuMemGetInfo failed")?;
    Ok((free as u64, total as u64))
}

/// Device 0 with its primary context (the one burn's CUDA runtime uses) retained for the life of
/// the process and current on this (the main) thread, as cubecl-cuda does; its name.
fn open_device() -> Result<(String, cudarc::driver::sys::CUdevice)> {
    let name = probe()?;
    let dev = result::device::get(0).context("could not open CUDA device 0")?;
    // SAFETY: `dev` is a valid device from `device::get`; the context is never released.
    unsafe {
        let ctx =
            result::primary_ctx::retain(dev).context("could not retain the primary context")?;
        result::ctx::set_current(ctx).context("could not make the primary context current")?;
    }
    Ok((name, dev))
}

/// NVML's view of a CUDA device (the same card, found by its UUID).
fn nvml_of(dev: cudarc::driver::sys::CUdevice) -> Result<Gpu> {
    let uuid = result::device::get_uuid(dev).context("could not read the device's UUID")?;
    Gpu::by_uuid(&uuid.bytes.map(|b| b as u8))
}

/// Device 0 (the trial's, through `CUDA_VISIBLE_DEVICES`) as NVML sees it, with its name, and no
/// CUDA context made: a holder that makes none leaves the whole card to its command.
pub fn nvml_device() -> Result<(String, Gpu)> {
    let name = probe()?;
    let dev = result::device::get(0).context("could not open CUDA device 0")?;
    Ok((name, nvml_of(dev)?))
}

/// Whose CUDA context the ceiling includes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnContext {
    /// The trial's own (a burn trial): it would exist on the smaller card too, so it counts.
    Counted,
    /// A holder's, beside the command that really trains (`--exec`): that context would not exist
    /// on the smaller card, so the ballast leaves the whole ceiling free beside it.
    Excluded,
}

impl CudaCeiling {
    /// Retains the primary context (the one burn's CUDA runtime uses), and takes ballast so that the
    /// device looks like a card of the requested size: what is used already (the context) counts
    /// against the ceiling as it would on that card, unless it is a holder's (`OwnContext::Excluded`).
    /// Refuses a card another process already uses.
    pub fn install(ceiling: Ceiling, context: OwnContext, by: CeilingBy) -> Result<CudaCeiling> {
        if by == CeilingBy::Cap {
            return Self::cap(ceiling);
        }
        let (name, dev) = open_device()?;
        settle_before_retry(dev);
        let (free, total) = mem_info()?;
        let used = total - free;
        let ceiling_bytes = ceiling.bytes(total);
        check_room(&name, total, used, ceiling_bytes, context)?;
        // What must stay free: the ceiling, less the context where it counts.
        let left_free = match context {
            OwnContext::Counted => ceiling_bytes - used,
            OwnContext::Excluded => ceiling_bytes.min(free),
        };
        let ballast = reserve(free - left_free)?;
        Ok(CudaCeiling {
            device_name: name,
            total_bytes: total,
            context_bytes: used,
            // Beside a holder, a ceiling near the card's size is cut by the holder's context.
            ceiling_bytes: match context {
                OwnContext::Counted => ceiling_bytes,
                OwnContext::Excluded => left_free,
            },
            ballast_bytes: ballast,
            capped: false,
        })
    }

    /// The ceiling as a cap in the allocator (`CeilingBy::Cap`), the context measured by NVML.
    fn cap(ceiling: Ceiling) -> Result<CudaCeiling> {
        let (name, dev) = open_device()?;
        let gpu = nvml_of(dev).context("a capped ceiling reads this process's device memory")?;
        let own = gpu.process_used(std::process::id())?.with_context(|| {
            "NVML does not list this process on its GPU (a PID namespace?), so its device memory \
             cannot be capped; run with --ceiling-by ballast"
        })?;
        let (free, total) = mem_info()?;
        // No ceiling on a shared card: what is free now is what this trial can have.
        let ceiling_bytes = match ceiling {
            Ceiling::None => own + free,
            c => c.bytes(total),
        };
        check_room(&name, total, own, ceiling_bytes, OwnContext::Counted)?;
        if free < ceiling_bytes - own {
            bail!(
                "the GPU ({name}) has {} free, less than the {} this trial may still take: other \
                 processes hold memory on it. The trial did not run; it is not an out-of-memory",
                crate::fmt_bytes(free),
                crate::fmt_bytes(ceiling_bytes - own)
            );
        }
        let _ = CAPPED_GPU.set(gpu);
        settle_before_retry(dev);
        let pools = &cubecl_runtime::memory_management::oom_bisect::DEVICE_POOLS;
        pools.measure_with(device_now);
        pools.set_cap(ceiling_bytes);
        Ok(CudaCeiling {
            device_name: name,
            total_bytes: total,
            context_bytes: own,
            ceiling_bytes,
            ballast_bytes: 0,
            capped: true,
        })
    }

    /// What the command beside a holder uses: the device's use less the ballast and the holder's
    /// own context.
    pub fn used_beside(&self) -> u64 {
        self.device_used().saturating_sub(self.context_bytes)
    }

    /// Device memory used by the trial and its context, ballast excluded.
    pub fn device_used(&self) -> u64 {
        if self.capped {
            return process_used();
        }
        match mem_info() {
            Ok((free, total)) => (total - free).saturating_sub(self.ballast_bytes),
            Err(_) => 0,
        }
    }

    /// Why a reading of `used` bytes is past the ceiling although no page was refused, with what
    /// the process held then (`None` when it is within the ceiling).
    pub fn past(&self, used: u64) -> Option<String> {
        // Every reading asks: the pools and the driver only once past the ceiling.
        if used <= self.ceiling_bytes {
            return None;
        }
        let pools = self.capped.then(|| {
            let held = cubecl_runtime::memory_management::oom_bisect::DEVICE_POOLS.held();
            (held, mempool_spare())
        });
        past_ceiling(used, self.ceiling_bytes, self.context_bytes, pools)
    }
}

/// The error of a trial whose device reading went past its ceiling without a page refused: it
/// measured nothing a card of that size would allow (never a fit, never an out-of-memory: which
/// of a late page or a kernel loaded after the last page took it over cannot be told here, and a
/// card of that size would retry the one and refuse the other). Under the cap, what the process
/// held at that reading, for the reader who has to tell: `pools` is (bytes of pool pages, bytes
/// the stream's pool held spare).
fn past_ceiling(
    used: u64,
    ceiling: u64,
    context: u64,
    pools: Option<(u64, u64)>,
) -> Option<String> {
    use crate::fmt_bytes as b;
    if used <= ceiling {
        return None;
    }
    if used == u64::MAX {
        return Some(
            "NVML could not read this process's device memory: its ceiling was not kept".into(),
        );
    }
    let held = match pools {
        Some((pages, spare)) => format!(
            " (at the first reading past it: {} of pool pages, {} spare in the stream's pool, {} \
             outside them against a {} context at the start)",
            b(pages),
            b(spare),
            b(used.saturating_sub(pages + spare)),
            b(context)
        ),
        None => " (another process's memory on the card?)".into(),
    };
    Some(format!(
        "the trial's device memory read {}, more than its ceiling ({}), without an \
         out-of-memory: it measured nothing a card of that size would allow{held}",
        b(used),
        b(ceiling)
    ))
}

/// Refuses a ceiling the device cannot give: larger than the card, on a card another process uses
/// (`used`: what is in use before the trial allocates; under a cap, this process's own use),
/// or not above the context that counts against it.
fn check_room(name: &str, total: u64, used: u64, ceiling: u64, context: OwnContext) -> Result<()> {
    if ceiling > total {
        bail!(
            "the ceiling ({}) is larger than the device ({name}, {})",
            crate::fmt_bytes(ceiling),
            crate::fmt_bytes(total)
        );
    }
    if used > FOREIGN_USE {
        bail!(
            "the GPU ({name}) has {} in use before this trial allocated anything: another \
             process holds memory on it (a leftover trial? `nvidia-smi --query-compute-apps=\
             pid,used_memory --format=csv` lists them). A ceiling needs the card to itself, so \
             this trial did not run; it is not an out-of-memory",
            crate::fmt_bytes(used)
        );
    }
    if context == OwnContext::Counted && ceiling <= used {
        bail!(
            "the ceiling ({}) is not above what the CUDA context already holds ({})",
            crate::fmt_bytes(ceiling),
            crate::fmt_bytes(used)
        );
    }
    Ok(())
}

/// Allocates `bytes` of ballast in 1 GiB chunks that are never freed nor accessed: they only hold
/// memory until the process exits, which frees them. Returns what was reserved.
fn reserve(bytes: u64) -> Result<u64> {
    let mut left = bytes as usize;
    while left > 0 {
        let n = left.min(CHUNK);
        // SAFETY: a plain device allocation, never freed nor accessed (see above).
        unsafe { result::malloc_sync(n) }.with_context(|| {
            format!(
                "could not reserve ballast ({} left to reserve)",
                crate::fmt_bytes(left as u64)
            )
        })?;
        left -= n;
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    /// A reading past the ceiling is an error that says what the process held outside its pools
    /// (a late kernel load or a page; the next GPU run's logs tell which).
    #[test]
    fn a_reading_past_the_ceiling_says_what_was_held() {
        let (ceiling, context) = (24 * GIB, 600 * MIB);
        assert_eq!(
            past_ceiling(ceiling, ceiling, context, Some((GIB, 0))),
            None
        );
        let m = past_ceiling(ceiling + 15 * MIB, ceiling, context, Some((23 * GIB, 0))).unwrap();
        assert!(
            m.contains("read 24.01 GiB, more than its ceiling (24.00 GiB)"),
            "{m}"
        );
        assert!(
            m.contains("1.01 GiB outside them against a 600.0 MiB context"),
            "{m}"
        );
        let m = past_ceiling(u64::MAX, ceiling, context, Some((GIB, 0))).unwrap();
        assert!(m.contains("NVML could not read"), "{m}");
    }
}
