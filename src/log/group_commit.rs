//! Group commit (DUR-1): appenders that wait for durability at the same time share one
//! sync. One waiter becomes the leader and syncs; the others wait for its outcome. A
//! failed sync poisons every waiter and every later wait (DUR-5): no success is ever
//! reported after an I/O error.

use std::io;

use crate::sync::{Condvar, Mutex, MutexGuard};

/// The shared durability state of one log.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    state: Mutex<State>,
    synced: Condvar,
}

#[derive(Debug)]
struct State {
    /// Every seq below this is durable.
    durable: u64,
    /// A leader is syncing.
    syncing: bool,
    poisoned: bool,
}

/// Why a wait did not end in durability.
#[derive(Debug)]
pub(crate) enum WaitError {
    /// This wait's own sync failed.
    Io(io::Error),
    /// A sync failed earlier or in another waiter.
    Poisoned,
}

impl GroupCommit {
    /// Every seq below `durable` is durable already.
    pub(crate) fn new(durable: u64) -> Self {
        Self {
            state: Mutex::new(State {
                durable,
                syncing: false,
                poisoned: false,
            }),
            synced: Condvar::new(),
        }
    }

    /// Waits until every seq below `target` is durable. When no sync is running, the caller
    /// runs `sync`, which **must** make durable everything written when it starts and
    /// return the seq it covers up to (exclusive).
    pub(crate) fn wait(
        &self,
        target: u64,
        mut sync: impl FnMut() -> io::Result<u64>,
    ) -> Result<(), WaitError> {
        let mut state = self.lock();
        loop {
            if state.poisoned {
                return Err(WaitError::Poisoned);
            }
            if state.durable >= target {
                return Ok(());
            }
            if state.syncing {
                state = self
                    .synced
                    .wait(state)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                continue;
            }
            state.syncing = true;
            drop(state);
            // Should `sync` unwind (a panic in a storage's call), the guard hands the lead
            // back with the log poisoned: what it was syncing has an unknown fate (DUR-5),
            // and the other waiters must not wait for good on a sync no one runs.
            let leading = Leading(self);
            let outcome = sync();
            std::mem::forget(leading);
            state = self.lock();
            state.syncing = false;
            match outcome {
                Ok(covered) => state.durable = state.durable.max(covered),
                Err(error) => {
                    state.poisoned = true;
                    drop(state);
                    self.synced.notify_all();
                    return Err(WaitError::Io(error));
                }
            }
            self.synced.notify_all();
        }
    }

    /// Every seq below this one is durable.
    pub(crate) fn durable_seq(&self) -> u64 {
        self.lock().durable
    }

    /// Whether a sync or a write failed: every wait is refused.
    pub(crate) fn is_poisoned(&self) -> bool {
        self.lock().poisoned
    }

    /// Refuses every later wait (a write failed).
    pub(crate) fn poison(&self) {
        self.lock().poisoned = true;
        self.synced.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The lead of a running sync, while its leader's `sync` runs: dropped only when that
/// call unwinds (it is forgotten once it returns), it ends the lead as a failed sync.
struct Leading<'a>(&'a GroupCommit);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.syncing = false;
        state.poisoned = true;
        drop(state);
        self.0.synced.notify_all();
    }
}

#[cfg(all(test, loom))]
mod loom_group_commit {
    use std::io;

    use loom::sync::atomic::{AtomicU64, Ordering};

    use super::{GroupCommit, WaitError};
    use loom::sync::Arc;

    use crate::sync::Mutex;

    /// A log: `written` is the next seq; `disk` what a sync has made durable.
    struct Model {
        written: Mutex<u64>,
        disk: AtomicU64,
        syncs: AtomicU64,
        commit: GroupCommit,
    }

    fn append_and_wait(model: &Model, fail: bool) -> Result<u64, WaitError> {
        let target = {
            let mut written = model.written.lock().unwrap();
            *written += 1;
            *written
        };
        model.commit.wait(target, || {
            model.syncs.fetch_add(1, Ordering::SeqCst);
            if fail {
                return Err(io::Error::other("injected"));
            }
            let upto = *model.written.lock().unwrap();
            model.disk.fetch_max(upto, Ordering::SeqCst);
            Ok(upto)
        })?;
        Ok(target)
    }

    fn model() -> Arc<Model> {
        Arc::new(Model {
            written: Mutex::new(0),
            disk: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            commit: GroupCommit::new(0),
        })
    }

    #[test]
    fn loom_every_waiter_returns_only_once_its_append_is_durable() {
        loom::model(|| {
            let model = model();
            let other = Arc::clone(&model);
            let thread = loom::thread::spawn(move || {
                let target = append_and_wait(&other, false).unwrap();
                assert!(other.disk.load(Ordering::SeqCst) >= target);
            });
            let target = append_and_wait(&model, false).unwrap();
            assert!(model.disk.load(Ordering::SeqCst) >= target);
            thread.join().unwrap();
            assert!(
                model.syncs.load(Ordering::SeqCst) <= 2,
                "at most one sync per append"
            );
        });
    }

    #[test]
    fn loom_a_failed_sync_is_never_reported_as_success() {
        loom::model(|| {
            let model = model();
            let other = Arc::clone(&model);
            let thread = loom::thread::spawn(move || append_and_wait(&other, true));
            let mine = append_and_wait(&model, false);
            let theirs = thread.join().unwrap();
            for outcome in [mine, theirs] {
                if let Ok(target) = outcome {
                    assert!(
                        model.disk.load(Ordering::SeqCst) >= target,
                        "success means durable"
                    );
                }
            }
        });
    }
}
