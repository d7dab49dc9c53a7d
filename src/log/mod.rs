//! The segmented append-only log of one session: surfacelog's own format, specified in
//! `format-spec/log-format.md` and cited here by rule ID.
//!
//! [`LogWriter`] appends (one per log, across processes: `LOCKED`), with three durability
//! modes and group commit; [`LogReader`] reads the committed prefix, in any process,
//! while the writer appends. Recovery at open drops a torn tail and refuses corruption.

mod chain;
mod compact;
pub(crate) mod compressed;
mod group_commit;
mod index;
pub mod limit;
mod map;
mod quarantine;
mod reader;
mod restore;
mod scan;
pub mod segment;
mod writer;

pub use chain::KnownSegment;
pub(crate) use chain::{Chain, open_own_segment};
pub(crate) use compact::compact_then;
pub use compact::{
    CompactOptions, KeptReason, LogCompaction, RewrittenSegment, compact, compact_with,
};
#[cfg(feature = "compress")]
pub use compressed::release_decompressed_copies;
// Hidden: the index codec for the fuzz targets (`fuzz/`), not part of the API.
#[doc(hidden)]
pub use index::{Index, decode as decode_index, encode as encode_index};
pub(crate) use map::{FileWords, map as map_file};
pub use quarantine::{LogSalvage, QUARANTINE_SUFFIX, SetAside, salvage};
pub(crate) use reader::BoundarySegment;
pub use reader::LogReader;
pub(crate) use writer::DurableWait;
pub use writer::LogWriter;
pub(crate) use writer::{FileLock, LogDir, take_lock};

/// A log opened for writing together with a reader of it: what a stored session holds.
/// Appends go through the writer; reads come from the reader, refreshed after each
/// append, so a session reads its own events without copying them.
#[derive(Debug)]
pub struct DiskLog {
    writer: LogWriter,
    reader: LogReader,
    /// Appended events the writer still buffers (DUR-2, DUR-3), so not yet readable from
    /// the files. Invariant: they follow the reader's events, in order.
    unwritten: Vec<crate::event::Event>,
    /// Bytes of event text in `unwritten`: the reader catches up only after about a write
    /// buffer's worth, since before that the files cannot hold more (checking costs a
    /// scan and, at a segment's end, a failed open of the next one).
    unwritten_bytes: usize,
    /// The `unwritten_bytes` at which the next catch-up is tried: [`CATCH_UP_BYTES`] more
    /// than the last one left. What it left is still in the writer's buffer (or, after a
    /// failure, unreadable), so trying again before more text arrives would find nothing
    /// new: a write buffer of compact records holds about three times its size in text.
    catch_up_at: usize,
    /// Appends return once written, even in `Sync` ([`DiskLog::set_defer_sync`]).
    defer_sync: bool,
}

/// How much appended text [`DiskLog`] lets accumulate before it refreshes its reader:
/// the writer's buffer size, so in buffered modes most refreshes find new records.
const CATCH_UP_BYTES: usize = 256 << 10;

/// How much appended text [`DiskLog`] keeps in memory while its reader cannot catch up
/// (DUR-8): past it, an append first catches up and, if that still fails, is refused before
/// anything is written.
const UNWRITTEN_BYTES_MAX: usize = 16 << 20;

impl DiskLog {
    /// Opens (or creates) the log in `dir` for writing and reading, recovering its tail.
    ///
    /// # Errors
    /// As [`LogWriter::open`] and [`LogReader::open`].
    pub fn open(dir: &std::path::Path, options: LogOptions) -> crate::Result<(Self, OpenReport)> {
        Self::open_from(dir, options, None, None, 0, LogDir::Create)
    }

    /// [`DiskLog::open`] over a chain already opened and checked, when given: a fork's
    /// child ([`LogReader::into_fork_chain`]); otherwise over the segments `known` records
    /// (a checkpoint's, `checkpoint.md` CKP-8) when they are still the log's, without
    /// listing the directory (RCV-11). `durable_seq` is a durable mark (§7): the log held at
    /// least that many events durably (a checkpoint's `seq_next`), 0 when none is known.
    /// `how` says whether `dir` may be created and whether its lock is held ([`LogDir`]).
    ///
    /// # Errors
    /// As [`DiskLog::open`]; `CORRUPT` when the log holds fewer than `durable_seq` events.
    pub(crate) fn open_from(
        dir: &std::path::Path,
        options: LogOptions,
        chain: Option<Chain>,
        known: Option<&[KnownSegment]>,
        durable_seq: u64,
        how: LogDir,
    ) -> crate::Result<(Self, OpenReport)> {
        let storage = Arc::clone(&options.storage);
        let (writer, report, segments) =
            LogWriter::open_recovered_from(dir, options, chain, known, durable_seq, how)?;
        let reader = LogReader::from_recovered(dir, storage, segments, false, false)?;
        Ok((
            Self {
                writer,
                reader,
                unwritten: Vec::new(),
                unwritten_bytes: 0,
                catch_up_at: CATCH_UP_BYTES,
                defer_sync: false,
            },
            report,
        ))
    }

