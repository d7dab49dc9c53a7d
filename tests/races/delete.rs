//! An open racing a delete of the same session (STORE-9): the open read the header, then
//! made `log/` again (`create_dir_all`) before taking the lock, so a delete in between had
//! it open a new, empty log of a session whose history was trashed, and left a session
//! directory without `header.json` that blocked a restore. An open of a
//! published session now never creates its log directory, and a session replaced under
//! the open is `SESSION_NOT_FOUND`.
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use surfacelog::{NoSurface, Store, StoreOptions, kinds};

use crate::common::{HookedStorage, Op};

/// A storage that, once, just before an open first touches the log directory of session
/// `s` (makes it, or opens its `LOCK`), has another handle of the store delete `s`: its
/// delete takes the lock, which no writer holds yet, and renames it into the trash.
fn delete_before_log_dir(store_dir: &Path) -> Arc<HookedStorage> {
    let armed = AtomicBool::new(true);
    let store_dir = store_dir.to_owned();
    Arc::new(HookedStorage(Box::new(move |op| {
        let touches = match op {
            Op::CreateDir(dir) => dir.ends_with("sessions/s/log"),
            Op::Open(path) => path.ends_with("sessions/s/log/LOCK"),
            _ => false,
        };
        if touches && armed.swap(false, Ordering::SeqCst) {
            let other = Store::open(&store_dir, StoreOptions::new()).unwrap();
            other
                .delete("s")
                .expect("the delete runs: no writer holds the lock yet");
        }
        Ok(())
    })))
}

fn race(close: bool, drop_checkpoint: bool) {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open_or_create(dir.path(), StoreOptions::new()).unwrap();
        let mut s = store.create("s", None, None).unwrap();
        s.append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)
            .unwrap();
        s.append::<kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, NoSurface)
            .unwrap();
        if close {
            s.close().unwrap();
        } else {
            drop(s); // as a host that crashed would leave it: the checkpoint of the create
        }
    }
    if drop_checkpoint {
        // The checkpoint is a cache (checkpoint.md): a session may have none.
        std::fs::remove_file(dir.path().join("sessions/s/checkpoint")).unwrap();
    }
    let storage = delete_before_log_dir(dir.path());
    let store = Store::open(dir.path(), StoreOptions::new().storage(storage)).unwrap();
    let opened = store.open_session("s");
    let outcome = match &opened {
        Ok((s, _)) => format!("Ok, seq_next {}", s.seq_next()),
        Err(e) => format!("{e:?}"),
    };
    drop(opened);
    let plain = Store::open(dir.path(), StoreOptions::new()).unwrap();
    let listing = plain.list().unwrap();
    let restored = plain.restore("s");
    // Expected: the open is refused SESSION_NOT_FOUND (the session was deleted), nothing
    // is created under sessions/, and the deleted session can be restored whole.
    assert!(
        outcome.contains("SESSION_NOT_FOUND") && listing.damaged.is_empty() && restored.is_ok(),
        "open: {outcome}\nlist damaged: {:?}\nrestore: {:?}\nsessions/: {:?}",
        listing.damaged,
        restored.err(),
        std::fs::read_dir(dir.path().join("sessions/s"))
            .map(|d| d.map(|e| e.unwrap().file_name()).collect::<Vec<_>>()),
    );
}

#[test]
fn open_racing_delete_of_a_closed_session() {
    race(true, false);
}

#[test]
fn open_racing_delete_of_a_session_left_without_close() {
    race(false, false);
}

#[test]
fn open_racing_delete_of_a_session_without_checkpoint() {
    race(true, true);
}
