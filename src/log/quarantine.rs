//! Quarantine files (RCV-12) and salvage (SLV-1 to SLV-4): bytes of a log set aside beside
//! it, never deleted or overwritten by the engine, so that a person can look at them.
#![deny(clippy::indexing_slicing)]

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::chain::is_absent;
use super::limit::{Limit, limit_name};
use super::map::map;
use super::reader::read_error;
use super::scan::{FileBytes, Stop, nonzero_end, read_range, scan};
use super::segment::{
    HeaderError, LogId, SEGMENT_HEADER_LEN, SegmentHeader, index_name, parse_first_seq,
    parse_segment_name, seq_file_name, seq_file_path,
};
use super::writer::{data_regions, remove_temporary_files, take_lock};
use crate::error::{Error, Result};
use crate::record::RecordError;
use crate::storage::Storage;

/// The suffix of every quarantine file's name (LOG-1).
pub const QUARANTINE_SUFFIX: &str = ".quarantine";

/// A free quarantine name in `dir` for `stem`: `<stem>.quarantine`, or, when that is taken,
/// `<stem>.<k>.quarantine` for the first free `k` (RCV-12: a quarantine file is never
/// overwritten). The caller holds the log's lock, so no other writer picks the same name.
///
/// # Errors
/// `IO` when none of the first [`QUARANTINE_NAMES_MAX`] names is free (or a directory that
/// cannot be read makes every one look taken): never an endless search.
fn free_name(storage: &dyn Storage, dir: &Path, stem: &str) -> Result<PathBuf> {
    for k in 0..QUARANTINE_NAMES_MAX {
        let name = if k == 0 {
            format!("{stem}{QUARANTINE_SUFFIX}")
        } else {
            format!("{stem}.{k}{QUARANTINE_SUFFIX}")
        };
        let path = dir.join(name);
        if is_absent(storage, &path) {
            return Ok(path);
        }
    }
    let path = dir.join(format!("{stem}{QUARANTINE_SUFFIX}"));
    let error = std::io::Error::new(std::io::ErrorKind::AlreadyExists, "no free quarantine name");
    Err(Error::io("create", &path, &error))
}

/// How many names [`free_name`] tries for one stem.
const QUARANTINE_NAMES_MAX: u64 = 10_000;

/// RCV-12: writes `bytes`, taken from offset `offset` of the segment starting at
/// `first_seq`, to a new quarantine file `<first_seq>.<offset>.quarantine` in `dir`: a
/// `.tmp` file, synced, renamed, and the directory synced, so the file is durable before
/// the caller zeroes or drops the bytes. Returns its path.
///
/// # Errors
/// `IO`.
pub(crate) fn write_bytes(
    storage: &dyn Storage,
    dir: &Path,
    first_seq: u64,
    offset: u64,
    bytes: &[u8],
) -> Result<PathBuf> {
    let stem = format!("{}.{offset}", seq_file_name(first_seq, ""));
    let path = free_name(storage, dir, &stem)?;
    let mut tmp = path.clone().into_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    crate::storage::replace_file(storage, &tmp, &path, bytes, 0)?;
    storage
        .sync_dir(dir)
        .map_err(|e| Error::io("fsync", dir, &e))?;
    Ok(path)
}

/// SLV-3: moves the file `name` of `dir` aside whole, under a free quarantine name
/// (`<name>.quarantine`); the directory is synced by the caller. `None` when there is no
/// such file.
fn move_aside(storage: &dyn Storage, dir: &Path, name: &str) -> Result<Option<SetAside>> {
    let from = dir.join(name);
    let Ok(meta) = std::fs::symlink_metadata(&from) else {
        return Ok(None);
    };
    let to = free_name(storage, dir, name)?;
    storage
        .rename(&from, &to)
        .map_err(|e| Error::io("rename", &from, &e))?;
    Ok(Some(SetAside {
        from,
        offset: 0,
        bytes: meta.len(),
        quarantine: to,
    }))
}