    /// Appends events and makes them readable.
    ///
    /// An `Ok` means the events are appended; an `Err`, that none is (or, when the writer
    /// failed, `POISONED` on every later append, DUR-5). Reading back what was written is
    /// not part of the append (DUR-8): should the reader fail to catch up (a map refused,
    /// damage met), the events stay readable from memory and the catch-up is tried again
    /// later.
    ///
    /// # Errors
    /// As [`LogWriter::append`]; or, before anything is written, the reader's error when it
    /// has fallen `UNWRITTEN_BYTES_MAX` behind and still cannot catch up (as
    /// [`LogReader::refresh`]).
    pub fn append(&mut self, events: &[crate::event::Event]) -> crate::Result<()> {
        self.append_owned(events.to_vec())
    }

    /// [`DiskLog::append`] taking the events by value, so that the ones the writer still
    /// buffers are kept without a copy.
    ///
    /// # Errors
    /// As [`DiskLog::append`].
    pub fn append_owned(&mut self, events: Vec<crate::event::Event>) -> crate::Result<()> {
        self.make_room()?;
        self.write(&events)?;
        self.unwritten_bytes += events.iter().map(|e| e.text().len()).sum::<usize>();
        self.unwritten.extend(events);
        self.appended();
        Ok(())
    }

    /// [`DiskLog::append_owned`] of one event.
    ///
    /// # Errors
    /// As [`DiskLog::append`].
    pub fn append_one(&mut self, event: crate::event::Event) -> crate::Result<()> {
        self.make_room()?;
        self.write(std::slice::from_ref(&event))?;
        self.unwritten_bytes += event.text().len();
        self.unwritten.push(event);
        self.appended();
        Ok(())
    }

    /// Hands `events` to the writer: appended and, unless deferred (DUR-11), durable in
    /// `Sync`.
    fn write(&self, events: &[crate::event::Event]) -> crate::Result<u64> {
        if self.defer_sync {
            self.writer.append_deferred(events)
        } else {
            self.writer.append(events)
        }
    }

    /// Whether appends return once written, without waiting for their sync in `Sync`
    /// durability (DUR-11): the caller then waits with [`DiskLog::durable_wait`] after
    /// releasing its own lock, so that appenders it serializes share one sync.
    pub(crate) fn set_defer_sync(&mut self, defer: bool) {
        self.defer_sync = defer;
    }

    /// Writes the buffered records to the OS, without a sync (`LogWriter::write_out`).
    ///
    /// # Errors
    /// As `LogWriter::write_out`.
    pub(crate) fn write_out(&self) -> crate::Result<()> {
        self.writer.write_out()
    }

    /// The wait for deferred appends (DUR-11).
    pub(crate) fn durable_wait(&self) -> DurableWait {
        self.writer.durable_wait()
    }

    /// Before an append (DUR-8): refuses it, with nothing written, when the reader is
    /// `UNWRITTEN_BYTES_MAX` behind and cannot catch up.
    fn make_room(&mut self) -> crate::Result<()> {
        if self.unwritten_bytes >= UNWRITTEN_BYTES_MAX {
            self.catch_up()?;
        }
        Ok(())
    }

    /// After an append: catches the reader up once enough text waits in `unwritten`. A
    /// failure is not the append's (its events are written): they stay in `unwritten`,
    /// readable, and [`DiskLog::make_room`] reports the failure if it lasts (DUR-8).
    fn appended(&mut self) {
        if self.unwritten_bytes >= self.catch_up_at {
            let _ = self.catch_up();
        }
    }

