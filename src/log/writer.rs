//! The single writer of a log: append, group commit, segment rolling, poisoning, and
//! recovery at open (`log-format.md` §2, §7, §8).

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;

use super::chain::{
    Chain, KnownSegment, is_absent, open_chain, open_chain_known, open_chain_listed,
};
use super::group_commit::{GroupCommit, WaitError};
use super::reader::{Layout, Segment, corrupt, into_segments, read_error};
use super::scan::{FileBytes, Stop, nonzero_end, read_range, scan};
use super::segment::{
    LogId, SEGMENT_HEADER_LEN, SegmentHeader, grown_len, index_name, is_grown_len, segment_name,
    seq_file_path,
};
use super::{Durability, LogOptions, OpenReport, TornTail, index, quarantine};
use crate::error::{Error, ErrorKind, Result};
use crate::event::{Event, EventRef};
use crate::record::{Format, RecordError, body_len, compact, encode, frame_len};
use crate::storage::Storage;
// Through the facade, so that loom sees how appends publish what they wrote (`loom_publication`).
use crate::sync::{AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering};

/// Buffered appends (not `Sync`) are written once this many bytes gather (DUR-2, DUR-3).
const WRITE_BUFFER_BYTES: usize = 64 << 10;

/// The longest a sync leader waits for appends that are still writing (DUR-1).
#[cfg(not(loom))]
const GATHER_WAIT_MAX: std::time::Duration = std::time::Duration::from_micros(100);
/// Under loom, no wait (a spin on the clock is not a model's step): the gather loop only
/// reads the gauges once.
#[cfg(loom)]
const GATHER_WAIT_MAX: std::time::Duration = std::time::Duration::ZERO;

/// The only handle that appends to a log. `Sync`: threads may append concurrently, and
/// in `Sync` durability their waits share one `fdatasync` (group commit, DUR-1).
#[derive(Debug)]
pub struct LogWriter {
    shared: Arc<Shared>,
    flusher: Option<Flusher>,
}

/// Waits until a log's events are durable in `Sync` durability (DUR-11): what a deferred
/// append ([`LogWriter::append_deferred`]) does after its caller released its own lock.
#[derive(Debug, Clone)]
pub(crate) struct DurableWait(Arc<Shared>);

impl DurableWait {
    /// Waits until events `0..seq_next` are durable, sharing the sync with every appender
    /// waiting meanwhile (DUR-1). Returns at once unless the log's durability is `Sync`:
    /// the other modes make no append wait.
    ///
    /// # Errors
    /// `IO` or `POISONED` for a failed sync, with [`Error::outcome`] `FateUnknown`
    /// (DUR-10).
    pub(crate) fn wait(&self, seq_next: u64) -> Result<()> {
        if self.0.options.durability != Durability::Sync {
            return Ok(());
        }
        self.0
            .wait_durable(seq_next)
            .map_err(Error::with_fate_unknown)
    }
}

#[derive(Debug)]
struct Shared {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    options: LogOptions,
    log_id: LogId,
    state: Mutex<State>,
    commit: GroupCommit,
    /// Appends between their start and the end of their write: a sync leader waits a
    /// moment for them, so one sync covers them too (like `commit_delay` in `PostgreSQL`).
    in_flight: AtomicUsize,
    /// How many appends the last sync covered, up to which seq, and the seq after the
    /// last write: the sync leader's gauge of who is coming (DUR-1).
    last_covered: AtomicU64,
    synced_upto: AtomicU64,
    seq_written: AtomicU64,
    /// Held for the writer's lifetime (LOG-1).
    _lock: FileLock,
}

#[derive(Debug)]
struct State {
    active: Arc<File>,
    header: SegmentHeader,
    /// Where the next record goes in the active segment.
    write_offset: u64,
    /// The active segment file's length: records are written only below it, and it grows
    /// ahead of them in steps (SEG-6).
    file_len: u64,
    /// Offsets of the active segment's records after the first `unloaded`, for its index
    /// (IDX-1).
    offsets: Vec<u32>,
    /// The prefix of the active segment recovery took from its index (IDX-5), whose
    /// offsets are in the index file only, not yet read back: read when the index is next
    /// written (`load_indexed`), so that open does not read them; `offsets` holds those
    /// after it.
    unloaded: Option<index::Vouched>,
    /// CRC-32C of the active segment's bytes from its header to `write_offset` (IDX-1).
    data_crc: u32,
    /// How many of the active segment's records its index file covers (IDX-5).
    indexed: usize,
    /// The active segment is limited (LIM-4): nothing is written to it; the first append
    /// starts the next segment.
    limited: bool,
    /// The next seq, counting the events still in `buffer` and `open_run`.
    seq_next: u64,
    poisoned: bool,
    /// Encoded records not yet written, destined for `write_offset`. Invariant: they and
    /// `open_run` hold exactly `pending` events (a run's members each count); both are
    /// empty in `Sync` durability between appends.
    buffer: Vec<u8>,
    pending: u64,
    /// The compact chunk run (§4.2) whose record comes after `buffer`'s, not encoded yet:
    /// the next appended chunk may join it (REC-17). It is encoded at the end of `buffer`
    /// ([`close_run`]) before another record is, and before the buffer is written, so a
    /// run of n chunks is encoded once, not n times.
    open_run: Option<compact::OpenRun>,
    /// A record being encoded (compact segments), kept to reuse its allocation.
    record: Vec<u8>,
    /// `Staged` (DUR-6): the syncs of sealed segments still running in the background,
    /// each with its segment's path; the next flush waits for them.
    sealing: Vec<(PathBuf, JoinHandle<std::io::Result<()>>)>,
    /// Changes of the directory to be made durable by a sync of it (a segment created in
    /// `Staged`, DUR-6; this writer's open, DUR-9), counted; and how many of them a sync
    /// has made durable. Counted, not flagged, so that a sync running (outside the lock)
    /// is never taken for done by a flush that does not wait for it (DUR-13).
    dir_changes: u64,
    dir_synced: u64,
}

/// Poisons the writer (DUR-5) when dropped, which happens only when the write it guards
/// unwinds (a panic in the storage's call; it is forgotten once the write returns): the
/// records being written then have an unknown fate, as after a failed write, and the
/// writer's state (its next seq, its buffer) no longer says what is in the file.
struct PoisonOnUnwind<'a>(&'a GroupCommit);

impl Drop for PoisonOnUnwind<'_> {
    fn drop(&mut self) {
        self.0.poison();
    }
}

#[derive(Debug)]
struct Flusher {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl LogWriter {
    /// Opens the log in `dir` for writing, creating it when it does not exist (LOG-3),
    /// and recovers its tail (§7).
    ///
    /// # Errors
    /// `LOCKED` when another writer holds it, `CORRUPT` with the file and offset for
    /// damage (nothing is changed then), `FORMAT_VERSION`, `IO`.
    pub fn open(dir: &Path, options: LogOptions) -> Result<(Self, OpenReport)> {
        Self::open_recovered(dir, options).map(|(writer, report, _)| (writer, report))
    }

    /// [`LogWriter::open`], also handing over the segments recovery opened, for a reader
    /// in this process that then reads nothing twice (`DiskLog`).
    ///
    /// # Errors
    /// As [`LogWriter::open`].
    pub(crate) fn open_recovered(
        dir: &Path,
        options: LogOptions,
    ) -> Result<(Self, OpenReport, Vec<Segment>)> {
        Self::open_recovered_from(dir, options, None, None, 0, LogDir::Create)
    }

