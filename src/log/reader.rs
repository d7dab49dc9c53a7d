//! Reading a log: any number of readers, in any process, alongside one writer (§6).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use memmap2::Mmap;

use super::chain::{
    Chain, KnownSegment, Linked, Sealed, check_index_of_no_segment, open_chain, open_sealed,
};
use super::index::{self, Vouched};
use super::limit::Limit;
use super::map::{FileIdentity, identity, map, read_ahead, release};
use super::scan::{FileBytes, Stop, nonzero_end, scan, valid_record_after, walk_written};
use super::segment::{
    HeaderError, LogId, SEGMENT_HEADER_LEN, SegmentHeader, index_name, parse_segment_name,
    version_error,
};
use crate::error::{Error, ErrorKind, Result};
use crate::event::{EventRef, EventSource};
use crate::record::{Format, decode_again_as, decode_as};
use crate::storage::{FsStorage, Storage};

/// A read-only view of a log: the committed prefix as of the last [`LogReader::refresh`].
///
/// Segments are read through their maps without copying; every read checks the record's
/// checksum again (REC-4), so a reader never returns a partial record. A sealed segment is
/// opened, mapped and checked (SEG-2, SEG-3), and its offsets read from its index (IDX-3),
/// on the first access into it, not at open (§7).
#[derive(Debug)]
pub struct LogReader {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    log_id: LogId,
    segments: Vec<Segment>,
    seq_next: u64,
    /// The position of the segment [`EventSource::event`] read from last: when a read moves
    /// on to the next segment, the one it leaves is released (RD-4). Only a hint for that
    /// release, never a correctness fact, so relaxed loads and stores suffice.
    cursor: AtomicUsize,
    /// RD-6: RCV-4's shape at the end of the last segment is taken for a torn tail, not
    /// damage ([`LogReader::open_reporting_torn`]).
    torn_tails: bool,
    /// Where in the last segment the last refresh took RCV-4's shape for the end of the
    /// records (only when `torn_tails`; [`LogReader::torn_shape`]).
    torn_shape: Option<usize>,
    /// RD-2: the last listing of the log directory that found no segment named after a
    /// seq `bound`: `(bound, the directory's modification time before it, when)`. A refresh
    /// stopping at the same bound lists again only once the directory changed or a second
    /// passed, so an idle follower does not list it at every look.
    unlisted: Option<(u64, Option<std::time::SystemTime>, std::time::Instant)>,
    /// The compact run (log-format.md §4.2) the last read decoded whole: its segment's
    /// position plus one, then its offset, in one word (0: none). A read of another of its
    /// members decodes it again without checking its other members' strings again
    /// (`decode_again_as`), the member it returns checked on its own (`event_again`):
    /// reading a run's members one by one costs a checksum and a member each, not a full
    /// check. Only a hint of work done, so relaxed loads and stores suffice.
    decoded_run: std::sync::atomic::AtomicU64,
}

/// One segment as a reader holds it.
#[derive(Debug)]
pub(crate) struct Segment {
    /// The seq of its first record: its name's (LOG-2), which its header repeats (SEG-3).
    first_seq: u64,
    /// Its position in the log: the `segment_index` its header carries (SEG-3).
    index: u64,
    /// Its file's path: set at open for the last segment, made on first need for a sealed
    /// one ([`Segment::path`]), so that open makes no path per segment.
    path: OnceLock<PathBuf>,
    /// Its header and map: set at open for the last segment (and a limited one, LIM-3), on
    /// the first access for another sealed one. A refusal found then is kept, so every
    /// later read is refused the same way; an I/O error is not (the next access retries).
    mapped: OnceLock<Result<Mapped, Error>>,
    /// Where this log's part of the segment ends (LIM-1).
    limit: Option<Limit>,
    /// The records a sealed segment holds, known from the names (LOG-2) or its limit.
    /// `None` for the last segment, which is scanned as it grows.
    count: Option<u64>,
    /// Record offsets: scanned for the last segment; for a sealed one, read from its index
    /// (or a scan) on first access. Invariant: set for the last segment unless `unread`
    /// is.
    offsets: OnceLock<Vec<u32>>,
    /// The last segment's records whose offsets its index lists (IDX-5) and which have
    /// not been read yet, and the offsets scanned after them: `offsets` is set from both on
    /// first access. Once `offsets` is set, this is stale and unused.
    unread: Option<Unread>,
    /// Just past the last record scanned (the last segment).
    end: usize,
    /// How many of its first records are known to be durable: all of a sealed segment's
    /// (DUR-4), those a last segment's index vouches for (IDX-5).
    durable: u64,
    /// The bytes from the start of the map whose pages were released once read through
    /// (RD-4): only a hint of where the next release starts, not a correctness fact.
    released: usize,
}

/// The last segment's offsets before they are first needed (IDX-5).
#[derive(Debug)]
struct Unread {
    /// The prefix its index lists (at least one record), with the offset of its last.
    vouched: Vouched,
    /// The offsets of the records scanned after them.
    after: Vec<u32>,
}

/// How recovery leaves the last segment (IDX-5): the records its index vouches for,
/// unread; the offsets of those after them; and just past the last record.
#[derive(Debug)]
pub(crate) struct Layout {
    /// The prefix the index vouches for, whose offsets are read on first access.
    pub vouched: Option<Vouched>,
    /// Offsets of the records after it.
    pub after: Vec<u32>,
    /// Just past the last record.
    pub end: usize,
}

/// A segment's checked header and its map.
#[derive(Debug)]
struct Mapped {
    header: SegmentHeader,
    map: Mmap,
    /// The mapped file, kept for the last segment: the bytes past its verified end are
    /// read from it with `pread` (RD-8). `None` for a sealed segment, whose file is opened
    /// again when it must be scanned.
    file: Option<std::fs::File>,
    /// The mapped file's identity (RD-1): a sealed segment is scanned from the file under
    /// its name only while that is still the file mapped; once compaction has given the
    /// name to another file (CMP-4), the offsets come from the map itself.
    identity: Option<FileIdentity>,
}

/// The last segment's file for reading past its verified end with `pread` (RD-8): the one
/// kept open, or the name opened again.
enum TailFile<'a> {
    Kept(&'a std::fs::File),
    Opened(std::fs::File),
}

impl TailFile<'_> {
    fn file(&self) -> &std::fs::File {
        match self {
            Self::Kept(file) => file,
            Self::Opened(file) => file,
        }
    }
}

impl Mapped {
    /// The file to read past the verified end from: the kept one, or `path` opened again.
    ///
    /// # Errors
    /// `IO` naming `path` when it cannot be opened.
    fn tail_file(&self, storage: &dyn Storage, path: &Path) -> Result<TailFile<'_>> {
        match &self.file {
            Some(file) => Ok(TailFile::Kept(file)),
            None => storage
                .open_file(path, false)
                .map(TailFile::Opened)
                .map_err(|e| Error::io("open", path, &e)),
        }
    }

    /// The records from the segment's first, expecting `first` first, among its first
    /// `bound` bytes: read with pread (RD-8), from the kept file or from `path` opened
    /// again.
    fn scan(
        &self,
        storage: &dyn Storage,
        path: &Path,
        bound: usize,
        first: u64,
    ) -> std::io::Result<super::scan::Scan> {
        if super::compressed::is_compressed(&self.header) {
            // CZ-4: the map is the logical segment, every byte of it written and checked
            // (`block_crc`) before it was mapped; the file under the name is the compressed
            // one. Its records are found by their frames' lengths (REC-1), as the writer's
            // own just written ones are (RD-2): each read checks its record again (REC-4).
            let bytes = self.map.get(..bound).unwrap_or(&self.map);
            return Ok(super::scan::walk_written(
                bytes,
                self.header.format(),
                SEGMENT_HEADER_LEN,
                first,
                u64::MAX,
            ));
        }
        let opened;
        let file = if let Some(file) = &self.file {
            file
        } else {
            opened = storage.open_file(path, false)?;
            if self.identity.is_some() && identity(&opened) != self.identity {
                // CMP-4: the name now holds a rewritten file, whose records lie at other
                // offsets. The mapped file has no name left in this log (compaction
                // replaces only a file with one link) and was sealed whole (DUR-4), so its
                // bytes up to its length are all there: scanned through the map.
                let bytes = self.map.get(..bound).unwrap_or(&self.map);
                return scan(bytes, self.header.format(), SEGMENT_HEADER_LEN, first);
            }
            &opened
        };
        let source = FileBytes {
            file,
            len: bound.min(self.map.len()),
        };
        scan(&source, self.header.format(), SEGMENT_HEADER_LEN, first)
    }
}

/// The reader releases the pages of the last segment's records it has scanned once this
/// many bytes of them are held (RD-4): an madvise per MiB scanned, and at most this much
/// plus a page of them resident.
const RELEASE_STEP_BYTES: usize = 1 << 20;

/// RD-9: records of a read-ahead this close together (or closer) in a segment are loaded
/// as one range, the bytes between them included: fewer requests for a few more pages.
const READ_AHEAD_GAP_BYTES: usize = 64 << 10;

/// The page size ranges are rounded down to before they are released. A smaller size than
/// the system's only means that the OS releases the page holding the range's end too.
const PAGE_BYTES: usize = 4096;

/// The parts of a log's first events that a fork takes (STORE-10).
#[derive(Debug)]
pub(crate) struct Prefix<'a> {
    /// The segments before the boundary segment, whole, each with whether it has a limit
    /// file (LIM-1) to share too.
    pub whole: Vec<(&'a Path, bool)>,
    /// The segment holding the last of the events shared; `None` for an empty prefix, and
    /// when the prefix ends inside a run that starts its segment.
    pub boundary: Option<BoundarySegment<'a>>,
    /// The compact run the prefix ends inside (log-format.md §4.2), when it does.
    pub split: Option<SplitRun>,
}

/// A compact chunk run (log-format.md §4.2) a fork's prefix ends inside: no limit ends
/// inside a record (LIM-3), so the boundary segment is shared up to the record before it,
/// and the child's own segment starts at its first seq with its members before the end.
#[derive(Debug)]
pub(crate) struct SplitRun {
    /// The run's first seq: the child's own segment's.
    pub first_seq: u64,
    /// The header of the segment holding it.
    pub header: SegmentHeader,
    /// Its members before the prefix's end (at least one), read and checked (REC-4).
    pub carried: Vec<crate::event::Event>,
}