    /// Reads what the writer has written and forgets those events from `unwritten`.
    fn catch_up(&mut self) -> crate::Result<()> {
        let caught_up = self.reader.refresh_written(self.writer.seq_on_file());
        // The reader may have read some before failing: forget those too, so `unwritten`
        // keeps following its events.
        let visible = crate::event::EventSource::seq_next(&self.reader);
        let written = self
            .unwritten
            .iter()
            .take_while(|e| e.seq() < visible)
            .count();
        let read: usize = self
            .unwritten
            .drain(..written)
            .map(|e| e.text().len())
            .sum();
        self.unwritten_bytes -= read;
        self.catch_up_at = self.unwritten_bytes.saturating_add(CATCH_UP_BYTES);
        caught_up.map(|_| ())
    }

    /// Makes every appended event durable, then catches the reader up (a failure of that
    /// is left for a later catch-up, as after an append: DUR-8).
    ///
    /// # Errors
    /// As [`LogWriter::flush`].
    pub fn flush(&mut self) -> crate::Result<()> {
        self.writer.flush()?;
        let _ = self.catch_up();
        Ok(())
    }

    /// Makes every appended event durable, without reading them back (a fork's end-seed).
    ///
    /// # Errors
    /// As [`LogWriter::flush`].
    pub fn sync(&self) -> crate::Result<()> {
        self.writer.flush()
    }

    /// Flushes and closes the log.
    ///
    /// # Errors
    /// As [`LogWriter::close`].
    pub fn close(self) -> crate::Result<()> {
        self.writer.close()
    }

    /// The log's directory.
    pub fn dir(&self) -> &std::path::Path {
        self.writer.dir()
    }

    /// The log's segments as its reader knows them, for a checkpoint to record
    /// (`checkpoint.md` CKP-8).
    pub fn known_segments(&self) -> Vec<KnownSegment> {
        self.reader.known_segments()
    }
}

impl crate::event::EventSource for DiskLog {
    fn seq_next(&self) -> u64 {
        self.reader.seq_next() + self.unwritten.len() as u64
    }

    fn event(&self, seq: u64) -> crate::Result<Option<crate::event::EventRef<'_>>> {
        match seq.checked_sub(self.reader.seq_next()) {
            None => self.reader.event(seq),
            Some(index) => Ok(usize::try_from(index)
                .ok()
                .and_then(|index| self.unwritten.get(index))
                .map(crate::event::Event::as_ref)),
        }
    }

    /// RD-9 for the records on disk; the reader skips the seqs still in memory.
    fn read_ahead(&self, seqs: &[u64]) {
        self.reader.read_ahead(seqs);
    }
}

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::storage::{FsStorage, Storage};

/// When appended events become durable (`log-format.md` §8).
///
/// ```
/// use std::time::Duration;
/// use surfacelog::{Durability, StoreOptions};
///
/// // Each append durable before it returns (the default)...
/// let safe = StoreOptions::new().durability(Durability::Sync);
/// // ...or written to the OS at once and synced in the background within 10 ms.
/// let fast = StoreOptions::new().durability(Durability::Batch { max_delay: Duration::from_millis(10) });
/// # let _ = (safe, fast);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// `append` returns once its events are durable; concurrent appends share one
    /// `fdatasync` (DUR-1).
    Sync,
    /// `append` returns once written to the OS; a background thread makes them durable
    /// within `max_delay` plus one sync (DUR-2).
    Batch {
        /// The longest an appended event stays not durable.
        max_delay: Duration,
    },
    /// Durable at `flush()` and at close (DUR-3).
    Manual,
    /// For a log that nobody can open yet, built to be published whole (an import under
    /// the store's `tmp/`, `store.md` STORE-14): as `Manual`, but a sealed segment's sync
    /// runs in the background while appends go on, and segments are created without
    /// syncs; `flush()` waits for those syncs, then syncs the active segment and the
    /// directory (DUR-6). The order of DUR-4 is not kept, so after a crash the log must be
    /// discarded, never recovered.
    Staged,
}

