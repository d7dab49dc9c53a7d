//! Compaction (log-format.md §13, CMP-1 to CMP-6): an explicit rewrite of a log's sealed
//! segments written before chunk records (§4.1) into segments that use them, and, when
//! asked, into compressed segments (§14, CZ-5). Every event keeps its seq and its text byte
//! for byte; only the form of its record, and of the file, changes.
#![deny(clippy::indexing_slicing)]

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use super::compressed::is_compressed;
use super::quarantine::{Examined, Opened, examine, locked_listing};
use super::reader::read_error;
use super::scan::{FileBytes, read_range};
use super::segment::{
    CHUNK_RECORDS, COMPACT_RECORDS, SEGMENT_HEADER_LEN, SegmentHeader, index_name, seq_file_name,
    seq_file_path,
};
use crate::error::{Error, ErrorKind, Result};
use crate::record::{Format, compact as compact_form, decode, decode_as, encode};
use crate::storage::Storage;

/// A segment [`compact`] rewrote (CMP-3).
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// let report = store.compact_log("s")?;
/// for segment in &report.rewritten {
///     println!(
///         "segment {}: {} events ({} chunk records), {} -> {} bytes",
///         segment.first_seq, segment.events, segment.chunk_records,
///         segment.bytes_before, segment.bytes_after,
///     );
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewrittenSegment {
    /// Its name's seq, the first of its records.
    pub first_seq: u64,
    /// How many events it holds (unchanged).
    pub events: u64,
    /// Of them, how many are now stored as chunk records (REC-11).
    pub chunk_records: u64,
    /// The file's length before (its records, padding and the zeros up to its growth
    /// step, SEG-6).
    pub bytes_before: u64,
    /// The file's length after: its header and records, nothing more, or its compressed
    /// form (§14).
    pub bytes_after: u64,
    /// Whether it is now a compressed segment (CZ-5).
    pub compressed: bool,
}

/// Why [`compact`] left a segment as it was (CMP-1, CMP-6).
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// use surfacelog::KeptReason;
/// let report = store.compact_log("s")?;
/// // One segment: the last, which the writer appends to, is never rewritten.
/// assert_eq!(report.kept, [(0, KeptReason::Last)]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeptReason {
    /// The last segment, which the writer appends to and followers tail by its map.
    Last,
    /// A segment with a limit file: it is shared with another log (LIM-1).
    Limited,
    /// A segment file with more than one link: another log (a fork) shares it.
    Shared,
    /// It already sets `CHUNK_RECORDS` (SEG-9): its writer chose each record's form.
    AlreadyCompact,
    /// None of its events is stored differently as a chunk record, or, when compressing,
    /// its compressed form would not be smaller than its file (CZ-5).
    NoGain,
    /// Already compressed (CZ-5): a compressed segment is never rewritten.
    Compressed,
    /// Not rewritten: the last segment's header does not check out, so this one could
    /// become the last (RCV-7), which is never rewritten (CMP-1) nor compressed (CZ-6).
    BeforeUnbornLast,
    /// Not rewritten into compact records (log-format.md §4.2): it holds an event no
    /// compact record holds (REC-20: a value a version 1 record holds out of a compact
    /// record's range), which stays in its version 1 record.
    NoCompactRecord,
}

/// How [`compact_with`] rewrites a log.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// use surfacelog::CompactOptions;
/// let report = store.compact_log_with("s", CompactOptions::new().compress(true))?;
/// assert!(report.rewritten.is_empty()); // one segment: the last, left as it is
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactOptions {
    /// The Zstandard level sealed segments are compressed at, when they are.
    level: Option<i32>,
    /// Whether segments are rewritten into compact records (log-format.md §4.2) rather
    /// than version 1 records with chunk records.
    compact_records: bool,
}

