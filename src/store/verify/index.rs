//! A segment's index file (IDX-1 to IDX-4): its format, checksum and identity, and the
//! records it lists against the ones the scan found, with its `data_crc`. The verifier
//! reads the header by `log-format.md` §5 itself rather than through `log::index` (which
//! only says whether an index is usable), so that it can name each field that is wrong.

use std::path::Path;

use super::Found;
use super::records::Records;
use super::segment::SegmentPlace;
use crate::error::{Error, Result};
use crate::log::segment::{SEGMENT_HEADER_LEN, SegmentHeader, seq_file_path};
use crate::record::{u32_at, u64_at};

/// An index file's fields once its format checks out (IDX-1, IDX-2, IDX-4).
#[derive(Debug)]
pub(super) struct IndexFields {
    header_len: u64,
    offsets: Vec<u32>,
    pub(super) end: u64,
    data_crc: Option<u32>,
}

/// IDX-1, IDX-2, IDX-4: an index file's format, checksum and identity.
pub(super) fn check_index(
    found: &mut Found,
    place: &SegmentPlace<'_>,
    header: Option<&SegmentHeader>,
    segment_len: u64,
) -> Result<Option<IndexFields>> {
    let path = seq_file_path(place.log_dir, place.first, ".idx");
    let before = found.problems.len();
    // The fewest bytes an event takes in the segment: a version 1 record is at least 72
    // bytes; a compact run's members take a byte or two each (log-format.md §4.2, REC-20),
    // and a segment whose header does not check out may be either.
    let per_event = match header.map(SegmentHeader::format) {
        Some(crate::record::Format::V1) => 72,
        Some(crate::record::Format::Compact) | None => 1,
    };
    let most = 56 + 4 * (segment_len / per_event + 1);
    let Some((bytes, header_len, data_crc)) = check_index_file(found, &path, most)? else {
        // IDX-2: an index is written without a sync, so a crash may leave it torn under its
        // name; its format or `crc` failing is a cache to rebuild, not lost data. An index
        // that checks out but does not match its segment is an error.
        found.downgrade_since(before);
        return Ok(None);
    };
    if !check_identity(found, &path, &bytes, place, header) {
        return Ok(None);
    }
    let field32 = |at| u32_at(&bytes, at);
    let (words, _) = bytes.get(header_len..).unwrap_or_default().as_chunks::<4>();
    Ok(Some(IndexFields {
        header_len: header_len as u64,
        offsets: words.iter().map(|w| u32::from_le_bytes(*w)).collect(),
        end: u64::from(field32(40).unwrap_or_default()),
        data_crc,
    }))
}

/// An index file whose format and `crc` check out: its bytes, its header's length and its
/// `data_crc` (version 2).
type IndexBytes = (Vec<u8>, usize, Option<u32>);

/// [`check_index`] up to its `crc`.
fn check_index_file(found: &mut Found, path: &Path, most: u64) -> Result<Option<IndexBytes>> {
    let Some(bytes) = read_index(found, path, most)? else {
        return Ok(None);
    };
    let Some((header_len, crc_at, data_crc)) = index_layout(found, path, &bytes) else {
        return Ok(None);
    };
    let field32 = |at| u32_at(&bytes, at);
    let count = field32(12).unwrap_or_default() as usize;
    if Some(bytes.len()) != count.checked_mul(4).and_then(|n| n.checked_add(header_len)) {
        found.error(
            path,
            Some(12),
            "IDX-1",
            format!("{} bytes, not a header and {count} offsets", bytes.len()),
        );
        return Ok(None);
    }
    let crc = crc32c::crc32c_append(
        crc32c::crc32c(bytes.get(..crc_at).unwrap_or_default()),
        bytes.get(header_len..).unwrap_or_default(),
    );
    if Some(crc) != field32(crc_at) {
        found.error(path, Some(crc_at as u64), "IDX-2", "crc mismatch");
        return Ok(None);
    }
    Ok(Some((bytes, header_len, data_crc)))
}

