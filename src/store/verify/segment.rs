//! One segment: its header and its place in the log (SEG-1 to SEG-3, SEG-6, SEG-7,
//! VER-1), its records (through `records`), the zeros after them (SEG-5), and its limit and
//! index against those records (through `limit` and `index`).

use std::fs::File;
use std::path::Path;

use super::index::{check_index, check_index_records};
use super::limit::{LimitFields, check_limit, check_limit_records, limit_path};
use super::records::Scan;
use super::{Found, read_at};
use crate::error::{Error, Result};
use crate::log::segment::{HeaderError, LogId, SEGMENT_HEADER_LEN, SegmentHeader};
use crate::record::Format;

/// Where a segment is in its log.
pub(super) struct SegmentPlace<'a> {
    pub(super) log_dir: &'a Path,
    pub(super) path: &'a Path,
    pub(super) position: u64,
    pub(super) first: u64,
    /// The next segment's `first_seq`, when there is one.
    pub(super) next: Option<u64>,
    pub(super) limited: bool,
    pub(super) indexed: bool,
    pub(super) target: Option<u64>,
}

/// One segment with its limit and index. Returns the seq after its last record when its
/// records could be followed to their end.
pub(super) fn check_segment(
    found: &mut Found,
    place: &SegmentPlace<'_>,
    log_id: &mut Option<LogId>,
    target_crc: &mut Option<u32>,
) -> Result<Option<u64>> {
    let path = place.path;
    let file = crate::storage::open_regular(path).map_err(|e| Error::io("open", path, &e))?;
    let file_len = file
        .metadata()
        .map_err(|e| Error::io("stat", path, &e))?
        .len();
    let Some((file, file_len)) = logical_segment(found, place, file, file_len)? else {
        return Ok(None);
    };
    let header = check_segment_header(found, place, &file, file_len, log_id)?;
    let limit = if place.limited {
        check_limit(found, place, header.as_ref())?
    } else {
        None
    };
    let index = if place.indexed {
        check_index(found, place, header.as_ref(), file_len)?
    } else {
        None
    };
    let data_end = header.map_or(file_len, |h| h.capacity.min(file_len));
    let (stop, count) = records_bounds(place, limit, data_end);
    let scan = Scan {
        file: &file,
        path,
        first: place.first,
        stop,
        count,
        index_end: index.as_ref().map(|i| i.end),
        target: place.target,
        // SEG-9; a header that does not check out is reported, and its records are read
        // as version 1 records.
        format: header.map_or(Format::V1, |h| h.format()),
    };
    let records = scan.run(found, target_crc)?;
    // SEG-5 does not hold past a limit: the bytes there are another log's (LIM-4).
    if records.complete && !place.limited {
        check_zero_tail(found, &file, path, records.end, file_len)?;
    }
    if let Some(limit) = limit {
        check_limit_records(found, &limit_path(place), limit, place.first, &records);
    }
    if let Some(index) = index {
        let holds_all = place.next.is_some() || place.limited;
        check_index_records(found, place, &index, &records, holds_all);
    }
    let held = records.offsets.len() as u64;
    Ok(records.complete.then_some(place.first + held))
}

