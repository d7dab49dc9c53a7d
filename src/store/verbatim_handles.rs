//! The writers and readers a verbatim store keeps open between calls
//! (`format-spec/verbatim-store.md` VBT-6, VBT-7).
//!
//! Each session has at most one slot. A slot's writer is taken out while one thread uses it
//! (or closes it); another thread that wants the same session's writer meanwhile waits for
//! the slot to be free, instead of opening a second writer and meeting the first one's
//! lock (`LOCKED`). A kept handle is reused only while the session's `log/` directory is
//! still the one it was opened in (device and inode): a session deleted, or deleted and
//! created again, behind the store's back gets new handles, never the old files.

use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::log::{LogReader, LogWriter};

/// A directory's identity: device and inode.
pub(super) type DirIdentity = (u64, u64);

/// The identity of `dir`, or `None` when it cannot be read (it is gone).
pub(super) fn identity(dir: &Path) -> Option<DirIdentity> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(dir)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// One session's writer slot.
#[derive(Debug)]
struct WriterSlot {
    /// The session's directory.
    dir: PathBuf,
    /// The identity of the `log/` directory the writer was opened in.
    log: DirIdentity,
    /// `None` while a thread uses (or closes) the writer: the slot is busy.
    writer: Option<LogWriter>,
    /// A number unique to this opening of the writer in `log` while it is open with its
    /// recovery done (log-format §7), in use or idle; `None` before that (a writer being
    /// opened, its recovery perhaps changing the tail) and once it is closed.
    opening: Option<u64>,
    /// When the writer was last put back, idle.
    used: Instant,
}

/// A writer's opening: its log's identity and a number no other opening of this store has.
pub(super) type Opened = (DirIdentity, u64);

/// The writers kept between appends, the most recently used last.
#[derive(Debug, Default)]
pub(super) struct Writers {
    slots: Mutex<Vec<WriterSlot>>,
    freed: Condvar,
    /// The last number handed to an opening ([`Writers::recovered`]).
    openings: std::sync::atomic::AtomicU64,
}

/// What [`Writers::take`] hands over: the session's kept writer, if one can be reused.
pub(super) type Taken = Option<(LogWriter, DirIdentity)>;