impl CompactOptions {
    /// The Zstandard level [`CompactOptions::compress`] uses: 9. Compaction is an
    /// explicit rewrite, so size counts more than its speed: on the 1M-event workload of
    /// `benches/footprint.rs` a sealed segment takes 10.1% of its bytes at level 9 (about
    /// 125 MB/s) against 11.4% at Zstandard's own default, 3 (about 800 MB/s), and 8.4% at
    /// 19 (about 3 MB/s); reading is about as fast at any level (4 to 5 ms per 8 MiB).
    ///
    /// ```
    /// use surfacelog::CompactOptions;
    /// let options = CompactOptions::new().compress(true);
    /// assert_eq!(options.compresses(), Some(CompactOptions::DEFAULT_LEVEL));
    /// ```
    pub const DEFAULT_LEVEL: i32 = 9;

    /// Chunk records only (CMP-1 to CMP-6), as [`compact`] does.
    ///
    /// ```
    /// use surfacelog::CompactOptions;
    /// assert_eq!(CompactOptions::new().compresses(), None);
    /// assert_eq!(CompactOptions::new(), CompactOptions::default());
    /// ```
    #[must_use]
    pub const fn new() -> Self {
        Self {
            level: None,
            compact_records: false,
        }
    }

    /// Whether sealed segments are rewritten into compact records (log-format.md §4.2):
    /// a segment of version 1 records (with or without chunk records) is rewritten, every
    /// run of continuing chunks in one record; a compact segment is kept (CMP-6). What
    /// [`crate::Store::compact_log`] does for a store writing compact records.
    ///
    /// ```
    /// use surfacelog::CompactOptions;
    /// assert!(CompactOptions::new().compact_records(true).compacts_records());
    /// assert!(!CompactOptions::new().compacts_records());
    /// ```
    #[must_use]
    pub const fn compact_records(mut self, on: bool) -> Self {
        self.compact_records = on;
        self
    }

    /// Whether [`CompactOptions::compact_records`] is on.
    ///
    /// ```
    /// use surfacelog::CompactOptions;
    /// let options = CompactOptions::new().compact_records(true);
    /// assert!(options.compacts_records());
    /// assert!(!options.compact_records(false).compacts_records());
    /// ```
    #[must_use]
    pub const fn compacts_records(&self) -> bool {
        self.compact_records
    }

    /// Whether sealed segments are also compressed (log-format.md §14, CZ-5), at
    /// [`CompactOptions::DEFAULT_LEVEL`]. Only in a build with the `compress` feature.
    ///
    /// ```
    /// use surfacelog::CompactOptions;
    /// assert_eq!(CompactOptions::new().compress(true).compresses(), Some(9));
    /// assert_eq!(CompactOptions::new().compress(false).compresses(), None);
    /// ```
    #[cfg(feature = "compress")]
    #[must_use]
    pub const fn compress(mut self, compress: bool) -> Self {
        self.level = if compress {
            Some(Self::DEFAULT_LEVEL)
        } else {
            None
        };
        self
    }

    /// Compresses sealed segments (as [`CompactOptions::compress`]) at Zstandard level
    /// `level`, clamped to 1 ..= 22: higher is smaller and slower to compress, and about
    /// as fast to read (see [`CompactOptions::DEFAULT_LEVEL`]).
    ///
    /// ```
    /// use surfacelog::CompactOptions;
    /// assert_eq!(CompactOptions::new().compression_level(19).compresses(), Some(19));
    /// assert_eq!(CompactOptions::new().compression_level(99).compresses(), Some(22));
    /// ```
    #[cfg(feature = "compress")]
    #[must_use]
    pub const fn compression_level(mut self, level: i32) -> Self {
        self.level = Some(if level < 1 {
            1
        } else if level > 22 {
            22
        } else {
            level
        });
        self
    }

    /// The Zstandard level sealed segments are compressed at, or `None` when they are not.
    ///
    /// ```
    /// use surfacelog::CompactOptions;
    /// assert_eq!(CompactOptions::new().compresses(), None);
    /// ```
    #[must_use]
    pub const fn compresses(&self) -> Option<i32> {
        self.level
    }
}

