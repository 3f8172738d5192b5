//! One way to take the runtime's in-memory locks: a panic while one was held (a bug) leaves
//! data a later pass can still read, so a poisoned lock is taken as it is rather than
//! panicking every pass after.

use std::sync::{Mutex, MutexGuard, PoisonError};

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