impl Writers {
    fn lock(&self) -> MutexGuard<'_, Vec<WriterSlot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes the slot of the session in `dir` busy for this thread, waiting while another thread has it,
    /// and returns its kept writer if there is one. The caller must [`Writers::put`] the
    /// slot back, whatever happens.
    pub(super) fn take(&self, dir: &Path) -> Taken {
        let mut slots = self.lock();
        loop {
            let Some(at) = slots.iter().position(|s| s.dir == dir) else {
                slots.push(WriterSlot {
                    dir: dir.to_owned(),
                    log: (0, 0),
                    writer: None,
                    opening: None,
                    used: Instant::now(),
                });
                return None;
            };
            if let Some(writer) = slots[at].writer.take() {
                return Some((writer, slots[at].log));
            }
            // In use, or being closed, by another thread.
            slots = self
                .freed
                .wait(slots)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Frees the slot of the session in `dir`: keeps `writer` in it (most recently used), or, when
    /// `None`, removes the slot. The caller has dropped a writer it does not keep, so its
    /// lock is released before anyone else may open one. Then closes the least recently
    /// used idle writers beyond `kept`, their slots busy until they are closed.
    pub(super) fn put(&self, dir: &Path, writer: Option<(LogWriter, DirIdentity)>, kept: usize) {
        let mut closing = Vec::new();
        {
            let mut slots = self.lock();
            if let Some(at) = slots.iter().position(|s| s.dir == dir) {
                let mut slot = slots.remove(at);
                if let Some((writer, log)) = writer {
                    slot.writer = Some(writer);
                    slot.log = log;
                    slot.used = Instant::now();
                    slots.push(slot);
                }
            }
            let mut excess = slots.len().saturating_sub(kept);
            for slot in slots.iter_mut() {
                if excess == 0 {
                    break;
                }
                if let Some(writer) = slot.writer.take() {
                    closing.push((slot.dir.clone(), writer));
                    excess -= 1;
                }
            }
        }
        self.freed.notify_all();
        // Their records are durable already (`Sync`); a failure to close is this
        // writer's alone, and the next open of that log recovers it.
        let _ = self.close_all(closing);
    }

    /// Closes every idle writer (their records are durable already: closing writes their
    /// indexes and releases their locks). A writer in use by another thread is left to it.
    ///
    /// # Errors
    /// The first writer's failure to close; the others are closed all the same.
    pub(super) fn close_idle(&self) -> Result<()> {
        let closing: Vec<(PathBuf, LogWriter)> = {
            let mut slots = self.lock();
            slots
                .iter_mut()
                .filter_map(|s| s.writer.take().map(|w| (s.dir.clone(), w)))
                .collect()
        };
        self.close_all(closing)
    }

    /// Closes the idle writers last used `idle` ago or longer, releasing their locks, and
    /// returns how many writers stay open (idle or in use).
    ///
    /// # Errors
    /// The first writer's failure to close; the others are closed all the same.
    pub(super) fn close_idle_for(&self, idle: Duration) -> Result<usize> {
        let (closing, open): (Vec<(PathBuf, LogWriter)>, usize) = {
            let mut slots = self.lock();
            let closing: Vec<_> = slots
                .iter_mut()
                .filter(|s| s.writer.is_some() && s.used.elapsed() >= idle)
                .filter_map(|s| s.writer.take().map(|w| (s.dir.clone(), w)))
                .collect();
            (closing, slots.len())
        };
        let open = open - closing.len();
        self.close_all(closing).map(|()| open)
    }

    /// Closes `closing` (writers whose slots are busy), then removes their slots.
    fn close_all(&self, closing: Vec<(PathBuf, LogWriter)>) -> Result<()> {
        if closing.is_empty() {
            return Ok(());
        }
        let mut first = Ok(());
        let mut dirs = Vec::with_capacity(closing.len());
        for (dir, writer) in closing {
            let closed = writer.close();
            if first.is_ok() {
                first = closed;
            }
            dirs.push(dir);
        }
        self.lock()
            .retain(|s| s.writer.is_some() || !dirs.contains(&s.dir));
        self.freed.notify_all();
        first
    }

    /// Records, for the busy slot of the session in `dir`, that its writer is open in the log
    /// directory `log` with its recovery done (`Some`), or that it has none (`None`: closed,
    /// dropped, or being opened).
    pub(super) fn set_recovered(&self, dir: &Path, log: Option<DirIdentity>) {
        if let Some(slot) = self.lock().iter_mut().find(|s| s.dir == dir) {
            slot.opening = log.map(|log| {
                slot.log = log;
                self.openings
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                    + 1
            });
        }
    }

    /// The opening of this store's writer of the session in `dir` while it is open with its
    /// recovery done (VBT-7): a reader that finds the same one before it reads and after,
    /// in the log it reads, knows that no recovery changed that log's tail meanwhile.
    pub(super) fn recovered(&self, dir: &Path) -> Option<Opened> {
        self.lock()
            .iter()
            .find(|s| s.dir == dir)
            .and_then(|s| s.opening.map(|n| (s.log, n)))
    }

    /// Whether this store has a writer of the session in `dir`, idle or in use: while it does, no
    /// other writer can have written past what this one's reader sees as the end, and the
    /// bytes there are its own write in progress, not a torn tail (VBT-7).
    pub(super) fn holds(&self, dir: &Path) -> bool {
        self.lock().iter().any(|s| s.dir == dir)
    }
}

/// The readers kept between reads, by session directory, the most recently used last.
#[derive(Debug, Default)]
pub(super) struct Readers {
    slots: Mutex<Vec<(PathBuf, DirIdentity, LogReader)>>,
    /// Counts the restores (log-format DUR-12) this store made: a reader taken before one
    /// may hold records it undid, so it is not kept ([`Readers::put`]).
    restores: std::sync::atomic::AtomicU64,
}

impl Readers {
    fn lock(&self) -> MutexGuard<'_, Vec<(PathBuf, DirIdentity, LogReader)>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The reader kept for the session in `dir`, taken out, if it was opened in the `log/`
    /// directory that is there now (`log`); one opened elsewhere is dropped.
    pub(super) fn take(&self, dir: &Path, log: Option<DirIdentity>) -> Option<LogReader> {
        let mut slots = self.lock();
        let at = slots.iter().position(|(known, _, _)| known == dir)?;
        let (_, opened_in, reader) = slots.remove(at);
        (Some(opened_in) == log).then_some(reader)
    }

    /// How many restores this store made so far: taken before a reader is, and handed to
    /// [`Readers::put`].
    pub(super) fn restores(&self) -> u64 {
        self.restores.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Drops the reader kept for the session in `dir`, and any taken out now, which is
    /// not kept when put back: the session's log was taken back (log-format DUR-12), and
    /// a reader does not read again what it has read once (RD-2). Called once the restore
    /// is over, so that a reader opened while it ran is not kept either.
    pub(super) fn forget(&self, dir: &Path) {
        let mut slots = self.lock();
        self.restores
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        slots.retain(|(known, _, _)| known != dir);
    }

    /// Keeps `reader` for the session in `dir` (replacing one another thread kept
    /// meanwhile), dropping the least recently used beyond `kept`; not when a restore was
    /// made since `restores` ([`Readers::restores`]) was read, before it was taken.
    pub(super) fn put(
        &self,
        dir: &Path,
        log: DirIdentity,
        reader: LogReader,
        kept: usize,
        restores: u64,
    ) {
        let mut slots = self.lock();
        if self.restores() != restores {
            return;
        }
        slots.retain(|(known, _, _)| known != dir);
        slots.push((dir.to_owned(), log, reader));
        let excess = slots.len().saturating_sub(kept);
        slots.drain(..excess);
    }

    /// Drops every kept reader.
    pub(super) fn clear(&self) {
        self.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::{Readers, identity};
    use crate::log::{LogOptions, LogReader, LogWriter};

    /// A reader taken out, or opened, before a restore ends is not kept: `put` with the
    /// count of restores read before it was taken, once `forget` ran, drops it; one
    /// taken after is kept.
    #[test]
    fn readers_from_before_a_restore_are_not_kept() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("s");
        let log = dir.join("log");
        let (writer, _) = LogWriter::open(&log, LogOptions::default()).unwrap();
        writer.close().unwrap();
        let opened_in = identity(&log).unwrap();
        let readers = Readers::default();
        let before = readers.restores();
        let reader = LogReader::open(&log).unwrap();
        readers.forget(&dir);
        readers.put(&dir, opened_in, reader, 32, before);
        assert!(readers.take(&dir, Some(opened_in)).is_none());
        let after = readers.restores();
        readers.put(&dir, opened_in, LogReader::open(&log).unwrap(), 32, after);
        assert!(readers.take(&dir, Some(opened_in)).is_some());
    }
}
