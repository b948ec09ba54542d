//! oom-bisect's change to cubecl-cuda (see `vendor/README.md` in oom-bisect): a virtual card.
//!
//! Every buffer a training step asks of the device is decided on the host: the model, autodiff,
//! fusion, which kernel runs with which buffers and metadata, and the memory manager's rules. With a
//! card set ([`set_virtual_card`]) before the device is first used, the runtime keeps all of that and
//! drops what only the GPU does: it builds the device's properties from the card instead of asking
//! the driver, and never calls the driver at all. No context is made, device memory is numbered
//! rather than taken (`cudaMalloc` is never called), no kernel is compiled or launched, no copy is
//! made, and a read returns zeros. The memory manager's requests and releases (the stream that the
//! vendored cubecl-runtime notes) are the ones a real card with these properties sees.
//!
//! [`read_card`] reads the properties of a real card from the driver (no context needed); the
//! runtime builds a real device from the same [`VirtualCard`], so a virtual card read from a GPU is
//! that GPU as far as the host can tell.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the host learns of a card before it runs anything on it: everything the runtime reads from
/// the driver to build the device's properties.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualCard {
    /// Compute capability, major and minor (9.0 for an H100).
    pub compute_capability: (u32, u32),
    /// `cuDeviceTotalMem`.
    pub total_bytes: u64,
    pub warp_size: u32,
    /// `MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`, in bytes.
    pub max_shared_memory_per_block: usize,
    pub max_threads_per_block: u32,
    pub max_block_dim: (u32, u32, u32),
    pub max_grid_dim: (u32, u32, u32),
    pub multiprocessors: u32,
}

impl VirtualCard {
    /// The compute capability as one number (90 for 9.0), as the runtime keys its features.
    pub fn arch_version(&self) -> u32 {
        self.compute_capability.0 * 10 + self.compute_capability.1
    }
}

static CARD: OnceLock<VirtualCard> = OnceLock::new();

/// Makes every CUDA device of this process the virtual `card`. Must come before the device is first
/// used; a second call is refused (the card in force is returned).
pub fn set_virtual_card(card: VirtualCard) -> Result<(), VirtualCard> {
    CARD.set(card)
}

/// The virtual card in force, if any.
pub fn virtual_card() -> Option<&'static VirtualCard> {
    CARD.get()
}

/// Whether the devices of this process are virtual: nothing may call the driver.
pub(crate) fn is_virtual() -> bool {
    CARD.get().is_some()
}

/// Reads the properties of the card at `index` from the driver. Needs the driver and a GPU, not a
/// context: no device memory is taken.
pub fn read_card(index: usize) -> Result<VirtualCard, String> {
    use cudarc::driver::result::device::get_attribute;
    use cudarc::driver::sys::CUdevice_attribute::*;
    cudarc::driver::result::init().map_err(|e| format!("cuInit: {e:?}"))?;
    let device = cudarc::driver::result::device::get(index as i32)
        .map_err(|e| format!("cuDeviceGet({index}): {e:?}"))?;
    // SAFETY: `device` is a valid device handle from `cuDeviceGet`; each call reads one attribute.
    let attr = |a| unsafe { get_attribute(device, a) }.map_err(|e| format!("{a:?}: {e:?}"));
    // SAFETY: `device` is valid; `cuDeviceTotalMem_v2` writes the total into `bytes`.
    let total_bytes = unsafe {
        let mut bytes = std::mem::MaybeUninit::uninit();
        cudarc::driver::sys::cuDeviceTotalMem_v2(bytes.as_mut_ptr(), device)
            .result()
            .map_err(|e| format!("cuDeviceTotalMem: {e:?}"))?;
        bytes.assume_init() as u64
    };
    Ok(VirtualCard {
        compute_capability: (
            attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as u32,
            attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as u32,
        ),
        total_bytes,
        warp_size: attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE)? as u32,
        max_shared_memory_per_block: attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
            as usize,
        max_threads_per_block: attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)? as u32,
        max_block_dim: (
            attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)? as u32,
            attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)? as u32,
            attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)? as u32,
        ),
        max_grid_dim: (
            attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)? as u32,
            attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)? as u32,
            attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)? as u32,
        ),
        multiprocessors: attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
    })
}

/// The next virtual device address. Addresses are never dereferenced; they only have to be
/// distinct and aligned as the driver's are (2 MiB for the sizes a pool asks for), so that nothing
/// that looks at an address's alignment decides otherwise than on the card.
static NEXT_ADDRESS: AtomicU64 = AtomicU64::new(1 << 40);

/// The driver's granularity for device allocations.
const ADDRESS_ALIGN: u64 = 2 << 20;

/// A fresh virtual device address for `size` bytes.
pub(crate) fn virtual_address(size: u64) -> u64 {
    let step = size.div_ceil(ADDRESS_ALIGN).max(1) * ADDRESS_ALIGN;
    NEXT_ADDRESS.fetch_add(step, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_addresses_are_distinct_and_aligned() {
        let a = virtual_address(1);
        let b = virtual_address(3 << 20);
        let c = virtual_address(512);
        assert_eq!(a % ADDRESS_ALIGN, 0);
        assert!(b >= a + ADDRESS_ALIGN && c >= b + (4 << 20), "{a} {b} {c}");
    }
}