/// Bytes of a log that salvage set aside (SLV-2, SLV-3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    /// The file they came from: a segment, or a limit file moved aside whole.
    pub from: PathBuf,
    /// Where in that file they started: 0 for a file moved aside whole.
    pub offset: u64,
    /// How many bytes (a file moved whole: its length, holes included).
    pub bytes: u64,
    /// The quarantine file that holds them now.
    pub quarantine: PathBuf,
}

/// What [`salvage`] kept and set aside.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogSalvage {
    /// The log now holds events `0..seq_next`: its longest valid prefix.
    pub seq_next: u64,
    /// The seq of the first event not kept, when anything was set aside (it is
    /// `seq_next`).
    pub first_lost_seq: Option<u64>,
    /// Why the prefix ends there, with the file and offset (none for a log that checks out
    /// to its end).
    pub reason: Option<String>,
    /// What was moved into quarantine files, in log order.
    pub set_aside: Vec<SetAside>,
    /// The segments whose records all check out but whose file had a length SEG-6 does
    /// not allow (cut or extended by something else, SEG-8), rewritten with the same
    /// bytes at a length it allows (the bytes past their records were zeros).
    pub resized: Vec<PathBuf>,
}

/// Where the longest valid prefix ends.
#[derive(Debug)]
enum Cut {
    /// Inside segment `position`, at `offset`: the segment is kept up to there.
    Inside {
        position: usize,
        offset: usize,
        opened: Opened,
    },
    /// Before segment `position`: it and every later one are moved aside whole.
    Before { position: usize },
}

/// A segment salvage (or compaction, CMP-2) opened.
#[derive(Debug)]
pub(super) struct Opened {
    pub header: SegmentHeader,
    pub map: Mmap,
    pub file: File,
    pub limit: Option<Limit>,
}

/// How one segment ends in the prefix.
pub(super) enum Examined {
    /// Every record of it checks out and continues the log: the next seq, the segment
    /// opened, its records' offsets and the offset just past the last.
    Whole {
        seq_next: u64,
        log_id: LogId,
        opened: Opened,
        offsets: Vec<u32>,
        end: usize,
    },
    /// The prefix ends inside it.
    Cut {
        offset: usize,
        /// The seq after the last record kept.
        seq_next: u64,
        reason: String,
        opened: Opened,
    },
    /// The prefix ends before it: its header, place or limit does not check out.
    Rejected { reason: String },
    /// It cannot be judged: a version or feature this build does not read (SEG-9,
    /// `FORMAT_VERSION`), or an I/O failure (`IO`). Not damage: salvage and compaction
    /// refuse with the error and change nothing.
    Refused { error: crate::Error },
}

