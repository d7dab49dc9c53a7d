//! An open racing a delete and a create of the same id (LOG-1): `take_lock` opens
//! `log/LOCK`, then locks the open file. A delete and a create in between left the opener
//! holding a lock on the trashed session's `LOCK` while it opened the new session's log by
//! path: two writers of one log (found in review). The lock is now checked to be on the
//! file still named `LOCK`.
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use surfacelog::internals::storage::{FsStorage, Storage};
use surfacelog::{Store, StoreOptions, StoredSession};

/// The plain filesystem; once armed, right after an open of `sessions/s/log/LOCK` returns,
/// another handle of the store deletes `s` and creates it again, keeping the new one open.
#[derive(Debug)]
struct RecreateAfterLockOpen {
    armed: AtomicBool,
    store_dir: PathBuf,
    other_writer: Mutex<Option<StoredSession>>,
}

impl Storage for RecreateAfterLockOpen {
    fn open_file(&self, path: &Path, write: bool) -> std::io::Result<std::fs::File> {
        let file = FsStorage.open_file(path, write)?;
        if path.ends_with("sessions/s/log/LOCK") && self.armed.swap(false, Ordering::SeqCst) {
            let other = Store::open(&self.store_dir, StoreOptions::new()).unwrap();
            other.delete("s").expect("no writer holds the lock yet");
            let created = other.create("s", None, None).expect("the id is free again");
            *self.other_writer.lock().unwrap() = Some(created);
        }
        Ok(file)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        FsStorage.create_dir_all(dir)
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        FsStorage.list_dir(dir)
    }
    fn create_file(&self, path: &Path, len: u64) -> std::io::Result<std::fs::File> {
        FsStorage.create_file(path, len)
    }
    fn write_at(&self, file: &std::fs::File, offset: u64, bytes: &[u8]) -> std::io::Result<()> {
        FsStorage.write_at(file, offset, bytes)
    }
    fn set_len(&self, file: &std::fs::File, len: u64) -> std::io::Result<()> {
        FsStorage.set_len(file, len)
    }
    fn sync_data(&self, file: &std::fs::File) -> std::io::Result<()> {
        FsStorage.sync_data(file)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        FsStorage.sync_dir(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        FsStorage.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        FsStorage.remove_file(path)
    }
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
    let storage = Arc::new(RecreateAfterLockOpen {
        armed: AtomicBool::new(true),
        store_dir: dir.path().to_owned(),
        other_writer: Mutex::default(),
    });
    let store = Store::open(dir.path(), StoreOptions::new().storage(storage.clone())).unwrap();
    let opened = store.open_session("s");
    let other_is_open = storage.other_writer.lock().unwrap().is_some();
    assert!(other_is_open);
    match opened {
        Ok((mut second, _)) => {
            // Both handles now write the one log of the new session `s`.
            let seq = second.append_dynamic("host/x", "{}", None);
            let mut guard = storage.other_writer.lock().unwrap();
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
