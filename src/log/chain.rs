//! The segment chain of a log directory: one pass over its names (LOG-1, LOG-2), the last
//! segment's header (SEG-2, SEG-3) and the limit files (LIM-3), shared by the writer's
//! recovery and by readers. A sealed segment's file is not even opened at open: its header
//! is checked on the first access into it (log-format.md §7), unless it is limited.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::compressed::is_compressed;
use super::limit::{Limit, limit_name};
use super::map::{FileIdentity, identity, map};
use super::reader::corrupt;
use super::segment::{
    HeaderError, LogId, SEGMENT_HEADER_LEN, SegmentHeader, parse_first_seq, parse_segment_name,
    segment_name, seq_file_path, version_error,
};
use crate::error::{Error, Result};
use crate::storage::Storage;

/// A segment whose header checks out.
#[derive(Debug)]
pub(crate) struct Linked {
    pub header: SegmentHeader,
    pub path: PathBuf,
    /// The open file (the writer appends to it), until a consumer of the chain takes it.
    pub file: Option<File>,
    pub map: Mmap,
    /// Its limit file, checked (LIM-3).
    pub limit: Option<Limit>,
}

/// A segment before the last one: sealed (DUR-4). Known at open by its name (LOG-2); its
/// file is opened, mapped and checked (SEG-2, SEG-3) on the first access into it, and
/// its path made then too.
#[derive(Debug)]
pub(crate) struct Sealed {
    /// Its name's seq, the first of its records (LOG-2).
    pub first_seq: u64,
    /// Its limit file, checked (LIM-3).
    pub limit: Option<Limit>,
    /// Its header, map and the mapped file's identity when it is already open: a limited
    /// segment, whose limit open checks against its last record (LIM-3), or one a fork's
    /// reader hands over.
    pub opened: Option<(SegmentHeader, Mmap, Option<FileIdentity>)>,
}

impl Sealed {
    /// A sealed segment known by its name's seq alone, opened on first access.
    fn unopened(first_seq: u64) -> Self {
        Self {
            first_seq,
            limit: None,
            opened: None,
        }
    }
}

/// The last segment file when its header does not check out: being created (SEG-6), or
/// torn by a crash during creation (RCV-7). The caller decides.
#[derive(Debug)]
pub(crate) struct Unborn {
    pub path: PathBuf,
    /// The file opened under `path`: judged itself, never the name opened again (another
    /// file may have taken it since: compaction, a writer's recovery).
    pub file: std::fs::File,
    pub map: Mmap,
    pub reason: &'static str,
}

impl Unborn {
    /// RCV-7: why the segment is damaged rather than being created (or torn by a crash
    /// during its creation), if it is: it holds a valid record at some 8-aligned offset
    /// (its header is damaged, and its records are the log's); its length is one no
    /// creation leaves (SEG-6: a file is created empty, then `min(capacity, 64 KiB)` long,
    /// 136 to 65,536 bytes, or by earlier builds its full capacity: taken to be that of the
    /// segment before it, `previous`, or the `configured` one, since the file's own header
    /// is what is missing); or its index, which only a segment that held records is given
    /// (§5), checks out for this log (`log_id`: the segment before it says it; segment 0's
    /// index is taken at its own word, its checksum checked) and lists records: durable
    /// ones (RCV-13). A length that fits neither is refused rather
    /// than guessed at: a segment that held records is never removed as a torn creation
    /// (salvage, SLV-1, sets it aside if a person decides it is one). Read with `pread` inside the file's data
    /// regions, never through the map (RD-8): a segment being created has holes.
    ///
    /// A segment being created beside a reader (its header not yet written when the chain
    /// was opened) holds records and is given its index soon after: when the judgement
    /// finds damage, the header is read again, and one that checks out now says the
    /// segment was being created, not damaged. For readers only: a writer's recovery
    /// holds the lock, no creation runs beside it, and it judges with
    /// [`Unborn::damage_as_read`].
    ///
    /// # Errors
    /// `IO` when the file or its index cannot be opened or read, `CORRUPT` when the file is
    /// shorter than its map (truncated by another process).
    pub(crate) fn damage(
        &self,
        storage: &dyn Storage,
        previous: Option<&SegmentHeader>,
        configured: u64,
    ) -> Result<Option<String>> {
        let damage = self.damage_as_read(storage, previous, configured)?;
        let written_since = || {
            SegmentHeader::decode(&super::map::read_head(&self.file, SEGMENT_HEADER_LEN)).is_ok()
        };
        Ok(damage.filter(|_| !written_since()))
    }

