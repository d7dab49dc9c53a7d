//! Scanning a segment's records, and the facts recovery decides on (RCV-1 to RCV-8).
#![deny(clippy::indexing_slicing)]

use super::segment::SEGMENT_HEADER_LEN;
use crate::record::{RECORD_ALIGN, RecordError, decode};

/// Where a scan stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// A zero length: the end marker (REC-1).
    End,
    /// The bytes ran out exactly at a record boundary.
    Full,
    /// The bytes at `offset` are not a valid record.
    Invalid { offset: usize, error: RecordError },
    /// A valid record at `offset` whose seq is not the next one (RCV-5).
    WrongSeq { offset: usize, found: u64 },
}

/// The result of scanning records from an offset.
#[derive(Debug, Clone)]
pub(crate) struct Scan {
    /// Offsets of the valid records found, in order.
    pub offsets: Vec<u32>,
    /// The offset just past the last valid record.
    pub end: usize,
    /// The seq after the last valid record.
    pub seq_next: u64,
    pub stop: Stop,
}

/// Scans the records of a segment's bytes from `from`, expecting `seq_next` first.
pub(crate) fn scan(bytes: &[u8], from: usize, seq_next: u64) -> Scan {
    let mut scan = Scan {
        offsets: Vec::new(),
        end: from,
        seq_next,
        stop: Stop::Full,
    };
    loop {
        let Some(rest) = bytes.get(scan.end..).filter(|r| !r.is_empty()) else {
            return scan;
        };
        match decode(rest) {
            Ok((event, len)) if event.seq == scan.seq_next => {
                scan.offsets
                    .push(u32::try_from(scan.end).unwrap_or(u32::MAX));
                scan.end += len;
                scan.seq_next += 1;
            }
            Ok((event, _)) => {
                scan.stop = Stop::WrongSeq {
                    offset: scan.end,
                    found: event.seq,
                };
                return scan;
            }
            Err(RecordError::End) => {
                scan.stop = Stop::End;
                return scan;
            }
            Err(error) => {
                scan.stop = Stop::Invalid {
                    offset: scan.end,
                    error,
                };
                return scan;
            }
        }
    }
}

/// The offset just past the last non-zero byte at or after `from` (`from` when none),
/// looking only inside `regions`: the file's data regions (holes read as zeros).
pub(crate) fn nonzero_end(bytes: &[u8], from: usize, regions: &[(usize, usize)]) -> usize {
    for &(start, end) in regions.iter().rev() {
        let (start, end) = (start.max(from), end.min(bytes.len()));
        if start >= end {
            continue;
        }
        let region = bytes.get(start..end).unwrap_or_default();
        if let Some(at) = region.iter().rposition(|b| *b != 0) {
            return start + at + 1;
        }
    }
    from
}

/// `true` when a valid record starts at any 8-aligned offset after `offset` inside
/// `regions` (RCV-4: damage followed by valid data is corruption, not a torn tail).
pub(crate) fn valid_record_after(bytes: &[u8], offset: usize, regions: &[(usize, usize)]) -> bool {
    let first = (offset + RECORD_ALIGN)
        .next_multiple_of(RECORD_ALIGN)
        .max(SEGMENT_HEADER_LEN);
    for &(start, end) in regions {
        let mut at = start.max(first).next_multiple_of(RECORD_ALIGN);
        let end = nonzero_end(bytes, at, &[(start, end)]);
        while at < end {
            if bytes.get(at..).is_some_and(|rest| decode(rest).is_ok()) {
                return true;
            }
            at += RECORD_ALIGN;
        }
    }
    false
}