/// What [`compact`] did, segment by segment, in log order.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// let report = store.compact_log("s")?;
/// println!("{} segments rewritten, {} kept", report.rewritten.len(), report.kept.len());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogCompaction {
    /// The segments rewritten.
    pub rewritten: Vec<RewrittenSegment>,
    /// The segments left as they were, each with its first seq and why.
    pub kept: Vec<(u64, KeptReason)>,
    /// With compression, the session's message pack compressed too (message-pack.md
    /// MSP-8): its length before and after. `None` when it was not (no pack, or no gain).
    pub pack_bytes: Option<(u64, u64)>,
}

impl LogCompaction {
    /// The bytes the rewritten segments' files shrank by, in all.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// let report = store.compact_log("s")?;
    /// assert_eq!(report.bytes_saved(), 0); // nothing written without chunk records
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn bytes_saved(&self) -> u64 {
        self.rewritten
            .iter()
            .map(|s| s.bytes_before.saturating_sub(s.bytes_after))
            .sum()
    }
}

/// Reads are made in windows of about this many bytes of whole records (a larger record
/// in a read of its own), so memory stays bounded by the segment being rewritten.
const READ_WINDOW_BYTES: usize = 8 << 20;

/// CMP-1 to CMP-6: rewrites the sealed segments of the log in `dir` that were written
/// without chunk records, each into a segment that uses them. Holds the log's lock
/// throughout (`LOCKED` while a writer has it). Checks every sealed segment first (CMP-2)
/// and changes nothing when one does not check out.
///
/// # Errors
/// `LOCKED`, `CORRUPT` naming the file and offset of the first damage (nothing changed),
/// `FORMAT_VERSION`, `IO`. A failure part-way leaves every segment either as it was or
/// rewritten whole (CMP-3), each holding the same events.
pub fn compact(storage: &dyn Storage, dir: &Path) -> Result<LogCompaction> {
    compact_with(storage, dir, CompactOptions::new())
}

/// [`compact`], and with [`CompactOptions::compress`] each sealed segment it would rewrite,
/// and each that already uses chunk records, rewritten as a compressed segment instead
/// (log-format.md §14, CZ-5).
///
/// # Errors
/// As [`compact`].
pub fn compact_with(
    storage: &dyn Storage,
    dir: &Path,
    options: CompactOptions,
) -> Result<LogCompaction> {
    compact_then(storage, dir, options, |_| {})
}