    /// [`Unborn::damage`] of the bytes as they are read now, without reading the header
    /// again: a writer's recovery's judgement. It holds the log's lock, so no segment is
    /// being created beside it, and a header that reads differently the second time is a
    /// fault (a read that failed), never a creation: taken for one, the segment, records
    /// and all, would be removed as a torn creation.
    pub(crate) fn damage_as_read(
        &self,
        storage: &dyn Storage,
        previous: Option<&SegmentHeader>,
        configured: u64,
    ) -> Result<Option<String>> {
        let log_id = previous.map(|header| &header.log_id);
        let file = &self.file;
        let len = file
            .metadata()
            .map_err(|e| Error::io("stat", &self.path, &e))?
            .len();
        let created = len == 0
            || (MIN_CREATED_LEN..=super::segment::SEGMENT_GROW_BYTES).contains(&len)
            || previous.is_some_and(|header| header.capacity == len)
            || len == configured;
        if !created {
            return Ok(Some(format!(
                "{}, and {len} bytes long: a length no segment's creation leaves (SEG-6)",
                self.reason
            )));
        }
        let source = super::scan::FileBytes {
            file,
            len: self.map.len(),
        };
        let regions = super::writer::data_regions(file, 0, source.len);
        // The header is not readable, so neither is the segment's record format (SEG-9):
        // a valid record of either format is one.
        let valid_after = |format| {
            super::scan::valid_record_after(&source, format, 0, &regions)
                .map_err(|e| super::reader::read_error(&self.path, 0, &e))
        };
        if valid_after(crate::record::Format::V1)? || valid_after(crate::record::Format::Compact)? {
            return Ok(Some(self.reason.to_owned()));
        }
        let first = self
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(parse_segment_name);
        if let Some(first) = first {
            let index = self.path.with_extension("idx");
            let listed = match crate::storage::read_file_at_most(storage, &index, INDEX_BYTES_MAX) {
                Ok(bytes) => bytes
                    .and_then(|bytes| {
                        // Segment 0 has no segment before it to say the log's id: the
                        // index's own stands (its checksum covers it). A segment 0 being
                        // created has no index: one lists only durable records (IDX-5).
                        let log_id = match log_id {
                            Some(log_id) => *log_id,
                            None => bytes.get(16..32)?.try_into().ok()?,
                        };
                        super::index::decode(&bytes, &log_id, first)
                    })
                    .map_or(0, |index| index.offsets.len()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
                Err(e) => return Err(Error::io("read", &index, &e)),
            };
            if listed > 0 {
                return Ok(Some(format!(
                    "{}, but its index lists {listed} durable records (RCV-13)",
                    self.reason
                )));
            }
        }
        Ok(None)
    }
}

/// The shortest length a segment's creation leaves, but for an empty file: the header
/// and the smallest record (SEG-6, SEG-7).
const MIN_CREATED_LEN: u64 = 136;

/// The largest index file read to judge a torn last segment (as `index::load` reads).
const INDEX_BYTES_MAX: u64 = 512 << 20;

/// The segments of a log, in order: the sealed ones, then the last one.
#[derive(Debug)]
pub(crate) struct Chain {
    /// The segments before the last one.
    pub sealed: Vec<Sealed>,
    /// The last segment, opened and checked (recovery reads and writes it): none for a
    /// log without a segment, otherwise exactly one.
    pub segments: Vec<Linked>,
    pub unborn: Option<Unborn>,
}

/// Lists the log in `dir` and checks its chain: the names (LOG-2), the last segment's
/// header, identity, index and name (SEG-2, SEG-3), and the limits (LIM-3, LIM-5), which
/// opens the segments they limit. Every other segment is left unopened: a reader opens
/// and checks it on first access ([`open_sealed`]). `write` opens the last segment for
/// writing (the writer's recovery).
///
/// A listing is no snapshot: beside a writer that rolls (a reader's open), it may miss a
/// segment created while it was made and show one created after it, or that segment's
/// index (LOG-2 would then name a segment that is there). A chain refused `CORRUPT` is
/// therefore listed again, and opened again when the listing changed meanwhile (at most
/// [`LISTINGS_MAX`] listings): a damaged log lists the same each time, and is refused.
///
/// # Errors
/// `CORRUPT` for a broken chain or a limit that does not check out, `FORMAT_VERSION`, `IO`.
pub(crate) fn open_chain(storage: &dyn Storage, dir: &Path, write: bool) -> Result<Chain> {
    let list = || -> Result<Vec<String>> {
        let mut names = storage
            .list_dir(dir)
            .map_err(|e| Error::io("list", dir, &e))?;
        names.sort_unstable();
        Ok(names)
    };
    let mut names = list()?;
    let mut listings = 1;
    loop {
        let opened = open_chain_listed(storage, dir, write, &names);
        match opened {
            Err(error) if error.code() == "CORRUPT" && listings < LISTINGS_MAX => {
                let again = list()?;
                listings += 1;
                if again == names {
                    return Err(error);
                }
                names = again;
            }
            other => return other,
        }
    }
}

/// How many listings [`open_chain`] makes at most of a log whose chain it finds broken.
const LISTINGS_MAX: usize = 8;

/// [`open_chain`] from `names`, a listing of `dir` the caller has just made.
pub(crate) fn open_chain_listed(
    storage: &dyn Storage,
    dir: &Path,
    write: bool,
    names: &[String],
) -> Result<Chain> {
    let mut firsts: Vec<u64> = names.iter().filter_map(|n| parse_segment_name(n)).collect();
    firsts.sort_unstable();
    let mut limits: Vec<u64> = names.iter().filter_map(|n| parse_limit_name(n)).collect();
    limits.sort_unstable();
    let mut chain = Chain {
        sealed: Vec::new(),
        segments: Vec::new(),
        unborn: None,
    };
    // LOG-2: the first segment starts at seq 0.
    // A log whose first segment is gone names it and the seqs it held (RCV-14), rather
    // than the intact segment that now comes first.
    if let Some(&first) = firsts.first().filter(|&&first| first != 0) {
        return Err(corrupt(
            &dir.join(segment_name(0)),
            0,
            &format!("the log has no segment 0: seqs 0..{first} are missing (LOG-2)"),
        ));
    }
    let Some(&last_first) = firsts.last() else {
        // LOG-2, RCV-13: a log without segments is a new one only when none is gone.
        check_no_segment_after(storage, dir, names, None, None)?;
        check_limits(dir, &chain, &limits)?;
        return Ok(chain);
    };
    let mut last_at = firsts.len() - 1;
    let path = dir.join(segment_name(last_first));
    let (file, map) = open_mapped(storage, &path, write)?;
    let last = match SegmentHeader::decode(&super::map::read_head(&file, SEGMENT_HEADER_LEN)) {
        Ok(header) => Some((header, path, file, map)),
        Err(HeaderError::Version(found)) => return Err(version_error(found, &path)),
        Err(HeaderError::Invalid(reason)) => {
            chain.unborn = Some(Unborn {
                path,
                file,
                map,
                reason,
            });
            // RCV-7: the segment before a torn last one is the last, and must check out.
            match last_at.checked_sub(1) {
                None => None,
                Some(at) => {
                    last_at = at;
                    let first = firsts.get(at).copied().unwrap_or_default();
                    let path = dir.join(segment_name(first));
                    let (file, map) = open_mapped(storage, &path, write)?;
                    let header =
                        checked_header(&super::map::read_head(&file, SEGMENT_HEADER_LEN), &path)?;
                    Some((header, path, file, map))
                }
            }
        }
    };
    // LOG-2, RCV-13: no segment is gone after the last one present.
    check_no_segment_after(storage, dir, names, Some(last_first), last.as_ref())?;
    let Some((header, path, file, map)) = last else {
        check_limits(dir, &chain, &limits)?;
        return Ok(chain);
    };
    if is_compressed(&header) {
        // A segment after a compressed one had a valid header when it was compressed
        // (CZ-5 leaves alone a segment whose next one is a torn last segment): one that
        // does not check out now is damaged, and is named (RD-6).
        if let Some(unborn) = &chain.unborn {
            let reason = format!(
                "{}, and the segment before it is compressed: it held a valid header (CZ-5)",
                unborn.reason
            );
            return Err(corrupt(&unborn.path, 0, &reason));
        }
        return Err(corrupt(
            &path,
            0,
            "the last segment is compressed: a segment after it is missing (CZ-6)",
        ));
    }
    let log_id = header.log_id;
    if header.index > last_at as u64 && Some(&header.first_seq) == firsts.get(last_at) {
        // Fewer segments than the last one's index says: some are gone (LOG-2).
        return Err(missing_segment(storage, dir, &firsts, &header));
    }
    if header.index != last_at as u64 || Some(&header.first_seq) != firsts.get(last_at) {
        return Err(discontinued(&path));
    }
    for (position, &first) in firsts.iter().enumerate().take(last_at) {
        let sealed = if limits.binary_search(&first).is_ok() {
            limited_sealed(storage, dir, position, first, &log_id)?
        } else {
            Sealed::unopened(first)
        };
        chain.sealed.push(sealed);
    }
    let limit = match limits.binary_search(&header.first_seq) {
        Ok(_) => Some(Limit::load(
            storage,
            &dir.join(limit_name(header.first_seq)),
            &header,
            &map,
        )?),
        Err(_) => None,
    };
    chain.segments.push(Linked {
        header,
        path,
        file: Some(file),
        map,
        limit,
    });
    check_limits(dir, &chain, &limits)?;
    Ok(chain)
}

/// A segment of a log as a checkpoint recorded it (`checkpoint.md` CKP-8): its name's seq
/// and whether it has a limit file (LIM-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownSegment {
    /// The seq of its first record, its name (LOG-2).
    pub first_seq: u64,
    /// Whether the log has a limit file for it (LIM-1).
    pub limited: bool,
}