/// SLV-1 to SLV-4: keeps the longest valid prefix of the log in `dir` (every record checks
/// out, REC-4, and continues the seq chain, from segment 0 on) and moves everything after
/// it into quarantine files: the rest of the segment where it ends (its bytes to the last
/// non-zero one, or to its limit), and every later segment whole, with its limit file.
/// Holds the log's lock (LOG-1) throughout, and calls `then` with the outcome before it
/// releases it (the store drops a checkpoint covering more than what remains).
///
/// # Errors
/// `LOCKED` when a writer holds the log, `IO`; the log is changed only by whole steps
/// (a quarantine file is durable before the bytes it holds are dropped).
pub fn salvage(
    storage: &dyn Storage,
    dir: &Path,
    then: impl FnOnce(&LogSalvage) -> Result<()>,
) -> Result<LogSalvage> {
    let (_lock, firsts, limits) = locked_listing(storage, dir)?;
    let mut report = LogSalvage::default();
    if firsts.is_empty() {
        // SLV-3, LOG-2: a log without segments (a salvage that set aside segment 0 and was
        // cut short before it made a new one) starts again, empty; a limit file left
        // behind (its segment moved first) would limit the new segment 0, so it goes too.
        clear_for_first_segment(storage, dir, &limits, &mut report)?;
        super::writer::create_first_segment(storage, dir)?;
        then(&report)?;
        return Ok(report);
    }
    let mut seq = 0;
    let mut log_id = None;
    let mut cut = None;
    let mut misfits = Vec::new();
    for (position, &first) in firsts.iter().enumerate() {
        let next = firsts.get(position + 1).copied();
        let limited = limits.contains(&first);
        match examine(storage, dir, position, first, seq, log_id, limited, next) {
            Examined::Whole {
                seq_next,
                log_id: id,
                opened,
                end,
                ..
            } => {
                seq = seq_next;
                log_id = Some(id);
                if misfit(&opened) {
                    misfits.push((end, opened));
                }
            }
            Examined::Cut {
                offset,
                seq_next,
                reason,
                opened,
            } => {
                seq = seq_next;
                report.reason = Some(reason);
                cut = Some(Cut::Inside {
                    position,
                    offset,
                    opened,
                });
                break;
            }
            Examined::Rejected { reason } => {
                report.reason = Some(reason);
                cut = Some(Cut::Before { position });
                break;
            }
            // Nothing has been changed yet: every segment is examined first.
            Examined::Refused { error } => return Err(error),
        }
    }
    report.seq_next = seq;
    // LIM-5: a limit whose segment a salvage cut short by a crash already moved aside.
    let mut changed = false;
    for &first in limits.iter().filter(|f| !firsts.contains(f)) {
        if let Some(moved) = move_aside(storage, dir, &limit_name(first))? {
            report.set_aside.push(moved);
            changed = true;
        }
    }
    // CZ-6, CZ-7: the segment left last, when compressed, becomes its plain logical
    // segment (a cut inside a segment writes it plain already).
    let last = match &cut {
        None => firsts.last().copied(),
        Some(Cut::Before { position }) => position
            .checked_sub(1)
            .and_then(|at| firsts.get(at).copied()),
        Some(Cut::Inside { .. }) => None,
    };
    // Made plain first: the plain file holds the same records at the same offsets, so the
    // log is whole either way, and a copy that cannot be written (a full disk, IO) refuses
    // the salvage before anything is set aside (CZ-7), never leaving it compressed and last.
    // SEG-6, SEG-8: a segment whose records all check out but whose length no writer gives
    // it is rewritten with the same bytes at a length it allows; nothing is lost.
    for (end, opened) in &misfits {
        report
            .resized
            .push(keep_prefix(storage, dir, opened, *end)?);
        changed = true;
    }
    if let Some(first) = last {
        changed |= make_plain(storage, dir, first)?;
        changed |= drop_overlisting_index(storage, dir, first, log_id, seq, &mut report)?;
    }
    // First, so that no crash leaves the index of a segment set aside (LOG-2).
    changed |= drop_stray_indexes(storage, dir, &firsts, cut.as_ref(), log_id, &mut report)?;
    if let Some(cut) = cut {
        let nothing_left = matches!(cut, Cut::Before { position: 0 });
        set_aside(storage, dir, &firsts, &limits, cut, &mut report)?;
        if nothing_left {
            // SLV-3, LOG-2: the log keeps no segment; it starts again, empty.
            super::writer::create_first_segment(storage, dir)?;
        }
        if !report.set_aside.is_empty() {
            report.first_lost_seq = Some(seq);
        }
        changed = true;
    }
    if changed {
        storage
            .sync_dir(dir)
            .map_err(|e| Error::io("fsync", dir, &e))?;
    }
    then(&report)?;
    Ok(report)
}