/// CZ-7: the file to check the segment in, with its length: `file` itself, or for a
/// compressed segment (CZ-2) its logical segment decompressed into a temporary file, every
/// block checked (CZ-3). `None` when the compressed file does not check out (reported):
/// its records cannot be followed.
///
/// # Errors
/// `IO` when the copy cannot be written: not damage.
fn logical_segment(
    found: &mut Found,
    place: &SegmentPlace<'_>,
    file: File,
    file_len: u64,
) -> Result<Option<(File, u64)>> {
    let head = crate::log::segment::read_head(&file);
    let header = match SegmentHeader::decode(&head) {
        Ok(header) if header.incompat_features & crate::log::segment::COMPRESSED != 0 => header,
        // Plain, or a header `check_segment_header` reports.
        _ => return Ok(Some((file, file_len))),
    };
    if place.next.is_none() {
        found.error(
            place.path,
            Some(58),
            "CZ-6",
            "the last segment is compressed: a segment after it is missing",
        );
    }
    match crate::log::segment::materialize(place.log_dir, place.path, &file, &header) {
        Ok((copy, _)) => Ok(Some((copy, header.capacity))),
        Err(error) if error.code() == "CORRUPT" => {
            found.error(place.path, None, "CZ-3", error.to_string());
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

/// Where the segment's records end and, when known, how many this log has in it.
///
/// LIM-1, LIM-4: a limited segment's records end at the limit; past it the bytes are
/// another log's. With a limit that does not check out, the next segment's first seq
/// bounds them (LIM-5).
fn records_bounds(
    place: &SegmentPlace<'_>,
    limit: Option<LimitFields>,
    data_end: u64,
) -> (u64, Option<u64>) {
    match (place.limited, limit) {
        (true, Some(limit)) => (
            u64::from(limit.end).min(data_end),
            Some(limit.seq_next - place.first),
        ),
        (true, None) => (data_end, place.next.map(|n| n.saturating_sub(place.first))),
        (false, _) => (data_end, None),
    }
}

/// SEG-1 to SEG-3, SEG-6, SEG-7: the header, and its place in the log.
fn check_segment_header(
    found: &mut Found,
    place: &SegmentPlace<'_>,
    file: &File,
    file_len: u64,
    log_id: &mut Option<LogId>,
) -> Result<Option<SegmentHeader>> {
    let Some(header) = read_segment_header(found, place.path, file, file_len)? else {
        return Ok(None);
    };
    match log_id {
        None => *log_id = Some(header.log_id),
        Some(id) if *id != header.log_id => {
            found.error(
                place.path,
                Some(16),
                "SEG-3",
                "log_id differs from the log's (segment 0's)",
            );
        }
        Some(_) => {}
    }
    check_header_fields(found, place, &header, file_len);
    Ok(Some(header))
}

/// SEG-1, SEG-2, VER-1: the header decodes (reported when it does not).
fn read_segment_header(
    found: &mut Found,
    path: &Path,
    file: &File,
    file_len: u64,
) -> Result<Option<SegmentHeader>> {
    if file_len < SEGMENT_HEADER_LEN as u64 {
        found.error(
            path,
            Some(0),
            "SEG-2",
            format!("{file_len} bytes: shorter than its header"),
        );
        return Ok(None);
    }
    let mut bytes = [0; SEGMENT_HEADER_LEN];
    read_at(file, path, &mut bytes, 0)?;
    match SegmentHeader::decode(&bytes) {
        Ok(header) => Ok(Some(header)),
        Err(HeaderError::Invalid(reason)) => {
            found.error(path, Some(0), "SEG-2", reason);
            Ok(None)
        }
        Err(HeaderError::Version(unsupported)) => {
            let error = crate::log::segment::version_error(unsupported, path);
            found.error(path, Some(8), "VER-1", error.to_string());
            Ok(None)
        }
    }
}

/// SEG-3, SEG-6, SEG-7: the header's index, first seq and capacity against the segment's
/// place in the log, its name and its file's length.
fn check_header_fields(
    found: &mut Found,
    place: &SegmentPlace<'_>,
    header: &SegmentHeader,
    file_len: u64,
) {
    let path = place.path;
    if header.index != place.position {
        found.error(
            path,
            Some(32),
            "SEG-3",
            format!(
                "segment_index is {}, its position among the segments is {}",
                header.index, place.position
            ),
        );
    }
    if header.first_seq != place.first {
        found.error(
            path,
            Some(40),
            "SEG-3",
            format!(
                "first_seq is {}, its name says {}",
                header.first_seq, place.first
            ),
        );
    }
    if header.capacity > u64::from(u32::MAX) || header.capacity < SEGMENT_HEADER_LEN as u64 {
        found.error(
            path,
            Some(48),
            "SEG-7",
            format!("capacity {}", header.capacity),
        );
    }
    if !crate::log::segment::is_grown_len(file_len, header.capacity) {
        found.error(
            path,
            Some(file_len.min(header.capacity)),
            "SEG-6",
            format!(
                "the file is {file_len} bytes long, neither its capacity ({}) nor a multiple \
                 of the 64 KiB steps it grows in: cut short or extended",
                header.capacity
            ),
        );
    }
}

/// SEG-5: the bytes after the last record are zero up to the end of the file.
fn check_zero_tail(found: &mut Found, file: &File, path: &Path, from: u64, len: u64) -> Result<()> {
    let mut buf = vec![0; 64 << 10];
    let mut at = from;
    while at < len {
        let n = usize::try_from((len - at).min(buf.len() as u64)).unwrap_or(buf.len());
        let chunk = buf.get_mut(..n).unwrap_or_default();
        read_at(file, path, chunk, at)?;
        if let Some(i) = chunk.iter().position(|b| *b != 0) {
            found.error(
                path,
                Some(at + i as u64),
                "SEG-5",
                format!("a non-zero byte after the last record (which ends at {from}): damage, or a torn tail no writer has recovered"),
            );
            return Ok(());
        }
        at += n as u64;
    }
    Ok(())
}