/// The chain of the log in `dir` from `known`, a record of its segments (RCV-11), without
/// listing the directory: the last known segment is opened for writing and its header
/// checked (SEG-2, SEG-3, its position in `known`), and every known limit is checked
/// (LIM-3, LIM-5), as [`open_chain`] checks them. `None` when anything differs or fails, or
/// when the last known segment is limited, in the record or on disk (a limit file): the
/// caller then lists the directory.
pub(crate) fn open_chain_known(
    storage: &dyn Storage,
    dir: &Path,
    known: &[KnownSegment],
) -> Option<Chain> {
    let (last, before) = known.split_last()?;
    let ordered = known.first().is_some_and(|s| s.first_seq == 0)
        && known
            .windows(2)
            .all(|w| matches!(w, [a, b] if a.first_seq < b.first_seq));
    if !ordered || last.limited {
        return None;
    }
    // LIM-4: a last segment limited in this log (shared with another) is never taken from
    // a record, even one recorded as unlimited: the record may come from another log that
    // shares the segment (a fork's, CKP-7), whose records run past this log's limit.
    if !is_absent(storage, &seq_file_path(dir, last.first_seq, ".lim")) {
        return None;
    }
    let path = seq_file_path(dir, last.first_seq, ".seg");
    let (file, map) = open_mapped(storage, &path, true).ok()?;
    let header = SegmentHeader::decode(&super::map::read_head(&file, SEGMENT_HEADER_LEN)).ok()?;
    // CZ-6: a compressed segment is never the last; listing the directory finds why.
    if header.index != before.len() as u64
        || header.first_seq != last.first_seq
        || is_compressed(&header)
    {
        return None;
    }
    let mut chain = Chain {
        sealed: Vec::with_capacity(before.len()),
        segments: Vec::new(),
        unborn: None,
    };
    let mut limits = Vec::new();
    for (position, segment) in before.iter().enumerate() {
        let first = segment.first_seq;
        let sealed = if segment.limited {
            limits.push(first);
            limited_sealed(storage, dir, position, first, &header.log_id).ok()?
        } else {
            Sealed::unopened(first)
        };
        chain.sealed.push(sealed);
    }
    chain.segments.push(Linked {
        header,
        path,
        file: Some(file),
        map,
        limit: None,
    });
    check_limits(dir, &chain, &limits).ok()?;
    Some(chain)
}

