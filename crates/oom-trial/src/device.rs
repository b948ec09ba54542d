//! Facts about the machine a trial runs on: the CUDA devices this process sees and their memory,
//! and the host's memory (the CPU backend's "device").

/// Whether this binary can run trials on CUDA and a device is present; the device name if so.
pub fn cuda_device() -> Result<String, String> {
    #[cfg(feature = "cuda")]
    {
        crate::cuda::probe().map_err(|e| format!("{e:#}"))
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err("this binary was built without the `cuda` feature".into())
    }
}

/// How many CUDA devices this process sees (after any inherited `CUDA_VISIBLE_DEVICES`).
pub fn cuda_device_count() -> Result<usize, String> {
    #[cfg(feature = "cuda")]
    {
        crate::cuda::probe().map_err(|e| format!("{e:#}"))?;
        cudarc::driver::result::device::get_count()
            .map(|n| n.max(0) as usize)
            .map_err(|e| format!("{e:?}"))
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err("this binary was built without the `cuda` feature".into())
    }
}

/// Total memory of CUDA device 0.
pub fn cuda_total_bytes() -> Result<u64, String> {
    #[cfg(feature = "cuda")]
    {
        crate::cuda::probe().map_err(|e| format!("{e:#}"))?;
        let dev = cudarc::driver::result::device::get(0).map_err(|e| format!("{e:?}"))?;
        // SAFETY: `dev` is a valid device handle from `device::get`.
        unsafe { cudarc::driver::result::device::total_mem(dev) }
            .map(|b| b as u64)
            .map_err(|e| format!("{e:?}"))
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err("this binary was built without the `cuda` feature".into())
    }
}

/// (free, total) bytes of visible CUDA device `ordinal`, read without a CUDA context: NVML's free
/// memory where it can be read, else the device's total.
pub fn cuda_free_bytes(ordinal: usize) -> Result<(u64, u64), String> {
    #[cfg(feature = "cuda")]
    {
        use cudarc::driver::result::device;
        crate::cuda::probe().map_err(|e| format!("{e:#}"))?;
        let dev = device::get(ordinal as i32).map_err(|e| format!("{e:?}"))?;
        // SAFETY: `dev` is a valid device handle from `device::get`.
        let total = unsafe { device::total_mem(dev) }.map_err(|e| format!("{e:?}"))? as u64;
        let nvml = device::get_uuid(dev)
            .map_err(|e| anyhow::anyhow!("{e:?}"))
            .and_then(|u| crate::nvml::Gpu::by_uuid(&u.bytes.map(|b| b as u8)))
            .and_then(|g| g.memory());
        Ok(nvml.unwrap_or((total, total)))
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = ordinal;
        Err("this binary was built without the `cuda` feature".into())
    }
}

/// Physical memory of this host (the CPU backend's "device").
pub fn host_total() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages.max(0) as u64) * (size.max(0) as u64)
}

/// Memory the host can give without swapping (`MemAvailable`), or its physical memory where
/// `/proc/meminfo` cannot be read.
pub fn host_available() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or_else(host_total, |kib| kib * 1024)
}