/// [`compact_with`], then `then` with the report, still under the log's lock: where the
/// store compresses the session's message pack (MSP-8), so that no writer writes one
/// meanwhile.
///
/// # Errors
/// As [`compact`].
pub(crate) fn compact_then(
    storage: &dyn Storage,
    dir: &Path,
    options: CompactOptions,
    then: impl FnOnce(&mut LogCompaction),
) -> Result<LogCompaction> {
    let (_lock, firsts, limits) = locked_listing(storage, dir)?;
    let mut report = LogCompaction::default();
    // CMP-2: every sealed segment checks out before anything is written. Each is closed
    // again once checked (a log may have thousands: one descriptor at a time), and what
    // its check found is kept to check it once more right before it is rewritten.
    let mut checked = Vec::new();
    let mut seq = 0;
    let mut log_id = None;
    let sealed = firsts.len().saturating_sub(1);
    for (position, &first) in firsts.iter().enumerate().take(sealed) {
        let place = Place {
            position,
            first,
            seq,
            next: firsts.get(position + 1).copied(),
            limited: limits.contains(&first),
        };
        let (opened, _, _, seq_next) = examined(storage, dir, &place, log_id)?;
        seq = seq_next;
        log_id = Some(opened.header.log_id);
        // What its checked header already decides: such a segment is not examined (nor
        // decompressed) a second time.
        let kept = kept_by_header(&opened, options);
        checked.push((place, kept));
    }
    if let Some(&last) = firsts.last()
        && firsts.len() > 1
        && last != seq
    {
        let path = seq_file_path(dir, last, ".seg");
        return Err(corrupt(
            &path,
            0,
            "the segment does not continue the log (LOG-2, SEG-3); nothing was compacted (CMP-2)",
        ));
    }
    // CZ-5, CZ-6: whether the last segment's header checks out; if not, RCV-7 would make
    // the segment before it the last, which must then stay plain.
    // Synced first: a header only in the page cache (a writer killed right after it
    // created the segment, in `Staged` durability) could still be lost. A failure to open
    // or sync it is `IO`, never taken for a header that does not check out.
    let last_born = match firsts.last() {
        None => true,
        Some(&last) => {
            let path = seq_file_path(dir, last, ".seg");
            let file = storage
                .open_file(&path, false)
                .map_err(|e| Error::io("open", &path, &e))?;
            storage
                .sync_data(&file)
                .map_err(|e| Error::io("fsync", &path, &e))?;
            SegmentHeader::decode(&super::map::read_head(&file, SEGMENT_HEADER_LEN)).is_ok()
        }
    };
    // CZ-6: the segments' names durable before any segment is compressed. On a filesystem
    // that does not order metadata, a crash could otherwise keep a compressed segment and
    // lose the entry of a last segment a killed writer had just created.
    if options.level.is_some() && firsts.len() > 1 {
        storage
            .sync_dir(dir)
            .map_err(|e| Error::io("fsync", dir, &e))?;
    }
    for (place, kept) in checked {
        let first = place.first;
        if let Some(why) = kept {
            report.kept.push((first, why));
            continue;
        }
        // Examined again (the first pass keeps no segment open): the same file, under the
        // lock, so its header decides nothing more (`kept` was `None`).
        let (opened, offsets, end, _) = examined(storage, dir, &place, log_id)?;
        let why = if links(&opened, dir)? > 1 {
            Some(KeptReason::Shared)
        } else if !last_born && place.next == firsts.last().copied() {
            Some(KeptReason::BeforeUnbornLast)
        } else {
            None
        };
        if let Some(why) = why {
            report.kept.push((first, why));
            continue;
        }
        match rewrite(storage, dir, &opened, &offsets, end, options)? {
            Ok(rewritten) => report.rewritten.push(rewritten),
            Err(why) => report.kept.push((first, why)),
        }
    }
    if let Some(&last) = firsts.last() {
        report.kept.push((last, KeptReason::Last));
    }
    if !report.rewritten.is_empty() {
        storage
            .sync_dir(dir)
            .map_err(|e| Error::io("fsync", dir, &e))?;
    }
    then(&mut report);
    Ok(report)
}

/// Why the checked segment `opened` is kept whatever else holds: its limit (CMP-1), its
/// compression (CZ-5), or, without compression, its chunk records (CMP-6).
fn kept_by_header(opened: &Opened, options: CompactOptions) -> Option<KeptReason> {
    if opened.limit.is_some() {
        Some(KeptReason::Limited)
    } else if is_compressed(&opened.header) {
        Some(KeptReason::Compressed)
    } else if options.level.is_none()
        && (opened.header.format() == Format::Compact
            || (!options.compact_records && opened.header.incompat_features & CHUNK_RECORDS != 0))
    {
        Some(KeptReason::AlreadyCompact)
    } else {
        None
    }
}

/// A sealed segment's place in the log: its position and name, the seq it must start at,
/// the next segment's first seq, and whether it has a limit file.
struct Place {
    position: usize,
    first: u64,
    seq: u64,
    next: Option<u64>,
    limited: bool,
}

