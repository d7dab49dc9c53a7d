//! Fault injection for the log's I/O (tests only, but public so integration tests and
//! fuzzers can use it).
//!
//! Fault model: each operation kind has a counter; a plan names the N-th call of a kind
//! (counting from 1) that fails. A failing write may first write a prefix of its bytes
//! (a torn write), as a crash or a full disk can. Failpoints are named
//! `storage::<op>::fail`: `storage::write::fail`, `storage::sync::fail`,
//! `storage::sync_dir::fail`, `storage::rename::fail`, `storage::create::fail`.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{FsStorage, Storage};

/// Which call fails, per operation kind: `0` never, `n` the n-th call.
#[derive(Debug, Default)]
pub struct Faults {
    /// Fail the n-th `write_at`.
    pub write: AtomicU64,
    /// Bytes the failing write writes before failing.
    pub write_torn_bytes: AtomicU64,
    /// Fail the n-th `sync_data`.
    pub sync: AtomicU64,
    /// Fail the n-th `sync_dir`.
    pub sync_dir: AtomicU64,
    /// Fail the n-th `rename`.
    pub rename: AtomicU64,
    /// Fail the n-th `create_file`.
    pub create: AtomicU64,
    counts: [AtomicU64; 5],
}

impl Faults {
    /// Fails the `n`-th write from now on, after writing `torn` of its bytes.
    pub fn fail_write(&self, n: u64, torn: u64) {
        self.write.store(self.calls(0) + n, Ordering::SeqCst);
        self.write_torn_bytes.store(torn, Ordering::SeqCst);
    }

    /// Fails the `n`-th `sync_data` from now on.
    pub fn fail_sync(&self, n: u64) {
        self.sync.store(self.calls(1) + n, Ordering::SeqCst);
    }

    /// The number of `sync_data` calls so far.
    pub fn syncs(&self) -> u64 {
        self.calls(1)
    }

    fn calls(&self, kind: usize) -> u64 {
        self.counts[kind].load(Ordering::SeqCst)
    }

    /// Counts a call of `kind`; `true` when it is the one planned to fail.
    fn hit(&self, kind: usize, plan: &AtomicU64) -> bool {
        let n = self.counts[kind].fetch_add(1, Ordering::SeqCst) + 1;
        plan.load(Ordering::SeqCst) == n
    }
}

/// The real filesystem with planned failures.
#[derive(Debug, Default, Clone)]
pub struct FaultyStorage {
    /// The plan, shared so a test can change it while the log runs.
    pub faults: Arc<Faults>,
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("injected failure: storage::{what}::fail"))
}

impl Storage for FaultyStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        FsStorage.create_dir_all(dir)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        FsStorage.list_dir(dir)
    }

    fn create_file(&self, path: &Path, len: u64) -> io::Result<File> {
        if self.faults.hit(4, &self.faults.create) {
            return Err(injected("create"));
        }
        FsStorage.create_file(path, len)
    }

    fn open_file(&self, path: &Path, write: bool) -> io::Result<File> {
        FsStorage.open_file(path, write)
    }

    fn write_at(&self, file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
        if self.faults.hit(0, &self.faults.write) {
            let torn = usize::try_from(self.faults.write_torn_bytes.load(Ordering::SeqCst))
                .unwrap_or(usize::MAX);
            FsStorage.write_at(file, offset, &bytes[..torn.min(bytes.len())])?;
            return Err(injected("write"));
        }
        FsStorage.write_at(file, offset, bytes)
    }

    fn sync_data(&self, file: &File) -> io::Result<()> {
        if self.faults.hit(1, &self.faults.sync) {
            return Err(injected("sync"));
        }
        FsStorage.sync_data(file)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        if self.faults.hit(2, &self.faults.sync_dir) {
            return Err(injected("sync_dir"));
        }
        FsStorage.sync_dir(dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        if self.faults.hit(3, &self.faults.rename) {
            return Err(injected("rename"));
        }
        FsStorage.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        FsStorage.remove_file(path)
    }
}