/// RCV-13, SLV-2: removes the index of `first`, the segment left last (holding the log's
/// events up to `seq_next`), when it lists more records than that segment keeps: one a
/// salvage or compaction of an earlier build left beside a shorter copy (its crash kept the
/// rename and lost the removal) would refuse every open. The index is a cache (IDX-2); the
/// records it named are gone, and the report says from which seq. `true` when removed.
///
/// # Errors
/// `IO` when the index cannot be removed.
fn drop_overlisting_index(
    storage: &dyn Storage,
    dir: &Path,
    first: u64,
    log_id: Option<super::segment::LogId>,
    seq_next: u64,
    report: &mut LogSalvage,
) -> Result<bool> {
    let index = dir.join(index_name(first));
    // SLV-1: an index that cannot be read is not judged; the salvage is refused.
    let listed = match log_id {
        Some(id) => super::index::durable_listing(storage, &index, &id, first)?,
        None => None,
    }
    .map_or(0, |(records, _)| records as u64);
    let kept = seq_next.saturating_sub(first);
    if listed <= kept {
        return Ok(false);
    }
    storage
        .remove_file(&index)
        .map_err(|e| Error::io("remove", &index, &e))?;
    report.reason.get_or_insert_with(|| {
        format!(
            "{}: its index lists {listed} durable records, the segment holds {kept} (RCV-13)",
            index.display()
        )
    });
    report.first_lost_seq = Some(seq_next);
    Ok(true)
}

/// The `first_seq`s of the segments (of `firsts`) salvage keeps when the prefix ends at
/// `cut`: an index of any other is a cache of no segment.
fn kept_segments(firsts: &[u64], cut: Option<&Cut>) -> Vec<u64> {
    let kept = match cut {
        None => firsts.len(),
        Some(Cut::Before { position }) => *position,
        Some(Cut::Inside { position, .. }) => position + 1,
    };
    firsts.get(..kept).unwrap_or_default().to_vec()
}

/// SLV-3, LOG-2: removes every index whose segment the log does not keep (of the segments
/// `firsts`, those the prefix ending at `cut` keeps): of a segment set aside now (before
/// it is moved), of one removed, or of one a salvage cut short moved aside before it
/// removed the index. An index after the last segment kept that checks out for this log
/// and lists records is the durable mark of records that are gone: every open refuses it
/// (LOG-2, RCV-13), so it is removed, and the first lost seq reported, as for an index
/// that lists more than its segment keeps (SLV-2). Each is a cache (IDX-2). `true` when
/// one was removed.
///
/// # Errors
/// `IO` when the directory cannot be listed or synced, or an index cannot be removed.
fn drop_stray_indexes(
    storage: &dyn Storage,
    dir: &Path,
    firsts: &[u64],
    cut: Option<&Cut>,
    log_id: Option<LogId>,
    report: &mut LogSalvage,
) -> Result<bool> {
    let kept = kept_segments(firsts, cut);
    let seq_next = report.seq_next;
    let names = storage
        .list_dir(dir)
        .map_err(|e| Error::io("list", dir, &e))?;
    let mut removed = false;
    for first in names
        .iter()
        .filter_map(|name| parse_first_seq(name.strip_suffix(".idx")?))
        .filter(|first| !kept.contains(first))
    {
        let index = dir.join(index_name(first));
        let past_end = kept.last().is_none_or(|&last| first > last);
        // Without a segment to say the log's id, the index's own stands (its checksum
        // covers it), as an open takes it (LOG-2).
        let id = match log_id {
            Some(id) => Some(id),
            None => own_log_id(storage, &index)?,
        };
        let listed = match (past_end, id) {
            (true, Some(id)) => super::index::durable_listing(storage, &index, &id, first)?
                .map_or(0, |(records, _)| records as u64),
            _ => 0,
        };
        storage
            .remove_file(&index)
            .map_err(|e| Error::io("remove", &index, &e))?;
        removed = true;
        if listed > 0 {
            report.reason.get_or_insert_with(|| {
                format!(
                    "{}: the index of a segment that is gone lists {listed} durable records \
                     from seq {first} (LOG-2, RCV-13)",
                    index.display()
                )
            });
            report.first_lost_seq = Some(seq_next);
        }
    }
    if removed {
        // Durable before a segment is moved aside, so that no crash keeps its index alone.
        storage
            .sync_dir(dir)
            .map_err(|e| Error::io("fsync", dir, &e))?;
    }
    Ok(removed)
}