/// A sealed segment at `position` that has a limit file, opened and checked at open (LIM-3:
/// a limit is checked against its segment's last record before use).
fn limited_sealed(
    storage: &dyn Storage,
    dir: &Path,
    position: usize,
    first_seq: u64,
    log_id: &LogId,
) -> Result<Sealed> {
    let path = seq_file_path(dir, first_seq, ".seg");
    let (header, map, identity) = open_sealed(storage, &path, position as u64, first_seq, log_id)?;
    let limit = Limit::load(storage, &dir.join(limit_name(first_seq)), &header, &map)?;
    Ok(Sealed {
        first_seq,
        limit: Some(limit),
        opened: Some((header, map, identity)),
    })
}

/// Whether no file is at `path`: only a `NotFound` says so; any other outcome (the file,
/// or an error that hides whether it is there) is `false`.
pub(crate) fn is_absent(storage: &dyn Storage, path: &Path) -> bool {
    matches!(storage.open_file(path, false), Err(error) if error.kind() == std::io::ErrorKind::NotFound)
}

/// Opens and maps a sealed segment on the first access into it, and checks its header
/// (SEG-2) and its place in the log (SEG-3): the log's identity `log_id`, its position
/// `index` and its name's `first_seq`. Returns the map with the mapped file's identity
/// (RD-1): the file itself is closed, and a later scan checks that the name still holds
/// it (CMP-4).
///
/// # Errors
/// `CORRUPT` with the segment's path, `FORMAT_VERSION`, `IO`.
pub(crate) fn open_sealed(
    storage: &dyn Storage,
    path: &Path,
    index: u64,
    first_seq: u64,
    log_id: &LogId,
) -> Result<(SegmentHeader, Mmap, Option<FileIdentity>)> {
    let (file, header) = sealed_header(storage, path, index, first_seq, log_id)?;
    let map = if is_compressed(&header) {
        // CZ-4: the logical segment, every block checked, in a file of its own; the
        // identity kept is the compressed file's, under the segment's name (RD-1, CMP-4).
        let dir = path.parent().unwrap_or(Path::new("."));
        super::compressed::materialize(dir, path, &file, &header)?.1
    } else {
        map(&file).map_err(|e| Error::io("mmap", path, &e))?
    };
    Ok((header, map, identity(&file)))
}