/// CMP-2: the segment at `place`, opened and checked whole as salvage checks it (SLV-1),
/// with its records' offsets, the end of the last and the seq after it; damage is
/// `CORRUPT` with the file and offset, and compaction changes nothing because of it.
fn examined(
    storage: &dyn Storage,
    dir: &Path,
    place: &Place,
    log_id: Option<super::segment::LogId>,
) -> Result<(Opened, Vec<u32>, usize, u64)> {
    let verdict = examine(
        storage,
        dir,
        place.position,
        place.first,
        place.seq,
        log_id,
        place.limited,
        place.next,
    );
    match verdict {
        Examined::Whole {
            opened,
            offsets,
            end,
            seq_next,
            ..
        } => Ok((opened, offsets, end, seq_next)),
        Examined::Refused { error } => Err(error),
        Examined::Cut { reason, .. } | Examined::Rejected { reason } => Err(ErrorKind::Corrupt {
            location: dir.display().to_string(),
            reason: format!("{reason}; nothing was compacted (CMP-2)"),
        }
        .into()),
    }
}

/// How many links the segment's file has (CMP-1: more than one, a fork shares it).
fn links(opened: &Opened, dir: &Path) -> Result<u64> {
    let path = seq_file_path(dir, opened.header.first_seq, ".seg");
    opened
        .file
        .metadata()
        .map(|meta| meta.nlink())
        .map_err(|e| Error::io("stat", &path, &e))
}

/// CMP-3: the segment `opened`, whose records checked out at `offsets` up to `end`,
/// rebuilt with chunk records (and, when `compress`, compressed, CZ-5) in a `.tmp` file,
/// synced, read back and compared, then put in place of the old one by rename, with its
/// index. The reason it is kept when it would not gain (CMP-6, CZ-5), or holds an event no
/// compact record holds (§4.2): nothing is written then.
fn rewrite(
    storage: &dyn Storage,
    dir: &Path,
    opened: &Opened,
    offsets: &[u32],
    end: usize,
    options: CompactOptions,
) -> Result<std::result::Result<RewrittenSegment, KeptReason>> {
    let first = opened.header.first_seq;
    let path = seq_file_path(dir, first, ".seg");
    let level = options.level;
    let built = if opened.header.format() == Format::Compact {
        // Compact records stay as they are (§4.2); only compression rewrites them (CZ-5).
        copy_compact(&path, opened, offsets, end)?
    } else if options.compact_records {
        match build_compact(&path, opened, offsets, end)? {
            Some(built) => built,
            // A healthy segment, kept as it is: never `CORRUPT`.
            None => return Ok(Err(KeptReason::NoCompactRecord)),
        }
    } else {
        let header = SegmentHeader {
            incompat_features: opened.header.incompat_features | CHUNK_RECORDS,
            ..opened.header
        };
        build(&path, opened, offsets, end, &header)?
    };
    let header = SegmentHeader::decode(&built.bytes)
        .map_err(|_| corrupt(&path, 0, "the rebuilt segment's header does not check out"))?;
    let before = opened.map.len() as u64;
    let packed = if let Some(level) = level {
        match compressed(&path, &built.bytes, level)? {
            Some(packed) if (packed.len() as u64) < before => Some(packed),
            _ => return Ok(Err(KeptReason::NoGain)),
        }
    } else if (opened.header.format() == Format::Compact || !options.compact_records)
        && built.chunk_records == 0
        || built.bytes.len() >= end
    {
        // CMP-6: a rewrite that would change no record's form, or not shrink the file.
        return Ok(Err(KeptReason::NoGain));
    } else {
        None
    };
    let logical = built.bytes;
    let bytes = packed.as_deref().unwrap_or(&logical);
    let tmp = dir.join(seq_file_name(first, ".seg.tmp"));
    let _ = storage.remove_file(&tmp);
    let file = storage
        .create_file(&tmp, bytes.len() as u64)
        .map_err(|e| Error::io("create", &tmp, &e))?;
    let written = storage
        .write_at(&file, 0, bytes)
        .and_then(|()| storage.sync_data(&file))
        .map_err(|e| Error::io("write", &tmp, &e))
        .and_then(|()| read_back(&file, &tmp, bytes))
        .and_then(|()| {
            // CZ-5: the compressed file decompresses to the logical segment, byte for byte.
            if packed.is_some() {
                unpacks_to(&file, &tmp, &header, &logical)
            } else {
                Ok(())
            }
        });
    if let Err(error) = written {
        let _ = storage.remove_file(&tmp);
        return Err(error);
    }
    // The old index lists the old offsets: removed, durably, before the rename, so that no
    // crash leaves it beside the new file. There it would fail IDX-2 and be rebuilt, but
    // should the segment ever be the last (a later one removed as a torn creation, RCV-7)
    // an index that checks out whole is a durable mark (RCV-13) past the new file's end.
    let index_path = dir.join(index_name(first));
    super::index::remove_durably(storage, dir, first)?;
    storage
        .rename(&tmp, &path)
        .map_err(|e| Error::io("rename", &path, &e))?;
    // IDX-1: a cache, written through a `.tmp` file; a failure costs a scan later. Its
    // offsets and `data_crc` are the logical segment's (CZ-1). A compressed segment gets
    // none (CZ-5): its reader decompresses it whole and scans that in memory.
    if packed.is_none() {
        let data = logical.get(SEGMENT_HEADER_LEN..).unwrap_or_default();
        let index = super::index::encode(
            &header.log_id,
            first,
            &built.offsets,
            u32::try_from(logical.len()).unwrap_or(u32::MAX),
            crc32c::crc32c(data),
        );
        let index_tmp = dir.join(seq_file_name(first, ".idx.tmp"));
        let _ = storage.remove_file(&index_tmp);
        let _ = storage
            .create_file(&index_tmp, 0)
            .and_then(|file| storage.write_at(&file, 0, &index))
            .and_then(|()| storage.rename(&index_tmp, &index_path));
    }
    Ok(Ok(RewrittenSegment {
        first_seq: first,
        events: offsets.len() as u64,
        chunk_records: built.chunk_records,
        bytes_before: before,
        bytes_after: bytes.len() as u64,
        compressed: packed.is_some(),
    }))
}

