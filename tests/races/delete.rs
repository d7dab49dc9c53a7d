//! An open racing a delete of the same session (STORE-9): the open read the header, then
//! made `log/` again (`create_dir_all`) before taking the lock, so a delete in between had
//! it open a new, empty log of a session whose history was trashed, and left a session
//! directory without `header.json` that blocked a restore (found in review). An open of a
//! published session now never creates its log directory, and a session replaced under
//! the open is `SESSION_NOT_FOUND`.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use surfacelog::internals::storage::{FsStorage, Storage};
use surfacelog::{NoSurface, Store, StoreOptions, kinds};

/// The plain filesystem, which deletes session `s` from another store handle just before
/// an open first touches the log directory of `s` (once, when armed).
#[derive(Debug)]
struct DeleteBeforeLogDir {
    armed: AtomicBool,
    store_dir: PathBuf,
}

impl DeleteBeforeLogDir {
    /// The first time: session `s` is deleted by another handle of the store, whose
    /// delete takes the lock (no writer holds it yet) and renames it into the trash.
    fn delete_once(&self) {
        if self.armed.swap(false, Ordering::SeqCst) {
            let other = Store::open(&self.store_dir, StoreOptions::new()).unwrap();
            other
                .delete("s")
                .expect("the delete runs: no writer holds the lock yet");
        }
    }
}

impl Storage for DeleteBeforeLogDir {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        if dir.ends_with("sessions/s/log") {
            self.delete_once();
        }
        FsStorage.create_dir_all(dir)
    }
    fn open_file(&self, path: &Path, write: bool) -> std::io::Result<std::fs::File> {
        if path.ends_with("sessions/s/log/LOCK") {
            self.delete_once();
        }
        FsStorage.open_file(path, write)
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
    let storage = Arc::new(DeleteBeforeLogDir {
        armed: AtomicBool::new(true),
        store_dir: dir.path().to_owned(),
    });
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