/// The segment holding a fork's boundary.
#[derive(Debug)]
pub(crate) struct BoundarySegment<'a> {
    pub path: &'a Path,
    pub header: SegmentHeader,
    /// The whole segment file.
    pub bytes: &'a [u8],
    /// The identity of the file those bytes were mapped from (RD-1): a fork checks that
    /// the file it links is this one (CMP-5).
    pub identity: Option<FileIdentity>,
    /// The offsets of its records that belong to the prefix (at least one).
    pub offsets: &'a [u32],
    /// Just past the last of them.
    pub end: usize,
    /// Whether those records are known to be durable (DUR-4, IDX-5); otherwise a fork
    /// syncs the file before sharing it.
    pub durable: bool,
}

impl LogReader {
    /// Opens the log in `dir` for reading: lists it and opens its last segment (and any
    /// limited one, LIM-3); every other segment is opened on the first access into it.
    ///
    /// # Errors
    /// `CORRUPT` for a broken segment chain (LOG-2, SEG-3) or limit (LIM-3, LIM-5),
    /// `FORMAT_VERSION`, `IO`. A sealed segment's header is checked on first access: a
    /// read there is refused with the same codes.
    pub fn open(dir: &Path) -> Result<Self> {
        Self::open_with(dir, Arc::new(FsStorage))
    }

    /// [`LogReader::open`] through a given storage.
    ///
    /// # Errors
    /// As [`LogReader::open`].
    pub fn open_with(dir: &Path, storage: Arc<dyn Storage>) -> Result<Self> {
        Self::open_in(dir, storage, false)
    }

    /// [`LogReader::open_with`] for a reader that reports a torn tail where a writer's
    /// recovery would drop one (the verbatim store's, `verbatim-store.md` VBT-7): RCV-4's
    /// shape (an end marker or an invalid frame followed by a valid record) past the
    /// durable marks, in the last segment when no later segment file exists, ends the
    /// records instead of being refused as damage (RD-6), and
    /// [`LogReader::unrecovered_tail`] reports the bytes from there. A record with the wrong
    /// seq (RCV-5) or a bad body (RCV-8), and anything under a durable mark (RCV-13), stay
    /// `CORRUPT`, as they do for recovery.
    ///
    /// # Errors
    /// As [`LogReader::open`].
    pub fn open_reporting_torn(dir: &Path, storage: Arc<dyn Storage>) -> Result<Self> {
        Self::open_in(dir, storage, true)
    }

    fn open_in(dir: &Path, storage: Arc<dyn Storage>, torn_tails: bool) -> Result<Self> {
        let chain = open_chain(&*storage, dir, false)?;
        if chain.segments.is_empty() && chain.unborn.is_none() {
            let path = dir.join(super::segment::segment_name(0));
            return Err(corrupt(&path, 0, "the log has no first segment"));
        }
        if let Some(unborn) = &chain.unborn {
            // RCV-7: a last segment whose header is not written yet is being created and
            // holds nothing; one that holds a valid record, has a length no creation
            // leaves or an index listing records has a damaged header, and its records are
            // the log's: never read as if it were not there (RD-6).
            let previous = chain.segments.last().map(|last| &last.header);
            if let Some(reason) = unborn.damage(
                &*storage,
                previous,
                super::LogOptions::default().segment_capacity(),
            )? {
                return Err(corrupt(&unborn.path, 0, &reason));
            }
        }
        // The last segment: take the prefix its index vouches for (IDX-5), then scan on
        // from there in `refresh`. When the vouched check fails, an index that checks out
        // whole still marks its records durable (RCV-13): the scan must reach its end.
        let mut durable_end = None;
        let layout = chain
            .segments
            .last()
            .map(|last| -> Result<Layout> {
                let first = last.header.first_seq;
                let index_path = dir.join(index_name(first));
                // An index that cannot be read is `IO`, not an index that is missing.
                let (vouched, listed_end) = index::durable_marks(
                    &*storage,
                    &index_path,
                    &last.map,
                    &last.header.log_id,
                    first,
                    last.header.format(),
                )?;
                if vouched.is_none() && last.limit.is_none() {
                    durable_end = Some((first, listed_end));
                }
                Ok(Layout {
                    vouched,
                    after: Vec::new(),
                    end: vouched.map_or(SEGMENT_HEADER_LEN, |v| v.end),
                })
            })
            .transpose()?;
        let vouched = layout
            .as_ref()
            .and_then(|l| l.vouched)
            .map_or(0, |v| v.count as u64);
        let (mut segments, _) = into_segments(chain, layout);
        if let Some(last) = segments.last_mut().filter(|s| s.count.is_none()) {
            last.durable = vouched;
        }
        let reader = Self::from_recovered(dir, storage, segments, true, torn_tails)?;
        if let Some((first, end)) = durable_end
            && let Some(segment) = reader.segments.iter().find(|s| s.first_seq == first)
            && segment.count.is_none()
            && segment.end < end
        {
            return Err(corrupt(
                segment.path(&reader.dir),
                segment.end,
                "a record the segment's index lists as durable does not check out (RCV-13)",
            ));
        }
        Ok(reader)
    }

    /// A reader over segments the writer's recovery has just opened and scanned, so that
    /// nothing is read twice (`DiskLog`).
    ///
    /// # Errors
    /// As [`LogReader::open`].
    ///
    /// `check_end`: whether the first scan of the last segment decides, as every refresh
    /// does, whether where it stops is damage (RD-6); a writer's recovery has just decided
    /// that (§7), so its own reader does not decide it again.
    pub(crate) fn from_recovered(
        dir: &Path,
        storage: Arc<dyn Storage>,
        segments: Vec<Segment>,
        check_end: bool,
        torn_tails: bool,
    ) -> Result<Self> {
        let log_id = segments
            .last()
            .and_then(Segment::mapped)
            .map_or([0; 16], |m| m.header.log_id);
        let seq_next = segments.last().map_or(0, |s| {
            s.first_seq + s.count.unwrap_or(s.records_known() as u64)
        });
        let mut reader = Self {
            dir: dir.to_owned(),
            storage,
            log_id,
            segments,
            seq_next,
            cursor: AtomicUsize::new(0),
            torn_tails,
            torn_shape: None,
            unlisted: None,
            decoded_run: std::sync::atomic::AtomicU64::new(0),
        };
        reader.refresh_checked(check_end)?;
        // RD-4: what recovery scanned (and the last record of a vouched prefix, IDX-5) is
        // read through.
        if let Some(last) = reader.segments.last_mut() {
            last.release_read(0);
        }
        Ok(reader)
    }

    /// Picks up records committed since the last refresh, including new segments.
    /// Returns the new `seq_next`. Cost: proportional to the new records.
    ///
    /// # Errors
    /// As [`LogReader::open`], and `CORRUPT` with the segment and offset where the last
    /// segment's records stop at bytes that are damage, not the end of what was written
    /// (RD-6): a record with the wrong seq or a bad body, or an invalid position followed
    /// by a valid record. Damage is never taken for the end of the log.
    pub fn refresh(&mut self) -> Result<u64> {
        self.refresh_checked(true)
    }

    /// [`LogReader::refresh`]; `check_end` is `false` only for the first refresh of the
    /// reader beside a writer whose recovery has just decided the same tail (§7).
    fn refresh_checked(&mut self, check_end: bool) -> Result<u64> {
        // Found again by this refresh's scan of the last segment, if it is still there.
        self.torn_shape = None;
        // The seq where the last segment's records stopped when a listing found a segment
        // after it (RD-2): the last is then sealed, and a scan again that gets no further
        // is final: damage (RCV-6), or a missing segment (LOG-2).
        let mut sealed_at = None;
        loop {
            if let Some(last) = self.segments.last_mut() {
                // LIM-4: nothing after a limit belongs to this log; the next segment may.
                if last.limit.is_none() {
                    let Some(mapped) = last.mapped() else {
                        return Ok(self.seq_next);
                    };
                    if super::compressed::is_compressed(&mapped.header) {
                        // CZ-4: sealed whole, every byte checked; its records are found by
                        // their frames (as `Mapped::scan` finds them), and the log goes on
                        // in the next segment: a compressed segment is never the last
                        // (CZ-6).
                        let format = mapped.header.format();
                        let found =
                            walk_written(&mapped.map, format, last.end, self.seq_next, u64::MAX);
                        let path = last.path(&self.dir).to_owned();
                        if let Stop::Invalid { offset, .. } = found.stop {
                            return Err(corrupt(
                                &path,
                                offset,
                                "a record frame does not fit (CZ-4)",
                            ));
                        }
                        last.push_offsets(&found.offsets);
                        last.end = found.end;
                        self.seq_next = found.seq_next;
                        if !self.open_next_segment()? {
                            return Err(corrupt(
                                &path,
                                0,
                                "the last segment is compressed: a segment after it is missing (CZ-6)",
                            ));
                        }
                        continue;
                    }
                    last.map_grown(&*self.storage, &self.dir)?;
                    let Some(mapped) = last.mapped() else {
                        return Ok(self.seq_next);
                    };
                    // RD-8: past `last.end` nothing is verified: read with pread.
                    let format = mapped.header.format();
                    let path = last.path(&self.dir);
                    let tail = mapped.tail_file(&*self.storage, path)?;
                    let source = FileBytes {
                        file: tail.file(),
                        len: mapped.map.len(),
                    };
                    let found = if check_end {
                        let first = last.first_seq;
                        // Is the last segment the last? Asked only of RCV-4's shape.
                        let later = || later_segment_exists(&*self.storage, &self.dir, first);
                        let torn = self
                            .torn_tails
                            .then_some(&later as &dyn Fn() -> Result<bool>);
                        let (found, shape) =
                            scan_checked(path, &source, format, last.end, self.seq_next, torn)?;
                        // RD-6, RCV-13: where the segment's index lists durable records
                        // past the stop, the stop is damage, never the end of the log.
                        let before = last.records_known();
                        let index_path = self.dir.join(index_name(first));
                        let marks = IndexMarks {
                            storage: &*self.storage,
                            path: &index_path,
                            map: &mapped.map,
                            log_id: &self.log_id,
                            first_seq: first,
                        };
                        stop_before_index_end(path, &source, format, &found, before, &marks)?;
                        self.torn_shape = shape.then_some(found.end);
                        found
                    } else {
                        scan(&source, format, last.end, self.seq_next)
                            .map_err(|e| read_error(path, last.end, &e))?
                    };
                    last.push_offsets(&found.offsets);
                    let empty = last.records_known() == 0;
                    last.end = found.end;
                    last.release_read(RELEASE_STEP_BYTES);
                    self.seq_next = found.seq_next;
                    if empty && self.remap_replaced_last()? {
                        // SEG-7: replaced by a larger empty segment; scan the new file.
                        continue;
                    }
                    // Not yet written or being written (RD-1); or a segment with no record
                    // yet, which the writer has not rolled from: unless it is sealed.
                    if !matches!(found.stop, Stop::End | Stop::Full) || empty {
                        // Sealed if any segment follows it (SEG-7: a sealed segment ends at
                        // an end marker or its capacity, and holds a record).
                        let after = self.segments.last().map_or(0, |s| s.first_seq);
                        if !check_end || !self.sealed_after_all(&mut sealed_at, after)? {
                            return Ok(self.seq_next);
                        }
                        continue;
                    }
                }
            }
            // The last segment ends here; the writer may have rolled (RD-2). A segment of
            // the next seq's name whose header is not written yet is being created; one of
            // a later name means this one is sealed and its records stop short.
            if self.open_next_segment()? {
                sealed_at = None;
            } else if !check_end || !self.sealed_after_all(&mut sealed_at, self.seq_next)? {
                if check_end {
                    // LOG-2, RCV-13: the next segment's index without it is the durable
                    // mark of records that are gone (the writer writes an index only for a
                    // segment it created), never the end of the log (RD-6).
                    let (storage, dir) = (&*self.storage, &self.dir);
                    check_index_of_no_segment(storage, dir, self.seq_next, Some(&self.log_id))?;
                }
                return Ok(self.seq_next);
            }
        }
    }

