//! The log directory: the names in it (LOG-1, LOG-3), its chain of segments (LOG-2, SEG-3:
//! no gap, no overlap), and an index or limit of no segment (LOG-1, LIM-5); each segment is
//! then checked by `segment`.

use std::collections::BTreeSet;
use std::path::Path;

use super::Found;
use super::segment::{SegmentPlace, check_segment};
use crate::error::{Error, Result};
use crate::log::segment::{LogId, parse_first_seq, segment_name, seq_file_path};

/// What the scan of a log found, for the checkpoint's check.
#[derive(Debug, Default)]
pub(super) struct LogSummary {
    /// The number of records the log holds, when its segments could be followed to the
    /// end (`None` when a broken frame hides where a segment ends).
    pub(super) len: Option<u64>,
    /// CRC-32C of the text of the record at the seq asked for (the checkpoint's last).
    pub(super) target_text_crc: Option<u32>,
    /// The segments, in order: `first_seq` and whether a limit file limits it.
    pub(super) chain: Vec<(u64, bool)>,
    /// Whether the log had no error at all (the fold is only done then).
    pub(super) clean: bool,
}

/// The log directory: names (LOG-1), chain (LOG-2), every segment (SEG-1 to SEG-7), every
/// record (REC-1 to REC-8, seq order), every index (IDX-1 to IDX-4), every limit (LIM-2,
/// LIM-3, LIM-5). `target` is a seq whose text CRC the checkpoint's check needs.
pub(super) fn check_log(
    found: &mut Found,
    log_dir: &Path,
    target: Option<u64>,
) -> Result<LogSummary> {
    let errors_before = found.problems.len();
    let mut summary = LogSummary::default();
    let Some(listing) = list_log(found, log_dir)? else {
        return Ok(summary);
    };
    let segments: Vec<u64> = listing.segments.iter().copied().collect();
    check_strays(found, log_dir, &listing);
    let mut log_id: Option<LogId> = None;
    // The seq the next segment must start at, when the previous one could be followed.
    let mut expected: Option<u64> = Some(0);
    for (position, &first) in segments.iter().enumerate() {
        let path = seq_file_path(log_dir, first, ".seg");
        check_continuity(found, log_dir, &path, expected, first);
        let limited = listing.limits.contains(&first);
        summary.chain.push((first, limited));
        let place = SegmentPlace {
            log_dir,
            path: &path,
            position: position as u64,
            first,
            next: segments.get(position + 1).copied(),
            limited,
            indexed: listing.indexes.contains(&first),
            target,
        };
        expected = check_segment(found, &place, &mut log_id, &mut summary.target_text_crc)?;
    }
    summary.len = if segments.is_empty() { None } else { expected };
    summary.clean = !found.errors_since(errors_before);
    Ok(summary)
}

/// The names of a log directory's segments, indexes and limits, by `first_seq`.
struct Listing {
    segments: BTreeSet<u64>,
    indexes: BTreeSet<u64>,
    limits: BTreeSet<u64>,
}

/// LOG-1: lists the log directory; a name LOG-1 does not allow is a warning. `None`
/// (reported) when there is no log directory.
fn list_log(found: &mut Found, log_dir: &Path) -> Result<Option<Listing>> {
    let entries = match std::fs::read_dir(log_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            found.error(log_dir, None, "LOG-3", "the session has no log directory");
            return Ok(None);
        }
        Err(error) => return Err(Error::io("list", log_dir, &error)),
    };
    let mut listing = Listing {
        segments: BTreeSet::new(),
        indexes: BTreeSet::new(),
        limits: BTreeSet::new(),
    };
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("list", log_dir, &e))?;
        let path = entry.path();
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        let name = entry.file_name();
        let name = name.to_str().unwrap_or_default();
        let parsed = [
            (".seg", &mut listing.segments),
            (".idx", &mut listing.indexes),
            (".lim", &mut listing.limits),
        ]
        .into_iter()
        .find_map(|(suffix, set)| {
            let first = parse_first_seq(name.strip_suffix(suffix)?)?;
            Some((first, set))
        });
        let temporary = Path::new(name).extension().is_some_and(|e| e == "tmp");
        match parsed {
            Some((first, set)) if is_file => {
                set.insert(first);
            }
            Some(_) => found.error(&path, None, "LOG-1", "not a regular file"),
            None if name == "LOCK" || temporary => {}
            None => found.warning(
                &path,
                None,
                "LOG-1",
                "a file LOG-1 does not allow in a log directory",
            ),
        }
    }
    Ok(Some(listing))
}

/// LOG-1, LIM-5, LOG-2: an index or a limit of no segment, and a log without segment 0.
fn check_strays(found: &mut Found, log_dir: &Path, listing: &Listing) {
    for &first in listing.indexes.difference(&listing.segments) {
        found.error(
            &seq_file_path(log_dir, first, ".idx"),
            None,
            "LOG-1",
            "an index of no segment: the segment is missing",
        );
    }
    for &first in listing.limits.difference(&listing.segments) {
        found.error(
            &seq_file_path(log_dir, first, ".lim"),
            None,
            "LIM-5",
            "a limit of no segment of the log: the segment is missing",
        );
    }
    if listing.segments.first() != Some(&0) {
        found.error(
            &log_dir.join(segment_name(0)),
            None,
            "LOG-2",
            "the log has no segment 0",
        );
    }
}

/// LOG-2, SEG-3: the segment at `path` starts at `first`, the seq the one before it ends
/// at (`expected`, when that one could be followed): no gap, no overlap.
fn check_continuity(
    found: &mut Found,
    log_dir: &Path,
    path: &Path,
    expected: Option<u64>,
    first: u64,
) {
    match expected {
        Some(seq) if seq < first => found.error(
            &seq_file_path(log_dir, seq, ".seg"),
            None,
            "LOG-2",
            format!(
                "missing: no segment holds seqs {seq}..{first} (the one before ends at {seq}, the next starts at {first})"
            ),
        ),
        Some(seq) if seq > first => found.error(
            path,
            None,
            "SEG-3",
            format!(
                "starts at seq {first}, but the segment before holds records up to seq {}",
                seq - 1
            ),
        ),
        _ => {}
    }
}
