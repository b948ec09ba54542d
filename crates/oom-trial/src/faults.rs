//! Deliberate faults for the tests of the classification (`--fault`, hidden): each fails the way a
//! real trial can, at a known stage.

use crate::protocol::Fault;
use deeplab::ids;
use std::time::Duration;

/// Fails as `fault` says when the trial reaches `stage`.
pub fn inject(fault: &Option<Fault>, stage: &str) {
    match (fault, stage) {
        (Some(Fault::Sleep), ids::STEM) => {
            // A grandchild that must die with us: the parent kills the whole process group.
            let _ = std::process::Command::new("sleep").arg("6017").spawn();
            std::thread::sleep(Duration::from_secs(600));
        }
        (Some(Fault::BrokenModule), ids::ASPP) => {
            panic!("deliberately broken module: this layer always fails")
        }
        (Some(Fault::DeviceThreadOom), ids::STEM) => {
            // burn-cuda's shape of an OOM: a panic on the device-runner thread, the caller unharmed.
            let _ = std::thread::Builder::new()
                .name("DSD-0-0".into())
                .spawn(|| {
                    panic!("called `Result::unwrap()` on an `Err` value: can't allocate buffer of size: 42949672960")
                })
                .and_then(|h| h.join().map_err(|_| std::io::Error::other("joined")));
        }
        _ => {}
    }
}