/// SEG-2, SEG-3 for a sealed segment without mapping it: its header checks out and names
/// its place in the log. What a fork checks of the segments it links whole (STORE-10): a
/// compressed one (CZ-4) is not decompressed for it.
///
/// # Errors
/// `CORRUPT` with the segment's path, `FORMAT_VERSION`, `IO`.
pub(crate) fn check_sealed(
    storage: &dyn Storage,
    path: &Path,
    index: u64,
    first_seq: u64,
    log_id: &LogId,
) -> Result<()> {
    sealed_header(storage, path, index, first_seq, log_id).map(|_| ())
}

/// The sealed segment at `path` opened, with its header checked (SEG-2) and its place in
/// the log (SEG-3).
///
/// # Errors
/// As [`open_sealed`].
fn sealed_header(
    storage: &dyn Storage,
    path: &Path,
    index: u64,
    first_seq: u64,
    log_id: &LogId,
) -> Result<(File, SegmentHeader)> {
    let file = match storage.open_file(path, false) {
        Ok(file) => file,
        // LOG-2: a segment of the chain that is not there (an open from a known chain,
        // RCV-11, finds it here rather than from the names).
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(corrupt(path, 0, "a segment of the log is missing (LOG-2)"));
        }
        Err(error) => return Err(Error::io("open", path, &error)),
    };
    let header = checked_header(&super::map::read_head(&file, SEGMENT_HEADER_LEN), path)?;
    if header.log_id != *log_id || header.index != index || header.first_seq != first_seq {
        return Err(discontinued(path));
    }
    Ok((file, header))
}

/// Opens and maps a segment file.
fn open_mapped(storage: &dyn Storage, path: &Path, write: bool) -> Result<(File, Mmap)> {
    let file = storage
        .open_file(path, write)
        .map_err(|e| Error::io("open", path, &e))?;
    let map = map(&file).map_err(|e| Error::io("mmap", path, &e))?;
    Ok((file, map))
}

/// The header of a segment that is not the last file (SEG-2): an invalid one is `CORRUPT`.
fn checked_header(map: &[u8], path: &Path) -> Result<SegmentHeader> {
    match SegmentHeader::decode(map) {
        Ok(header) => Ok(header),
        Err(HeaderError::Version(found)) => Err(version_error(found, path)),
        Err(HeaderError::Invalid(reason)) => Err(corrupt(path, 0, reason)),
    }
}