/// SLV-3, LOG-2: what a log without segments keeps of its old ones, before its new segment
/// 0 is created: its limit files (which would limit the new segment 0) are moved aside, and
/// its indexes (every open refuses them, LOG-2) removed.
///
/// # Errors
/// `IO`.
fn clear_for_first_segment(
    storage: &dyn Storage,
    dir: &Path,
    limits: &BTreeSet<u64>,
    report: &mut LogSalvage,
) -> Result<()> {
    for &first in limits {
        if let Some(moved) = move_aside(storage, dir, &limit_name(first))? {
            report.set_aside.push(moved);
        }
    }
    drop_stray_indexes(storage, dir, &[], None, None, report)?;
    Ok(())
}

/// The `log_id` an index at `path` names (its bytes 16 to 32), `None` when it is too short.
///
/// # Errors
/// `IO` when it cannot be read.
fn own_log_id(storage: &dyn Storage, path: &Path) -> Result<Option<LogId>> {
    use std::os::unix::fs::FileExt;
    let file = match storage.open_read(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open", path, &e)),
    };
    let mut head = [0; 32];
    match file.read_exact_at(&mut head, 0) {
        Ok(()) => Ok(head.get(16..32).and_then(|id| id.try_into().ok())),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(Error::io("read", path, &e)),
    }
}

/// What salvage and compaction (CMP-1) start from: the log's lock (LOG-1; `LOCKED` while a
/// writer has it), its `.tmp` files removed (LOG-1), and the `first_seq`s of its segments,
/// in order, and of its limit files.
///
/// # Errors
/// `LOCKED`, `IO`.
pub(super) fn locked_listing(
    storage: &dyn Storage,
    dir: &Path,
) -> Result<(super::FileLock, Vec<u64>, BTreeSet<u64>)> {
    let lock = take_lock(storage, dir)?;
    let names = storage
        .list_dir(dir)
        .map_err(|e| Error::io("list", dir, &e))?;
    remove_temporary_files(storage, dir, &names);
    let mut firsts: Vec<u64> = names.iter().filter_map(|n| parse_segment_name(n)).collect();
    firsts.sort_unstable();
    let limits = names
        .iter()
        .filter_map(|n| parse_first_seq(n.strip_suffix(".lim")?))
        .collect();
    Ok((lock, firsts, limits))
}

