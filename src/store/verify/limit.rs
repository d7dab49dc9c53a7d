//! A segment's limit file (LIM-2, LIM-3, LIM-5, LIM-7): its format, its identity and
//! place in the log, and the record it names as the limited segment's last. The verifier
//! reads the 64 bytes by `log-format.md` §12 itself rather than through `log::limit`, so
//! that it can name each field that is wrong.

use std::path::{Path, PathBuf};

use super::Found;
use super::records::Records;
use super::segment::SegmentPlace;
use crate::error::{Error, Result};
use crate::log::limit::{LIMIT_LEN, LIMIT_MAGIC, LIMIT_VERSION};
use crate::log::segment::{SEGMENT_HEADER_LEN, SegmentHeader, seq_file_path};
use crate::record::{u32_at, u64_at};

/// A limit file's fields once its format checks out (LIM-2).
#[derive(Debug, Clone, Copy)]
pub(super) struct LimitFields {
    pub(super) seq_next: u64,
    pub(super) last_offset: u32,
    pub(super) end: u32,
}

/// LIM-2, LIM-3 (but for the record at `last_offset`, checked after the scan): the
/// fields of a limit file whose format checks out.
pub(super) fn check_limit(
    found: &mut Found,
    place: &SegmentPlace<'_>,
    header: Option<&SegmentHeader>,
) -> Result<Option<LimitFields>> {
    let path = limit_path(place);
    let Some(bytes) = read_limit(found, &path)? else {
        return Ok(None);
    };
    Ok(check_limit_fields(found, &path, &bytes, place, header))
}

/// LIM-3: the record at `last_offset` is the limited segment's last for this log, with
/// seq `seq_next − 1`, ending at `end`.
pub(super) fn check_limit_records(
    found: &mut Found,
    path: &Path,
    limit: LimitFields,
    first: u64,
    records: &Records,
) {
    let count = limit.seq_next - first;
    let last = usize::try_from(count - 1)
        .ok()
        .and_then(|i| records.offsets.get(i));
    if records.complete && records.offsets.len() as u64 != count {
        found.error(
            path,
            Some(40),
            "LIM-3",
            format!(
                "the limit says {count} records, the segment holds {} before its end",
                records.offsets.len()
            ),
        );
    } else if last.is_some_and(|&at| at != limit.last_offset) {
        found.error(
            path,
            Some(48),
            "LIM-3",
            format!(
                "last_offset {} is not the offset of record {}",
                limit.last_offset,
                limit.seq_next - 1
            ),
        );
    } else if records.complete && !records.damaged && records.end != u64::from(limit.end) {
        found.error(
            path,
            Some(52),
            "LIM-3",
            "end is not where its last record ends",
        );
    }
}

/// The path of the limit file of the segment at `place`.
pub(super) fn limit_path(place: &SegmentPlace<'_>) -> PathBuf {
    seq_file_path(place.log_dir, place.first, ".lim")
}

/// LIM-2, LIM-7: the limit file's bytes, when its length, magic, `crc`, `limit_version`,
/// incompatible features and reserved field check out (reported otherwise).
fn read_limit(found: &mut Found, path: &Path) -> Result<Option<Vec<u8>>> {
    let len = std::fs::symlink_metadata(path)
        .map_err(|e| Error::io("stat", path, &e))?
        .len();
    if len != LIMIT_LEN as u64 {
        found.error(path, None, "LIM-2", format!("{len} bytes, not {LIMIT_LEN}"));
        return Ok(None);
    }
    let bytes = crate::storage::read_regular(path).map_err(|e| Error::io("read", path, &e))?;
    let field32 = |at| u32_at(&bytes, at).unwrap_or_default();
    if bytes.get(..8) != Some(&LIMIT_MAGIC[..]) {
        found.error(path, Some(0), "LIM-2", "wrong magic");
        return Ok(None);
    }
    if crc32c::crc32c(bytes.get(..60).unwrap_or_default()) != field32(60) {
        found.error(path, Some(60), "LIM-2", "crc mismatch");
        return Ok(None);
    }
    // LIM-7: compatible feature bits (bytes 12..14) are ignored; no incompatible one
    // (bytes 14..16) is known to this build.
    let incompat = field32(12) >> 16;
    if field32(8) != LIMIT_VERSION || incompat != 0 || field32(56) != 0 {
        found.error(
            path,
            Some(8),
            "LIM-2",
            "another limit_version, unknown incompat features, or a reserved field not 0",
        );
        return Ok(None);
    }
    Ok(Some(bytes))
}

/// LIM-2, LIM-3, LIM-5: the fields of a limit file of the right format against its
/// segment's header and place in the log; `None` when one of them is wrong (reported).
/// A `seq_next` that is not the next segment's `first_seq` is reported but does not make
/// the limit unusable.
fn check_limit_fields(
    found: &mut Found,
    path: &Path,
    bytes: &[u8],
    place: &SegmentPlace<'_>,
    header: Option<&SegmentHeader>,
) -> Option<LimitFields> {
    let field32 = |at| u32_at(bytes, at).unwrap_or_default();
    let field64 = |at| u64_at(bytes, at).unwrap_or_default();
    let limit = LimitFields {
        seq_next: field64(40),
        last_offset: field32(48),
        end: field32(52),
    };
    let mut ok = true;
    if let Some(header) = header {
        if bytes.get(16..32) != Some(&header.log_id[..]) {
            found.error(path, Some(16), "LIM-3", "log_id differs from its segment's");
            ok = false;
        }
        if u64::from(limit.end) > header.capacity {
            found.error(
                path,
                Some(52),
                "LIM-2",
                "end is past the segment's capacity",
            );
            ok = false;
        }
    }
    if field64(32) != place.first {
        found.error(
            path,
            Some(32),
            "LIM-3",
            "first_seq differs from its segment's",
        );
        ok = false;
    }
    if limit.seq_next <= place.first {
        found.error(
            path,
            Some(40),
            "LIM-2",
            "seq_next is not greater than first_seq",
        );
        ok = false;
    }
    if (limit.last_offset as usize) < SEGMENT_HEADER_LEN || limit.last_offset >= limit.end {
        found.error(
            path,
            Some(48),
            "LIM-2",
            "last_offset and end do not frame a record",
        );
        ok = false;
    }
    if let Some(next) = place.next.filter(|&n| n != limit.seq_next) {
        found.error(
            path,
            Some(40),
            "LIM-5",
            format!(
                "seq_next is {}, the next segment starts at {next}",
                limit.seq_next
            ),
        );
    }
    ok.then_some(limit)
}
