//! Scanning a segment's records, and the facts recovery decides on (RCV-1 to RCV-8).
#![deny(clippy::indexing_slicing)]

use super::segment::SEGMENT_HEADER_LEN;
use crate::record::{BODY_FIXED_LEN, RECORD_ALIGN, RecordError, decode, frame_len, u32_at};

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

/// The records from `from` that this process's writer has written, up to seq `seq_target`
/// (excluded), expecting `seq_next` first: walks the frames' lengths only. Checksums and
/// bodies are not checked here, since these are bytes the writer has just written and
/// every read checks its record again (REC-4). Stops early, with `Stop::Invalid`, at a
/// length that does not frame a record inside `bytes` (the caller then scans instead),
/// and with `Stop::End` at an end marker (REC-1).
pub(crate) fn walk_written(bytes: &[u8], from: usize, seq_next: u64, seq_target: u64) -> Scan {
    let mut scan = Scan {
        offsets: Vec::new(),
        end: from,
        seq_next,
        stop: Stop::Full,
    };
    while scan.seq_next < seq_target {
        let Some(len) = u32_at(bytes, scan.end) else {
            return scan;
        };
        let body_len = len as usize;
        if body_len == 0 {
            scan.stop = Stop::End;
            return scan;
        }
        let next = scan.end.saturating_add(frame_len(body_len));
        if body_len < BODY_FIXED_LEN || next > bytes.len() {
            scan.stop = Stop::Invalid {
                offset: scan.end,
                error: RecordError::Length,
            };
            return scan;
        }
        scan.offsets
            .push(u32::try_from(scan.end).unwrap_or(u32::MAX));
        scan.end = next;
        scan.seq_next += 1;
    }
    scan
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
/// `regions` (RCV-7: a torn last segment header with no valid record after it).
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

#[cfg(test)]
mod tests {
    #![expect(
        clippy::indexing_slicing,
        reason = "tests index their own fixed buffers"
    )]

    use proptest::prelude::*;

    use super::*;
    use crate::event::{Event, EventFields};
    use crate::record::encode_event;

    fn event(seq: u64, pad: usize) -> Event {
        let text = format!(
            r#"{{"type":"plugin/t","seq":{seq},"time":0,"data":{{"pad":"{}"}}}}"#,
            "x".repeat(pad)
        );
        let data = text.find("{\"pad\"").unwrap()..text.len() - 1;
        let fields = EventFields {
            event_type: "plugin/t".into(),
            seq,
            time: 0,
            surface_op: None,
            sources: None,
            ignorable: false,
        };
        Event::new(text, data, None, fields)
    }

    /// A segment's bytes: a header's room, the records of `pads` from seq 0, then zeros.
    fn segment(pads: &[usize], zeros: usize) -> Vec<u8> {
        let mut bytes = vec![0; SEGMENT_HEADER_LEN];
        for (seq, pad) in pads.iter().enumerate() {
            encode_event(&event(seq as u64, *pad), &mut bytes);
        }
        bytes.resize(bytes.len() + zeros, 0);
        bytes
    }

    proptest! {
        /// Over records the writer wrote, the walk finds what the checking scan finds, up
        /// to the target seq.
        #[test]
        fn walk_matches_the_scan_over_written_records(
            pads in prop::collection::vec(0usize..300, 0..40),
            zeros in prop_oneof![Just(0usize), 1usize..64],
            from_record in 0usize..5,
            target_cut in 0u64..5,
        ) {
            let bytes = segment(&pads, zeros);
            let full = scan(&bytes, SEGMENT_HEADER_LEN, 0);
            let skip = from_record.min(pads.len());
            let from = full.offsets.get(skip).map_or(full.end, |&o| o as usize);
            let target = (pads.len() as u64).saturating_sub(target_cut).max(skip as u64);
            let walked = walk_written(&bytes, from, skip as u64, target);
            let target_at = usize::try_from(target).unwrap();
            let expected: Vec<u32> = full.offsets[skip..target_at].to_vec();
            prop_assert_eq!(&walked.offsets, &expected);
            prop_assert_eq!(walked.seq_next, target);
            let end = full.offsets.get(target_at).map_or(full.end, |&o| o as usize);
            prop_assert_eq!(walked.end, end);
            // Asked for more than was written: it stops at the end marker or the bytes' end.
            let beyond = walk_written(&bytes, from, skip as u64, pads.len() as u64 + 3);
            prop_assert_eq!(beyond.seq_next, pads.len() as u64);
            prop_assert_eq!(beyond.stop, if zeros >= 4 { Stop::End } else { Stop::Full });
        }
    }

    #[test]
    fn walk_stops_at_a_length_that_frames_no_record() {
        let mut bytes = segment(&[5, 5], 64);
        let second = scan(&bytes, SEGMENT_HEADER_LEN, 0).offsets[1] as usize;
        bytes[second..second + 4].copy_from_slice(&1_000_000u32.to_le_bytes());
        let walked = walk_written(&bytes, SEGMENT_HEADER_LEN, 0, 2);
        assert_eq!(walked.offsets.len(), 1);
        assert_eq!(
            walked.stop,
            Stop::Invalid {
                offset: second,
                error: RecordError::Length
            }
        );
        bytes[second..second + 4].copy_from_slice(&3u32.to_le_bytes());
        let walked = walk_written(&bytes, SEGMENT_HEADER_LEN, 0, 2);
        assert!(
            matches!(walked.stop, Stop::Invalid { .. }),
            "shorter than a body"
        );
    }
}
