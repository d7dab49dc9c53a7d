//! An open racing a delete and a create of the same id (LOG-1): `take_lock` opens
//! `log/LOCK`, then locks the open file. A delete and a create in between left the opener
//! holding a lock on the trashed session's `LOCK` while it opened the new session's log by
//! path: two writers of one log. The lock is now checked to be on the
//! file still named `LOCK`.
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use surfacelog::{Store, StoreOptions, StoredSession};

use crate::common::{HookedStorage, Op};

/// A storage that, once, right after an open of `sessions/s/log/LOCK` returns, has another
/// handle of the store delete `s` and create it again, keeping the new one open in `slot`.
fn recreate_after_lock_open(
    store_dir: &Path,
    slot: &Arc<Mutex<Option<StoredSession>>>,
) -> Arc<HookedStorage> {
    let armed = AtomicBool::new(true);
    let store_dir = store_dir.to_owned();
    let slot = Arc::clone(slot);
    Arc::new(HookedStorage(Box::new(move |op| {
        if let Op::Opened(path) = op
            && path.ends_with("sessions/s/log/LOCK")
            && armed.swap(false, Ordering::SeqCst)
        {
            let other = Store::open(&store_dir, StoreOptions::new()).unwrap();
            other.delete("s").expect("no writer holds the lock yet");
            let created = other.create("s", None, None).expect("the id is free again");
            *slot.lock().unwrap() = Some(created);
        }
        Ok(())
    })))
}

#[test]
fn an_open_racing_delete_and_create_is_never_a_second_writer() {
    let dir = tempfile::tempdir().unwrap();
    Store::open_or_create(dir.path(), StoreOptions::new())
        .unwrap()
        .create("s", None, None)
        .unwrap()
        .close()
        .unwrap();
    let other_writer = Arc::new(Mutex::new(None));
    let storage = recreate_after_lock_open(dir.path(), &other_writer);
    let store = Store::open(dir.path(), StoreOptions::new().storage(storage)).unwrap();
    let opened = store.open_session("s");
    let other_is_open = other_writer.lock().unwrap().is_some();
    assert!(other_is_open);
    match opened {
        Ok((mut second, _)) => {
            // Both handles now write the one log of the new session `s`.
            let seq = second.append_dynamic("host/x", "{}", None);
            let mut guard = other_writer.lock().unwrap();
            let first = guard.as_mut().unwrap();
            let seq_first = first.append_dynamic("host/y", "{}", None);
            panic!(
                "open_session returned a second writer of `s` while another holds it: \
                 second append {seq:?}, first append {seq_first:?}"
            );
        }
        Err(error) => assert!(
            ["LOCKED", "SESSION_NOT_FOUND"].contains(&error.code()),
            "{error:?}"
        ),
    }
}