    /// [`LogWriter::open_recovered`] over a chain already opened and checked, when given
    /// (a fork's child, whose segments its source's reader has just checked), instead of
    /// opening every segment of `dir` again; otherwise over the segments `known` records,
    /// when they are still the log's (RCV-11), without listing `dir`. `durable_seq` is a
    /// durable mark (§7, RCV-14): a checkpoint's `seq_next`, or 0. `how` says whether `dir`
    /// may be created and whether its lock is already held ([`LogDir`]).
    ///
    /// # Errors
    /// As [`LogWriter::open`].
    pub(crate) fn open_recovered_from(
        dir: &Path,
        options: LogOptions,
        chain: Option<Chain>,
        known: Option<&[KnownSegment]>,
        durable_seq: u64,
        how: LogDir,
    ) -> Result<(Self, OpenReport, Vec<Segment>)> {
        let storage = Arc::clone(&options.storage);
        let lock = match how {
            LogDir::Create => {
                storage
                    .create_dir_all(dir)
                    .map_err(|e| Error::io("create_dir", dir, &e))?;
                take_lock(&*storage, dir)?
            }
            LogDir::Existing => take_lock(&*storage, dir)?,
            LogDir::Locked(lock) => lock,
        };
        let marks = Marks { known, durable_seq };
        let (mut state, log_id, report, segments) =
            recover(&*storage, dir, &options, chain, marks)?;
        // DUR-9: the directory is synced once, at the first sync that acknowledges an append
        // or the first flush (not at open, which stays free of syncs for a cleanly closed
        // log): a segment an earlier writer created may have its name in the page cache
        // only. Not when the chain was taken from a checkpoint's record of it (CKP-8): a
        // checkpoint records only names made durable before it was written (DUR-13).
        state.dir_changes = u64::from(!report.from_known_chain);
        let durable_seq = state.seq_next;
        let shared = Arc::new(Shared {
            dir: dir.to_owned(),
            storage,
            options,
            log_id,
            state: Mutex::new(state),
            commit: GroupCommit::new(durable_seq),
            in_flight: AtomicUsize::new(0),
            last_covered: AtomicU64::new(0),
            synced_upto: AtomicU64::new(durable_seq),
            seq_written: AtomicU64::new(durable_seq),
            _lock: lock,
        });
        let flusher = match shared.options.durability {
            Durability::Batch { max_delay } => Some(Flusher::start(Arc::clone(&shared), max_delay)),
            Durability::Sync | Durability::Manual | Durability::Staged => None,
        };
        Ok((Self { shared, flusher }, report, segments))
    }

    /// Checks that no writer holds the log in `dir`, without opening it: takes the lock
    /// (LOG-1) and releases it at once. A log without its `LOCK` file has no writer (one
    /// holds the file it locked, which is checked to be named `LOCK`, LOG-1): that is not
    /// refused, and nothing is created.
    ///
    /// # Errors
    /// `LOCKED` when a writer holds it, `IO`.
    pub fn check_lock(dir: &Path) -> Result<()> {
        Self::check_lock_with(&crate::storage::FsStorage, dir)
    }

    /// [`LogWriter::check_lock`] through a given storage.
    ///
    /// # Errors
    /// As [`LogWriter::check_lock`].
    pub fn check_lock_with(storage: &dyn Storage, dir: &Path) -> Result<()> {
        let path = dir.join("LOCK");
        let file = match storage.open_file(&path, false) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io("open", &path, &e)),
        };
        match file.try_lock() {
            Ok(()) => {
                drop(FileLock(file));
                Ok(())
            }
            Err(TryLockError::WouldBlock) => Err(ErrorKind::Locked { path }.into()),
            Err(TryLockError::Error(error)) => Err(Error::io("flock", &path, &error)),
        }
    }

    /// Appends `events`, whose seqs must continue the log, as one batch: one write per
    /// segment touched. Returns once the events are written to the OS and, in `Sync`
    /// durability, durable. Returns the next seq.
    ///
    /// # Errors
    /// `SEQ_NOT_CONTIGUOUS` for a gap (nothing written), `POISONED` after an earlier
    /// failure, `IO` for a failed write or sync, which poisons the writer (DUR-5). The
    /// error's [`Error::outcome`] is `FateUnknown` when the events' bytes may be on disk in
    /// part (a failed write or sync, or, in `Sync`, a `POISONED` from the failed sync another
    /// appender ran for them), `NothingWritten` or `Poisoned` otherwise (DUR-10).
    pub fn append(&self, events: &[Event]) -> Result<u64> {
        self.append_built(|_| events)
    }

    /// Appends the events `build` makes from the next seq, which it gets while the
    /// writer's lock is held: threads append concurrently without agreeing on seqs
    /// first, and in `Sync` durability their waits share one `fdatasync`. `build` should
    /// be quick; it runs under the lock.
    ///
    /// # Errors
    /// As [`LogWriter::append`].
    pub fn append_with(&self, build: impl FnOnce(u64) -> Vec<Event>) -> Result<u64> {
        self.append_built(build)
    }

    /// [`LogWriter::append`] that returns once the events are written to the OS, even in
    /// `Sync` durability: for a caller that holds a lock of its own around the append and
    /// waits with [`DurableWait::wait`] after releasing it, so that appenders serialized
    /// by that lock still share one `fdatasync` (DUR-1, DUR-11).
    ///
    /// # Errors
    /// As [`LogWriter::append`], without the sync's.
    pub(crate) fn append_deferred(&self, events: &[Event]) -> Result<u64> {
        let counted = InFlight::count(&self.shared.in_flight);
        let written = self.write_built(|_| events);
        drop(counted);
        let seq_next = written?;
        self.shared
            .seq_written
            .fetch_max(seq_next, Ordering::SeqCst);
        Ok(seq_next)
    }

    /// Writes the records the write buffer holds (DUR-2, DUR-3) to the OS, without a
    /// sync: once it returns they are in the segment file, readable by other processes and
    /// kept if this process dies (not at a power loss).
    ///
    /// # Errors
    /// `POISONED` after an earlier failure; `IO` for a failed write, which poisons the
    /// writer (DUR-5) with the outcome `FateUnknown` (DUR-10).
    pub(crate) fn write_out(&self) -> Result<()> {
        let mut state = self.shared.lock_state();
        if self.shared.poisoned(&state) {
            return Err(ErrorKind::Poisoned.into());
        }
        let unwinding = PoisonOnUnwind(&self.shared.commit);
        let written = self.shared.flush_buffer(&mut state);
        std::mem::forget(unwinding);
        if let Err(error) = written {
            state.poisoned = true;
            self.shared.commit.poison();
            return Err(error.with_fate_unknown());
        }
        Ok(())
    }

    /// The wait of a deferred `Sync` append (DUR-11); it outlives any lock around the
    /// writer.
    pub(crate) fn durable_wait(&self) -> DurableWait {
        DurableWait(Arc::clone(&self.shared))
    }

    fn append_built<E: AsRef<[Event]>>(&self, build: impl FnOnce(u64) -> E) -> Result<u64> {
        let counted = InFlight::count(&self.shared.in_flight);
        let written = self.write_built(build);
        drop(counted);
        let seq_next = written?;
        self.shared
            .seq_written
            .fetch_max(seq_next, Ordering::SeqCst);
        if self.shared.options.durability == Durability::Sync {
            // DUR-10: the records are written; a failed sync, this one's or the one another
            // appender ran for them (`POISONED`), leaves their fate unknown.
            self.shared
                .wait_durable(seq_next)
                .map_err(Error::with_fate_unknown)?;
        }
        Ok(seq_next)
    }

    /// Checks and writes the built events under the lock; returns the next seq.
    fn write_built<E: AsRef<[Event]>>(&self, build: impl FnOnce(u64) -> E) -> Result<u64> {
        let mut state = self.shared.lock_state();
        if self.shared.poisoned(&state) {
            return Err(ErrorKind::Poisoned.into());
        }
        let built = build(state.seq_next);
        let events = built.as_ref();
        for (i, event) in events.iter().enumerate() {
            let expected = state.seq_next + i as u64;
            if event.seq() != expected {
                let found = event.seq().to_string();
                return Err(ErrorKind::SeqNotContiguous { expected, found }.into());
            }
            record_fits(event)?;
            // A compact record refused mid-append would leave the events before it
            // written: every event is checked first (REC-20), by a writer configured for
            // them and by one whose active segment holds them (another writer's, SEG-9).
            if self.shared.options.compact_records || state.header.format() == Format::Compact {
                compact::check_encodable(&event.as_ref()).map_err(|why| refused(event, why))?;
            }
        }
        let unwinding = PoisonOnUnwind(&self.shared.commit);
        let written = self.shared.write(&mut state, events);
        std::mem::forget(unwinding);
        if let Err(error) = written {
            // DUR-5, DUR-10: bytes of these events may be on disk; none is ever written
            // after them.
            state.poisoned = true;
            self.shared.commit.poison();
            return Err(error.with_fate_unknown());
        }
        Ok(state.seq_next)
    }

    /// Makes every appended event durable (DUR-3).
    ///
    /// # Errors
    /// `POISONED`, or `IO` for a failed write or sync (which poisons; its
    /// [`Error::outcome`] is `FateUnknown`: the unsynced appends may be on disk in part,
    /// DUR-10).
    pub fn flush(&self) -> Result<()> {
        let seq_next = self.shared.lock_state().seq_next;
        self.shared.wait_durable(seq_next)?;
        // DUR-13: the segments' names too, when no sync of an append has synced them (a
        // flush with nothing to sync, before a checkpoint records the chain, CKP-5).
        let mut state = self.shared.lock_state();
        if state.dir_synced < state.dir_changes {
            self.shared
                .storage
                .sync_dir(&self.shared.dir)
                .map_err(|e| {
                    state.poisoned = true;
                    self.shared.commit.poison();
                    Error::io("fsync", &self.shared.dir, &e).with_fate_unknown()
                })?;
            state.dir_synced = state.dir_changes;
        }
        Ok(())
    }

    /// The next seq: the number of events in the log.
    pub fn seq_next(&self) -> u64 {
        self.shared.lock_state().seq_next
    }

    /// The seq after the last record written to the files (records still in the write
    /// buffer excluded): what a reader in this process can find there.
    pub(crate) fn seq_on_file(&self) -> u64 {
        let state = self.shared.lock_state();
        state.seq_next - state.pending
    }

    /// DUR-12: after an append of `batch` failed with its fate unknown (DUR-10), takes the
    /// log back to its first `seq_next` events (the batch's first seq), durably, while this
    /// poisoned writer still holds the lock: the batch's records and bytes are undone, as if
    /// the append had written nothing. The writer stays poisoned; the caller drops it and
    /// the next writer opens the restored log.
    ///
    /// # Errors
    /// `POISONED` when the writer is not poisoned (nothing failed, nothing to undo) or not
    /// in `Sync` durability (earlier appends may be unwritten too);
    /// `CORRUPT` when the log does not hold exactly its first `seq_next` events and a part
    /// of the batch; `IO`. The log is then as the failure left it (DUR-10), or, after a
    /// failed step, as recovery takes it.
    pub(crate) fn restore(&self, seq_next: u64, batch: &[Event]) -> Result<()> {
        // Held throughout: no append, flush or index write of this writer runs meanwhile.
        let state = self.shared.lock_state();
        // Only in `Sync` is every event before `seq_next` acknowledged durable, and nothing
        // but the batch after it.
        if !state.poisoned || self.shared.options.durability != Durability::Sync {
            return Err(ErrorKind::Poisoned.into());
        }
        super::restore::restore(&*self.shared.storage, &self.shared.dir, seq_next, batch)
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Flushes and closes the log.
    ///
    /// # Errors
    /// As [`LogWriter::flush`].
    pub fn close(mut self) -> Result<()> {
        self.stop_flusher();
        self.flush()?;
        self.shared.index_active();
        Ok(())
    }

    fn stop_flusher(&mut self) {
        if let Some(flusher) = self.flusher.take() {
            flusher.stop.store(true, Ordering::SeqCst);
            flusher.thread.thread().unpark();
            let _ = flusher.thread.join();
        }
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        self.stop_flusher();
        // Best effort: an explicit close() reports the error.
        if self.flush().is_ok() {
            self.shared.index_active();
        }
    }
}

