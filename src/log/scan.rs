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

/// The offset just past the last non-zero byte at or after `from` (`from` when none).
pub(crate) fn nonzero_end(bytes: &[u8], from: usize) -> usize {
    let tail = bytes.get(from..).unwrap_or_default();
    tail.iter()
        .rposition(|b| *b != 0)
        .map_or(from, |at| from + at + 1)
}

/// `true` when a valid record starts at any 8-aligned offset after `offset` (RCV-4:
/// damage followed by valid data is corruption, not a torn tail).
pub(crate) fn valid_record_after(bytes: &[u8], offset: usize) -> bool {
    let end = nonzero_end(bytes, offset);
    let mut at = (offset + RECORD_ALIGN)
        .next_multiple_of(RECORD_ALIGN)
        .max(SEGMENT_HEADER_LEN);
    while at < end {
        if bytes.get(at..).is_some_and(|rest| decode(rest).is_ok()) {
            return true;
        }
        at += RECORD_ALIGN;
    }
    false
}