    /// Whether the last segment, whose records stop at `seq_next` with no segment of that
    /// name after it, is sealed after all: a segment file named after the seq `after`
    /// exists (the writer seals a segment before it creates the next, SEG-7). When one is
    /// found, `sealed_at` is set to `seq_next` and `true` returned: the caller scans the
    /// segment once more, since the writer may have written records into it between this
    /// refresh's scan and its rolling. When that scan got no further (`sealed_at` is still
    /// `seq_next`), the directory is listed again, and a later segment still there is
    /// damage. A log directory that is gone has no later segment (its session was
    /// deleted: the caller's checks report that).
    ///
    /// # Errors
    /// `CORRUPT` naming the last segment and the offset where its records stop, when a
    /// later segment exists but none starts at `seq_next` (RCV-6, LOG-2): damage, never
    /// the end of the log (RD-6). `IO` when the directory cannot be listed.
    fn sealed_after_all(&mut self, sealed_at: &mut Option<u64>, after: u64) -> Result<bool> {
        if self.segments.is_empty() {
            return Ok(false);
        }
        let again = *sealed_at == Some(self.seq_next);
        *sealed_at = None;
        if !self.segment_after(after, again)? {
            return Ok(false);
        }
        if again && let Some(last) = self.segments.last() {
            let reason = format!(
                "a later segment exists, but none starts at seq {}: this segment's records \
                 stop short, or the next segment is missing (RCV-6, LOG-2)",
                self.seq_next
            );
            return Err(corrupt(last.path(&self.dir), last.end, &reason));
        }
        *sealed_at = Some(self.seq_next);
        Ok(true)
    }

    /// Whether a segment file named after the seq `after` exists. Lists the log directory,
    /// unless `fresh` is false and the last listing at the same `after` found none, less
    /// than a second ago, with the directory unchanged since (its modification time): what
    /// an idle follower's every look would otherwise cost (a listing, growing with the
    /// segments). A listing that finds one is never kept.
    ///
    /// # Errors
    /// `IO` when the directory cannot be listed.
    fn segment_after(&mut self, after: u64, fresh: bool) -> Result<bool> {
        let changed = std::fs::metadata(&self.dir)
            .and_then(|meta| meta.modified())
            .ok();
        if !fresh
            && let Some((bound, modified, at)) = self.unlisted
            && bound == after
            && modified.is_some()
            && modified == changed
            && at.elapsed() < UNLISTED_FOR_AT_MOST
        {
            return Ok(false);
        }
        let found = match self.storage.list_dir(&self.dir) {
            Ok(names) => names
                .iter()
                .filter_map(|n| parse_segment_name(n))
                .any(|first| first > after),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(Error::io("list", &self.dir, &e)),
        };
        self.unlisted = (!found).then(|| (after, changed, std::time::Instant::now()));
        Ok(found)
    }

    /// [`LogReader::refresh`] for the reader beside this process's writer (`DiskLog`):
    /// catches up to `written`, the seq after the last record the writer has written,
    /// walking frame lengths instead of scanning (`scan::walk_written`): the writer has
    /// just written those bytes, and every read checks its record again (REC-4). Should the
    /// bytes not frame the records expected, it falls back to [`LogReader::refresh`].
    ///
    /// # Errors
    /// As [`LogReader::refresh`].
    pub(crate) fn refresh_written(&mut self, written: u64) -> Result<u64> {
        while self.seq_next < written {
            let Some(last) = self.segments.last_mut() else {
                return self.refresh();
            };
            if last.limit.is_none() {
                let Some(mapped) = last.mapped() else {
                    return self.refresh();
                };
                let format = mapped.header.format();
                let found = walk_written(&mapped.map, format, last.end, self.seq_next, written);
                if let Stop::Invalid { .. } = found.stop {
                    return self.refresh();
                }
                if !found.offsets.is_empty() {
                    last.push_offsets(&found.offsets);
                    last.end = found.end;
                    last.release_read(RELEASE_STEP_BYTES);
                    self.seq_next = found.seq_next;
                    continue;
                }
                if last.records_known() == 0 {
                    // The writer never rolls from a segment with no record: it replaced it
                    // by a larger one (SEG-7), which the full refresh maps.
                    return self.refresh();
                }
            }
            // The writer has rolled to the next segment (RD-2).
            if !self.open_next_segment()? {
                return self.refresh();
            }
        }
        Ok(self.seq_next)
    }

    /// The directory of the log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// For a reader that reports torn tails ([`LogReader::open_reporting_torn`]): the
    /// `CORRUPT` a strict reader reports where its last refresh took RCV-4's shape for the
    /// end of the records (RD-6), or `None`. A caller that knows no append can be in
    /// progress there, and no writer's recovery can have left the shape (the verbatim
    /// store while it holds the log's writer, VBT-7), reports it as damage.
    pub fn torn_shape(&self) -> Option<Error> {
        let offset = self.torn_shape?;
        let path = self.segments.last()?.path(&self.dir);
        let reason = "an end marker or an invalid record followed by valid records, while \
                      the log's writer is open (RD-6, VBT-7)";
        Some(corrupt(path, offset, reason))
    }

    /// The log's identity: the `log_id` of its segments (SEG-1), random per log.
    pub fn log_id(&self) -> LogId {
        self.log_id
    }

    /// The bytes a writer's recovery would drop as a torn tail (§7, RCV-9), read without
    /// changing anything: the last segment's file from just past its last valid record
    /// (this reader's end, or past the records a writer has completed since its last
    /// refresh) to the end of its last non-zero byte, when there is one.
    /// `None` when only zeros follow, or when the last segment is limited (LIM-4). Bytes
    /// that are damage rather than a tail are not asked about here: the scan that found
    /// the end has refused them already (RD-6).
    ///
    /// # Errors
    /// `IO` naming the file when its bytes cannot be read; `CORRUPT` when it is shorter
    /// than it was (RD-8).
    pub fn unrecovered_tail(&self) -> Result<Option<(PathBuf, std::ops::Range<usize>)>> {
        let Some(last) = self.segments.last().filter(|s| s.limit.is_none()) else {
            return Ok(None);
        };
        let Some(mapped) = last.mapped() else {
            return Ok(None);
        };
        let path = last.path(&self.dir);
        let tail = mapped.tail_file(&*self.storage, path)?;
        let file = tail.file();
        let source = FileBytes {
            file,
            len: mapped.map.len(),
        };
        // RD-8: past the verified end, read with pread. Records a writer has completed
        // since this reader's last refresh continue the log: the tail starts after them.
        let found = scan(&source, mapped.header.format(), last.end, self.seq_next)
            .map_err(|e| read_error(path, last.end, &e))?;
        let end = found.end;
        let regions = super::writer::data_regions(file, end, source.len);
        let dirty_to =
            nonzero_end(&source, end, &regions).map_err(|e| read_error(path, end, &e))?;
        Ok((dirty_to > end).then(|| (path.to_owned(), end..dirty_to)))
    }

    /// The segments this reader knows, in order: each one's first seq and whether it is
    /// limited (LIM-1), as a checkpoint records them (`checkpoint.md` CKP-8).
    pub fn known_segments(&self) -> Vec<KnownSegment> {
        self.segments
            .iter()
            .map(|s| KnownSegment {
                first_seq: s.first_seq,
                limited: s.limit.is_some(),
            })
            .collect()
    }

    /// Iterates the events from `seq` to the end of what this reader has seen; a record
    /// that cannot be read back is an `Err` item (RCV-6), never the end. As any read in seq
    /// order, it releases the pages of a sealed segment once it moves on to the next one
    /// (RD-4), so iterating a long log keeps about one segment resident.
    pub fn iter_from(&self, seq: u64) -> impl Iterator<Item = Result<EventRef<'_>>> + '_ {
        (seq..self.seq_next).map(move |seq| self.read(seq))
    }

    /// RD-4: a read in segment `at` that follows one in the segment before it releases that
    /// one's pages: reading in seq order (a fold, a repair scan, an iteration) holds about a
    /// segment resident, whatever the log's size. A read elsewhere releases nothing, so
    /// random reads cost one relaxed load more, and reads going back and forth between two
    /// segments release the earlier one at most once per forward move.
    fn follow(&self, at: usize) {
        if self.cursor.load(Ordering::Relaxed) == at {
            return;
        }
        let previous = self.cursor.swap(at, Ordering::Relaxed);
        if previous.checked_add(1) == Some(at)
            && let Some(segment) = self.segments.get(previous)
            && segment.count.is_some()
            && let Some(mapped) = segment.mapped()
        {
            release(&mapped.map, 0..mapped.map.len());
        }
    }

