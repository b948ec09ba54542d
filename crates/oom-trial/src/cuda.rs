//! The CUDA ceiling, in one of two ways (`CeilingBy`):
//!
//! - **Ballast**: before burn touches the device, allocate "ballast" so that exactly the ceiling is
//!   left to the trial, and the driver's own out-of-memory fires there. Measured on the H200: after
//!   `cuMemAlloc` of the free memory minus 8 GiB in 1 GiB chunks, `cuMemGetInfo` reported 8.00 GiB
//!   free and burn's allocations failed at that ceiling. The trial owns the GPU.
//! - **Cap**: the device's pools are PyTorch's caching allocator (the vendored cubecl-runtime, under
//!   the `pytorch` memory model), capped at the ceiling less the CUDA context, as PyTorch's
//!   `set_per_process_memory_fraction` caps its reserved bytes. Nothing else is held, so several
//!   trials share a GPU.

use crate::nvml::Gpu;
use crate::protocol::{Ceiling, CeilingBy};
use anyhow::{bail, Context, Result};
use cudarc::driver::result;
use std::sync::OnceLock;

const CHUNK: usize = 1 << 30;
/// More than a CUDA context takes (527 MiB on the H200): memory in use beyond
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
    /// Set under a cap: device use is read per process, from NVML.
    capped: Option<Gpu>,
}

/// The device's current memory pool (`cuDeviceGetMemPool`, as an address), which cubecl's
/// stream-ordered allocations come from.
static MEMPOOL: OnceLock<usize> = OnceLock::new();

/// Remembers the device's memory pool for [`settle`].
fn remember_mempool(dev: cudarc::driver::sys::CUdevice) {
    let mut pool: cudarc::driver::sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: `dev` is a valid device and `pool` a valid out-pointer.
    let r = unsafe { cudarc::driver::sys::cuDeviceGetMemPool(&mut pool, dev) };
    if r == cudarc::driver::sys::CUresult::CUDA_SUCCESS && !pool.is_null() {
        let _ = MEMPOOL.set(pool as usize);
    }
}

/// Makes the allocator's release-and-retry return the segments it released to the device before
/// it retries (`oom_bisect::Settle`), under either ceiling, as PyTorch's caching allocator does.
fn settle_before_retry(dev: cudarc::driver::sys::CUdevice) {
    remember_mempool(dev);
    cubecl_runtime::memory_management::oom_bisect::settle_with(settle);
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

/// What this process's CUDA context holds on device 0, as NVML accounts it: the primary context is
/// retained (until the process exits) and its memory read for this process alone.
pub fn own_context_bytes() -> Result<u64> {
    let (_, dev) = open_device()?;
    let gpu = nvml_of(dev)?;
    gpu.process_used(std::process::id())?
        .context("NVML does not list this process on its GPU (a PID namespace?)")
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
            capped: None,
        })
    }

    /// The ceiling as a cap on the allocator's reserved bytes (`CeilingBy::Cap`): the ceiling
    /// less this process's context, measured by NVML (other trials share the card).
    fn cap(ceiling: Ceiling) -> Result<CudaCeiling> {
        // Held until the trial's process ends, which frees its memory.
        std::mem::forget(crate::turns::take_turn(ceiling)?);
        let (name, dev) = open_device()?;
        let gpu = nvml_of(dev).context("a capped ceiling reads this process's device memory")?;
        let own = gpu.process_used(std::process::id())?.with_context(|| {
            "NVML does not list this process on its GPU (a PID namespace?), so its device memory \
             cannot be capped; run with --ceiling-by ballast"
        })?;
        let (free, total) = mem_info()?;
        // No ceiling: what is free now (on a shared card, it has the card alone).
        let ceiling_bytes = match ceiling {
            Ceiling::None => own + free,
            c => c.bytes(total),
        };
        check_room(&name, total, own, ceiling_bytes, OwnContext::Counted)?;
        if free < ceiling_bytes - own {
            bail!(
                "the GPU ({name}) has {} free, less than the {} this trial may still take: other \
                 processes hold memory on it. The trial did not run; it is not an out-of-memory",
                crate::units::fmt_bytes(free),
                crate::units::fmt_bytes(ceiling_bytes - own)
            );
        }
        settle_before_retry(dev);
        cubecl_runtime::memory_management::oom_bisect::set_cap(Some(ceiling_bytes - own));
        Ok(CudaCeiling {
            device_name: name,
            total_bytes: total,
            context_bytes: own,
            ceiling_bytes,
            ballast_bytes: 0,
            capped: Some(gpu),
        })
    }

    /// What the command beside a holder uses: the device's use less the ballast and the holder's
    /// own context.
    pub fn used_beside(&self) -> u64 {
        self.device_used().saturating_sub(self.context_bytes)
    }

    /// Device memory used by the trial and its context, ballast excluded.
    pub fn device_used(&self) -> u64 {
        if let Some(gpu) = &self.capped {
            return gpu
                .process_used(std::process::id())
                .ok()
                .flatten()
                .unwrap_or(0);
        }
        match mem_info() {
            Ok((free, total)) => (total - free).saturating_sub(self.ballast_bytes),
            Err(_) => 0,
        }
    }
}

/// Refuses a ceiling the device cannot give: larger than the card, on a card another process uses
/// (`used`: what is in use before the trial allocates; under a cap, this process's own use),
/// or not above the context that counts against it.
fn check_room(name: &str, total: u64, used: u64, ceiling: u64, context: OwnContext) -> Result<()> {
    if ceiling > total {
        bail!(
            "the ceiling ({}) is larger than the device ({name}, {})",
            crate::units::fmt_bytes(ceiling),
            crate::units::fmt_bytes(total)
        );
    }
    if used > FOREIGN_USE {
        bail!(
            "the GPU ({name}) has {} in use before this trial allocated anything: another \
             process holds memory on it (a leftover trial? `nvidia-smi --query-compute-apps=\
             pid,used_memory --format=csv` lists them). A ceiling needs the card to itself, so \
             this trial did not run; it is not an out-of-memory",
            crate::units::fmt_bytes(used)
        );
    }
    if context == OwnContext::Counted && ceiling <= used {
        bail!(
            "the ceiling ({}) is not above what the CUDA context already holds ({})",
            crate::units::fmt_bytes(ceiling),
            crate::units::fmt_bytes(used)
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
                crate::units::fmt_bytes(left as u64)
            )
        })?;
        left -= n;
    }
    Ok(bytes)
}