/// IDX-1, IDX-2, IDX-3: the index lists the records the scan found, at their offsets,
/// ends where they end, and its `data_crc` is the CRC of those bytes.
pub(super) fn check_index_records(
    found: &mut Found,
    place: &SegmentPlace<'_>,
    index: &IndexFields,
    records: &Records,
    holds_all: bool,
) {
    let path = seq_file_path(place.log_dir, place.first, ".idx");
    let (listed, held) = (index.offsets.len(), records.offsets.len());
    if records.complete && listed > held {
        found.error(
            &path,
            Some(12),
            if holds_all { "IDX-3" } else { "IDX-2" },
            format!("lists {listed} records, the segment holds {held}"),
        );
    } else if records.complete && holds_all && listed < held {
        // A prefix written before the segment was sealed, whose rewrite at the seal failed
        // (an index is a cache: its failure is not an error, IDX-1): readers scan instead.
        found.warning(
            &path,
            Some(12),
            "IDX-3",
            format!("lists {listed} records, the segment holds {held}: a stale cache, not used"),
        );
    }
    let mismatch = index
        .offsets
        .iter()
        .zip(&records.offsets)
        .position(|(a, b)| a != b);
    if let Some(i) = mismatch {
        let (at, listed_at) = (
            records.offsets.get(i).copied().unwrap_or_default(),
            index.offsets.get(i).copied().unwrap_or_default(),
        );
        found.error(
            &path,
            Some(index.header_len + 4 * i as u64),
            "IDX-2",
            format!(
                "lists record {} at offset {listed_at}, the segment has it at {at}",
                place.first + i as u64
            ),
        );
        return;
    }
    let end = match listed.checked_sub(1) {
        None => Some(SEGMENT_HEADER_LEN as u64),
        Some(_) if listed < held => records.offsets.get(listed).map(|&o| u64::from(o)),
        Some(_) if listed == held && records.complete => Some(records.end),
        Some(_) => None,
    };
    if end.is_some_and(|end| end != index.end) {
        found.error(
            &path,
            Some(40),
            "IDX-1",
            "end is not where its last record ends",
        );
    } else if let (Some(expected), false) = (index.data_crc, records.damaged)
        && records.crc_at_index_end.is_some_and(|crc| crc != expected)
    {
        found.error(
            &path,
            Some(44),
            "IDX-1",
            "data_crc does not match the segment's bytes 64..end",
        );
    }
}

/// IDX-1: the index file's bytes, when it is not longer than `most`, the longest index of
/// its segment can be (reported otherwise).
fn read_index(found: &mut Found, path: &Path, most: u64) -> Result<Option<Vec<u8>>> {
    let len = std::fs::symlink_metadata(path)
        .map_err(|e| Error::io("stat", path, &e))?
        .len();
    // No index lists more events than its segment can hold: `most` bytes of index.
    if len > most {
        found.error(
            path,
            None,
            "IDX-1",
            format!("{len} bytes: more offsets than the segment can hold"),
        );
        return Ok(None);
    }
    crate::storage::read_regular(path)
        .map(Some)
        .map_err(|e| Error::io("read", path, &e))
}

/// IDX-1, IDX-4: the magic and `index_version`, and what the version implies: the
/// header's length, where its `crc` is and its `data_crc` (version 2 only). `None` when
/// they do not check out (reported).
fn index_layout(
    found: &mut Found,
    path: &Path,
    bytes: &[u8],
) -> Option<(usize, usize, Option<u32>)> {
    let field32 = |at| u32_at(bytes, at);
    if bytes.get(..8) != Some(&b"surfidx\0"[..]) {
        found.error(path, Some(0), "IDX-1", "wrong magic");
        return None;
    }
    // IDX-4: version 1 has no data_crc and a shorter header; version 2 is current.
    match field32(8) {
        Some(1) => Some((48, 44, None)),
        Some(2) if field32(48) != Some(0) => {
            found.error(path, Some(48), "IDX-1", "reserved field not 0");
            None
        }
        Some(2) => Some((56, 52, field32(44))),
        version => {
            found.error(
                path,
                Some(8),
                "IDX-4",
                format!("index_version {}", version.unwrap_or(0)),
            );
            None
        }
    }
}

/// IDX-2: the index's `log_id` is its segment's (when the segment's header could be read)
/// and its `first_seq` is the segment's; whether both hold (reported otherwise).
fn check_identity(
    found: &mut Found,
    path: &Path,
    bytes: &[u8],
    place: &SegmentPlace<'_>,
    header: Option<&SegmentHeader>,
) -> bool {
    if header.is_some_and(|h| bytes.get(16..32) != Some(&h.log_id[..])) {
        found.error(path, Some(16), "IDX-2", "log_id differs from its segment's");
        return false;
    }
    if u64_at(bytes, 32) != Some(place.first) {
        found.error(
            path,
            Some(32),
            "IDX-2",
            "first_seq differs from its segment's",
        );
        return false;
    }
    true
}
