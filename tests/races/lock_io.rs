//! Taking a log's lock opens `LOCK` once: the check that the lock is on the file still
//! named `LOCK` (LOG-1) looks the path up, not through the log's `Storage`. Each `Storage`
//! call is an I/O point of the simulated disk and an open draws from its seeded faults, so
//! an extra open shifted every later fault and the regression seeds of
//! `tests/simulation.rs` (1038, 200,084) stopped reaching the faults they catch their bugs
//! at (found in review).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use surfacelog::internals::log::{LogOptions, LogWriter};
use surfacelog::internals::storage::{FsStorage, Storage};

#[derive(Debug, Default)]
struct CountLockOpens(AtomicU64);

impl Storage for CountLockOpens {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        FsStorage.create_dir_all(dir)
    }
    fn open_file(&self, path: &Path, write: bool) -> std::io::Result<std::fs::File> {
        if path.ends_with("LOCK") {
            self.0.fetch_add(1, Ordering::SeqCst);
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

#[test]
fn taking_the_lock_of_a_log_opens_lock_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let (writer, _) = LogWriter::open(&log, LogOptions::default()).unwrap();
    writer.close().unwrap();
    let counting = Arc::new(CountLockOpens::default());
    let options = LogOptions {
        storage: Arc::clone(&counting) as Arc<dyn Storage>,
        ..LogOptions::default()
    };
    let (writer, _) = LogWriter::open(&log, options).unwrap();
    writer.close().unwrap();
    assert_eq!(
        counting.0.load(Ordering::SeqCst),
        1,
        "the identity check of LOCK is a Storage call: an extra I/O point and fault draw of \
         the simulated disk"
    );
}