impl Shared {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave half-written state that matters:
        // a write that unwinds poisons the writer (`PoisonOnUnwind`), and the poisoned
        // flags and the file are the truth, so recover the guard.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the writer is poisoned (DUR-5): by a failure this writer met under its lock,
    /// or by a sync that failed or unwound in a group-commit leader, which may not have
    /// come back to say so.
    fn poisoned(&self, state: &State) -> bool {
        state.poisoned || self.commit.is_poisoned()
    }

    /// Encodes and writes `events`, rolling segments as needed (SEG-7).
    fn write(&self, state: &mut State, events: &[Event]) -> Result<()> {
        for event in events {
            if state.header.format() == Format::Compact && !state.limited {
                self.write_compact(state, event)?;
                continue;
            }
            // Nothing is buffered after an open run (its offset is where the buffer ends);
            // none is open here, in a segment of version 1 records or a limited one, whose
            // writer never buffers into it, but should one be, it is closed first.
            close_run(state);
            let mut stored = stored_form(&state.header, event);
            let len = frame_len(body_len(&stored)) as u64;
            let full = state.write_offset + state.buffer.len() as u64 + len > state.header.capacity;
            if full || state.limited {
                self.flush_buffer(state)?;
                self.roll(state, len)?;
                if state.header.format() == Format::Compact {
                    // SEG-9: a writer configured for compact records rolled from a segment
                    // of version 1 records (created before, or a fork's limited one).
                    self.write_compact(state, event)?;
                    continue;
                }
                // The new segment may allow a chunk record, never a longer form.
                stored = stored_form(&state.header, event);
            }
            let offset = state.write_offset + state.buffer.len() as u64;
            state
                .offsets
                .push(u32::try_from(offset).unwrap_or(u32::MAX));
            encode(&stored, &mut state.buffer);
            state.pending += 1;
            state.seq_next += 1;
        }
        // DUR-2, DUR-3: without `Sync`, small appends gather into one write.
        let buffered = self.options.durability != Durability::Sync;
        if !buffered || unwritten_len(state) >= WRITE_BUFFER_BYTES {
            self.flush_buffer(state)?;
        }
        Ok(())
    }

    /// One positional write of the buffered records (RD-3). Should it fail, the writer is
    /// poisoned by the caller and the state is not used again.
    fn flush_buffer(&self, state: &mut State) -> Result<()> {
        close_run(state);
        if state.buffer.is_empty() {
            return Ok(());
        }
        self.grow(state, state.write_offset + state.buffer.len() as u64)?;
        if let Err(error) = self
            .storage
            .write_at(&state.active, state.write_offset, &state.buffer)
        {
            return Err(Error::io("write", self.active_path(state), &error));
        }
        state.write_offset += state.buffer.len() as u64;
        state.data_crc = crc32c::crc32c_append(state.data_crc, &state.buffer);
        state.pending = 0;
        state.buffer.clear();
        Ok(())
    }

    /// [`SharedWriter::write`] of one event into a compact segment (§4.2, REC-17): a chunk
    /// joins the run the buffer ends with when it continues it and the run stays under
    /// its cap (and in the segment); otherwise the event gets a record of its own, after
    /// a roll when it does not fit.
    fn write_compact(&self, state: &mut State, event: &Event) -> Result<()> {
        let choice = compact::choose(&event.as_ref()).map_err(|why| refused(event, why))?;
        if let compact::Choice::Chunk(member) = choice
            && join_run(state, member)
        {
            return Ok(());
        }
        close_run(state);
        // A chunk starts a run, left open (not encoded) for the next chunk to join; any
        // other event is encoded at once.
        let mut record = std::mem::take(&mut state.record);
        record.clear();
        let (run, len) = match choice {
            compact::Choice::Chunk(member) => {
                let run = compact::OpenRun::start(&member).map_err(|why| refused(event, why))?;
                let len = compact::frame_len(run.body_len());
                (Some(run), len)
            }
            compact::Choice::Event(e) => {
                compact::encode_event(&e, &mut record);
                (None, record.len())
            }
        };
        let full =
            state.write_offset + state.buffer.len() as u64 + len as u64 > state.header.capacity;
        if full {
            self.flush_buffer(state)?;
            self.roll(state, len as u64)?;
            if state.header.format() != Format::Compact {
                // A writer configured without compact records rolled to a segment of
                // another format (SEG-9).
                state.record = record;
                return self.write(state, std::slice::from_ref(event));
            }
        }
        let offset = state.write_offset + state.buffer.len() as u64;
        state
            .offsets
            .push(u32::try_from(offset).unwrap_or(u32::MAX));
        state.buffer.extend_from_slice(&record);
        state.record = record;
        state.open_run = run;
        state.pending += 1;
        state.seq_next += 1;
        Ok(())
    }

    /// SEG-6: grows the active segment's file, before a write, so that it holds its first
    /// `end` bytes: to the next multiple of [`super::segment::SEGMENT_GROW_BYTES`] (at most the capacity).
    /// One `ftruncate` per step, not per append; the sync that makes the records durable
    /// makes the length durable too. Should it fail, the writer is poisoned by the caller.
    fn grow(&self, state: &mut State, end: u64) -> Result<()> {
        if end <= state.file_len {
            return Ok(());
        }
        let len = grown_len(end, state.header.capacity);
        if let Err(error) = self.storage.set_len(&state.active, len) {
            return Err(Error::io("grow", self.active_path(state), &error));
        }
        state.file_len = len;
        Ok(())
    }