/// CZ-5: the compressed form of the logical segment `logical`, in blocks of 1 MiB at
/// Zstandard level `level`.
#[cfg(feature = "compress")]
fn compressed(path: &Path, logical: &[u8], level: i32) -> Result<Option<Vec<u8>>> {
    super::compressed::compress(logical, super::compressed::BLOCK_BYTES, level)
        .map_err(|e| Error::io("compress", path, &e))
}

/// Without the `compress` feature [`compact_with`] refuses compression first.
#[cfg(not(feature = "compress"))]
#[expect(
    clippy::unnecessary_wraps,
    reason = "the signature of the `compress` feature's function"
)]
fn compressed(_path: &Path, _logical: &[u8], _level: i32) -> Result<Option<Vec<u8>>> {
    Ok(None)
}

/// CZ-5: the compressed file `file` (at `path`, for the segment whose logical header is
/// `header`) decompresses, every block checked, to `logical` exactly.
fn unpacks_to(
    file: &std::fs::File,
    path: &Path,
    header: &SegmentHeader,
    logical: &[u8],
) -> Result<()> {
    let stored = SegmentHeader {
        incompat_features: header.incompat_features | super::segment::COMPRESSED,
        capacity: logical.len() as u64,
        ..*header
    };
    super::compressed::check_unpacks_to(file, path, &stored, logical)
}

/// A segment rebuilt in memory.
struct Built {
    /// The whole file: header and records, its capacity exactly.
    bytes: Vec<u8>,
    /// Its records' offsets.
    offsets: Vec<u32>,
    /// How many of them are chunk records.
    chunk_records: u64,
}