    /// RD-9: asks the OS to load the records of the events at `seqs` (any order; seqs at or
    /// past `seq_next` are skipped) in few requests, those of [`LogReader::ahead_ranges`],
    /// without waiting for them.
    pub(crate) fn read_ahead(&self, seqs: &[u64]) {
        for (at, range) in self.ahead_ranges(seqs) {
            if let Some(mapped) = self.segments.get(at).and_then(Segment::mapped) {
                read_ahead(&mapped.map, range);
            }
        }
    }

    /// RD-9: the byte ranges holding the records of the events at `seqs`, as `(segment
    /// position, range)` in file order: each record's bytes from its offset to the next
    /// record's (only the start of the last record known: its length is not read here),
    /// ranges of a segment less than [`READ_AHEAD_GAP_BYTES`] apart merged. Only records
    /// whose offsets the reader knows are named (known written, RD-8). Segments not opened
    /// yet are opened and checked as a read would (SEG-2, SEG-3, IDX-3); a segment or seq
    /// that fails is skipped, left to its read to report (RD-7).
    fn ahead_ranges(&self, seqs: &[u64]) -> Vec<(usize, std::ops::Range<usize>)> {
        // (segment position, record start, record end)
        let mut ranges: Vec<(usize, usize, usize)> = Vec::with_capacity(seqs.len());
        // The segment of the previous seq, with its seqs: consecutive seqs mostly share one.
        let mut current: Option<(usize, &Segment, &Mapped, std::ops::Range<u64>)> = None;
        for &seq in seqs {
            if seq >= self.seq_next {
                continue;
            }
            let (at, segment, mapped) = match &current {
                Some((at, segment, mapped, seqs)) if seqs.contains(&seq) => {
                    (*at, *segment, *mapped)
                }
                _ => {
                    let Some((at, segment)) = self
                        .segment_of(seq)
                        .and_then(|at| Some((at, self.segments.get(at)?)))
                    else {
                        continue;
                    };
                    let Ok(mapped) = self.open_segment(segment) else {
                        continue;
                    };
                    let next = self
                        .segments
                        .get(at + 1)
                        .map_or(self.seq_next, |s| s.first_seq);
                    current = Some((at, segment, mapped, segment.first_seq..next));
                    (at, segment, mapped)
                }
            };
            let index = usize::try_from(seq - segment.first_seq).unwrap_or(usize::MAX);
            let offset_of =
                |i: usize| segment.offset_of(&*self.storage, i, mapped, &self.dir, &self.log_id);
            let Ok(Some(start)) = offset_of(index) else {
                continue;
            };
            let start = start as usize;
            // Up to the next record's start when it is known (known written, RD-8); the
            // last known record's own length is not read here.
            let end = match index.checked_add(1).map(offset_of) {
                Some(Ok(Some(next))) if next as usize > start => next as usize,
                _ => start + 1,
            };
            if end <= mapped.map.len() {
                ranges.push((at, start, end));
            }
        }
        if !ranges.is_sorted() {
            ranges.sort_unstable();
        }
        let mut merged: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
        for (at, start, end) in ranges {
            if let Some((last_at, last)) = merged.last_mut()
                && *last_at == at
                && start <= last.end.saturating_add(READ_AHEAD_GAP_BYTES)
            {
                last.end = last.end.max(end);
                continue;
            }
            merged.push((at, start..end));
        }
        merged
    }