    /// Seals the active segment and creates the next one (SEG-6, SEG-7, DUR-4). A limited
    /// segment was sealed by the fork that made it (LIM-4): it is neither synced nor
    /// indexed again.
    fn roll(&self, state: &mut State, record_len: u64) -> Result<()> {
        if state.seq_next == state.header.first_seq && !state.limited {
            // The next segment would take this one's name (LOG-1).
            return self.replace_empty(state, record_len);
        }
        let staged = self.options.durability == Durability::Staged;
        if !state.limited {
            let path = self.active_path(state);
            if staged {
                self.sync_in_background(state, path)?;
            } else {
                self.storage
                    .sync_data(&state.active)
                    .map_err(|e| Error::io("fsync", &path, &e))?;
            }
            self.write_index(state);
        }
        let capacity = capacity_for(&self.options, record_len);
        let header = SegmentHeader {
            log_id: self.log_id,
            index: state.header.index + 1,
            first_seq: state.seq_next,
            capacity,
            incompat_features: self.options.segment_features(),
        };
        let file = if staged {
            state.dir_changes += 1;
            write_segment_file(&*self.storage, &self.dir, &header)?
        } else {
            create_segment(&*self.storage, &self.dir, &header)?
        };
        state.active = Arc::new(file);
        state.header = header;
        state.write_offset = SEGMENT_HEADER_LEN as u64;
        state.file_len = initial_len(&header);
        state.offsets.clear();
        debug_assert!(
            state.open_run.is_none(),
            "the buffer is written before a roll"
        );
        state.unloaded = None;
        state.data_crc = 0;
        state.indexed = 0;
        state.limited = false;
        Ok(())
    }

    /// SEG-7: the active segment holds no record and the next one, `record_len` bytes, does
    /// not fit in it: it is replaced, under its own name, by an empty segment of the same
    /// identity, index and first seq whose capacity is just large enough. The new file is
    /// written and synced as `<name>.tmp`, renamed over the old one, and the directory is
    /// synced (in `Staged` durability, at the next flush, DUR-6): a crash leaves one of two
    /// valid empty segments under the name, and at most a `.tmp` file (LOG-1). A reader
    /// that mapped the old file keeps a valid map (SEG-8) and maps the new one when it
    /// finds another file under the name (SEG-7).
    fn replace_empty(&self, state: &mut State, record_len: u64) -> Result<()> {
        let header = SegmentHeader {
            capacity: capacity_for(&self.options, record_len),
            ..state.header
        };
        let path = self.active_path(state);
        let tmp = self
            .dir
            .join(format!("{}.tmp", segment_name(header.first_seq)));
        crate::storage::replace_file(
            &*self.storage,
            &tmp,
            &path,
            &header.encode(),
            initial_len(&header),
        )?;
        if self.options.durability == Durability::Staged {
            state.dir_changes += 1;
        } else {
            self.storage
                .sync_dir(&self.dir)
                .map_err(|e| Error::io("fsync", &self.dir, &e))?;
        }
        let file = self
            .storage
            .open_file(&path, true)
            .map_err(|e| Error::io("open", &path, &e))?;
        state.active = Arc::new(file);
        state.header = header;
        state.file_len = initial_len(&header);
        Ok(())
    }

    /// DUR-6: starts the sync of the sealed active segment on a thread of its own, so that
    /// the disk writes it back while appends go on; the next flush waits for it. Should no
    /// thread start, the segment is synced here instead.
    fn sync_in_background(&self, state: &mut State, path: PathBuf) -> Result<()> {
        let file = Arc::clone(&state.active);
        let storage = Arc::clone(&self.storage);
        let spawned = std::thread::Builder::new()
            // The simulated disk recognizes this thread by its name.
            .name(crate::storage::sim::SEAL_THREAD.into())
            .spawn(move || storage.sync_data(&file));
        match spawned {
            Ok(handle) => state.sealing.push((path, handle)),
            Err(_) => self
                .storage
                .sync_data(&state.active)
                .map_err(|e| Error::io("fsync", &path, &e))?,
        }
        Ok(())
    }

    /// DUR-6: waits for the background syncs of sealed segments, then syncs the directory
    /// when segments were created in it since it was last synced. The first failure is
    /// returned with the file it concerns.
    fn finish_staged(
        &self,
        sealing: Vec<(PathBuf, JoinHandle<std::io::Result<()>>)>,
        dir_unsynced: bool,
    ) -> std::result::Result<(), (PathBuf, std::io::Error)> {
        let mut first_error = None;
        for (path, handle) in sealing {
            let outcome = handle
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the sync thread panicked")));
            if let (Err(error), None) = (outcome, &first_error) {
                first_error = Some((path, error));
            }
        }
        if let Some(failure) = first_error {
            return Err(failure);
        }
        if dir_unsynced {
            self.storage
                .sync_dir(&self.dir)
                .map_err(|e| (self.dir.clone(), e))?;
        }
        Ok(())
    }

    /// Writes the active segment's index through a temporary file (IDX-1). The index is
    /// a cache (IDX-2): a failure only costs readers a scan, so it is not an error.
    fn write_index(&self, state: &mut State) {
        if state.unloaded.is_some() && !self.load_indexed(state) {
            return;
        }
        let end = u32::try_from(state.write_offset).unwrap_or(u32::MAX);
        let bytes = index::encode(
            &self.log_id,
            state.header.first_seq,
            &state.offsets,
            end,
            state.data_crc,
        );
        let name = index_name(state.header.first_seq);
        let tmp = self.dir.join(format!("{name}.tmp"));
        let _ = self.storage.remove_file(&tmp);
        let written = self
            .storage
            .create_file(&tmp, 0)
            .and_then(|file| self.storage.write_at(&file, 0, &bytes))
            .and_then(|()| self.storage.rename(&tmp, &self.dir.join(&name)));
        if written.is_err() {
            let _ = self.storage.remove_file(&tmp);
        } else {
            state.indexed = state.offsets.len();
        }
    }

    /// Reads back the offsets of the `unloaded` prefix from the active segment's index file
    /// (IDX-2: header, checksum, identity, first seq, and the count and `data_crc` recovery
    /// took from it), ahead of the ones since.
    /// Returns `false` when the file no longer lists exactly them (removed or damaged
    /// meanwhile): the index, a cache, is then not written again for this segment, and
    /// the next open scans what the old one does not cover.
    fn load_indexed(&self, state: &mut State) -> bool {
        let Some(vouched) = state.unloaded else {
            return true;
        };
        let first = state.header.first_seq;
        let path = self.dir.join(index_name(first));
        let listed = crate::storage::read_file(&*self.storage, &path)
            .ok()
            .and_then(|bytes| index::decode(&bytes, &self.log_id, first))
            .filter(|index| {
                index.offsets.len() == vouched.count && index.data_crc == Some(vouched.data_crc)
            });
        let Some(index) = listed else {
            return false;
        };
        let mut offsets = index.offsets;
        offsets.extend_from_slice(&state.offsets);
        state.offsets = offsets;
        state.unloaded = None;
        true
    }

    /// IDX-5: after a flush, indexes the active segment's records, now all durable, so that
    /// the next open scans only what is appended after them. Nothing to do when the index
    /// already covers them, or when the writer is poisoned or its segment limited.
    fn index_active(&self) {
        let mut state = self.lock_state();
        let durable = self.commit.durable_seq() >= state.seq_next;
        let unloaded = state.unloaded.map_or(0, |v| v.count);
        let dirty = unloaded + state.offsets.len() > state.indexed;
        if durable && dirty && !state.poisoned && !state.limited && state.pending == 0 {
            self.write_index(&mut state);
        }
    }

