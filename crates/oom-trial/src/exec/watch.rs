//! `--ceiling-by command`: the command holds its ceiling itself (`$OOM_BISECT_MEMORY_LIMIT`, its
//! CUDA context counted), so that several trials share a GPU. The holder makes no CUDA context of
//! its own; it reads the device memory of the command's processes from NVML (per process, so the
//! other trials on the card do not count) and vouches for the run only when they kept to the
//! ceiling.

use crate::nvml::Gpu;
use crate::protocol::Ceiling;
use crate::units::fmt_bytes;
use anyhow::{bail, Result};

pub struct Watch {
    gpu: Gpu,
    pub device_name: String,
    pub total_bytes: u64,
    pub ceiling_bytes: u64,
}

impl Watch {
    /// Finds the trial's GPU in NVML; refuses a ceiling larger than the card, or than what is free
    /// on it now (other processes hold the rest: the run would fail for their sake). Without a
    /// ceiling, the command may take what is free.
    pub fn start(ceiling: Ceiling) -> Result<Watch> {
        let (device_name, gpu) = crate::cuda::nvml_device()?;
        let (free, total) = gpu.memory()?;
        let ceiling_bytes = match ceiling {
            Ceiling::None => free,
            c => c.bytes(total),
        };
        if ceiling_bytes > total {
            bail!(
                "the ceiling ({}) is larger than the device ({device_name}, {})",
                fmt_bytes(ceiling_bytes),
                fmt_bytes(total)
            );
        }
        if free < ceiling_bytes {
            bail!(
                "the GPU ({device_name}) has {} free, less than the ceiling ({}): other processes \
                 hold memory on it. The trial did not run; it is not an out-of-memory",
                fmt_bytes(free),
                fmt_bytes(ceiling_bytes)
            );
        }
        Ok(Watch {
            gpu,
            device_name,
            total_bytes: total,
            ceiling_bytes,
        })
    }

    /// The device memory the command's processes use now, contexts included; `None` while NVML
    /// lists none of them, or does not account one of them, or cannot be read.
    pub fn used(&self) -> Option<u64> {
        let mine: Vec<Option<u64>> = self
            .gpu
            .processes()
            .ok()?
            .into_iter()
            .filter(|(pid, _)| super::contain::descends_from_me(*pid))
            .map(|(_, used)| used)
            .collect();
        if mine.is_empty() {
            return None;
        }
        mine.into_iter().sum()
    }

    /// Why the run cannot be vouched for, given the highest reading of [`Watch::used`].
    pub fn unheld(&self, peak: Option<u64>) -> Option<String> {
        match peak {
            None => Some(
                "under --ceiling-by command, NVML never listed the command's processes on its GPU \
                 (a PID namespace it cannot see into, or a command that never used the GPU), so \
                 whether it kept to its ceiling cannot be told: run with --ceiling-by ballast"
                    .into(),
            ),
            Some(p) if p > self.ceiling_bytes => Some(format!(
                "under --ceiling-by command, the command's processes used {} of device memory, \
                 more than the ceiling it was given ({}, $OOM_BISECT_MEMORY_LIMIT): it did not \
                 hold its ceiling (its CUDA context and what it holds outside its allocator \
                 count), so the run says nothing about a card of that size",
                fmt_bytes(p),
                fmt_bytes(self.ceiling_bytes)
            )),
            Some(_) => None,
        }
    }
}