    /// The segments holding the first `len` events: for a fork, all but the last are
    /// shared whole, and the last is shared up to a limit (STORE-10, LIM-1). Each of them
    /// is opened and checked (SEG-2, SEG-3) if no read has done so yet, so that a fork
    /// refuses a broken chain and hands its child checked segments.
    ///
    /// # Errors
    /// `CORRUPT` when a segment does not check out or the boundary segment's records
    /// cannot be read back, `FORMAT_VERSION`, `IO`.
    pub(crate) fn prefix<'a>(&'a self, len: u64) -> Result<Prefix<'a>> {
        let len = len.min(self.seq_next);
        let mut prefix = Prefix {
            whole: Vec::new(),
            boundary: None,
            split: None,
        };
        let Some(last) = len.checked_sub(1) else {
            return Ok(prefix);
        };
        let at = self.segment_of(last).unwrap_or(0);
        // SEG-2, SEG-3 of each segment linked whole, by its header: one not opened yet is
        // not mapped for it (nor decompressed, CZ-4); the child maps it on first access.
        for segment in self.segments.iter().take(at) {
            match segment.mapped.get() {
                None => super::chain::check_sealed(
                    &*self.storage,
                    segment.path(&self.dir),
                    segment.index,
                    segment.first_seq,
                    &self.log_id,
                )?,
                Some(Err(error)) => return Err(error.repeat()),
                Some(Ok(_)) => {}
            }
        }
        prefix.whole = self
            .segments
            .iter()
            .take(at)
            .map(|s| (s.path(&self.dir), s.limit.is_some()))
            .collect();
        let Some(segment) = self.segments.get(at) else {
            return Ok(prefix);
        };
        let count = usize::try_from(len - segment.first_seq).unwrap_or(usize::MAX);
        let mapped = self.open_segment(segment)?;
        let offsets = segment.offsets(&*self.storage, mapped, &self.dir, &self.log_id)?;
        let path = segment.path(&self.dir);
        let unreadable = || corrupt(path, 0, "a record of the prefix cannot be read");
        let kept = offsets.get(..count).ok_or_else(unreadable)?;
        // The record at an offset, checked (REC-4).
        let record_at = |at: u32| {
            let rest = mapped.map.get(at as usize..).unwrap_or_default();
            let checked = decode_as(mapped.header.format(), rest).ok();
            checked.ok_or_else(|| corrupt(path, at as usize, "checksum mismatch"))
        };
        let &last_offset = kept.last().ok_or_else(unreadable)?;
        let (record, frame) = record_at(last_offset)?;
        if record.event(last).is_none() {
            return Err(unreadable());
        }
        // The segment shared up to the record at `last_offset` (`frame` bytes long), its
        // records at `kept`: durable when sealed (DUR-4) or vouched for (IDX-5).
        let share = |kept: &'a [u32], last_offset: u32, frame: usize| BoundarySegment {
            path,
            header: mapped.header,
            bytes: &mapped.map,
            identity: mapped.identity,
            offsets: kept,
            end: last_offset as usize + frame,
            durable: segment.count.is_some() || segment.durable >= kept.len() as u64,
        };
        if record.seq_end() == len {
            prefix.boundary = Some(share(kept, last_offset, frame));
            return Ok(prefix);
        }
        // A boundary inside a compact chunk run (log-format.md §4.2): the segment is shared
        // up to the record before the run (a limit ends at a record boundary, LIM-3), and
        // the run's members before the boundary are the first events of the child's own
        // segment, which starts at the run's first seq.
        let first = record.first_seq();
        let members = usize::try_from(len - first).unwrap_or(usize::MAX);
        let carried: Vec<crate::event::Event> = record
            .events()
            .take(members)
            .map(|e| e.to_event())
            .collect();
        if carried.len() != members {
            return Err(unreadable());
        }
        // The run's events before the boundary are the segment's (an index, crafted, may
        // list a run that starts below it).
        let before = first
            .checked_sub(segment.first_seq)
            .and_then(|before| usize::try_from(before).ok())
            .ok_or_else(unreadable)?;
        let kept = offsets.get(..before).ok_or_else(unreadable)?;
        prefix.split = Some(SplitRun {
            first_seq: first,
            header: mapped.header,
            carried,
        });
        if kept.is_empty() {
            // The run is the segment's first record: the child's own segment takes the
            // segment's place, and nothing of it is shared.
            return Ok(prefix);
        }
        let &last_offset = kept.last().ok_or_else(unreadable)?;
        let (record, frame) = record_at(last_offset)?;
        if record.seq_end() != first {
            return Err(unreadable());
        }
        prefix.boundary = Some(share(kept, last_offset, frame));
        Ok(prefix)
    }

    /// Consumes the reader for the child of a fork (STORE-10) whose own segment starts at
    /// `own_first` (the prefix's length, or the first seq of the run it ends inside,
    /// [`SplitRun`]): the chain of the child's log, whose segment files are links to this
    /// reader's (the child's reader makes their paths in its own directory), so that the
    /// child's writer does not open and check them again. The segments before `own_first`
    /// keep their maps (the same files; [`LogReader::prefix`] has opened and checked them)
    /// and limits, the one holding the boundary gets `boundary_limit`, the limit the fork
    /// wrote for it (when it wrote one); `own`, the segment the fork created for the
    /// child's appends, comes last.
    pub(crate) fn into_fork_chain(
        self,
        own_first: u64,
        boundary_limit: Option<Limit>,
        own: Linked,
    ) -> Chain {
        let len = own_first.min(self.seq_next);
        let kept = len
            .checked_sub(1)
            .and_then(|last| self.segment_of(last))
            .map_or(0, |at| at + 1);
        let mut sealed: Vec<Sealed> = self
            .segments
            .into_iter()
            .take(kept)
            .map(|segment| Sealed {
                first_seq: segment.first_seq,
                limit: segment.limit,
                opened: segment
                    .mapped
                    .into_inner()
                    .and_then(Result::ok)
                    .map(|m| (m.header, m.map, m.identity)),
            })
            .collect();
        // The last segment kept is the boundary's, limited by the fork; or, when the
        // prefix ends inside a run that starts a segment, the one before, shared whole
        // with the limit it has.
        if let Some(boundary) = sealed.last_mut()
            && boundary_limit.is_some()
        {
            boundary.limit = boundary_limit;
        }
        Chain {
            sealed,
            segments: vec![own],
            unborn: None,
        }
    }

    /// The position of the segment holding `seq`.
    fn segment_of(&self, seq: u64) -> Option<usize> {
        self.segments
            .partition_point(|s| s.first_seq <= seq)
            .checked_sub(1)
    }

    /// The header and map of `segment`, opening and checking it on the first access
    /// (SEG-2, SEG-3): its identity is the log's, its index its position, its first seq
    /// its name's.
    ///
    /// # Errors
    /// `CORRUPT` with the segment's path, `FORMAT_VERSION`, `IO`.
    fn open_segment<'a>(&self, segment: &'a Segment) -> Result<&'a Mapped> {
        if segment.mapped.get().is_none() {
            let opened = open_sealed(
                &*self.storage,
                segment.path(&self.dir),
                segment.index,
                segment.first_seq,
                &self.log_id,
            );
            match opened {
                // Not kept: the next access tries again.
                Err(error) if error.code() == "IO" => return Err(error),
                opened => {
                    // Another thread may have set it first: both checked the same file.
                    let _ = segment
                        .mapped
                        .set(opened.map(|(header, map, identity)| Mapped {
                            header,
                            map,
                            file: None,
                            identity,
                        }));
                }
            }
        }
        match segment.mapped.get() {
            Some(Ok(mapped)) => Ok(mapped),
            Some(Err(error)) => Err(error.repeat()),
            None => Err(corrupt(
                segment.path(&self.dir),
                0,
                "the segment cannot be opened",
            )),
        }
    }

    /// Why the event at `seq` cannot be read: its segment does not check out (SEG-2, SEG-3, checked
    /// on first access), or its record does not (REC-4: damaged since it was written,
    /// RCV-6), with the file and offset.
    fn why_unreadable(&self, seq: u64) -> Option<Error> {
        if seq >= self.seq_next {
            return None;
        }
        let segment = self.segments.get(self.segment_of(seq)?)?;
        let mapped = match self.open_segment(segment) {
            Ok(mapped) => mapped,
            Err(error) => return Some(error),
        };
        let offsets = match segment.offsets(&*self.storage, mapped, &self.dir, &self.log_id) {
            Ok(offsets) => offsets,
            Err(error) => return Some(error),
        };
        let index = usize::try_from(seq - segment.first_seq).ok()?;
        let Some(&offset) = offsets.get(index) else {
            // A scan stopped before this record: at the first one that does not check out.
            let stop = offsets.last().map_or(SEGMENT_HEADER_LEN, |&last| {
                let at = last as usize;
                let frame = mapped
                    .map
                    .get(at..)
                    .and_then(|rest| decode_as(mapped.header.format(), rest).ok());
                frame.map_or(at, |(_, len)| at + len)
            });
            let reason = format!("seq {seq}: a record before it does not check out (RCV-6)");
            return Some(corrupt(segment.path(&self.dir), stop, &reason));
        };
        let offset = offset as usize;
        let decoded = mapped
            .map
            .get(offset..)
            .map(|rest| decode_as(mapped.header.format(), rest));
        let reason = match decoded {
            Some(Ok((record, _))) if record.event(seq).is_some() => return None,
            Some(Ok(_)) => format!("seq {seq}: the record there has another seq (RCV-5)"),
            Some(Err(error)) => format!("seq {seq}: the record does not check out: {error:?}"),
            None => format!("seq {seq}: the record lies past the segment's end"),
        };
        Some(corrupt(segment.path(&self.dir), offset, &reason))
    }

    /// Opens the segment after the last one if its file exists with a valid header.
    /// A next file whose header is not written yet is not there yet (the writer is
    /// creating it, SEG-6).
    fn open_next_segment(&mut self) -> Result<bool> {
        let expected_index = self.segments.last().map_or(0, |s| s.index + 1);
        let first_seq = self.seq_next;
        let path = self.dir.join(super::segment::segment_name(first_seq));
        // Not there yet: the writer has not created it.
        let Some(file) = open_if_present(&*self.storage, &path)? else {
            return Ok(false);
        };
        let map = map(&file).map_err(|e| Error::io("mmap", &path, &e))?;
        // Being created (SEG-6): not there yet, unless later segments exist, or it holds
        // what only a segment that was written holds (RCV-7, as at open). Judged on two
        // reads of the header: a writer may have written it since the first (and gone on,
        // filling and sealing the segment), so a header still invalid at the second is
        // damage, never the first read's stale view.
        let mut looks = 0;
        let header = loop {
            let reason =
                match SegmentHeader::decode(&super::map::read_head(&file, SEGMENT_HEADER_LEN)) {
                    Ok(header) => break header,
                    Err(HeaderError::Version(found)) => return Err(version_error(found, &path)),
                    Err(HeaderError::Invalid(reason)) => reason,
                };
            let damage = if self.later_segment_exists(first_seq)? {
                Some(reason.to_owned())
            } else {
                let previous = self
                    .segments
                    .last()
                    .and_then(Segment::mapped)
                    .map(|mapped| &mapped.header);
                let again = super::map::map(&file).map_err(|e| Error::io("mmap", &path, &e))?;
                let unborn = super::chain::Unborn {
                    path: path.clone(),
                    file: file.try_clone().map_err(|e| Error::io("open", &path, &e))?,
                    map: again,
                    reason,
                };
                unborn.damage(
                    &*self.storage,
                    previous,
                    super::LogOptions::default().segment_capacity(),
                )?
            };
            let Some(damage) = damage else {
                return Ok(false);
            };
            looks += 1;
            if looks == 2 {
                return Err(corrupt(&path, 0, &damage));
            }
        };
        if expected_index == 0 {
            self.log_id = header.log_id;
        }
        if header.log_id != self.log_id
            || header.index != expected_index
            || header.first_seq != first_seq
        {
            return Err(corrupt(
                &path,
                0,
                "segment does not continue the log (SEG-3)",
            ));
        }
        // CZ-4, CZ-6 (its place checked first: another log's file is refused before it is
        // decompressed): a compressed segment (compacted since this reader last looked) is
        // sealed whole: its logical segment is mapped, never the compressed file, and
        // `refresh` takes all its records and goes on to the next one.
        let compressed = super::compressed::is_compressed(&header);
        let map = if compressed {
            super::compressed::materialize(&self.dir, &path, &file, &header)?.1
        } else {
            map
        };
        if let Some(previous) = self.segments.last_mut() {
            previous.count.get_or_insert(first_seq - previous.first_seq);
            // RD-4: the previous segment is read through; later reads fault it in again.
            if let Some(Ok(mapped)) = previous.mapped.get_mut() {
                release(&mapped.map, previous.released..mapped.map.len());
                previous.released = mapped.map.len();
                // Sealed now (RD-2): its file is no longer read past a verified end (RD-8),
                // so it is closed, as any sealed segment's is; the map stays. A reader
                // following a long log holds no descriptor per segment it passed.
                mapped.file = None;
            }
        }
        self.segments.push(Segment {
            first_seq,
            index: expected_index,
            path: OnceLock::from(path),
            mapped: OnceLock::from(Ok(Mapped {
                header,
                map,
                identity: identity(&file),
                file: (!compressed).then_some(file),
            })),
            limit: None,
            count: None,
            offsets: OnceLock::from(Vec::new()),
            unread: None,
            end: SEGMENT_HEADER_LEN,
            durable: 0,
            released: 0,
        });
        Ok(true)
    }

    /// SEG-7: when the last segment holds no record and the file under its name is now
    /// another file than the one mapped, the writer replaced it by an empty segment large
    /// enough for an oversized first record: that file is mapped instead, after its header
    /// is checked to be the same segment's (SEG-2, SEG-3). The old map stays valid until
    /// dropped (SEG-8). Returns whether it was replaced. Costs an open and two `fstat`s per
    /// refresh while the last segment is empty.
    fn remap_replaced_last(&mut self) -> Result<bool> {
        let Some(last) = self.segments.last() else {
            return Ok(false);
        };
        let Some(mapped) = last.mapped() else {
            return Ok(false);
        };
        if last.limit.is_some() || last.records_known() != 0 {
            return Ok(false);
        }
        let path = last.path(&self.dir).to_owned();
        // Gone (set aside by a salvage): nothing replaced it.
        let Some(file) = open_if_present(&*self.storage, &path)? else {
            return Ok(false);
        };
        // Another file than the one mapped: both grow in steps (SEG-6), so only its identity
        // tells a replacement from the same file grown.
        let identity = |file: &std::fs::File| {
            use std::os::unix::fs::MetadataExt;
            file.metadata()
                .map(|m| (m.dev(), m.ino()))
                .map_err(|e| Error::io("stat", &path, &e))
        };
        let now = identity(&file)?;
        let replaced = match &mapped.file {
            Some(kept) => identity(kept)? != now,
            // Without the mapped file at hand, its capacity tells (SEG-7: the replacement's
            // is larger).
            None => SegmentHeader::decode(&super::map::read_head(&file, SEGMENT_HEADER_LEN))
                .is_ok_and(|header| header.capacity > mapped.header.capacity),
        };
        if !replaced {
            return Ok(false);
        }
        let map = map(&file).map_err(|e| Error::io("mmap", &path, &e))?;
        let header = match SegmentHeader::decode(&super::map::read_head(&file, SEGMENT_HEADER_LEN))
        {
            Ok(header) => header,
            Err(HeaderError::Version(found)) => return Err(version_error(found, &path)),
            Err(HeaderError::Invalid(reason)) => return Err(corrupt(&path, 0, reason)),
        };
        let old = mapped.header;
        if header.log_id != old.log_id
            || header.index != old.index
            || header.first_seq != old.first_seq
        {
            return Err(corrupt(
                &path,
                0,
                "segment does not continue the log (SEG-3)",
            ));
        }
        // CZ-4: since filled, sealed and compressed by a compaction: its logical segment is
        // mapped, as `open_next_segment` maps one, never the compressed file.
        let compressed = super::compressed::is_compressed(&header);
        let map = if compressed {
            super::compressed::materialize(&self.dir, &path, &file, &header)?.1
        } else {
            map
        };
        if let Some(last) = self.segments.last_mut() {
            last.mapped = OnceLock::from(Ok(Mapped {
                header,
                map,
                identity: Some(now),
                file: (!compressed).then_some(file),
            }));
            last.offsets = OnceLock::from(Vec::new());
            last.unread = None;
            last.end = SEGMENT_HEADER_LEN;
            last.durable = 0;
            last.released = 0;
        }
        Ok(true)
    }

    /// `true` when a segment file starting after `first_seq` exists.
    fn later_segment_exists(&self, first_seq: u64) -> Result<bool> {
        later_segment_exists(&*self.storage, &self.dir, first_seq)
    }
}

/// How long a listing of the log directory that found no later segment stands for the
/// next ones at the same place, the directory unchanged ([`LogReader::segment_after`]).
const UNLISTED_FOR_AT_MOST: std::time::Duration = std::time::Duration::from_secs(1);