    /// Waits until every seq below `target` is durable; one waiter syncs for all (DUR-1).
    fn wait_durable(&self, target: u64) -> Result<()> {
        let mut failed_path = None;
        let mut failed_write = None;
        let outcome = self.commit.wait(target, || {
            // Appends still writing would each need a sync of their own right after
            // this one; give them a moment to finish so this sync covers them.
            // When the last sync covered k appends, k appenders are likely about to
            // append again: wait (a bounded moment) until as many have written since.
            let expected = self.last_covered.load(Ordering::SeqCst);
            let since = self.synced_upto.load(Ordering::SeqCst);
            let deadline = std::time::Instant::now() + GATHER_WAIT_MAX;
            while (self
                .seq_written
                .load(Ordering::SeqCst)
                .saturating_sub(since)
                < expected
                || self.in_flight.load(Ordering::SeqCst) > 0)
                && std::time::Instant::now() < deadline
            {
                std::thread::yield_now();
            }
            // Write what is buffered; then everything is in the active file or in sealed
            // segments, which were synced when sealed (DUR-4) or are being synced in the
            // background (DUR-6).
            let (file, upto, path, sealing, dir_unsynced) = {
                let mut state = self.lock_state();
                if let Err(error) = self.flush_buffer(&mut state) {
                    state.poisoned = true;
                    let io = std::io::Error::other(error.to_string());
                    failed_write = Some(error);
                    return Err(io);
                }
                (
                    Arc::clone(&state.active),
                    state.seq_next,
                    self.active_path(&state),
                    std::mem::take(&mut state.sealing),
                    (state.dir_synced < state.dir_changes).then_some(state.dir_changes),
                )
            };
            if let Err((path, error)) = self.finish_staged(sealing, dir_unsynced.is_some()) {
                failed_path = Some(path);
                return Err(error);
            }
            if let Some(changes) = dir_unsynced {
                let mut state = self.lock_state();
                state.dir_synced = state.dir_synced.max(changes);
            }
            let before = self.synced_upto.load(Ordering::SeqCst);
            let synced = self.storage.sync_data(&file).map(|()| upto);
            self.last_covered
                .store(upto.saturating_sub(before), Ordering::SeqCst);
            self.synced_upto.store(upto, Ordering::SeqCst);
            failed_path = Some(path);
            synced
        });
        match outcome {
            Ok(()) => Ok(()),
            Err(WaitError::Poisoned) => Err(ErrorKind::Poisoned.into()),
            // DUR-10: the records being made durable may be on disk in part, or not at all.
            Err(WaitError::Io(error)) => {
                self.lock_state().poisoned = true;
                let error = failed_write.unwrap_or_else(|| {
                    let path = failed_path.unwrap_or_else(|| self.dir.clone());
                    Error::io("fsync", path, &error)
                });
                Err(error.with_fate_unknown())
            }
        }
    }

    fn active_path(&self, state: &State) -> PathBuf {
        self.dir.join(segment_name(state.header.first_seq))
    }
}

impl Flusher {
    /// DUR-2: syncs at most `max_delay` after the first unsynced write.
    fn start(shared: Arc<Shared>, max_delay: std::time::Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::SeqCst) {
                std::thread::park_timeout(max_delay);
                let seq_next = shared.lock_state().seq_next;
                // A failure poisons the writer; the next append reports it.
                let _ = shared.wait_durable(seq_next);
            }
        });
        Self { stop, thread }
    }
}

/// How a writer's open finds its log directory and takes its lock (LOG-1).
#[derive(Debug)]
pub(crate) enum LogDir {
    /// A new log's: the directory is created when absent.
    Create,
    /// A published session's: never created; gone (its session deleted meanwhile), the
    /// open fails with an `IO` error of kind `NotFound`.
    Existing,
    /// A session's just published, with the lock taken in its build directory and held
    /// through the rename that published it (STORE-6): no other opener can take the
    /// session between its publish and its creator's open.
    Locked(FileLock),
}

/// LOG-1: the exclusive lock, refused at once with `LOCKED`. `LOCK` is created only when
/// it is absent; any other failure to open it (a read-only filesystem, a permission) is
/// reported as it is, with the path.
pub(crate) fn take_lock(storage: &dyn Storage, dir: &Path) -> Result<FileLock> {
    take_lock_attempt(storage, dir, 0)
}

/// [`take_lock`], for the `attempt`-th time: the file locked at an earlier attempt was
/// replaced at `LOCK` meanwhile.
fn take_lock_attempt(storage: &dyn Storage, dir: &Path, attempt: u32) -> Result<FileLock> {
    let path = dir.join("LOCK");
    let file = match storage.open_file(&path, true) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match storage.create_file(&path, 0) {
                Ok(file) => file,
                // Created by another opener meanwhile: open that one.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => storage
                    .open_file(&path, true)
                    .map_err(|e| Error::io("open", &path, &e))?,
                Err(e) => return Err(Error::io("create", &path, &e)),
            }
        }
        Err(e) => return Err(Error::io("open", &path, &e)),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Err(ErrorKind::Locked { path }.into()),
        Err(TryLockError::Error(error)) => return Err(Error::io("flock", &path, &error)),
    }
    let lock = FileLock(file);
    // LOG-1: the lock holds only if the file locked is still the one at `path`. Between
    // the open and the lock, the log's directory may have been renamed away (a delete,
    // STORE-9) and another made in its place (a create of the same id): a lock on the
    // old file would let this writer open the new log beside its own writer. Looked up
    // by path, not through `storage`: the check is no I/O of the log (a simulated disk's
    // I/O points and seeded faults stay those of the opens it models).
    let same = match std::fs::symlink_metadata(&path) {
        Ok(now) => match lock.0.metadata() {
            Ok(locked) => {
                use std::os::unix::fs::MetadataExt;
                (locked.dev(), locked.ino()) == (now.dev(), now.ino())
            }
            _ => false,
        },
        // Gone: the log's directory was renamed away (its session deleted).
        Err(e) => return Err(Error::io("stat", &path, &e)),
    };
    if same {
        return Ok(lock);
    }
    drop(lock);
    if attempt >= 8 {
        return Err(ErrorKind::Locked { path }.into());
    }
    take_lock_attempt(storage, dir, attempt + 1)
}

/// A held `flock` on a file, released explicitly (`LOCK_UN`) when dropped, before the file
/// is closed. Closing alone releases the lock only once every descriptor of the open file
/// is closed, and a child process this process forks (on any thread) holds copies of them
/// all until it execs: a lock released by closing could outlive its holder for that
/// moment, and a reopen right after would be refused `LOCKED` (LOG-1).
#[derive(Debug)]
pub(crate) struct FileLock(pub(crate) File);

impl Drop for FileLock {
    fn drop(&mut self) {
        // Best effort: should it fail, closing the file releases the lock anyway.
        let _ = self.0.unlock();
    }
}

/// SEG-7: the capacity of a new segment whose first record is `record_len` bytes long:
/// the options' (clamped) capacity, or just enough for the record when that is larger. The
/// caller has refused a record that no segment can hold ([`record_fits`]).
fn capacity_for(options: &LogOptions, record_len: u64) -> u64 {
    options
        .segment_capacity()
        .max(SEGMENT_HEADER_LEN as u64 + record_len)
}

/// The form `event` is stored in, in a segment with `header`: REC-11's chunk record when
/// the segment sets `CHUNK_RECORDS` (SEG-9) and the event is one, else the §4 record.
fn stored_form<'a>(header: &SegmentHeader, event: &'a Event) -> EventRef<'a> {
    if header.incompat_features & super::segment::CHUNK_RECORDS != 0 {
        crate::record::compact(&event.as_ref())
    } else {
        event.as_ref()
    }
}

/// Joins `member` to the open run ([`State::open_run`]): `false` (nothing changed) when
/// there is none, or `member` does not continue it (DSH ROW-3), or the run would pass its
/// cap (REC-20) or the segment's capacity.
fn join_run(state: &mut State, member: compact::ChunkMember<'_>) -> bool {
    let Some(run) = &mut state.open_run else {
        return false;
    };
    let start = state.write_offset + state.buffer.len() as u64;
    let room = usize::try_from(state.header.capacity.saturating_sub(start)).unwrap_or(usize::MAX);
    if !run.join_within(&member, room) {
        return false;
    }
    // The members of a run share its offset (IDX-1): where the buffer ends.
    let offset = state.write_offset + state.buffer.len() as u64;
    state
        .offsets
        .push(u32::try_from(offset).unwrap_or(u32::MAX));
    state.pending += 1;
    state.seq_next += 1;
    true
}

/// Encodes the open run, if any, at the end of the buffer: no chunk joins it after.
fn close_run(state: &mut State) {
    if let Some(run) = state.open_run.take() {
        run.encode(&mut state.buffer);
    }
}

/// The bytes of the records not yet written: the buffer's and the open run's.
fn unwritten_len(state: &State) -> usize {
    state.buffer.len()
        + state
            .open_run
            .as_ref()
            .map_or(0, |run| compact::frame_len(run.body_len()))
}

/// Why an admitted event has no compact record (REC-20): a field out of range, which
/// admission refuses first (`ENVELOPE_INVALID`), or a text of 4 GiB (`EVENT_TOO_LARGE`).
fn refused(event: &Event, why: compact::Refusal) -> Error {
    if why == compact::Refusal::TextLength {
        let max = crate::limits::EVENT_BYTES_LIMIT;
        let len = event.text().len();
        return ErrorKind::EventTooLarge { len, max }.into();
    }
    ErrorKind::EnvelopeInvalid {
        reason: format!(
            "seq {}: no compact record holds it: {}",
            event.seq(),
            why.reason()
        ),
    }
    .into()
}

