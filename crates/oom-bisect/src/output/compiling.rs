//! Whether GPU kernels are being compiled now, seen from outside the trials. cubecl appends each
//! kernel a trial compiles to the shared kernel cache as soon as it has it, and the CUDA driver its
//! machine code under `cuda-jit` (`oom_trial::cache`): while the cache grows, some trial is
//! compiling, and is slow for that reason, not for its memory. With several trials at once the
//! mark cannot say which one; a warm cache never grows, so a warm run never shows it.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the cache is looked at.
const EVERY: Duration = Duration::from_millis(500);
/// How long the mark stays after the cache last grew: NVRTC takes about a second a kernel, so
/// one compilation can fall between two looks.
const HOLD: Duration = Duration::from_secs(2);
/// The cache's depth: cubecl's files lie a few directories down, the driver's two.
const DEPTH: usize = 6;

/// The bytes of every file under `dir` (what cannot be read counts nothing).
pub fn cache_bytes(dir: &Path) -> u64 {
    fn walk(dir: &Path, depth: usize) -> u64 {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        entries
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() && depth > 0 => walk(&e.path(), depth - 1),
                Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
                _ => 0,
            })
            .sum()
    }
    walk(dir, DEPTH)
}

/// A thread that calls `on_change(true)` when the cache starts growing and `on_change(false)`
/// when it has stopped; it ends when the watch is dropped.
pub struct Watch {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Watch {
    pub fn start(dir: PathBuf, on_change: impl Fn(bool) + Send + 'static) -> Watch {
        Watch::every(dir, EVERY, HOLD, on_change)
    }

    fn every(
        dir: PathBuf,
        every: Duration,
        hold: Duration,
        on_change: impl Fn(bool) + Send + 'static,
    ) -> Watch {
        let (stop, stopped) = channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut last = cache_bytes(&dir);
            let mut grew_at: Option<Instant> = None;
            let mut compiling = false;
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                let now = cache_bytes(&dir);
                if now > last {
                    grew_at = Some(Instant::now());
                }
                last = now;
                let on = grew_at.is_some_and(|t| t.elapsed() < hold);
                if on != compiling {
                    compiling = on;
                    on_change(on);
                }
            }
        });
        Watch {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// The mark comes on when a file under the cache grows and goes off once it has stopped; a
    /// cache that does not grow never shows it.
    #[test]
    fn a_growing_cache_is_compiling_then_it_stops() {
        let dir = std::env::temp_dir().join(format!("oom-bisect-compiling-{}", std::process::id()));
        let sub = dir.join("cubecl").join("kernels");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join("chunk-0"), [0u8; 10]).unwrap();
        assert_eq!(cache_bytes(&dir), 10);
        let seen = Arc::new(Mutex::new(vec![]));
        let s = Arc::clone(&seen);
        let w = Watch::every(
            dir.clone(),
            Duration::from_millis(20),
            Duration::from_millis(150),
            move |on| s.lock().unwrap().push(on),
        );
        std::thread::sleep(Duration::from_millis(100));
        assert!(seen.lock().unwrap().is_empty(), "nothing grew");
        std::fs::write(sub.join("chunk-1"), [0u8; 5]).unwrap();
        std::thread::sleep(Duration::from_millis(500));
        drop(w);
        assert_eq!(*seen.lock().unwrap(), vec![true, false]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
