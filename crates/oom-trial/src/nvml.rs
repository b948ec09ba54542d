//! NVML, loaded at run time (`libnvidia-ml.so.1`, part of the driver): the device memory one process
//! uses, which `cuMemGetInfo` cannot give once several trials share a GPU, and a device's free
//! memory without creating a CUDA context.

use anyhow::{bail, Context, Result};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

type Device = *mut c_void;
type Ret = c_int;
const SUCCESS: Ret = 0;
const INSUFFICIENT_SIZE: Ret = 7;
/// `NVML_VALUE_NOT_AVAILABLE`: the driver does not account this process's memory (e.g. some
/// containers).
const NOT_AVAILABLE: u64 = u64::MAX;

/// `nvmlProcessInfo_t` (v2, the layout `_v3` of the query fills).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

type HandleByUuid = unsafe extern "C" fn(*const c_char, *mut Device) -> Ret;
type Processes = unsafe extern "C" fn(Device, *mut c_uint, *mut ProcessInfo) -> Ret;
type MemoryInfo = unsafe extern "C" fn(Device, *mut Memory) -> Ret;

/// One GPU as NVML sees it.
pub struct Gpu {
    device: Device,
    processes: Processes,
    memory: MemoryInfo,
}

// SAFETY: NVML handles are plain identifiers and NVML is thread-safe (its documentation: "all NVML
// functions are thread-safe").
unsafe impl Send for Gpu {}
unsafe impl Sync for Gpu {}

/// Resolves a symbol of the loaded library, or says which is missing.
unsafe fn symbol<T: Copy>(lib: *mut c_void, name: &CStr) -> Result<T> {
    // SAFETY: `lib` is a handle from dlopen; `name` is NUL-terminated.
    let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
    if p.is_null() {
        bail!("NVML has no {}", name.to_string_lossy());
    }
    // SAFETY: the caller names the symbol's true C signature as `T` (a function pointer type).
    Ok(unsafe { std::mem::transmute_copy(&p) })
}

fn check(what: &str, ret: Ret) -> Result<()> {
    if ret != SUCCESS {
        bail!("NVML {what} failed (NVML error {ret})");
    }
    Ok(())
}

impl Gpu {
    /// The GPU with this CUDA UUID (the 16 bytes of `cuDeviceGetUuid`).
    pub fn by_uuid(uuid: &[u8; 16]) -> Result<Gpu> {
        // SAFETY: dlopen with a constant name; the library stays loaded for the process's life.
        let lib = unsafe { libc::dlopen(c"libnvidia-ml.so.1".as_ptr(), libc::RTLD_NOW) };
        if lib.is_null() {
            bail!("libnvidia-ml.so.1 (NVML, part of the NVIDIA driver) could not be loaded");
        }
        // SAFETY: each type is the documented C signature of the symbol named.
        let (init, by_uuid, processes, memory) = unsafe {
            (
                symbol::<unsafe extern "C" fn() -> Ret>(lib, c"nvmlInit_v2")?,
                symbol::<HandleByUuid>(lib, c"nvmlDeviceGetHandleByUUID")?,
                symbol::<Processes>(lib, c"nvmlDeviceGetComputeRunningProcesses_v3")?,
                symbol::<MemoryInfo>(lib, c"nvmlDeviceGetMemoryInfo")?,
            )
        };
        // SAFETY: nvmlInit may be called more than once; it counts references.
        check("init", unsafe { init() })?;
        let text = std::ffi::CString::new(uuid_text(uuid)).context("uuid")?;
        let mut device: Device = std::ptr::null_mut();
        // SAFETY: `text` is NUL-terminated and `device` a valid out-pointer.
        check("device lookup", unsafe {
            by_uuid(text.as_ptr(), &mut device)
        })?;
        Ok(Gpu {
            device,
            processes,
            memory,
        })
    }

    /// Device memory process `pid` uses on this GPU, context included; `None` when NVML does not
    /// list it (no memory yet, or a PID namespace NVML cannot see into).
    pub fn process_used(&self, pid: u32) -> Result<Option<u64>> {
        self.processes()?
            .into_iter()
            .find(|(p, _)| *p == pid)
            .map(|(_, used)| used.context("NVML does not account per-process memory here"))
            .transpose()
    }

    /// Every compute process on this GPU with the device memory it uses, context included (`None`
    /// where the driver does not account it, e.g. in some containers).
    pub fn processes(&self) -> Result<Vec<(u32, Option<u64>)>> {
        let mut infos = vec![ProcessInfo::default(); 64];
        loop {
            let mut n = infos.len() as c_uint;
            // SAFETY: `infos` holds `n` writable entries of the layout NVML fills.
            let ret = unsafe { (self.processes)(self.device, &mut n, infos.as_mut_ptr()) };
            if ret == INSUFFICIENT_SIZE {
                infos.resize(n as usize + 16, ProcessInfo::default());
                continue;
            }
            check("process query", ret)?;
            return Ok(infos[..n as usize]
                .iter()
                .map(|p| {
                    (
                        p.pid,
                        (p.used_gpu_memory != NOT_AVAILABLE).then_some(p.used_gpu_memory),
                    )
                })
                .collect());
        }
    }

    /// (free, total) bytes of the device.
    pub fn memory(&self) -> Result<(u64, u64)> {
        let mut m = Memory::default();
        // SAFETY: `m` is a valid out-pointer of NVML's layout.
        check("memory query", unsafe {
            (self.memory)(self.device, &mut m)
        })?;
        Ok((m.free, m.total))
    }
}

/// NVML's spelling of a UUID: `GPU-` and the 16 bytes as 8-4-4-4-12 hexadecimal digits.
fn uuid_text(b: &[u8; 16]) -> String {
    let hex =
        |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuid_spelled_as_nvml_does() {
        let b: [u8; 16] = core::array::from_fn(|i| (i * 17) as u8);
        assert_eq!(
            super::uuid_text(&b),
            "GPU-00112233-4455-6677-8899-aabbccddeeff"
        );
    }
}