/// SEG-7: `EVENT_TOO_LARGE` for an event whose record no segment can hold (a segment's
/// capacity is at most 2^32 − 1 bytes).
fn record_fits(event: &Event) -> Result<()> {
    let len = frame_len(body_len(&event.as_ref())) as u64;
    if SEGMENT_HEADER_LEN as u64 + len <= super::SEGMENT_BYTES_MAX {
        return Ok(());
    }
    let max = crate::limits::EVENT_BYTES_LIMIT;
    let len = event.text().len();
    Err(ErrorKind::EventTooLarge { len, max }.into())
}

/// SEG-6: header, sync the file, sync the directory.
fn create_segment(storage: &dyn Storage, dir: &Path, header: &SegmentHeader) -> Result<File> {
    let file = create_segment_file(storage, dir, header)?;
    storage
        .sync_dir(dir)
        .map_err(|e| Error::io("fsync", dir, &e))?;
    Ok(file)
}

/// An empty segment 0 of a new log identity in `dir`, with the default capacity and
/// features, synced with its directory: what salvage leaves of a log whose first segment
/// it set aside (SLV-3), so that the log it leaves is one every reader and writer opens.
///
/// # Errors
/// `IO`.
pub(crate) fn create_first_segment(storage: &dyn Storage, dir: &Path) -> Result<()> {
    let header = first_header(dir, &super::LogOptions::default());
    create_segment(storage, dir, &header).map(drop)
}

/// The header of segment 0 of a new log in `dir` (a new `log_id`), as `options` say.
fn first_header(dir: &Path, options: &super::LogOptions) -> SegmentHeader {
    SegmentHeader {
        log_id: new_log_id(dir),
        index: 0,
        first_seq: 0,
        capacity: options.segment_capacity(),
        incompat_features: options.segment_features(),
    }
}

/// SEG-6 without the directory sync: a segment file with its header, synced. For a log
/// not yet published, whose directory is synced once at the end (`store.md` STORE-13).
///
/// # Errors
/// `IO`.
pub(crate) fn create_segment_file(
    storage: &dyn Storage,
    dir: &Path,
    header: &SegmentHeader,
) -> Result<File> {
    let file = write_segment_file(storage, dir, header)?;
    storage
        .sync_data(&file)
        .map_err(|e| Error::io("fsync", dir.join(segment_name(header.first_seq)), &e))?;
    Ok(file)
}

/// A segment file with its header, not synced: a `Staged` log syncs it when it is sealed
/// or flushed (DUR-6).
fn write_segment_file(storage: &dyn Storage, dir: &Path, header: &SegmentHeader) -> Result<File> {
    let path = dir.join(segment_name(header.first_seq));
    let file = storage
        .create_file(&path, initial_len(header))
        .map_err(|e| Error::io("create", &path, &e))?;
    storage
        .write_at(&file, 0, &header.encode())
        .map_err(|e| Error::io("write", &path, &e))?;
    Ok(file)
}

/// SEG-6: the length a new segment file is created with: its header and the first step of
/// room after it.
fn initial_len(header: &SegmentHeader) -> u64 {
    grown_len(SEGMENT_HEADER_LEN as u64, header.capacity)
}

/// What recovery hands over: the writer's state, the log's identity, the report, and
/// the segments it opened for a reader.
type Recovered = (State, LogId, OpenReport, Vec<Segment>);

/// Checks the chain from the directory's names and recovers the last segment (§7): sealed
/// segments are not opened here (their headers are checked on first access, SEG-3), except
/// limited ones (LIM-3); the last is scanned from where its index's vouched prefix ends
/// (IDX-5), or from its first record.
fn recover(
    storage: &dyn Storage,
    dir: &Path,
    options: &LogOptions,
    chain: Option<Chain>,
    marks: Marks<'_>,
) -> Result<Recovered> {
    if chain.is_none()
        && let Some(known) = marks.known
        && let Some(recovered) = recover_known(storage, dir, known, marks.durable_seq)
    {
        return Ok(recovered);
    }
    let names = storage
        .list_dir(dir)
        .map_err(|e| Error::io("list", dir, &e))?;
    remove_temporary_files(storage, dir, &names);
    // A fork's child: every file of its chain was synced before it was published (STORE-13),
    // so the records recovery finds are durable already.
    let given = chain.is_some();
    let mut chain = match chain {
        Some(chain) => chain,
        // One listing serves both (the .tmp files are not in the chain).
        None => open_chain_listed(storage, dir, true, &names)?,
    };
    if let Some(known) = marks.known {
        recorded_segments_present(dir, &chain, known)?;
    }
    let mut report = OpenReport::default();
    if let Some(unborn) = chain.unborn.take() {
        // RCV-7: a later segment whose creation was cut short holds nothing.
        if chain.segments.is_empty() {
            return Err(corrupt(&unborn.path, 0, unborn.reason));
        }
        let previous = chain.segments.last().map(|last| &last.header);
        // The bytes as read: under the lock nothing is being created (LOG-1).
        let capacity = options.segment_capacity();
        if let Some(reason) = unborn.damage_as_read(storage, previous, capacity)? {
            return Err(corrupt(&unborn.path, 0, &reason));
        }
        // RCV-14: unless a durable mark says it held events, checked before anything is
        // removed (a refused open leaves no trace).
        let first = unborn
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(super::segment::parse_segment_name);
        let recorded = first.is_some_and(|first| {
            marks
                .known
                .is_some_and(|known| known.iter().any(|s| s.first_seq == first))
        });
        if let Some(first) = first.filter(|&first| marks.durable_seq > first) {
            return Err(missing_events(&unborn.path, 0, first, marks.durable_seq));
        }
        if recorded {
            let reason = "its header is not there, but the checkpoint records the segment \
                          (its creation was synced before it was recorded, RCV-14)";
            return Err(corrupt(&unborn.path, 0, reason));
        }
        drop(unborn.map);
        storage
            .remove_file(&unborn.path)
            .map_err(|e| Error::io("remove", &unborn.path, &e))?;
        storage
            .sync_dir(dir)
            .map_err(|e| Error::io("fsync", dir, &e))?;
        // The segment before it becomes the last again; appends continue there.
        report.removed_segment = Some(unborn.path);
    }
    let Some(last) = chain.segments.last() else {
        if marks.durable_seq > 0 {
            return Err(missing_events(dir, 0, 0, marks.durable_seq));
        }
        let header = first_header(dir, options);
        let file = create_segment(storage, dir, &header)?;
        let mut state = new_state(file, header, SEGMENT_HEADER_LEN as u64, Vec::new(), 0);
        state.file_len = initial_len(&header);
        let segments = reopened_segments(storage, dir)?;
        return Ok((state, header.log_id, report, segments));
    };
    let (header, log_id) = (last.header, last.header.log_id);
    if let Some(limit) = last.limit {
        // LIM-4: a limited last segment is sealed; nothing after its limit is recovered.
        if limit.seq_next < marks.durable_seq {
            let end = limit.end as usize;
            return Err(missing_events(
                &last.path,
                end,
                limit.seq_next,
                marks.durable_seq,
            ));
        }
        // Nothing is written to a limited segment (LIM-4): its length does not matter.
        let (segments, file) = into_segments(chain, None);
        let file = file.ok_or_else(|| corrupt(dir, 0, "no segment"))?;
        let mut state = new_state(
            file,
            header,
            u64::from(limit.end),
            Vec::new(),
            limit.seq_next,
        );
        state.limited = true;
        return Ok((state, log_id, report, segments));
    }
    let mut tail = recover_tail(storage, dir, &chain, marks.durable_seq, &mut report)?;
    if given {
        tail.unsynced = false;
    }
    finish_recovery(storage, dir, chain, tail, report)
}

/// The durable marks recovery is given (§7): a record of the chain (a checkpoint's,
/// RCV-11) and the number of events the log held durably (a checkpoint's `seq_next`).
#[derive(Debug, Clone, Copy)]
struct Marks<'a> {
    known: Option<&'a [KnownSegment]>,
    durable_seq: u64,
}

