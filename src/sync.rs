//! std or loom synchronization types behind one facade, so the concurrency protocols can
//! be model-checked (`RUSTFLAGS="--cfg loom" cargo test --release --lib loom_`).

#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};