/// `true` when a segment file starting after `first_seq` exists in the log directory `dir`.
///
/// # Errors
/// `IO` when the directory cannot be listed.
fn later_segment_exists(storage: &dyn Storage, dir: &Path, first_seq: u64) -> Result<bool> {
    let names = storage
        .list_dir(dir)
        .map_err(|e| Error::io("list", dir, &e))?;
    Ok(names
        .iter()
        .filter_map(|n| parse_segment_name(n))
        .any(|first| first > first_seq))
}

impl Segment {
    /// The last segment's length, checked at each refresh that scans it (RD-2), before any
    /// byte of it is read again: a file another process cut shorter than its map, or to a
    /// length its writer never gives it (SEG-6), is damage (SEG-8, RD-8); a file the writer
    /// grew since it was mapped is mapped again whole (SEG-6), so that the records written
    /// in the new part can be read through the map once verified. The old map is dropped:
    /// nothing borrows it across a refresh (`&mut self`).
    fn map_grown(&mut self, storage: &dyn Storage, dir: &Path) -> Result<()> {
        let path = self.path(dir).to_owned();
        let Some(Ok(mut mapped)) = self.mapped.take() else {
            return Ok(());
        };
        let opened;
        let file = if let Some(file) = &mapped.file {
            file
        } else {
            opened = storage
                .open_file(&path, false)
                .map_err(|e| Error::io("open", &path, &e))?;
            &opened
        };
        let outcome = (|| {
            let len = file
                .metadata()
                .map_err(|e| Error::io("stat", &path, &e))?
                .len();
            if len < mapped.map.len() as u64 {
                return Err(truncated(&path, len, mapped.map.len()));
            }
            if !super::segment::is_grown_len(len, mapped.header.capacity) {
                let reason = super::segment::cut_short(len, mapped.header.capacity);
                return Err(corrupt(&path, mapped.map.len(), &reason));
            }
            if len > mapped.map.len() as u64 {
                return map(file)
                    .map(Some)
                    .map_err(|e| Error::io("mmap", &path, &e));
            }
            Ok(None)
        })();
        let outcome = outcome.map(|grown| {
            if let Some(map) = grown {
                mapped.map = map;
            }
        });
        self.mapped = OnceLock::from(Ok(mapped));
        outcome
    }

    /// Its header and map, once opened and checked.
    fn mapped(&self) -> Option<&Mapped> {
        self.mapped.get()?.as_ref().ok()
    }

    /// The record offsets, read on first use for a sealed segment: from its index when it
    /// checks out and holds the expected count (IDX-2, IDX-3), otherwise by a scan. A scan
    /// that finds fewer records leaves the rest unreadable: they are reported when read
    /// (RCV-6). `mapped` is this segment's.
    ///
    /// # Errors
    /// `IO` when the scan cannot read the segment (RD-8): not kept, so that a later read
    /// tries again rather than taking a passing failure for damage.
    fn offsets(
        &self,
        storage: &dyn Storage,
        mapped: &Mapped,
        dir: &Path,
        log_id: &LogId,
    ) -> Result<&[u32]> {
        if let Some(offsets) = self.offsets.get() {
            return Ok(offsets);
        }
        let offsets = if let Some(unread) = &self.unread {
            self.read_listed(storage, unread, mapped, dir, log_id)?
        } else {
            let count = usize::try_from(self.count.unwrap_or(0)).unwrap_or(usize::MAX);
            let bound = self.limit.map_or(mapped.map.len(), |l| l.end as usize);
            let bytes = mapped.map.get(..bound).unwrap_or(&mapped.map);
            let first = self.first_seq;
            let index_path = dir.join(index_name(first));
            let format = mapped.header.format();
            if let Some(index) = index::load(storage, &index_path, bytes, log_id, first, format)
                .filter(|index| index.offsets.len() == count)
            {
                index.offsets
            } else {
                // RD-8: a scan reads with pread; records it cannot read stay unreadable
                // (RCV-6), reported when read; a read that fails is IO.
                let path = self.path(dir);
                let mut offsets = mapped
                    .scan(storage, path, bound, first)
                    .map_err(|e| read_error(path, SEGMENT_HEADER_LEN, &e))?
                    .offsets;
                offsets.truncate(count);
                // RD-4: the scan read the whole segment once; the reads that follow are few.
                release(&mapped.map, 0..bound);
                offsets
            }
        };
        Ok(self.offsets.get_or_init(move || offsets))
    }

    /// The last segment's offsets on first access (IDX-5): those its index lists, read
    /// and checked now (IDX-2: header, `crc`, identity, count, and the record at the last
    /// offset), or, when the index no longer checks out, found by a scan of those records
    /// (a record it cannot find reads as unreadable: RCV-6); then those scanned after them.
    fn read_listed(
        &self,
        storage: &dyn Storage,
        unread: &Unread,
        mapped: &Mapped,
        dir: &Path,
        log_id: &LogId,
    ) -> Result<Vec<u32>> {
        let first = self.first_seq;
        let index_path = dir.join(index_name(first));
        let mut offsets = if let Some(index) = index::load(
            storage,
            &index_path,
            &mapped.map,
            log_id,
            first,
            mapped.header.format(),
        )
        .filter(|index| index.offsets.len() == unread.vouched.count)
        {
            index.offsets
        } else {
            let path = self.path(dir);
            let mut found = mapped
                .scan(storage, path, mapped.map.len(), first)
                .map_err(|e| read_error(path, SEGMENT_HEADER_LEN, &e))?
                .offsets;
            // Positions stay seq-aligned: a record the scan did not reach points past the
            // segment, so that reading it fails.
            found.resize(unread.vouched.count, u32::MAX);
            found
        };
        offsets.reserve(unread.after.len());
        offsets.extend_from_slice(&unread.after);
        Ok(offsets)
    }

    /// The offset of record `index`: without reading the index when the last segment's
    /// offsets are unread and it is the last listed record or one scanned after them
    /// (the records open and appends read), otherwise from [`Segment::offsets`].
    fn offset_of(
        &self,
        storage: &dyn Storage,
        index: usize,
        mapped: &Mapped,
        dir: &Path,
        log_id: &LogId,
    ) -> Result<Option<u32>> {
        if self.offsets.get().is_none()
            && let Some(unread) = &self.unread
        {
            if let Some(after) = index.checked_sub(unread.vouched.count) {
                return Ok(unread.after.get(after).copied());
            }
            if index + 1 == unread.vouched.count {
                return Ok(Some(unread.vouched.last_offset));
            }
        }
        Ok(self
            .offsets(storage, mapped, dir, log_id)?
            .get(index)
            .copied())
    }

    /// The records whose offsets are known: read, or listed and scanned (`unread`).
    fn records_known(&self) -> usize {
        match (self.offsets.get(), &self.unread) {
            (Some(offsets), _) => offsets.len(),
            (None, Some(unread)) => unread.vouched.count + unread.after.len(),
            (None, None) => 0,
        }
    }

    /// Appends the offsets of records scanned after the known ones: to `offsets` once read,
    /// otherwise to those waiting to be (`unread`).
    fn push_offsets(&mut self, found: &[u32]) {
        if self.offsets.get().is_none()
            && let Some(unread) = &mut self.unread
        {
            unread.after.extend_from_slice(found);
            return;
        }
        self.unread = None;
        let mut offsets = self.offsets.take().unwrap_or_default();
        offsets.extend_from_slice(found);
        self.offsets = OnceLock::from(offsets);
    }

    /// Its file's path in the log directory `dir`, made on the first call for a sealed
    /// segment (LOG-1: its name is its first seq).
    fn path(&self, dir: &Path) -> &Path {
        self.path
            .get_or_init(|| super::segment::seq_file_path(dir, self.first_seq, ".seg"))
    }

    /// RD-4: releases the pages of the records scanned so far, up to the page holding
    /// `end`, once more than `min_bytes` of them are held.
    fn release_read(&mut self, min_bytes: usize) {
        let to = self.end / PAGE_BYTES * PAGE_BYTES;
        if to > self.released
            && to - self.released >= min_bytes
            && let Some(mapped) = self.mapped()
        {
            release(&mapped.map, self.released..to);
            self.released = to;
        }
    }
}

/// The reader's segments from `chain`, consumed: sealed ones unopened (unless the chain
/// opened them), and the last one, when it is not limited, with the offsets and end in
/// `layout`. Also returns the last segment's file (the writer appends to it).
pub(crate) fn into_segments(
    chain: Chain,
    layout: Option<Layout>,
) -> (Vec<Segment>, Option<std::fs::File>) {
    let Chain {
        sealed, segments, ..
    } = chain;
    // LOG-2: a sealed segment holds the records up to the next one's first, or its limit's.
    let nexts: Vec<u64> = sealed
        .iter()
        .skip(1)
        .map(|s| s.first_seq)
        .chain(segments.iter().map(|s| s.header.first_seq))
        .collect();
    let mut out = Vec::with_capacity(sealed.len() + segments.len());
    let mut layout = layout;
    for (position, (s, next)) in sealed.into_iter().zip(nexts).enumerate() {
        let count = s.limit.map_or(next, |l| l.seq_next) - s.first_seq;
        out.push(Segment {
            first_seq: s.first_seq,
            index: position as u64,
            path: OnceLock::new(),
            mapped: s
                .opened
                .map_or_else(OnceLock::new, |(header, map, identity)| {
                    OnceLock::from(Ok(Mapped {
                        header,
                        map,
                        file: None,
                        identity,
                    }))
                }),
            limit: s.limit,
            count: Some(count),
            offsets: OnceLock::new(),
            unread: None,
            end: SEGMENT_HEADER_LEN,
            durable: count,
            released: 0,
        });
    }
    let mut last_file = None;
    for linked in segments {
        let count = linked.limit.map(|l| l.seq_next - linked.header.first_seq);
        let mut segment = Segment {
            first_seq: linked.header.first_seq,
            index: linked.header.index,
            path: OnceLock::from(linked.path),
            mapped: OnceLock::from(Ok(Mapped {
                header: linked.header,
                map: linked.map,
                identity: linked.file.as_ref().and_then(identity),
                file: linked.file.as_ref().and_then(|f| f.try_clone().ok()),
            })),
            limit: linked.limit,
            count,
            offsets: OnceLock::new(),
            unread: None,
            end: SEGMENT_HEADER_LEN,
            durable: count.unwrap_or(0),
            released: 0,
        };
        if count.is_none()
            && let Some(layout) = layout.take()
        {
            match layout.vouched.filter(|v| v.count > 0) {
                Some(vouched) => {
                    // Open read nothing before the last vouched record (IDX-5), so RD-4's
                    // release of what open read starts at its page.
                    segment.released = vouched.last_offset as usize / PAGE_BYTES * PAGE_BYTES;
                    segment.unread = Some(Unread {
                        vouched,
                        after: layout.after,
                    });
                }
                None => segment.offsets = OnceLock::from(layout.after),
            }
            segment.end = layout.end;
        }
        last_file = linked.file;
        out.push(segment);
    }
    (out, last_file)
}