/// RCV-14, LOG-2: every segment a record of the chain names (a checkpoint's, of this log
/// directory, CKP-8) is still in the directory. A checkpoint is written only after the
/// segments it records exist and the events it covers are durable (CKP-5), so one that is
/// gone was lost: `CORRUPT` naming it, never an open of what remains.
fn recorded_segments_present(dir: &Path, chain: &Chain, known: &[KnownSegment]) -> Result<()> {
    let listed = |first: u64| {
        chain.sealed.iter().any(|s| s.first_seq == first)
            || chain.segments.iter().any(|s| s.header.first_seq == first)
    };
    let unborn = chain.unborn.as_ref().map(|u| u.path.as_path());
    for segment in known {
        let path = seq_file_path(dir, segment.first_seq, ".seg");
        if !listed(segment.first_seq) && unborn != Some(path.as_path()) {
            return Err(corrupt(
                &path,
                0,
                "a segment the checkpoint recorded is missing (LOG-2, RCV-14)",
            ));
        }
    }
    Ok(())
}

/// RCV-14: `CORRUPT` at `path` and `offset`, where the log ends at `seq_next` although a
/// checkpoint vouched that events up to `durable_seq` were durable.
fn missing_events(path: &Path, offset: usize, seq_next: u64, durable_seq: u64) -> Error {
    ErrorKind::Corrupt {
        location: format!("{} offset={offset}", path.display()),
        reason: format!(
            "the log ends at seq {seq_next} but its checkpoint covers {durable_seq} events: \
             seqs {seq_next}..{durable_seq} are missing (RCV-14)"
        ),
    }
    .into()
}

/// RCV-11: recovery over `known`, a record of the log's segments, without listing the
/// directory: taken only when the last known segment is still the last one (no file under
/// the next segment's name, `.seg` or `.idx`) and its scan ends cleanly (RCV-1, nothing to drop). `None`
/// otherwise, or on any failure: the caller then recovers from a listing (§7), which
/// decides every other case, so this path never changes a file.
fn recover_known(
    storage: &dyn Storage,
    dir: &Path,
    known: &[KnownSegment],
    durable_seq: u64,
) -> Option<Recovered> {
    let chain = open_chain_known(storage, dir, known)?;
    let (tail, torn) = examine_tail(storage, dir, &chain, durable_seq).ok()?;
    if torn.is_some() {
        return None;
    }
    // No segment after it, nor the index of one that is gone (LOG-2: the durable mark of
    // records lost with it, which only the listing's check names).
    if [".seg", ".idx"]
        .into_iter()
        .any(|ext| !is_absent(storage, &seq_file_path(dir, tail.seq_next, ext)))
    {
        return None;
    }
    let report = OpenReport {
        from_known_chain: true,
        ..OpenReport::default()
    };
    finish_recovery(storage, dir, chain, tail, report).ok()
}

/// The writer's state and the reader's segments once the last segment of `chain` is
/// recovered as `tail`. Records recovery found after the vouched prefix may be in the page
/// cache only (a killed process's): they are synced before anything can be written that
/// claims them durable (RCV-15). A log closed cleanly has none, and no sync.
fn finish_recovery(
    storage: &dyn Storage,
    dir: &Path,
    chain: Chain,
    tail: Tail,
    report: OpenReport,
) -> Result<Recovered> {
    let Some(last) = chain.segments.last() else {
        return Err(corrupt(dir, 0, "no segment"));
    };
    if tail.unsynced
        && let Some(file) = &last.file
    {
        storage
            .sync_data(file)
            .map_err(|e| Error::io("fsync", &last.path, &e))?;
    }
    let (header, log_id) = (last.header, last.header.log_id);
    // The map was made of the whole file (SEG-6); appends grow it from there.
    let file_len = last.map.len() as u64;
    // Neither the reader nor the writer reads the indexed prefix's offsets now (IDX-5):
    // both read them back from the index when they first need them.
    let layout = Layout {
        vouched: tail.vouched,
        after: tail.offsets.clone(),
        end: tail.end,
    };
    let (segments, file) = into_segments(chain, Some(layout));
    let file = file.ok_or_else(|| corrupt(dir, 0, "no segment"))?;
    let mut state = new_state(file, header, tail.end as u64, tail.offsets, tail.seq_next);
    state.file_len = file_len;
    state.unloaded = tail.vouched.filter(|v| v.count > 0);
    state.data_crc = tail.data_crc;
    state.indexed = tail.vouched.map_or(0, |v| v.count);
    Ok((state, log_id, report, segments))
}

/// The last segment after recovery.
struct Tail {
    /// The offsets of the records after the vouched prefix.
    offsets: Vec<u32>,
    end: usize,
    seq_next: u64,
    data_crc: u32,
    /// The prefix the index vouches for (IDX-5), whose offsets are not read.
    vouched: Option<index::Vouched>,
    /// Records were found after the vouched prefix and not synced since (RCV-15).
    unsynced: bool,
}

/// Recovers the last segment of `chain`: the prefix its index vouches for is taken as it is
/// (IDX-5), the rest is scanned and decided by the table (RCV-1 to RCV-9).
fn recover_tail(
    storage: &dyn Storage,
    dir: &Path,
    chain: &Chain,
    durable_seq: u64,
    report: &mut OpenReport,
) -> Result<Tail> {
    let (mut tail, torn) = examine_tail(storage, dir, chain, durable_seq)?;
    if let Some(dropped_to) = torn
        && let Some(last) = chain.segments.last()
        && let Some(file) = &last.file
    {
        // RCV-12: the bytes are kept in a quarantine file, synced, before they are zeroed.
        // RD-8: they are past the verified end, so read with pread, not through the map.
        let source = FileBytes {
            file,
            len: last.map.len(),
        };
        let dropped = read_range(&source, tail.end, dropped_to)
            .map_err(|e| read_error(&last.path, tail.end, &e))?;
        let first = last.header.first_seq;
        let quarantine = quarantine::write_bytes(storage, dir, first, tail.end as u64, &dropped)?;
        zero_tail(storage, file, &last.path, tail.end, dropped_to)?;
        // zero_tail synced the segment, records found before the tail included (RCV-15).
        tail.unsynced = false;
        report.torn_tail = Some(TornTail {
            segment: last.path.clone(),
            offset: tail.end as u64,
            bytes: (dropped_to - tail.end) as u64,
            quarantine,
        });
    }
    Ok(tail)
}

/// The decision of [`recover_tail`] without acting on it: the last segment of `chain`
/// after its vouched prefix (IDX-5), scanned and classified (§7), and, for a torn tail,
/// the offset up to which it is to be set aside and zeroed. `durable_seq` is a durable
/// mark given by the caller (a checkpoint's `seq_next`, RCV-14).
fn examine_tail(
    storage: &dyn Storage,
    dir: &Path,
    chain: &Chain,
    durable_seq: u64,
) -> Result<(Tail, Option<usize>)> {
    let Some(last) = chain.segments.last() else {
        return Err(corrupt(dir, 0, "no segment"));
    };
    let (bytes, header, path) = (&last.map[..], last.header, &last.path);
    // SEG-6, SEG-8: the writer sets a segment's length only to its steps, and a crash
    // keeps one of them. Any other length was cut by another process: damage, never a
    // torn tail.
    if !is_grown_len(bytes.len() as u64, header.capacity) {
        let reason = super::segment::cut_short(bytes.len() as u64, header.capacity);
        return Err(corrupt(path, bytes.len(), &reason));
    }
    let file = last
        .file
        .as_ref()
        .ok_or_else(|| corrupt(path, 0, "the last segment is not open for writing"))?;
    let first = header.first_seq;
    let index_path = dir.join(index_name(first));
    // RCV-13: when the vouched check fails, an index that checks out whole (IDX-2) still
    // marks the records it lists as durable; a damaged one among them is not a torn tail.
    let (prefix, listed_end) = index::durable_marks(
        storage,
        &index_path,
        bytes,
        &header.log_id,
        first,
        header.format(),
    )?;
    let (indexed, start, crc) =
        prefix.map_or((0, SEGMENT_HEADER_LEN, 0), |p| (p.count, p.end, p.data_crc));
    // RD-8: past the vouched prefix nothing is known written: scanned with pread.
    let source = FileBytes {
        file,
        len: bytes.len(),
    };
    let found = scan(&source, header.format(), start, first + indexed as u64)
        .map_err(|e| read_error(path, start, &e))?;
    let end = found.end;
    let at = stop_offset(found.stop, end);
    if end < listed_end && !matches!(found.stop, Stop::WrongSeq { .. }) {
        return Err(corrupt(
            path,
            at,
            "a record the segment's index lists as durable does not check out (RCV-13)",
        ));
    }
    let regions = data_regions(file, end, bytes.len());
    let torn = classify_tail(&source, &found.stop, end, &regions)
        .map_err(|e| read_error(path, end, &e))?
        .map_err(|reason| corrupt(path, at, reason))?;
    if found.seq_next < durable_seq {
        return Err(missing_events(path, at, found.seq_next, durable_seq));
    }
    let data_crc = crc32c::crc32c_append(crc, bytes.get(start..end).unwrap_or_default());
    let tail = Tail {
        unsynced: !found.offsets.is_empty(),
        offsets: found.offsets,
        end,
        seq_next: found.seq_next,
        data_crc,
        vouched: prefix,
    };
    Ok((tail, torn))
}