/// Checks segment `position` (named `first`) of the log, expecting it to start at `seq`
/// in the log `log_id` (the first segment's, once known).
#[expect(
    clippy::too_many_arguments,
    reason = "one segment's place in the chain"
)]
pub(super) fn examine(
    storage: &dyn Storage,
    dir: &Path,
    position: usize,
    first: u64,
    seq: u64,
    log_id: Option<LogId>,
    limited: bool,
    next: Option<u64>,
) -> Examined {
    let path = seq_file_path(dir, first, ".seg");
    let at = |offset: usize, reason: &str| format!("{} offset={offset}: {reason}", path.display());
    if first != seq {
        let reason = at(0, "the segment does not continue the log (LOG-2, SEG-3)");
        return Examined::Rejected { reason };
    }
    let opened = match open_checked(storage, dir, &path, position, first, log_id, limited) {
        Ok(opened) => opened,
        Err(Unjudged::Damage(reason)) => return Examined::Rejected { reason },
        Err(Unjudged::Refused(error)) => return Examined::Refused { error },
    };
    let bound = opened
        .limit
        .map_or(opened.map.len(), |l| (l.end as usize).min(opened.map.len()));
    // RD-8: nothing past the header is verified yet: read with pread.
    let source = FileBytes {
        file: &opened.file,
        len: bound,
    };
    let found = match scan(&source, opened.header.format(), SEGMENT_HEADER_LEN, first) {
        Ok(found) => found,
        Err(error) => return unreadable(&path, SEGMENT_HEADER_LEN, &error),
    };
    let cut = |offset: usize, reason: &str, opened: Opened| Examined::Cut {
        offset,
        seq_next: found.seq_next,
        reason: at(offset, reason),
        opened,
    };
    match found.stop {
        Stop::WrongSeq { offset, .. } => {
            return cut(offset, "a record with the wrong seq (RCV-5)", opened);
        }
        Stop::Invalid {
            offset,
            error: RecordError::Body(_),
        } => return cut(offset, "a record whose body breaks REC-5/REC-6", opened),
        Stop::Invalid { offset, .. } => {
            return cut(offset, "a record that does not check out (REC-4)", opened);
        }
        Stop::End | Stop::Full => {}
    }
    if let Some(limit) = opened.limit {
        if found.seq_next != limit.seq_next {
            return cut(
                found.end,
                "the records end before the limit (LIM-3)",
                opened,
            );
        }
    } else {
        // SEG-5: nothing but zeros after the end marker.
        let regions = data_regions(&opened.file, found.end, opened.map.len());
        let source = FileBytes {
            file: &opened.file,
            len: opened.map.len(),
        };
        let dirty = match nonzero_end(&source, found.end, &regions) {
            Ok(to) => to != found.end,
            Err(error) => return unreadable(&path, found.end, &error),
        };
        if dirty {
            return cut(
                found.end,
                "bytes after the end of the records (SEG-5)",
                opened,
            );
        }
        if next.is_some_and(|next| found.seq_next < next) {
            return cut(
                found.end,
                "the segment ends before the next one starts (LOG-2)",
                opened,
            );
        }
    }
    Examined::Whole {
        seq_next: found.seq_next,
        log_id: opened.header.log_id,
        opened,
        offsets: found.offsets,
        end: found.end,
    }
}

/// Opens segment `path` and checks its header (SEG-2), its place (SEG-3) and, when
/// `limited`, its limit (LIM-3). The reason, with the file, when it does not check out.
fn open_checked(
    storage: &dyn Storage,
    dir: &Path,
    path: &Path,
    position: usize,
    first: u64,
    log_id: Option<LogId>,
    limited: bool,
) -> std::result::Result<Opened, Unjudged> {
    let at0 = |reason: &str| Unjudged::Damage(format!("{} offset=0: {reason}", path.display()));
    // An I/O failure is not damage (SLV-1): refused, never a cut.
    let (file, map) = storage
        .open_file(path, false)
        .and_then(|file| map(&file).map(|map| (file, map)))
        .map_err(|error| Unjudged::Refused(Error::io("open", path, &error)))?;
    // RD-8: the header is read with pread, never through the map: a segment whose
    // creation was cut short (RCV-7) may have a hole there, which a full filesystem
    // cannot give a page (SIGBUS).
    let head = super::map::read_head(&file, SEGMENT_HEADER_LEN);
    let header = match SegmentHeader::decode(&head) {
        Ok(header) => header,
        // SEG-9, VER-1: not damage, a file this build does not read.
        Err(HeaderError::Version(found)) => {
            return Err(Unjudged::Refused(super::segment::version_error(
                found, path,
            )));
        }
        Err(HeaderError::Invalid(why)) => return Err(at0(why)),
    };
    if log_id.is_some_and(|id| id != header.log_id)
        || header.index != position as u64
        || header.first_seq != first
    {
        return Err(at0("the segment does not continue the log (SEG-3)"));
    }
    // CZ-7: a compressed segment is checked (CZ-3), then examined as its logical segment,
    // whose bytes (and header, `COMPRESSED` clear) a cut keeps as a plain segment.
    let (file, map) = if super::compressed::is_compressed(&header) {
        // CZ-3 damage is damage; a failure to write the copy (a full disk) is not.
        super::compressed::materialize(dir, path, &file, &header).map_err(|error| {
            if error.code() == "CORRUPT" {
                Unjudged::Damage(error.to_string())
            } else {
                Unjudged::Refused(error)
            }
        })?
    } else {
        (file, map)
    };
    let limit = if limited {
        let limit_path = dir.join(limit_name(first));
        // A limit that is not there is damage (LIM-3); one that cannot be read is not
        // judged (SLV-1: an I/O failure changes nothing).
        let bytes = match crate::storage::read_file(storage, &limit_path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(Unjudged::Refused(Error::io("read", &limit_path, &e))),
        };
        let limit = Limit::decode(&bytes, &header, &map).map_err(|why| match why {
            super::limit::LimitError::Invalid(reason) => {
                Unjudged::Damage(format!("{} offset=0: {reason}", limit_path.display()))
            }
            super::limit::LimitError::Record(offset) => Unjudged::Damage(format!(
                "{} offset={offset}: {}",
                path.display(),
                super::limit::LAST_RECORD
            )),
            // LIM-7, VER-1: a limit this build does not read is not damage.
            super::limit::LimitError::Version(found) => Unjudged::Refused(
                super::segment::unsupported_error(found, super::limit::LIMIT_VERSION)
                    .at_place(&limit_path, 8),
            ),
        })?;
        Some(limit)
    } else {
        None
    };
    Ok(Opened {
        header,
        map,
        file,
        limit,
    })
}

