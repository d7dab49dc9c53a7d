//! Scanning a segment's records, and the facts recovery decides on (RCV-1 to RCV-8).
//!
//! RD-8: every byte read here that no scan has verified yet is read with `pread` from the
//! segment's file ([`FileBytes`]), never through a map: a hole of a sparse segment on a
//! full filesystem, or a page past a length another process cut the file to, raises
//! SIGBUS when touched through a map, but is a zero or a short read through `pread`.
#![deny(clippy::indexing_slicing)]

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::segment::SEGMENT_HEADER_LEN;
use crate::record::{Decoded, Format, RECORD_ALIGN, RecordError, announced_len, decode_as};

/// How many bytes a scan reads with one `pread` when it needs more (RD-8).
const CHUNK: usize = 64 * 1024;

/// Bytes a scan may read: a segment's file, read with `pread` (RD-8), or bytes already in
/// memory.
pub(crate) trait Source {
    /// How many bytes there are: a segment's length when it was opened.
    fn len(&self) -> usize;
    /// Fills `buf` with the bytes at `at`; `at + buf.len()` is at most [`Source::len`].
    ///
    /// # Errors
    /// The OS error; `UnexpectedEof` when the file is now shorter than [`Source::len`]
    /// (another process truncated it).
    fn read_at(&self, at: usize, buf: &mut [u8]) -> io::Result<()>;
}

impl Source for [u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    fn read_at(&self, at: usize, buf: &mut [u8]) -> io::Result<()> {
        let bytes = self
            .get(at..at.saturating_add(buf.len()))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(bytes);
        Ok(())
    }
}

/// A segment's file of `len` bytes (its length when mapped), read with `pread` (RD-8).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FileBytes<'a> {
    pub file: &'a File,
    pub len: usize,
}

impl Source for FileBytes<'_> {
    fn len(&self) -> usize {
        self.len
    }

    fn read_at(&self, at: usize, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, at as u64).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the segment file is shorter than when it was opened: another process \
                     truncated it (SEG-8, RD-8)",
                )
            } else {
                e
            }
        })
    }
}

/// The bytes `from..to` of `source`, read in one go (RD-8: a copy, never a borrow of a map).
///
/// # Errors
/// As [`Source::read_at`].
pub(crate) fn read_range<S: Source + ?Sized>(
    source: &S,
    from: usize,
    to: usize,
) -> io::Result<Vec<u8>> {
    let to = to.min(source.len());
    let mut bytes = vec![0; to.saturating_sub(from)];
    if !bytes.is_empty() {
        source.read_at(from, &mut bytes)?;
    }
    Ok(bytes)
}

/// A window of a [`Source`]'s bytes, refilled with one read when a frame needs bytes
/// outside it.
struct Window<'a, S: ?Sized> {
    source: &'a S,
    start: usize,
    buf: Vec<u8>,
}

impl<'a, S: Source + ?Sized> Window<'a, S> {
    fn new(source: &'a S) -> Self {
        Self {
            source,
            start: 0,
            buf: Vec::new(),
        }
    }

    /// The bytes from `at`, at least `want` of them unless the source ends first.
    fn bytes(&mut self, at: usize, want: usize) -> io::Result<&[u8]> {
        let len = self.source.len();
        let want_end = at.saturating_add(want).min(len);
        let held = at >= self.start && want_end <= self.start + self.buf.len();
        if !held {
            let fill = want_end
                .saturating_sub(at)
                .max(CHUNK)
                .min(len.saturating_sub(at));
            self.buf.clear();
            self.buf.resize(fill, 0);
            self.source.read_at(at, &mut self.buf)?;
            self.start = at;
        }
        Ok(self.buf.get(at - self.start..).unwrap_or_default())
    }

    /// The record of `format` at `at`, decoded from bytes read for it: the whole frame
    /// its length names when the source holds that many, else what the source holds
    /// (REC-4).
    fn decode_at(
        &mut self,
        format: Format,
        at: usize,
    ) -> io::Result<Result<(Decoded<'_>, usize), RecordError>> {
        let len = self.source.len();
        let head = self.bytes(at, crate::record::compact::LEN_BYTES_MAX)?;
        // A frame longer than the source cannot be whole: its first bytes tell so (the
        // same `RecordError` as over all the bytes).
        let want = announced_len(format, head)
            .filter(|&frame| frame <= len.saturating_sub(at))
            .map_or(8, |frame| frame.max(8));
        Ok(decode_as(format, self.bytes(at, want)?))
    }
}

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