/// LOG-1: a writer removes the `.tmp` files a crash left, among `names` (the listing of
/// `dir`).
pub(crate) fn remove_temporary_files(storage: &dyn Storage, dir: &Path, names: &[String]) {
    for name in names.iter().filter(|name| is_temporary(name)) {
        let _ = storage.remove_file(&dir.join(name));
    }
}

/// Whether a file name's extension is `tmp`, as `Path::extension` says (the part after
/// the last dot, when something precedes that dot), without parsing the name as a path.
fn is_temporary(name: &str) -> bool {
    name.rsplit_once('.')
        .is_some_and(|(stem, extension)| !stem.is_empty() && extension == "tmp")
}

/// The segments of a log just created, for its reader.
fn reopened_segments(storage: &dyn Storage, dir: &Path) -> Result<Vec<Segment>> {
    let chain = open_chain(storage, dir, false)?;
    let layout = Layout {
        vouched: None,
        after: Vec::new(),
        end: SEGMENT_HEADER_LEN,
    };
    Ok(into_segments(chain, Some(layout)).0)
}

/// The tail decision past the durable marks (§7): `Ok(None)` for a clean end (RCV-1),
/// `Ok(Some(end))` to set aside and zero up to `end` (RCV-2, RCV-3, RCV-4, RCV-12), `Err`
/// for corruption (RCV-5, RCV-8). The caller has refused damage below a mark (RCV-13,
/// RCV-14) before.
///
/// # Errors
/// The outer error: a failed read of the bytes past `end` (RD-8).
fn classify_tail(
    source: &FileBytes<'_>,
    stop: &Stop,
    end: usize,
    regions: &[(usize, usize)],
) -> std::io::Result<Result<Option<usize>, &'static str>> {
    Ok(match *stop {
        Stop::Full => Ok(None),
        Stop::WrongSeq { .. } => Err("a record with the wrong seq (RCV-5)"),
        Stop::Invalid {
            error: RecordError::Body(_),
            ..
        } => Err("a record whose body breaks REC-5/REC-6 (RCV-8)"),
        Stop::End | Stop::Invalid { .. } => {
            let dirty_to = nonzero_end(source, end, regions)?;
            Ok((dirty_to != end).then_some(dirty_to))
        }
    })
}

/// The data regions of `file` from `from` to `len` (`SEEK_DATA` / `SEEK_HOLE`): a segment is
/// a sparse file (SEG-6), so the unused tail is a hole that need not be read to know it
/// is zero. A filesystem that cannot tell reports everything as data.
pub(crate) fn data_regions(file: &File, from: usize, len: usize) -> Vec<(usize, usize)> {
    use rustix::fs::{SeekFrom, seek};
    let mut regions = Vec::new();
    let mut at = from as u64;
    while at < len as u64 {
        let data = match seek(file, SeekFrom::Data(at)) {
            Ok(data) => data,
            // No data after `at`: the rest is a hole.
            Err(rustix::io::Errno::NXIO) => break,
            // The filesystem cannot tell: read it all.
            Err(_) => {
                regions.push((usize::try_from(at).unwrap_or(len), len));
                break;
            }
        };
        let hole = seek(file, SeekFrom::Hole(data)).unwrap_or(len as u64);
        let to_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX).min(len);
        regions.push((to_usize(data), to_usize(hole)));
        if hole <= at {
            break;
        }
        at = hole;
    }
    regions
}

/// RCV-9: zeros over the torn bytes, then a sync. The file keeps its length (SEG-8).
fn zero_tail(
    storage: &dyn Storage,
    file: &File,
    path: &Path,
    from: usize,
    to: usize,
) -> Result<()> {
    let zeros = vec![0; to - from];
    storage
        .write_at(file, from as u64, &zeros)
        .map_err(|e| Error::io("write", path, &e))?;
    storage
        .sync_data(file)
        .map_err(|e| Error::io("fsync", path, &e))
}

/// Where a scan that stopped at `stop`, its valid records ending at `end`, stopped.
pub(super) fn stop_offset(stop: Stop, end: usize) -> usize {
    match stop {
        Stop::Invalid { offset, .. } | Stop::WrongSeq { offset, .. } => offset,
        Stop::End | Stop::Full => end,
    }
}

fn new_state(
    file: File,
    header: SegmentHeader,
    write_offset: u64,
    offsets: Vec<u32>,
    seq_next: u64,
) -> State {
    State {
        pending: 0,
        active: Arc::new(file),
        header,
        write_offset,
        // Set by the caller when the segment is written to.
        file_len: 0,
        offsets,
        unloaded: None,
        data_crc: 0,
        indexed: 0,
        limited: false,
        seq_next,
        poisoned: false,
        buffer: Vec::new(),
        open_run: None,
        record: Vec::new(),
        sealing: Vec::new(),
        dir_changes: 0,
        dir_synced: 0,
    }
}

/// A fresh random log identity (SEG-1), from the standard library's randomly keyed
/// hasher mixed with the time, the process and the directory.
fn new_log_id(dir: &Path) -> LogId {
    use std::hash::BuildHasher;
    let mut id = [0; 16];
    for (i, half) in id.chunks_exact_mut(8).enumerate() {
        let state = std::collections::hash_map::RandomState::new();
        let hash = state.hash_one((i, dir, std::process::id(), std::time::SystemTime::now()));
        half.copy_from_slice(&hash.to_le_bytes());
    }
    id
}

/// An append counted among those under way (`in_flight`, which a `Sync` leader waits on
/// to gather appends into its sync, DUR-1) for as long as this lives: uncounted when the
/// append returns and when it unwinds (a caller's `build` closure that panics, caught by
/// the caller), so that no later sync waits on an append that ended.
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn count(in_flight: &'a AtomicUsize) -> Self {
        in_flight.fetch_add(1, Ordering::SeqCst);
        Self(in_flight)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// DUR-1: an append whose `build` closure panicked (the panic caught by its caller) is
    /// no longer counted as under way. Before, it stayed counted, and every later `Sync`
    /// append's sync waited out its whole gathering window for it.
    #[test]
    fn an_append_whose_build_panicked_is_not_counted_as_under_way() {
        let scratch = tempfile::tempdir().unwrap();
        let options = LogOptions {
            durability: Durability::Sync,
            ..LogOptions::default()
        };
        let (writer, _) = LogWriter::open(scratch.path(), options).unwrap();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            writer.append_with(|_| panic!("the caller's build fails"))
        }));
        assert!(panicked.is_err());
        assert_eq!(writer.shared.in_flight.load(Ordering::SeqCst), 0);
        let text = r#"{"type":"host/note","seq":0,"time":0,"data":{}}"#;
        let data = text.find("{}").unwrap();
        let fields = crate::event::EventFields {
            event_type: "host/note".into(),
            seq: 0,
            time: 0,
            surface_op: None,
            sources: None,
            ignorable: false,
        };
        let event = crate::event::Event::new(text.to_owned(), data..data + 2, None, fields);
        assert_eq!(writer.append(&[event]).unwrap(), 1, "the writer goes on");
        assert_eq!(writer.shared.in_flight.load(Ordering::SeqCst), 0);
    }

    proptest! {
        /// LOG-1: the `.tmp` test agrees with `Path::extension`.
        #[test]
        fn is_temporary_agrees_with_path_extension(name in "[a.]{0,4}(tmp|\\.tmp|seg|\\.seg)?[.]?") {
            let by_path = Path::new(&name).extension().is_some_and(|x| x == "tmp");
            prop_assert_eq!(is_temporary(&name), by_path, "{:?}", name);
        }
    }

    /// CZ-4: the name a decompressed copy has for a moment where the file system has no
    /// unnamed files is one a writer's open removes after a crash.
    #[cfg(feature = "compress")]
    #[test]
    fn a_decompressed_copy_left_by_a_crash_is_temporary() {
        let scratch = tempfile::tempdir().unwrap();
        let file = crate::log::compressed::unlinked_named_file_for_tests(scratch.path());
        assert!(is_temporary(&file), "{file}");
    }
}

#[cfg(all(test, loom))]
mod loom_publication;