/// A read of segment `path` at `offset` that failed: bytes that end before the file's
/// length did (another process cut it) are damage, and cut the log there; any other I/O
/// failure is not (SLV-1), and refuses the salvage or compaction, changing nothing.
fn unreadable(path: &Path, offset: usize, error: &std::io::Error) -> Examined {
    if error.kind() == std::io::ErrorKind::UnexpectedEof {
        let reason = format!(
            "{} offset={offset}: cannot be read ({error})",
            path.display()
        );
        Examined::Rejected { reason }
    } else {
        Examined::Refused {
            error: Error::io("read", path, error),
        }
    }
}

/// Why a segment could not be opened for examination.
enum Unjudged {
    /// Damage, with the file and offset: the prefix ends before the segment.
    Damage(String),
    /// Not damage (a version or feature this build does not read, an I/O failure): refused.
    Refused(crate::Error),
}

/// SLV-2, SLV-3: acts on `cut`.
fn set_aside(
    storage: &dyn Storage,
    dir: &Path,
    firsts: &[u64],
    limits: &BTreeSet<u64>,
    cut: Cut,
    report: &mut LogSalvage,
) -> Result<()> {
    let later = match cut {
        Cut::Before { position } => position,
        Cut::Inside {
            position,
            offset,
            opened,
        } => {
            cut_segment(storage, dir, offset, &opened, report)?;
            position + 1
        }
    };
    for &first in firsts.get(later..).unwrap_or_default() {
        let limit = limits.contains(&first).then(|| limit_name(first));
        for name in std::iter::once(seq_file_name(first, ".seg")).chain(limit) {
            if let Some(moved) = move_aside(storage, dir, &name)? {
                report.set_aside.push(moved);
            }
        }
        // A cache (IDX-2) of a segment no longer in the log.
        let _ = storage.remove_file(&dir.join(index_name(first)));
    }
    Ok(())
}

/// SLV-2, SLV-2a: replaces the segment `opened`, by rename, with a synced copy of its
/// bytes before `end` at a length the writer could have given it (SEG-6: the same
/// capacity, zeros after). Returns the segment's path.
///
/// # Errors
/// `IO`.
fn keep_prefix(storage: &dyn Storage, dir: &Path, opened: &Opened, end: usize) -> Result<PathBuf> {
    let first = opened.header.first_seq;
    let path = seq_file_path(dir, first, ".seg");
    let tmp = dir.join(format!("{}.tmp", seq_file_name(first, ".seg")));
    let kept = opened.map.get(..end).unwrap_or_default();
    let len = super::segment::grown_len(end as u64, opened.header.capacity);
    crate::storage::replace_file(storage, &tmp, &path, kept, len)?;
    Ok(path)
}