/// Scans the records of `format` of a segment from `from`, expecting `seq_next` first.
/// Every byte is read from `source` (RD-8: a segment's file with `pread`), never borrowed.
/// A record holding several events (a compact run) gives each of them its offset.
///
/// # Errors
/// A failed read (as [`Source::read_at`]): never taken for the end of the records.
pub(crate) fn scan<S: Source + ?Sized>(
    source: &S,
    format: Format,
    from: usize,
    seq_next: u64,
) -> io::Result<Scan> {
    let mut scan = Scan {
        offsets: Vec::new(),
        end: from,
        seq_next,
        stop: Stop::Full,
    };
    let mut window = Window::new(source);
    loop {
        if scan.end >= source.len() {
            return Ok(scan);
        }
        // SEG-4, SEG-7: a capacity that is not a multiple of 8 can leave fewer bytes after
        // the last record than a length word; zeros there end the records as a full
        // segment's end does (they are no record, and no record fits).
        let left = source.len() - scan.end;
        if left < 4 {
            let mut tail = [0; 4];
            let tail = tail.get_mut(..left).unwrap_or_default();
            source.read_at(scan.end, tail)?;
            if tail.iter().all(|b| *b == 0) {
                return Ok(scan);
            }
        }
        match window.decode_at(format, scan.end)? {
            Ok((record, len)) if record.first_seq() == scan.seq_next => {
                let offset = u32::try_from(scan.end).unwrap_or(u32::MAX);
                // REC-9, REC-20 bound a record's seqs to 2^53 − 1: this never overflows.
                let count = usize::try_from(record.count()).unwrap_or(usize::MAX);
                scan.offsets.extend(std::iter::repeat_n(offset, count));
                scan.end += len;
                scan.seq_next = record.seq_end();
            }
            Ok((record, _)) => {
                scan.stop = Stop::WrongSeq {
                    offset: scan.end,
                    found: record.first_seq(),
                };
                return Ok(scan);
            }
            Err(RecordError::End) => {
                scan.stop = Stop::End;
                return Ok(scan);
            }
            Err(error) => {
                scan.stop = Stop::Invalid {
                    offset: scan.end,
                    error,
                };
                return Ok(scan);
            }
        }
    }
}

/// The records of `format` from `from` that this process's writer has written, up to seq
/// `seq_target` (excluded), expecting `seq_next` first: walks the frames' lengths only.
/// Checksums and bodies are not checked here, since these are bytes the writer has just
/// written and every read checks its record again (REC-4). Stops early, with
/// `Stop::Invalid`, at a length that does not frame a record inside `bytes` (the caller
/// then scans instead), and with `Stop::End` at an end marker (REC-1).
pub(crate) fn walk_written(
    bytes: &[u8],
    format: Format,
    from: usize,
    seq_next: u64,
    seq_target: u64,
) -> Scan {
    let mut scan = Scan {
        offsets: Vec::new(),
        end: from,
        seq_next,
        stop: Stop::Full,
    };
    while scan.seq_next < seq_target {
        let Some(rest) = bytes.get(scan.end..).filter(|rest| !rest.is_empty()) else {
            return scan;
        };
        let (len, count) = match crate::record::walk_frame(format, rest) {
            None => {
                scan.stop = Stop::End;
                return scan;
            }
            Some(Ok(frame)) => frame,
            Some(Err(())) if rest.len() < 4 => return scan,
            Some(Err(())) => {
                scan.stop = Stop::Invalid {
                    offset: scan.end,
                    error: RecordError::Length,
                };
                return scan;
            }
        };
        let Some(seq_next) = scan.seq_next.checked_add(count) else {
            // A segment named past the last seq (SEG-3 is checked elsewhere): no record.
            scan.stop = Stop::Invalid {
                offset: scan.end,
                error: RecordError::Length,
            };
            return scan;
        };
        let offset = u32::try_from(scan.end).unwrap_or(u32::MAX);
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        scan.offsets.extend(std::iter::repeat_n(offset, count));
        scan.end += len;
        scan.seq_next = seq_next;
    }
    scan
}

