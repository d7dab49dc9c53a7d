//! `Store::create` and `Store::fork` publish the new session with its log's lock already
//! held (LOG-1, STORE-6): another opener of the id between the publish and the creator's
//! open gets `LOCKED`, and the creator its writer. (Before the fix, the lock was taken
//! again after the publish, so the other opener won, the create failed `LOCKED` though the
//! session existed, and a retry got `SESSION_EXISTS`.)
use std::sync::{Arc, Mutex};

use surfacelog::internals::store::Step;
use surfacelog::{Boundary, Store, StoreOptions, StoredSession};

/// What another opener got when it tried the new session between its publish and its
/// creator's open.
type Stolen = Arc<Mutex<Option<surfacelog::Result<StoredSession>>>>;

fn racing_store(dir: &std::path::Path, id: &'static str) -> (Store, Stolen) {
    let other = Store::open_or_create(dir, StoreOptions::new()).unwrap();
    let stolen: Stolen = Arc::default();
    let slot = Arc::clone(&stolen);
    let store = Store::open_or_create(dir, StoreOptions::new())
        .unwrap()
        .with_hook(move |step| {
            // The new session is published; another thread of the host opens it by id
            // before `create` has opened it.
            if step == Step::SessionChecked(id) {
                let mut slot = slot.lock().unwrap();
                if slot.is_none() {
                    *slot = Some(other.open_session(id).map(|(session, _)| session));
                }
            }
        });
    (store, stolen)
}

/// The other opener's outcome: `LOCKED`, since the creator holds the lock from before the
/// publish.
fn refused_locked(stolen: &Stolen) {
    let outcome = stolen
        .lock()
        .unwrap()
        .take()
        .expect("the other opener tried");
    assert_eq!(outcome.map(|_| ()).map_err(|e| e.code()), Err("LOCKED"));
}

#[test]
fn a_create_keeps_its_session_from_an_opener_between_publish_and_open() {
    let dir = tempfile::tempdir().unwrap();
    let (store, stolen) = racing_store(dir.path(), "s");
    let mut created = store.create("s", None, None).expect("created and opened");
    refused_locked(&stolen);
    assert_eq!(created.append_dynamic("host/x", "{}", None).unwrap(), 0);
}

#[test]
fn a_fork_keeps_its_child_from_an_opener_between_publish_and_open() {
    let dir = tempfile::tempdir().unwrap();
    Store::open_or_create(dir.path(), StoreOptions::new())
        .unwrap()
        .create("p", None, None)
        .unwrap()
        .close()
        .unwrap();
    let (store, stolen) = racing_store(dir.path(), "child");
    let mut child = store
        .fork("p", Boundary::Last, "child")
        .expect("forked and opened");
    refused_locked(&stolen);
    let next = child.seq_next();
    assert_eq!(child.append_dynamic("host/x", "{}", None).unwrap(), next);
}
