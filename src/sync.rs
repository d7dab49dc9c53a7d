//! std or loom synchronization types behind one facade, so the concurrency protocols can
//! be model-checked (`RUSTFLAGS="--cfg loom" cargo test --release --lib loom_`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};

/// Waits `duration` before looking again (a poll's pause). Under loom, a yield: the model
/// runs the other threads instead, so a poll that would miss what they do never ends and
/// loom reports it.
pub(crate) fn pause(duration: std::time::Duration) {
    #[cfg(loom)]
    {
        let _ = duration;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    std::thread::sleep(duration);
}