/// The version 1 records at `offsets` (up to `end`) of `opened`, read with `pread` (RD-8),
/// each checked again (REC-4), rewritten as compact records (log-format.md §4.2) with every
/// run of continuing chunks in one record (REC-17), and each new record decoded and its
/// events compared with the ones they were made from (CMP-3): the same fields and text,
/// byte for byte. `None` when an event has no compact record (REC-20: a version 1 record
/// holds values a compact one does not, such as a source seq past 2^53 − 1): the segment
/// is healthy and stays as it is.
fn build_compact(
    path: &Path,
    opened: &Opened,
    offsets: &[u32],
    end: usize,
) -> Result<Option<Built>> {
    let source = FileBytes {
        file: &opened.file,
        len: opened.map.len(),
    };
    let from = SEGMENT_HEADER_LEN;
    let old = read_range(&source, from, end).map_err(|e| read_error(path, from, &e))?;
    let first = opened.header.first_seq;
    let count = offsets.len() as u64;
    let mut events = Vec::with_capacity(offsets.len());
    let mut at = 0;
    while (events.len() as u64) < count {
        let seq = first + events.len() as u64;
        let unreadable = |why: &str| corrupt(path, from + at, why);
        let (record, len) = decode_as(opened.header.format(), old.get(at..).unwrap_or_default())
            .map_err(|_| unreadable("the record does not check out (REC-4)"))?;
        if record.first_seq() != seq {
            return Err(unreadable("a record with the wrong seq (RCV-5)"));
        }
        events.extend(record.events());
        at += len;
    }
    let header = SegmentHeader {
        incompat_features: (opened.header.incompat_features & !CHUNK_RECORDS) | COMPACT_RECORDS,
        ..opened.header
    };
    let mut bytes = header.encode().to_vec();
    let Ok(starts) =
        crate::record::encode_events(header.incompat_features, events.iter().copied(), &mut bytes)
    else {
        return Ok(None);
    };
    // CMP-3: every event reads back from the new records as it was.
    let mut new_offsets = Vec::with_capacity(events.len());
    let mut in_runs = 0;
    let mut at = SEGMENT_HEADER_LEN;
    let mut seq = first;
    while seq < first + count {
        let unreadable = |why: &str| corrupt(path, at, why);
        let (record, len) = decode_as(Format::Compact, bytes.get(at..).unwrap_or_default())
            .map_err(|_| unreadable("the rewritten record does not check out (CMP-3)"))?;
        for written in record.events() {
            let index = usize::try_from(seq - first).unwrap_or(usize::MAX);
            if written.seq != seq
                || events.get(index) != Some(&written)
                || starts.get(index) != Some(&at)
            {
                return Err(unreadable(
                    "the rewritten record does not read back as the event (CMP-3)",
                ));
            }
            new_offsets.push(u32::try_from(at).unwrap_or(u32::MAX));
            seq += 1;
        }
        if record.count() > 1 {
            in_runs += record.count();
        }
        at += len;
    }
    let header = SegmentHeader {
        capacity: bytes.len() as u64,
        ..header
    };
    if let Some(head) = bytes.get_mut(..SEGMENT_HEADER_LEN) {
        head.copy_from_slice(&header.encode());
    }
    Ok(Some(Built {
        bytes,
        offsets: new_offsets,
        chunk_records: in_runs,
    }))
}

/// The compact records at `offsets` (up to `end`; a run's members share an offset) of
/// `opened`, read with `pread` (RD-8), each checked again (REC-4, REC-20) and copied as it
/// is, under the segment's header: the logical segment compression packs (CZ-1, CZ-5).
fn copy_compact(path: &Path, opened: &Opened, offsets: &[u32], end: usize) -> Result<Built> {
    let source = FileBytes {
        file: &opened.file,
        len: opened.map.len(),
    };
    let from = SEGMENT_HEADER_LEN;
    let records = read_range(&source, from, end).map_err(|e| read_error(path, from, &e))?;
    let header = SegmentHeader {
        capacity: (SEGMENT_HEADER_LEN + records.len()) as u64,
        ..opened.header
    };
    let mut bytes = header.encode().to_vec();
    bytes.extend_from_slice(&records);
    let mut seq = opened.header.first_seq;
    let mut at = SEGMENT_HEADER_LEN;
    while seq < opened.header.first_seq + offsets.len() as u64 {
        let unreadable = |why: &str| corrupt(path, at, why);
        let rest = bytes.get(at..).unwrap_or_default();
        let (record, len) = decode_as(Format::Compact, rest)
            .map_err(|_| unreadable("the record does not check out (REC-4)"))?;
        if record.first_seq() != seq {
            return Err(unreadable("a record with the wrong seq (RCV-5)"));
        }
        seq = record.seq_end();
        at += len;
    }
    if at != bytes.len() {
        return Err(corrupt(
            path,
            at,
            "the records end before the segment's end",
        ));
    }
    Ok(Built {
        offsets: offsets.to_vec(),
        chunk_records: 0,
        bytes,
    })
}