/// The offset just past the last non-zero byte at or after `from` (`from` when none),
/// looking only inside `regions`: the file's data regions (holes read as zeros). Reads
/// `source` backwards in chunks (RD-8).
///
/// # Errors
/// A failed read (as [`Source::read_at`]).
pub(crate) fn nonzero_end<S: Source + ?Sized>(
    source: &S,
    from: usize,
    regions: &[(usize, usize)],
) -> io::Result<usize> {
    let mut buf = Vec::new();
    for &(start, end) in regions.iter().rev() {
        let (start, mut end) = (start.max(from), end.min(source.len()));
        while start < end {
            let at = end.saturating_sub(CHUNK).max(start);
            buf.clear();
            buf.resize(end - at, 0);
            source.read_at(at, &mut buf)?;
            if let Some(last) = buf.iter().rposition(|b| *b != 0) {
                return Ok(at + last + 1);
            }
            end = at;
        }
    }
    Ok(from)
}

/// `true` when a valid record of `format` starts at any 8-aligned offset after `offset`
/// inside `regions` (RCV-7: a torn last segment header with no valid record after it).
/// Reads `source` in chunks (RD-8).
///
/// # Errors
/// A failed read (as [`Source::read_at`]).
pub(crate) fn valid_record_after<S: Source + ?Sized>(
    source: &S,
    format: Format,
    offset: usize,
    regions: &[(usize, usize)],
) -> io::Result<bool> {
    let first = (offset + RECORD_ALIGN)
        .next_multiple_of(RECORD_ALIGN)
        .max(SEGMENT_HEADER_LEN);
    let mut window = Window::new(source);
    for &(start, end) in regions {
        let mut at = start.max(first).next_multiple_of(RECORD_ALIGN);
        let end = nonzero_end(source, at, &[(start, end)])?;
        while at < end {
            if window.decode_at(format, at)?.is_ok() {
                return Ok(true);
            }
            at += RECORD_ALIGN;
        }
    }
    Ok(false)
}