/// SEG-6, SEG-8: whether the plain, unlimited segment `opened` has a file length its
/// writer never gives it (another process cut or extended it): salvage rewrites it at one
/// it does.
fn misfit(opened: &Opened) -> bool {
    opened.limit.is_none()
        && !super::compressed::is_compressed(&opened.header)
        && !super::segment::is_grown_len(opened.map.len() as u64, opened.header.capacity)
}

/// CZ-6, CZ-7: replaces the segment `first`, when it is compressed, by its logical
/// segment as a plain file (the same records at the same offsets, so its index stays
/// valid), by rename. Whether it did. A segment that does not check out is left for the
/// next open to report.
fn make_plain(storage: &dyn Storage, dir: &Path, first: u64) -> Result<bool> {
    let path = seq_file_path(dir, first, ".seg");
    let file = storage
        .open_file(&path, false)
        .map_err(|e| Error::io("open", &path, &e))?;
    let header = match SegmentHeader::decode(&super::map::read_head(&file, SEGMENT_HEADER_LEN)) {
        Ok(header) if super::compressed::is_compressed(&header) => header,
        _ => return Ok(false),
    };
    let (_, logical) = super::compressed::materialize(dir, &path, &file, &header)?;
    let tmp = dir.join(format!("{}.tmp", seq_file_name(first, ".seg")));
    crate::storage::replace_file(storage, &tmp, &path, &logical, logical.len() as u64)?;
    Ok(true)
}

/// SLV-2: keeps the segment `opened` up to `offset`. Its bytes from there (to the last
/// non-zero one, or to its limit) go to a quarantine file; then the segment is replaced, by
/// rename, with a copy of its bytes before `offset` (the same capacity, zeros after): a
/// segment shared with another log by a hard link (LIM-1) keeps its bytes there. A limited
/// segment's copy is this log's own, so its limit file is moved aside too; its index, a
/// cache that may list the records set aside, is removed.
fn cut_segment(
    storage: &dyn Storage,
    dir: &Path,
    offset: usize,
    opened: &Opened,
    report: &mut LogSalvage,
) -> Result<()> {
    let first = opened.header.first_seq;
    let path = seq_file_path(dir, first, ".seg");
    // RD-8: the bytes after `offset` are not verified: read with pread.
    let source = FileBytes {
        file: &opened.file,
        len: opened.map.len(),
    };
    let to = if let Some(limit) = opened.limit {
        (limit.end as usize).min(opened.map.len())
    } else {
        let regions = data_regions(&opened.file, offset, opened.map.len());
        nonzero_end(&source, offset, &regions).map_err(|e| read_error(&path, offset, &e))?
    };
    let compressed = super::compressed::is_compressed(&opened.header);
    if to <= offset && opened.limit.is_none() && !compressed && !misfit(opened) {
        // Nothing after the records: the segment stays as it is (LOG-2 cut).
        return Ok(());
    }
    if to > offset {
        let bytes = read_range(&source, offset, to).map_err(|e| read_error(&path, offset, &e))?;
        let quarantine = write_bytes(storage, dir, first, offset as u64, &bytes)?;
        report.set_aside.push(SetAside {
            from: path.clone(),
            offset: offset as u64,
            bytes: bytes.len() as u64,
            quarantine,
        });
    }
    // RCV-13: the old index must never be left beside the cut copy.
    super::index::remove_durably(storage, dir, first)?;
    keep_prefix(storage, dir, opened, offset)?;
    if opened.limit.is_some()
        && let Some(moved) = move_aside(storage, dir, &limit_name(first))?
    {
        report.set_aside.push(moved);
    }
    Ok(())
}