/// LOG-2: `CORRUPT` for a log that lacks segments its last one (`last`, whose index is
/// larger than its position among `firsts`) says came before it, naming the first that is
/// gone: the first present segment whose index is not its position follows the gap, and
/// the one before it, when its index checks out, says where the gap starts. Read only on
/// this error: the headers of the segments, and that one index.
fn missing_segment(
    storage: &dyn Storage,
    dir: &Path,
    firsts: &[u64],
    last: &SegmentHeader,
) -> Error {
    let index_of = |first: u64| -> Option<SegmentHeader> {
        let path = dir.join(segment_name(first));
        let file = storage.open_file(&path, false).ok()?;
        SegmentHeader::decode(&super::segment::read_head(&file)).ok()
    };
    let after = firsts
        .iter()
        .enumerate()
        .find(|&(position, &first)| {
            let header = if first == last.first_seq {
                Some(*last)
            } else {
                index_of(first)
            };
            // A header that does not decode says nothing of the gap: that segment is
            // damaged (SEG-2), not the first after the gap.
            header.is_some_and(|header| header.index != position as u64)
        })
        .map_or(last.first_seq, |(_, &first)| first);
    // Where the gap starts: the end of the records of the segment before it.
    let before = firsts.iter().rev().find(|&&first| first < after).copied();
    let start = before.and_then(|first| {
        let path = dir.join(segment_name(first));
        let file = storage.open_file(&path, false).ok()?;
        let header = SegmentHeader::decode(&super::segment::read_head(&file)).ok()?;
        let bytes = crate::storage::read_file_at_most(
            storage,
            &dir.join(super::segment::index_name(first)),
            INDEX_BYTES_MAX,
        )
        .ok()??;
        let index = super::index::decode(&bytes, &header.log_id, first)?;
        let listed = first.checked_add(index.offsets.len() as u64)?;
        // An index is a cache (IDX-2): it may list only a prefix of the segment's records
        // (one written at an earlier close). Taken as the segment's end only when zeros
        // follow the records it lists (SEG-5), read with `pread` (RD-8); a limited
        // segment's (a fork's, shared by a link) ends at its limit (LIM-1), which its
        // index, the fork's own, lists to.
        let limited = storage
            .open_file(&dir.join(limit_name(first)), false)
            .is_ok();
        if !is_compressed(&header) && !limited {
            let mut after = [0u8; 8];
            let n =
                std::os::unix::fs::FileExt::read_at(&file, &mut after, index.end as u64).ok()?;
            if after.get(..n)?.iter().any(|&b| b != 0) {
                return None;
            }
        }
        Some(listed)
    });
    match start {
        Some(start) if start < after => corrupt(
            &dir.join(segment_name(start)),
            0,
            &format!("the segment is missing: seqs {start}..{after} are missing (LOG-2)"),
        ),
        _ => corrupt(
            &dir.join(segment_name(after)),
            0,
            "a segment before this one is missing: its index is larger than its place in the \
             log (LOG-2, SEG-3)",
        ),
    }
}

/// LOG-2, RCV-13: `CORRUPT` when the log lost segments after its last one present
/// (`last_first`, whose file may be a torn creation, RCV-7; `None` for a log without any,
/// which lost every one when an index is left): the index of such a segment
/// is left, checks out for this log (`last`, the last segment whose header checks out,
/// says its id; without one the index's own stands, its checksum covering it) and lists
/// records. An index is written only for a segment that held records, and lists only
/// durable ones (IDX-5, RCV-13): the log does not end where its segments now do, and
/// taking it to would return it short to a reader, and give the lost events' seqs to new
/// ones to a writer. An index that does not check out says nothing (a cache, IDX-2).
///
/// # Errors
/// `CORRUPT` naming the missing segment and the seqs its index lists, `IO` when such an
/// index cannot be read.
fn check_no_segment_after(
    storage: &dyn Storage,
    dir: &Path,
    names: &[String],
    last_first: Option<u64>,
    last: Option<&(SegmentHeader, PathBuf, File, Mmap)>,
) -> Result<()> {
    let mut after: Vec<u64> = names
        .iter()
        .filter_map(|name| parse_first_seq(name.strip_suffix(".idx")?))
        .filter(|&first| last_first.is_none_or(|last_first| first > last_first))
        .collect();
    after.sort_unstable();
    let log_id = last.map(|(header, ..)| header.log_id);
    for first in after {
        check_index_of_no_segment(storage, dir, first, log_id.as_ref())?;
    }
    Ok(())
}

