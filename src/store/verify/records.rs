//! A segment's records, one in memory at a time: every frame and checksum (REC-1, REC-2,
//! REC-4), every body (RCV-8), seq order (RCV-5), and the CRCs the index (IDX-1) and the
//! checkpoint (CKP-3) are checked against.

use std::fs::File;
use std::path::Path;

use super::{Found, read_at};
use crate::error::Result;
use crate::log::segment::SEGMENT_HEADER_LEN;
use crate::record::{BODY_MIN_LEN, Format, RecordError, announced_len, decode_as, u32_at};

/// Bytes read first of each record: its frame header (REC-1), which holds a compact
/// record's `len` too (at most 5 bytes, REC-15; a compact record is at least 16 bytes).
const FRAME_HEADER_LEN: usize = crate::record::FRAME_HEADER_LEN;

/// A scan of one segment's records.
pub(super) struct Scan<'a> {
    pub(super) file: &'a File,
    pub(super) path: &'a Path,
    pub(super) first: u64,
    /// The offset this log's records end before.
    pub(super) stop: u64,
    /// How many records this log has in the segment, when known (a limit, LIM-1).
    pub(super) count: Option<u64>,
    /// Where the index says its records end (its `data_crc` covers 64..there).
    pub(super) index_end: Option<u64>,
    pub(super) target: Option<u64>,
    /// The segment's records (SEG-9).
    pub(super) format: Format,
}

/// What the scan of one segment's records found.
#[derive(Debug, Default)]
pub(super) struct Records {
    pub(super) offsets: Vec<u32>,
    /// Just past the last record scanned.
    pub(super) end: u64,
    /// Whether the scan reached the end of the segment's records (an end marker, the
    /// limit, the file's end or the count the chain gives) without losing the frames.
    pub(super) complete: bool,
    /// Whether any record failed.
    pub(super) damaged: bool,
    /// CRC-32C of bytes 64..`index.end` when the scan passed a record boundary there.
    pub(super) crc_at_index_end: Option<u32>,
}

impl Scan<'_> {
    /// REC-1 to REC-8 and seq order over the segment's records, one record in memory at a
    /// time. A bad record whose length frames it is passed over so that the rest of the
    /// segment is checked; a second bad record in a row, or a length that frames nothing,
    /// ends the scan of the segment. `target_crc` is set to the CRC-32C of the text of
    /// the record with seq `target`, when the segment holds it.
    pub(super) fn run(&self, found: &mut Found, target_crc: &mut Option<u32>) -> Result<Records> {
        let mut records = Records {
            end: SEGMENT_HEADER_LEN as u64,
            ..Records::default()
        };
        let (mut pos, mut seq, mut crc) = (SEGMENT_HEADER_LEN as u64, self.first, 0_u32);
        let mut buf = Vec::new();
        let mut bad_in_a_row = 0;
        loop {
            if self.index_end == Some(pos) {
                records.crc_at_index_end = Some(crc);
            }
            let Some(frame) = self.read_frame(found, &mut records, pos, &mut buf)? else {
                break;
            };
            let count = self.check_record(found, &mut records, &buf, pos, seq, target_crc);
            if let Some(count) = count {
                bad_in_a_row = 0;
                // A compact run's members share its offset.
                let offset = u32::try_from(pos).unwrap_or(u32::MAX);
                let more = usize::try_from(count.saturating_sub(1)).unwrap_or(usize::MAX);
                records.offsets.extend(std::iter::repeat_n(offset, more));
                seq += count - 1;
            } else {
                bad_in_a_row += 1;
                if bad_in_a_row > 1 {
                    found.error(
                        self.path,
                        Some(pos),
                        "REC-4",
                        "two bad records in a row: the rest of the segment is not checked",
                    );
                    break;
                }
            }
            crc = crc32c::crc32c_append(crc, &buf);
            records.offsets.push(u32::try_from(pos).unwrap_or(u32::MAX));
            pos += frame;
            seq += 1;
            records.end = pos;
        }
        Ok(records)
    }

    /// REC-1: reads the frame at `pos` into `buf` and returns its length; `None` where the
    /// records end: at the count or `stop`, or an end marker (`records.complete`), or at a
    /// length that frames no record before `stop` (reported, `records.damaged`).
    fn read_frame(
        &self,
        found: &mut Found,
        records: &mut Records,
        pos: u64,
        buf: &mut Vec<u8>,
    ) -> Result<Option<u64>> {
        if self
            .count
            .is_some_and(|c| records.offsets.len() as u64 >= c)
            || pos + FRAME_HEADER_LEN as u64 > self.stop
        {
            records.complete = true;
            return Ok(None);
        }
        let mut frame_header = [0; FRAME_HEADER_LEN];
        read_at(self.file, self.path, &mut frame_header, pos)?;
        // REC-1, SEG-5: a zero length, or a zero first byte of a compact record, ends them.
        let end = match self.format {
            Format::V1 => frame_header.get(..4) == Some(&[0; 4]),
            Format::Compact => frame_header.first() == Some(&0),
        };
        if end {
            records.complete = true;
            return Ok(None);
        }
        // REC-1 (a body of at least `BODY_MIN_LEN`), REC-15 (a `len` of at most 5 bytes).
        let frame = announced_len(self.format, &frame_header)
            .filter(|_| {
                self.format == Format::Compact
                    || u32_at(&frame_header, 0).is_some_and(|len| len as usize >= BODY_MIN_LEN)
            })
            .map(|frame| frame as u64)
            .filter(|frame| pos + frame <= self.stop);
        let Some(frame) = frame else {
            found.error(
                self.path,
                Some(pos),
                "REC-1",
                "a length that frames no record before the end of the segment's records; the \
                 rest of the segment is not checked",
            );
            records.damaged = true;
            return Ok(None);
        };
        buf.resize(usize::try_from(frame).unwrap_or(usize::MAX), 0);
        read_at(self.file, self.path, buf, pos)?;
        Ok(Some(frame))
    }

    /// REC-2, RCV-8, RCV-5: the record in `frame`, at `pos`, where seq `seq` is next.
    /// Returns how many events it holds when it decodes (a record with another seq
    /// decodes, but is reported).
    fn check_record(
        &self,
        found: &mut Found,
        records: &mut Records,
        frame: &[u8],
        pos: u64,
        seq: u64,
        target_crc: &mut Option<u32>,
    ) -> Option<u64> {
        match decode_as(self.format, frame) {
            Ok((record, _)) => {
                if record.first_seq() == seq {
                    if let Some(event) = self.target.and_then(|target| record.event(target)) {
                        *target_crc = Some(crc32c::crc32c(event.text().as_bytes()));
                    }
                } else {
                    found.error(
                        self.path,
                        Some(pos),
                        "RCV-5",
                        format!(
                            "a record with seq {} where seq {seq} is next",
                            record.first_seq()
                        ),
                    );
                    records.damaged = true;
                }
                Some(record.count())
            }
            Err(error) => {
                let (rule, message) = match error {
                    RecordError::Checksum => ("REC-2", "record checksum mismatch".to_owned()),
                    RecordError::Body(reason) => ("RCV-8", format!("record body: {reason}")),
                    RecordError::End | RecordError::Truncated | RecordError::Length => {
                        ("REC-1", "record length".to_owned())
                    }
                };
                found.error(self.path, Some(pos), rule, format!("seq {seq}: {message}"));
                records.damaged = true;
                None
            }
        }
    }
}