/// The records at `offsets` (up to `end`) of `opened`, each read with `pread` (RD-8) and
/// checked again (REC-4), re-encoded in the form REC-11 chooses, and each new record
/// decoded and compared with the event it was made from (CMP-3): the same seq, time,
/// type, surface operation, sources, flags and text, byte for byte.
fn build(
    path: &Path,
    opened: &Opened,
    offsets: &[u32],
    end: usize,
    header: &SegmentHeader,
) -> Result<Built> {
    let source = FileBytes {
        file: &opened.file,
        len: opened.map.len(),
    };
    let mut bytes = header.encode().to_vec();
    let mut new_offsets = Vec::with_capacity(offsets.len());
    let mut chunk_records = 0;
    let mut seq = header.first_seq;
    let mut at = 0;
    while at < offsets.len() {
        // A window of whole records: from this one up to about READ_WINDOW_BYTES.
        let from = offsets.get(at).map_or(end, |&o| o as usize);
        let mut upto = at + 1;
        while upto < offsets.len()
            && offsets
                .get(upto + 1)
                .map_or(end, |&o| o as usize)
                .saturating_sub(from)
                <= READ_WINDOW_BYTES
        {
            upto += 1;
        }
        let to = offsets.get(upto).map_or(end, |&o| o as usize);
        let window = read_range(&source, from, to).map_err(|e| read_error(path, from, &e))?;
        for &offset in offsets.get(at..upto).unwrap_or_default() {
            let offset = offset as usize;
            let unreadable = |why: &str| corrupt(path, offset, why);
            let rest = window
                .get(offset - from..)
                .ok_or_else(|| unreadable("outside the window read"))?;
            let (event, _) =
                decode(rest).map_err(|_| unreadable("the record does not check out (REC-4)"))?;
            if event.seq != seq {
                return Err(unreadable("a record with the wrong seq (RCV-5)"));
            }
            let stored = compact_form(&event);
            if stored.chunk().is_some() {
                chunk_records += 1;
            }
            let new_offset = bytes.len();
            encode(&stored, &mut bytes);
            let written = bytes
                .get(new_offset..)
                .and_then(|b| decode(b).ok())
                .map(|(back, _)| back);
            if written != Some(event) {
                return Err(unreadable(
                    "the rewritten record does not read back as the event (CMP-3)",
                ));
            }
            new_offsets.push(u32::try_from(new_offset).unwrap_or(u32::MAX));
            seq += 1;
        }
        at = upto;
    }
    let len = bytes.len() as u64;
    let header = SegmentHeader {
        capacity: len,
        ..*header
    };
    if let Some(head) = bytes.get_mut(..SEGMENT_HEADER_LEN) {
        head.copy_from_slice(&header.encode());
    }
    Ok(Built {
        bytes,
        offsets: new_offsets,
        chunk_records,
    })
}

/// CMP-3: the synced file read back and compared with what was written, before it takes
/// the segment's name.
fn read_back(file: &std::fs::File, path: &Path, written: &[u8]) -> Result<()> {
    let mut back = vec![0; written.len()];
    file.read_exact_at(&mut back, 0)
        .map_err(|e| Error::io("read", path, &e))?;
    if back != written {
        let at = back
            .iter()
            .zip(written)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        return Err(corrupt(
            path,
            at,
            "the rewritten segment does not read back as written (CMP-3)",
        ));
    }
    Ok(())
}

fn corrupt(path: &Path, offset: usize, reason: &str) -> Error {
    super::reader::corrupt(path, offset, reason)
}