/// LOG-2, RCV-13: `CORRUPT` when the index of segment `first`, whose file is not there,
/// checks out for the log (`log_id`; without one, the index's own stands, its checksum
/// covering it) and lists records: the durable mark of records that are gone. An index
/// that does not check out says nothing (IDX-2), nor one that is not there.
///
/// # Errors
/// `CORRUPT` naming the missing segment and the seqs its index lists, `IO` when the
/// index cannot be read.
pub(crate) fn check_index_of_no_segment(
    storage: &dyn Storage,
    dir: &Path,
    first: u64,
    log_id: Option<&LogId>,
) -> Result<()> {
    let path = dir.join(super::segment::index_name(first));
    let bytes = match crate::storage::read_file_at_most(storage, &path, INDEX_BYTES_MAX) {
        Ok(Some(bytes)) => bytes,
        // Too large to be an index, or removed meanwhile: nothing it says is taken.
        Ok(None) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("read", &path, &e)),
    };
    let log_id = match log_id {
        Some(log_id) => *log_id,
        None => match bytes.get(16..32).and_then(|id| id.try_into().ok()) {
            Some(log_id) => log_id,
            None => return Ok(()),
        },
    };
    let listed =
        super::index::decode(&bytes, &log_id, first).map_or(0, |index| index.offsets.len() as u64);
    if listed == 0 {
        return Ok(());
    }
    // The index is written after its segment is created: a segment there now was created
    // after the caller looked (a writer rolling), and nothing is gone.
    let segment = dir.join(segment_name(first));
    match storage.open_file(&segment, false) {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("open", &segment, &e)),
    }
    let end = first.saturating_add(listed);
    Err(corrupt(
        &segment,
        0,
        &format!(
            "the segment is missing, but its index lists {listed} durable records: \
             seqs {first}..{end} are missing (LOG-2, RCV-13)"
        ),
    ))
}

/// SEG-3: `CORRUPT` at a segment that does not continue the log.
fn discontinued(path: &Path) -> Error {
    corrupt(path, 0, "segment does not continue the log (SEG-3)")
}

/// LIM-5: every limit names a segment of the chain, and a limited segment that is not the
/// last ends where the next one starts.
fn check_limits(dir: &Path, chain: &Chain, limits: &[u64]) -> Result<()> {
    let segments: Vec<(u64, Option<Limit>)> = chain
        .sealed
        .iter()
        .map(|s| (s.first_seq, s.limit))
        .chain(chain.segments.iter().map(|s| (s.header.first_seq, s.limit)))
        .collect();
    for &first in limits {
        if !segments.iter().any(|&(f, _)| f == first) {
            let path = dir.join(limit_name(first));
            return Err(corrupt(
                &path,
                0,
                "a limit of no segment of the log (LIM-5)",
            ));
        }
    }
    for pair in segments.windows(2) {
        if let [(_, Some(limit)), (next_first, _)] = pair
            && limit.seq_next != *next_first
        {
            return Err(corrupt(
                &seq_file_path(dir, *next_first, ".seg"),
                0,
                "segment does not continue its limited predecessor (LIM-5)",
            ));
        }
    }
    Ok(())
}

/// The `first_seq` a limit file name encodes, or `None` for other names.
fn parse_limit_name(name: &str) -> Option<u64> {
    parse_first_seq(name.strip_suffix(".lim")?)
}

/// Opens, for writing, the segment a fork's child appends to: one the fork has just created
/// and synced with its header (`store.md` STORE-10), checked as [`open_chain`] checks one.
///
/// # Errors
/// `CORRUPT` when its header does not check out, `FORMAT_VERSION`, `IO`.
pub(crate) fn open_own_segment(storage: &dyn Storage, path: &Path) -> Result<Linked> {
    let (file, map) = open_mapped(storage, path, true)?;
    let header = checked_header(&super::map::read_head(&file, SEGMENT_HEADER_LEN), path)?;
    Ok(Linked {
        header,
        path: path.to_owned(),
        file: Some(file),
        map,
        limit: None,
    })
}