impl EventSource for LogReader {
    fn seq_next(&self) -> u64 {
        self.seq_next
    }

    fn event(&self, seq: u64) -> Result<Option<EventRef<'_>>> {
        if seq >= self.seq_next {
            return Ok(None);
        }
        self.read(seq).map(Some)
    }
}

impl LogReader {
    /// The event at `seq`, below `seq_next`: its segment opened and checked on first access
    /// (SEG-2, SEG-3), its record checked (REC-4) and its seq the one asked for (a record
    /// damaged since its index was written points elsewhere). Anything else is an error
    /// naming the file and offset (RCV-6).
    fn read(&self, seq: u64) -> Result<EventRef<'_>> {
        let at = self
            .segment_of(seq)
            .ok_or_else(|| crate::event::missing_event(seq, self.seq_next))?;
        self.follow(at);
        let segment = &self.segments[at];
        let mapped = self.open_segment(segment)?;
        let index = usize::try_from(seq - segment.first_seq).unwrap_or(usize::MAX);
        let offset = segment.offset_of(&*self.storage, index, mapped, &self.dir, &self.log_id)?;
        if let Some(offset) = offset
            && let Some(rest) = mapped.map.get(offset as usize..)
        {
            let format = mapped.header.format();
            let key = ((at as u64 + 1) << 32) | u64::from(offset);
            let again =
                format == Format::Compact && self.decoded_run.load(Ordering::Relaxed) == key;
            let decoded = if again {
                decode_again_as(format, rest)
            } else {
                decode_as(format, rest)
            };
            if let Ok((record, _)) = decoded {
                if !again && matches!(record, crate::record::Decoded::Run(_)) {
                    self.decoded_run.store(key, Ordering::Relaxed);
                }
                // A run decoded again: the member returned is checked on its own (REC-20),
                // the bytes under the same place may have changed under a matching crc.
                let event = if again {
                    record.event_again(seq)
                } else {
                    record.event(seq)
                };
                if let Some(event) = event {
                    return Ok(event);
                }
            }
        }
        Err(self.why_unreadable(seq).unwrap_or_else(|| {
            corrupt(
                segment.path(&self.dir),
                offset.map_or(0, |o| o as usize),
                &format!("seq {seq}: the record cannot be read back (RCV-6)"),
            )
        }))
    }
}

/// RD-6: scans the last segment's `bytes` from `from`, expecting `seq_next`, and decides
/// whether where it stops is damage ([`damage_at`]). When it finds a valid record after
/// an invalid position, it reads that position once more: the writer writes records in
/// order (RD-3), so a record after it that was complete before this second look means
/// the position was complete too, unless it is damage. If the position now holds the
/// next record, the writer was completing it, and the scan goes on from there. With
/// `torn` (a reader reporting torn tails), RCV-4's shape that stays is the end of the
/// records when no segment file follows the last one (`torn` says whether one does).
///
/// # Errors
/// `CORRUPT` with `path` and the offset, `IO`. With the scan, whether its end is RCV-4's
/// shape taken for a torn tail.
fn scan_checked(
    path: &Path,
    source: &FileBytes<'_>,
    format: Format,
    from: usize,
    seq_next: u64,
    torn: Option<&dyn Fn() -> Result<bool>>,
) -> Result<(super::scan::Scan, bool)> {
    let read = |from: usize, seq_next: u64| {
        scan(source, format, from, seq_next).map_err(|e| read_error(path, from, &e))
    };
    let mut found = read(from, seq_next)?;
    while let Some((damage, _)) = damage_at(path, source, format, found.stop, found.end)? {
        let again = read(found.end, found.seq_next)?;
        if again.offsets.is_empty() {
            // Decided on the second look's bytes: the first look's shape may be gone.
            if let Some(later) = torn {
                let now = damage_at(path, source, format, again.stop, again.end)?;
                let changed = matches!(now, Some((_, Shape::Changed)));
                if !changed && !later()? {
                    return Ok((found, now.is_some()));
                }
                if let Some((error, _)) = now {
                    return Err(error);
                }
            }
            return Err(damage);
        }
        found.offsets.extend_from_slice(&again.offsets);
        (found.end, found.seq_next, found.stop) = (again.end, again.seq_next, again.stop);
    }
    Ok((found, false))
}

/// The index of the last segment, as [`stop_before_index_end`] reads it.
struct IndexMarks<'a> {
    storage: &'a dyn Storage,
    path: &'a Path,
    /// The reader's map of the segment.
    map: &'a [u8],
    log_id: &'a super::segment::LogId,
    first_seq: u64,
}

/// RD-6, RCV-13: a refresh's scan of the last segment `path` (read through `source`) that
/// found `found` after `before` records: bytes that are not a record, or zeros, where the
/// segment's index (written since the reader opened: a writer's close) lists durable
/// records, are damage, never the end of the log. Looked at once more first: the writer
/// may have completed the record and written the index since the scan. An index listing
/// records past the map (the file grown since it was mapped) is judged at the next
/// refresh, which maps the file again. A segment with no record yet may have been
/// replaced by a larger one (SEG-7) whose index this is: judged once remapped.
///
/// # Errors
/// `CORRUPT` at the stop; `IO` when the bytes cannot be read again.
fn stop_before_index_end(
    path: &Path,
    source: &FileBytes<'_>,
    format: Format,
    found: &super::scan::Scan,
    before: usize,
    index: &IndexMarks<'_>,
) -> Result<()> {
    let stopped = match found.stop {
        Stop::Invalid { .. } => true,
        Stop::End => before + found.offsets.len() > 0,
        Stop::Full | Stop::WrongSeq { .. } => false,
    };
    if !stopped {
        return Ok(());
    }
    let (_, listed_end) = index::durable_marks(
        index.storage,
        index.path,
        index.map,
        index.log_id,
        index.first_seq,
        format,
    )?;
    if listed_end <= found.end || listed_end > source.len {
        return Ok(());
    }
    let again = scan(source, format, found.end, found.seq_next)
        .map_err(|e| read_error(path, found.end, &e))?;
    if again.end < listed_end {
        return Err(corrupt(
            path,
            found.end,
            "a record the segment's index lists as durable does not check out (RCV-13)",
        ));
    }
    Ok(())
}

/// Which damage [`damage_at`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// RCV-4's shape: an end marker or an invalid frame followed by a valid record, which a
    /// power cut leaves above the durable marks (a later sector kept, an earlier lost).
    Torn,
    /// A record with the wrong seq (RCV-5) or a bad body (RCV-8): never a power cut's.
    Changed,
}

/// RD-6: whether a scan of the last segment that stopped at `stop`, just past the valid
/// records ending at `end`, stopped at damage rather than at the end of what was written:
/// `Some(CORRUPT)`, with its [`Shape`], for a record with the wrong seq (RCV-5) or a bad
/// body (RCV-8), and for any other stop followed by a valid record (RCV-4's shape); `None`
/// for zeros, or for bytes that no valid record follows (a record being written, or a torn
/// tail that only a writer's recovery drops, §7). Only the file's data regions are read
/// (holes read as zeros), so the sparse rest of the segment costs nothing.
///
/// # Errors
/// `IO` or `CORRUPT` (a file shorter than it was) when the bytes cannot be read (RD-8).
fn damage_at(
    path: &Path,
    source: &FileBytes<'_>,
    format: Format,
    stop: Stop,
    end: usize,
) -> Result<Option<(Error, Shape)>> {
    let (offset, reason) = match stop {
        Stop::Full => return Ok(None),
        Stop::WrongSeq { offset, .. } => {
            let reason = "a record with the wrong seq (RCV-5)";
            return Ok(Some((corrupt(path, offset, reason), Shape::Changed)));
        }
        Stop::Invalid {
            offset,
            error: crate::record::RecordError::Body(_),
        } => {
            let reason = "a record whose body breaks REC-5/REC-6 or REC-20 (RCV-8)";
            return Ok(Some((corrupt(path, offset, reason), Shape::Changed)));
        }
        Stop::Invalid { offset, .. } => {
            (offset, "an invalid record followed by valid records (RD-6)")
        }
        Stop::End => (end, "an end marker followed by valid records (RD-6)"),
    };
    // RD-8: read with pread inside the data regions, never through the map.
    let regions = super::writer::data_regions(source.file, offset, source.len);
    let read = |e: std::io::Error| read_error(path, offset, &e);
    if nonzero_end(source, offset, &regions).map_err(read)? == offset
        || !valid_record_after(source, format, offset, &regions).map_err(read)?
    {
        return Ok(None);
    }
    Ok(Some((corrupt(path, offset, reason), Shape::Torn)))
}

/// `CORRUPT` at a file and offset.
/// `CORRUPT` for a segment file of `len` bytes although it was `mapped` bytes long: another
/// process truncated it (SEG-8 forbids it; RD-8).
fn truncated(path: &Path, len: u64, mapped: usize) -> Error {
    let reason = format!(
        "the segment file is {len} bytes, shorter than the {mapped} it had: truncated by \
         another process (SEG-8, RD-8)"
    );
    corrupt(path, usize::try_from(len).unwrap_or(usize::MAX), &reason)
}

