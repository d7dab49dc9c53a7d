//! Fault injection for the log's I/O (tests only, but public so integration tests and
//! fuzzers can use it).
//!
//! Fault model: each operation kind has a counter; a plan names the N-th call of a kind
//! (counting from 1) that fails. A failing write may first write a prefix of its bytes
//! (a torn write), as a crash or a full disk can. A failing write or `sync_data` returns
//! `EIO`, as a disk does; the other failpoints return an error naming them. Failpoints are named
//! `storage::<op>::fail`: `storage::write::fail`, `storage::sync::fail`,
//! `storage::sync_dir::fail`, `storage::rename::fail`, `storage::create::fail`,
//! `storage::open::fail`; an `open_read` fails with `EACCES`. One more fault is not an error of the call itself: an
//! `open_file` that hands back a handle which cannot be mapped (opened for writing only,
//! so `mmap` of it fails with `EACCES`), to stand for a map that fails (`ENOMEM`).

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
    /// Fail the n-th `open_file` (the error of a read-only filesystem, `EROFS`).
    pub open: AtomicU64,
    /// The n-th `open_file` and every later one, when `unmappable_sticky`, succeeds with a
    /// handle that cannot be mapped (counted with `open`).
    pub unmappable: AtomicU64,
    /// Whether `unmappable` holds for every call from the n-th on, not only the n-th.
    pub unmappable_sticky: std::sync::atomic::AtomicBool,
    /// Fail the n-th `open_read` (a checkpoint's, a pack's, a header's: `EACCES`).
    pub open_read: AtomicU64,
    counts: [AtomicU64; 7],
    /// The directories synced so far, in order (successful `sync_dir` calls).
    dirs_synced: std::sync::Mutex<Vec<std::path::PathBuf>>,
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

    /// Fails the `n`-th `sync_dir` from now on.
    pub fn fail_sync_dir(&self, n: u64) {
        self.sync_dir.store(self.calls(2) + n, Ordering::SeqCst);
    }

    /// The directories synced so far, in order.
    pub fn dirs_synced(&self) -> Vec<std::path::PathBuf> {
        self.dirs_synced
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Fails the `n`-th `open_file` from now on with `EROFS`.
    pub fn fail_open(&self, n: u64) {
        self.open.store(self.calls(5) + n, Ordering::SeqCst);
    }

    /// Fails the `n`-th `open_read` from now on with `EACCES`.
    pub fn fail_open_read(&self, n: u64) {
        self.open_read.store(self.calls(6) + n, Ordering::SeqCst);
    }

    /// Makes the `n`-th `open_file` from now on (and, when `sticky`, every later one)
    /// return a handle that cannot be mapped.
    pub fn unmappable_open(&self, n: u64, sticky: bool) {
        self.unmappable_sticky.store(sticky, Ordering::SeqCst);
        self.unmappable.store(self.calls(5) + n, Ordering::SeqCst);
    }

    /// Ends a plan of [`Faults::unmappable_open`].
    pub fn mappable_again(&self) {
        self.unmappable.store(0, Ordering::SeqCst);
    }

    /// The number of `open_file` calls so far.
    pub fn opens(&self) -> u64 {
        self.calls(5)
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

/// The error of a failing `write_at` or `sync_data`: `EIO`, as a disk reports it.
fn eio() -> io::Error {
    io::Error::from_raw_os_error(rustix::io::Errno::IO.raw_os_error())
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

    fn open_read(&self, path: &Path) -> io::Result<File> {
        if self.faults.hit(6, &self.faults.open_read) {
            return Err(io::Error::from_raw_os_error(
                rustix::io::Errno::ACCESS.raw_os_error(),
            ));
        }
        FsStorage.open_read(path)
    }

    fn open_file(&self, path: &Path, write: bool) -> io::Result<File> {
        let n = self.faults.counts[5].fetch_add(1, Ordering::SeqCst) + 1;
        if self.faults.open.load(Ordering::SeqCst) == n {
            return Err(io::Error::from_raw_os_error(
                rustix::io::Errno::ROFS.raw_os_error(),
            ));
        }
        let unmappable = self.faults.unmappable.load(Ordering::SeqCst);
        let sticky = self.faults.unmappable_sticky.load(Ordering::SeqCst);
        if unmappable != 0 && (unmappable == n || (sticky && n > unmappable)) {
            // Readable handles can be mapped; a write-only one cannot (`EACCES`).
            return std::fs::OpenOptions::new().write(true).open(path);
        }
        FsStorage.open_file(path, write)
    }

    fn write_at(&self, file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
        if self.faults.hit(0, &self.faults.write) {
            let torn = usize::try_from(self.faults.write_torn_bytes.load(Ordering::SeqCst))
                .unwrap_or(usize::MAX);
            FsStorage.write_at(file, offset, &bytes[..torn.min(bytes.len())])?;
            return Err(eio());
        }
        FsStorage.write_at(file, offset, bytes)
    }

    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        FsStorage.set_len(file, len)
    }

    fn sync_data(&self, file: &File) -> io::Result<()> {
        if self.faults.hit(1, &self.faults.sync) {
            return Err(eio());
        }
        FsStorage.sync_data(file)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        if self.faults.hit(2, &self.faults.sync_dir) {
            return Err(injected("sync_dir"));
        }
        FsStorage.sync_dir(dir)?;
        self.faults
            .dirs_synced
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(dir.to_owned());
        Ok(())
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
