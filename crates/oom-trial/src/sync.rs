//! Locks shared between threads that may panic (a worker, a drain, a progress bar).

use std::sync::{Mutex, MutexGuard};

/// The guard of `m`, also when a thread panicked holding it: every value guarded in this program
/// is only appended to or replaced whole, so a panic leaves no broken invariant behind.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