/// The file at `path`, opened to read, or `None` when there is none: only a missing name
/// (`NotFound`) says so; any other failure (EMFILE, EIO, EACCES) is `IO`, never taken for
/// the end of the log (RD-2).
///
/// # Errors
/// `IO` with the path.
fn open_if_present(storage: &dyn Storage, path: &Path) -> Result<Option<std::fs::File>> {
    match storage.open_file(path, false) {
        Ok(file) => Ok(Some(file)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(Error::io("open", path, &error)),
    }
}

/// A failed read of a segment's bytes with `pread` (RD-8): `CORRUPT` when the file is
/// shorter than it was (another process truncated it, SEG-8), `IO` otherwise; both name
/// the file (`CORRUPT` also the offset the read started at).
pub(crate) fn read_error(path: &Path, offset: usize, error: &std::io::Error) -> Error {
    if error.kind() == std::io::ErrorKind::UnexpectedEof {
        corrupt(path, offset, &error.to_string())
    } else {
        let _ = offset;
        Error::io("read", path, error)
    }
}

pub(crate) fn corrupt(path: &Path, offset: usize, reason: &str) -> Error {
    ErrorKind::Corrupt {
        location: format!("{} offset={offset}", path.display()),
        reason: reason.to_owned(),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, EventFields};

    /// A canonical streamed chunk (REC-11), stored as a §4 record by a writer without
    /// chunk records and as a chunk record by compaction.
    fn chunk(seq: u64) -> Event {
        let text = format!(
            r#"{{"type":"assistant/chunk","seq":{seq},"time":{seq},"data":{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"part {seq}"}}}}}}"#
        );
        let start = text.find(r#"{"turn""#).unwrap_or_default();
        let end = text.len() - 1;
        Event::new(
            text,
            start..end,
            None,
            EventFields {
                event_type: crate::event::chunk::CHUNK_TYPE.to_owned().into(),
                seq,
                time: i64::try_from(seq).unwrap_or_default(),
                surface_op: None,
                sources: None,
                ignorable: false,
            },
        )
    }

    /// No panics on any input: a segment whose index (checksummed, IDX-2) lists a compact
    /// run holding seqs below the segment's first, as crafted bytes may, is `CORRUPT` to a
    /// fork whose boundary falls inside that run (the run's first seq is not the
    /// segment's). Failed before the fix: `first - segment.first_seq` overflowed (a panic;
    /// in a release build, a wrapped count that took the run for the segment's first
    /// record).
    #[test]
    fn a_fork_inside_a_run_below_its_segment_is_corrupt() {
        use crate::record::compact::{self, ChunkRunBuilder, Record};
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let options = crate::log::LogOptions {
            segment_bytes: 400,
            compact_records: true,
            ..crate::log::LogOptions::default()
        };
        let (mut log, _) = crate::log::DiskLog::open(dir.path(), options).unwrap();
        // Chunks of one append each: runs of one, until a segment rolls; then a run of 12.
        let mut seq = 0;
        while log.seq_next() == 0 || std::fs::read_dir(dir.path()).unwrap().count() < 3 {
            log.append(&[chunk(seq)]).unwrap();
            seq += 1;
        }
        let first = seq - 1;
        let run: Vec<Event> = (seq..seq + 12).map(chunk).collect();
        log.append(&run).unwrap();
        log.close().unwrap();
        let name = crate::log::segment::segment_name(first);
        let path = dir.path().join(&name);
        let mut bytes = std::fs::read(&path).unwrap();
        let header = SegmentHeader::decode(&bytes).unwrap();
        assert_eq!(header.first_seq, first);
        // The run, moved 5 seqs down (below the segment's first seq), in a frame as long.
        let at = SEGMENT_HEADER_LEN + compact::decode(&bytes[SEGMENT_HEADER_LEN..]).unwrap().1;
        let Ok((Record::Chunks(found), len)) = compact::decode(&bytes[at..]) else {
            panic!("the second record is the run");
        };
        assert_eq!(found.count(), 12);
        let mut builder = ChunkRunBuilder::default();
        for mut member in found.members() {
            member.seq -= 5;
            builder.push(member).unwrap();
        }
        let mut moved = Vec::new();
        builder.encode(&mut moved);
        assert_eq!(moved.len(), len);
        bytes[at..at + len].copy_from_slice(&moved);
        std::fs::write(&path, &bytes).unwrap();
        let end = at + len;
        // Listed as the seqs `first .. first + 8`: the moved run ends the last of them.
        let mut offsets = vec![u32::try_from(SEGMENT_HEADER_LEN).unwrap()];
        offsets.extend(std::iter::repeat_n(u32::try_from(at).unwrap(), 7));
        let index = crate::log::encode_index(
            &header.log_id,
            first,
            &offsets,
            u32::try_from(end).unwrap(),
            crc32c::crc32c(&bytes[SEGMENT_HEADER_LEN..end]),
        );
        let index_path = dir.path().join(crate::log::segment::index_name(first));
        std::fs::write(index_path, index).unwrap();
        let reader = LogReader::open(dir.path()).unwrap();
        assert_eq!(reader.seq_next(), first + 8);
        // Seq `first + 2` is a member of the moved run, which starts at `first - 4`.
        let error = reader.prefix(first + 3).unwrap_err();
        assert_eq!(error.code(), "CORRUPT", "{error}");
    }

    /// A closed log in `dir` of 60 chunks as version 1 records without chunk records, in
    /// segments of 2,048 bytes (several sealed ones): its events.
    fn sixty_chunks(dir: &std::path::Path) -> Vec<Event> {
        let options = crate::log::LogOptions {
            segment_bytes: 2048,
            chunk_records: false,
            compact_records: false,
            ..crate::log::LogOptions::default()
        };
        let events: Vec<Event> = (0..60).map(chunk).collect();
        let (mut log, _) = crate::log::DiskLog::open(dir, options).unwrap();
        log.append(&events).unwrap();
        log.close().unwrap();
        events
    }

    /// CMP-4: a sealed segment this reader mapped before compaction replaced it, whose
    /// offsets it reads only after: the name now holds a file whose index and records lie
    /// elsewhere, so the offsets come from the mapped file's own bytes, and every event
    /// reads back as it was. (Scanning the file under the name would put the new file's
    /// offsets over the old map: every read of the segment would be `CORRUPT`.)
    #[test]
    fn cmp_4_offsets_come_from_the_file_that_was_mapped() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let events = sixty_chunks(dir.path());
        let reader = LogReader::open(dir.path()).unwrap();
        assert!(reader.segments.len() > 2);
        for segment in &reader.segments {
            reader.open_segment(segment).unwrap();
            assert!(segment.offsets.get().is_none() || segment.count.is_none());
        }
        let report = crate::log::compact(&crate::storage::FsStorage, dir.path()).unwrap();
        assert_eq!(report.rewritten.len(), reader.segments.len() - 1);
        for event in &events {
            let read = reader.event_at(event.seq()).unwrap();
            assert_eq!(read.text(), event.text());
            assert!(read.chunk().is_none(), "read from the file that was mapped");
        }
        let fresh = LogReader::open(dir.path()).unwrap();
        assert!(fresh.event_at(0).unwrap().chunk().is_some());
    }

    /// RD-9: the ranges read ahead for seqs in any order, repeated or past the end, are
    /// in file order, each from a record's offset to the next record's (the last known
    /// record: its first byte), merged within a segment, never past a map; only the
    /// segments of the seqs are opened. A damaged record and a damaged segment header are
    /// skipped by the read-ahead and reported by the read (RD-7), with file and offset.
    #[test]
    fn rd_9_read_ahead_ranges_are_known_records_in_file_order() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let events = sixty_chunks(dir.path());
        let reader = LogReader::open(dir.path()).unwrap();
        let count = reader.segments.len();
        assert!(count > 3, "{count} segments");
        let last = 59;
        let (first_at, last_at) = (
            reader.segment_of(3).unwrap(),
            reader.segment_of(last).unwrap(),
        );
        let middle = reader.segments[1].first_seq + 1;
        let seqs = [last, 3, 200, middle, 3, 4];
        let ranges = reader.ahead_ranges(&seqs);
        let opened: Vec<bool> = reader
            .segments
            .iter()
            .map(|s| s.mapped().is_some())
            .collect();
        assert_eq!(opened.iter().filter(|o| **o).count(), 3, "{opened:?}");
        assert!(ranges.is_sorted_by_key(|(at, range)| (*at, range.start)));
        assert_eq!(ranges.len(), 3, "3 and 4 merged: {ranges:?}");
        for (at, range) in &ranges {
            let segment = &reader.segments[*at];
            let mapped = segment.mapped().unwrap();
            let offsets = segment
                .offsets(&*reader.storage, mapped, &reader.dir, &reader.log_id)
                .unwrap();
            assert!(range.end <= mapped.map.len());
            assert!(offsets.contains(&u32::try_from(range.start).unwrap()));
            if *at == last_at {
                assert_eq!(range.len(), 1, "the last record's length is not read");
            } else {
                let end = u32::try_from(range.end).unwrap();
                assert!(offsets.contains(&end), "{range:?} ends at the next record");
            }
        }
        assert_eq!(ranges[0].0, first_at);
        for event in &events {
            reader.read_ahead(&[event.seq()]);
            assert_eq!(reader.event_at(event.seq()).unwrap(), event.as_ref());
        }

        // A damaged record of a sealed segment, and a sealed segment's damaged header.
        let path_of = |at: usize| {
            dir.path().join(crate::log::segment::segment_name(
                reader.segments[at].first_seq,
            ))
        };
        let damaged_record = path_of(1);
        let mut bytes = std::fs::read(&damaged_record).unwrap();
        let at = SEGMENT_HEADER_LEN + 40;
        bytes[at] ^= 0x20;
        std::fs::write(&damaged_record, &bytes).unwrap();
        let damaged_header = path_of(2);
        let mut bytes = std::fs::read(&damaged_header).unwrap();
        bytes[20] ^= 0x20; // its log_id (SEG-1, SEG-3)
        std::fs::write(&damaged_header, &bytes).unwrap();
        let fresh = LogReader::open(dir.path()).unwrap();
        let first = |at: usize| fresh.segments[at].first_seq;
        let (in_record, in_header) = (first(1), first(2));
        fresh.read_ahead(&[in_header, in_record]);
        let ranges = fresh.ahead_ranges(&[in_header, in_record]);
        assert!(ranges.iter().all(|(at, _)| *at == 1), "{ranges:?}");
        for (seq, path) in [(in_record, &damaged_record), (in_header, &damaged_header)] {
            let error = fresh.event_at(seq).unwrap_err();
            assert_eq!(error.code(), "CORRUPT", "{error}");
            let text = error.to_string();
            assert!(text.contains(path.to_str().unwrap()), "{text}");
            assert!(text.contains("offset="), "{text}");
        }
    }
}