#[cfg(test)]
pub(super) mod tests {
    #![expect(
        clippy::indexing_slicing,
        reason = "tests index their own fixed buffers"
    )]

    use proptest::prelude::*;

    use super::*;
    use crate::event::{Event, EventFields};
    use crate::record::encode_event;

    /// A `plugin/t` event of `seq` whose data is `{"pad":"xxx…"}` with `pad` bytes of
    /// padding (also the restore's tests').
    pub(crate) fn event(seq: u64, pad: usize) -> Event {
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
        segment_as(Format::V1, pads, zeros)
    }

    /// [`segment`] with records of `format`.
    fn segment_as(format: Format, pads: &[usize], zeros: usize) -> Vec<u8> {
        let mut bytes = vec![0; SEGMENT_HEADER_LEN];
        for (seq, pad) in pads.iter().enumerate() {
            let event = event(seq as u64, *pad);
            match format {
                Format::V1 => encode_event(&event, &mut bytes),
                Format::Compact => {
                    crate::record::compact::encode(&event.as_ref(), &mut bytes).unwrap();
                }
            }
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
            compact in any::<bool>(),
        ) {
            let format = if compact { Format::Compact } else { Format::V1 };
            let bytes = segment_as(format, &pads, zeros);
            let full = scan(&bytes[..], format, SEGMENT_HEADER_LEN, 0).unwrap();
            let skip = from_record.min(pads.len());
            let from = full.offsets.get(skip).map_or(full.end, |&o| o as usize);
            let target = (pads.len() as u64).saturating_sub(target_cut).max(skip as u64);
            let walked = walk_written(&bytes, format, from, skip as u64, target);
            let target_at = usize::try_from(target).unwrap();
            let expected: Vec<u32> = full.offsets[skip..target_at].to_vec();
            prop_assert_eq!(&walked.offsets, &expected);
            prop_assert_eq!(walked.seq_next, target);
            let end = full.offsets.get(target_at).map_or(full.end, |&o| o as usize);
            prop_assert_eq!(walked.end, end);
            // Asked for more than was written: it stops at the end marker or the bytes' end.
            let beyond = walk_written(&bytes, format, from, skip as u64, pads.len() as u64 + 3);
            prop_assert_eq!(beyond.seq_next, pads.len() as u64);
            // A compact record's end marker is one zero byte (SEG-5, REC-15).
            let ends = if compact { zeros >= 1 } else { zeros >= 4 };
            prop_assert_eq!(beyond.stop, if ends { Stop::End } else { Stop::Full });
        }
    }

    /// RD-8: the scan reads frames through its window, refilled with one read when a frame
    /// crosses its end: over frames shorter and longer than a chunk it finds every record
    /// the frame lengths lead to, reads the same from a file with pread, and stops at a
    /// frame whose length runs past the bytes (without reading them) and at a file cut
    /// shorter than it was (an error, not an end).
    #[test]
    fn scan_reads_across_chunks_and_reports_a_short_file() {
        let pads = [10, 70_000, 5, 65_000, 300, 200_000, 8, 1];
        let mut bytes = segment(&pads, 4096);
        let walked = walk_written(&bytes, Format::V1, SEGMENT_HEADER_LEN, 0, pads.len() as u64);
        let found = scan(&bytes[..], Format::V1, SEGMENT_HEADER_LEN, 0).unwrap();
        assert_eq!(found.offsets, walked.offsets);
        assert_eq!(found.stop, Stop::End);
        let temp = tempfile::NamedTempFile::new().unwrap();
        let path = temp.path().to_owned();
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        let source = FileBytes {
            file: &file,
            len: bytes.len(),
        };
        let from_file = scan(&source, Format::V1, SEGMENT_HEADER_LEN, 0).unwrap();
        assert_eq!(from_file.offsets, walked.offsets);
        assert_eq!(from_file.end, found.end);
        // A length that claims more than the bytes hold: a stop, not a read past them.
        let end = found.end;
        bytes[end..end + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let torn = scan(&bytes[..], Format::V1, SEGMENT_HEADER_LEN, 0).unwrap();
        assert_eq!(torn.end, end);
        assert!(matches!(torn.stop, Stop::Invalid { offset, .. } if offset == end));
        // Another process cut the file: the read fails; it is not taken for the end.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(u64::from(walked.offsets[5]) + 100)
            .unwrap();
        let error = scan(&source, Format::V1, SEGMENT_HEADER_LEN, 0).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
        assert!(error.to_string().contains("truncated"), "{error}");
        let cut = usize::try_from(std::fs::metadata(&path).unwrap().len()).unwrap();
        let error = nonzero_end(&source, cut, &[(0, bytes.len())]).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
        drop(temp);
    }

    #[test]
    fn walk_stops_at_a_length_that_frames_no_record() {
        let mut bytes = segment(&[5, 5], 64);
        let second = scan(&bytes[..], Format::V1, SEGMENT_HEADER_LEN, 0)
            .unwrap()
            .offsets[1] as usize;
        bytes[second..second + 4].copy_from_slice(&1_000_000u32.to_le_bytes());
        let walked = walk_written(&bytes, Format::V1, SEGMENT_HEADER_LEN, 0, 2);
        assert_eq!(walked.offsets.len(), 1);
        assert_eq!(
            walked.stop,
            Stop::Invalid {
                offset: second,
                error: RecordError::Length
            }
        );
        bytes[second..second + 4].copy_from_slice(&3u32.to_le_bytes());
        let walked = walk_written(&bytes, Format::V1, SEGMENT_HEADER_LEN, 0, 2);
        assert!(
            matches!(walked.stop, Stop::Invalid { .. }),
            "shorter than a body"
        );
    }

    /// A compact chunk run's frame whose `count` claims more members than its body has
    /// bytes (REC-20: each member takes at least one): `walk_written` walks the frames of
    /// a compressed segment's logical bytes, which no record check has read, so it must
    /// not take the claim for that many offsets (a count of 2^40 made it allocate 4 TiB and
    /// abort). Failed before the fix: 1,000,000 offsets were listed for one 24-byte frame.
    #[test]
    fn walk_bounds_a_run_count_by_its_body() {
        for count in [1_000_000_u64, 1 << 40, u64::MAX] {
            let mut body = vec![3, 1, 0];
            let mut v = count;
            while v >= 0x80 {
                body.push(u8::try_from(v & 0x7f).unwrap() | 0x80);
                v >>= 7;
            }
            body.push(u8::try_from(v).unwrap());
            body.resize(16, 0);
            let mut bytes = vec![0; SEGMENT_HEADER_LEN];
            bytes.push(16);
            bytes.extend_from_slice(&[0; 4]);
            bytes.extend_from_slice(&body);
            bytes.resize(bytes.len().next_multiple_of(8) + 64, 0);
            let walked = walk_written(&bytes, Format::Compact, SEGMENT_HEADER_LEN, 0, u64::MAX);
            assert!(walked.offsets.is_empty(), "count {count}");
            assert!(
                matches!(walked.stop, Stop::Invalid { offset, .. } if offset == SEGMENT_HEADER_LEN),
                "count {count}: {:?}",
                walked.stop
            );
        }
    }
}
