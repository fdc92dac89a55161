//! The lock-poisoning policy of ringmq's production code: a poisoned lock is taken over,
//! not unwrapped.
//!
//! Why: a lock is poisoned when a thread panicked while holding it. In ringmq that thread
//! is a request handler or a stage callback, and the panic is already reported where it
//! was caught. The tables behind these locks (topics, groups, offsets, consumers, held
//! pulls, stage slots) change by single inserts, removals and replacements, so what the
//! panicking thread left is a consistent table. Unwrapping would instead turn one bad
//! request into a panic on every later request that touches the same table — a network
//! core and all its connections lost for one fault. Tests keep `.unwrap()`: there a
//! poisoned lock should fail loudly.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Mutex locking under the policy above.
pub trait LockExt<T: ?Sized> {
    /// Locks, taking over the lock if a panicking thread poisoned it.
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockExt<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Read and write locks under the same policy.
pub trait RwLockExt<T: ?Sized> {
    /// Read-locks, taking over the lock if a panicking thread poisoned it.
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T>;
    /// Write-locks, taking over the lock if a panicking thread poisoned it.
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockExt<T> for RwLock<T> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_mutex_is_taken_over_with_its_last_value() {
        let m = Arc::new(Mutex::new(vec![1]));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let mut g = m2.lock().unwrap();
            g.push(2);
            panic!("poison on purpose");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(*m.lock_unpoisoned(), vec![1, 2]);
    }

    #[test]
    fn a_poisoned_rwlock_is_taken_over_for_reads_and_writes() {
        let l = Arc::new(RwLock::new(1));
        let l2 = l.clone();
        let _ = std::thread::spawn(move || {
            let _g = l2.write().unwrap();
            panic!("poison on purpose");
        })
        .join();
        assert!(l.is_poisoned());
        *l.write_unpoisoned() += 1;
        assert_eq!(*l.read_unpoisoned(), 2);
    }
}