/// How a log is written.
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// The capacity of a new segment (SEG-7). Larger segments mean fewer files and
    /// rolls; smaller ones reclaim space in finer steps. Default: 64 MiB. Clamped where
    /// it is used ([`LogOptions::segment_capacity`]) to [`SEGMENT_BYTES_MIN`] (136 bytes) ..=
    /// [`SEGMENT_BYTES_MAX`] (2^32 − 1, offsets are 32-bit): a larger value gives
    /// segments of 2^32 − 1 bytes, a smaller one segments of 136 bytes. A record larger than
    /// the capacity gets a segment just large enough for it (SEG-7).
    pub segment_bytes: u64,
    /// Default: `Sync`.
    pub durability: Durability,
    /// The file operations; tests inject failures here. Default: the real filesystem.
    pub storage: Arc<dyn Storage>,
    /// Store streamed chunks as chunk records (`log-format.md` §4.1, REC-11) in segments of
    /// version 1 records, that is when [`LogOptions::compact_records`] is off: segments this
    /// writer creates set `CHUNK_RECORDS` (SEG-9), which builds without the feature refuse.
    /// Default: on.
    pub chunk_records: bool,
    /// Store every event as a compact record (`log-format.md` §4.2): segments this writer
    /// creates set `COMPACT_RECORDS` (SEG-9), which builds before it refuse; consecutive
    /// streamed chunks of one append, or of one write of the write buffer, share a
    /// record. Takes precedence over [`LogOptions::chunk_records`]. Off, the writer creates
    /// segments of version 1 records (§4). A log's existing last segment keeps its format
    /// until the next roll, whichever is set (SEG-9). Default: on.
    pub compact_records: bool,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            durability: Durability::Sync,
            storage: Arc::new(FsStorage),
            chunk_records: true,
            compact_records: true,
        }
    }
}

/// The default segment capacity: 64 MiB.
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 << 20;

/// The smallest segment capacity (SEG-7): 136 bytes, the header and the smallest record's
/// frame (REC-1: a frame header and a body's fixed part). Larger records get segments just
/// large enough for them.
pub const SEGMENT_BYTES_MIN: u64 = (crate::log::segment::SEGMENT_HEADER_LEN
    + crate::record::FRAME_HEADER_LEN
    + crate::record::BODY_FIXED_LEN) as u64;

/// The largest segment capacity (SEG-7): 2^32 − 1 bytes, so that every offset in a segment
/// fits in 32 bits (record offsets, an index's `end`, a limit's `end`).
pub const SEGMENT_BYTES_MAX: u64 = u32::MAX as u64;

impl LogOptions {
    /// The `incompat_features` of a segment this writer creates (SEG-9).
    pub fn segment_features(&self) -> u16 {
        if self.compact_records {
            crate::log::segment::COMPACT_RECORDS
        } else if self.chunk_records {
            crate::log::segment::CHUNK_RECORDS
        } else {
            0
        }
    }

    /// The capacity of a new segment: [`LogOptions::segment_bytes`] clamped to
    /// [`SEGMENT_BYTES_MIN`] ..= [`SEGMENT_BYTES_MAX`] (SEG-7).
    pub fn segment_capacity(&self) -> u64 {
        self.segment_bytes
            .clamp(SEGMENT_BYTES_MIN, SEGMENT_BYTES_MAX)
    }
}

/// What opening a log for writing found and did (§7).
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// let (_, opened) = store.open_session("s")?;
/// let report: &surfacelog::OpenReport = &opened.log;
/// assert!(report.torn_tail.is_none()); // closed cleanly: nothing to set aside
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// `TORN_TAIL`: bytes past the last durable mark that were not valid records continuing
    /// the log (an incomplete final write, or writes of which a power cut kept only some),
    /// copied into a quarantine file and then dropped from the segment (information, not an
    /// error; RCV-9, RCV-12).
    pub torn_tail: Option<TornTail>,
    /// A last segment whose creation was cut short, removed (RCV-7).
    pub removed_segment: Option<PathBuf>,
    /// Whether the segment chain was taken from a record of it (a checkpoint's,
    /// `checkpoint.md` CKP-8) instead of a listing of the directory (RCV-11). Such an open
    /// repaired nothing, so the two fields above are empty.
    pub from_known_chain: bool,
}

/// A dropped torn tail (RCV-9), kept in a quarantine file (RCV-12).
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// let (_, opened) = store.open_session("s")?;
/// if let Some(torn) = &opened.log.torn_tail {
///     eprintln!("{}: {} bytes at {} kept in {}", torn.code(), torn.bytes, torn.offset, torn.quarantine.display());
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment file.
    pub segment: PathBuf,
    /// Where the dropped bytes started.
    pub offset: u64,
    /// How many bytes were zeroed: from `offset` to the last non-zero byte.
    pub bytes: u64,
    /// The quarantine file beside the segment holding exactly those bytes, written and
    /// synced before they were zeroed (RCV-12): never deleted or overwritten by the engine.
    pub quarantine: PathBuf,
}

impl TornTail {
    /// The stable code of this report, `TORN_TAIL` (contract §11).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// # let (_, opened) = store.open_session("s")?;
    /// assert!(opened.log.torn_tail.as_ref().is_none_or(|t| t.code() == "TORN_TAIL"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn code(&self) -> &'static str {
        "TORN_TAIL"
    }
}
