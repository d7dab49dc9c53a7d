//! Segment limits (LIM-1 to LIM-6): a small checksummed file that ends a segment, shared
//! with another log by a hard link, before its physical end. A fork links the segment
//! holding its boundary instead of copying it, and the limit says where the child's part
//! of it ends.
#![deny(clippy::indexing_slicing)]

use std::path::Path;

use super::segment::{LogId, SEGMENT_HEADER_LEN, SegmentHeader};
use crate::record::{decode as decode_record, u32_at, u64_at};

/// `"surflim\0"` (LIM-2).
pub const LIMIT_MAGIC: [u8; 8] = *b"surflim\0";
/// The limit file version this build reads and writes (LIM-2).
pub const LIMIT_VERSION: u32 = 1;
/// The length of a limit file (LIM-2).
pub const LIMIT_LEN: usize = 64;

/// Where a limited segment ends for this log (LIM-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The log's identity.
    pub log_id: LogId,
    /// The limited segment's first seq (its name).
    pub first_seq: u64,
    /// The seq after the segment's last record in this log.
    pub seq_next: u64,
    /// The offset of that last record.
    pub last_offset: u32,
    /// The offset just past it: bytes from here on are not part of this log.
    pub end: u32,
}

impl Limit {
    /// The file's 64 bytes (LIM-2).
    pub fn encode(&self) -> [u8; LIMIT_LEN] {
        let mut bytes = [0; LIMIT_LEN];
        let fields: [(usize, &[u8]); 7] = [
            (0, &LIMIT_MAGIC),
            (8, &LIMIT_VERSION.to_le_bytes()),
            (16, &self.log_id),
            (32, &self.first_seq.to_le_bytes()),
            (40, &self.seq_next.to_le_bytes()),
            (48, &self.last_offset.to_le_bytes()),
            (52, &self.end.to_le_bytes()),
        ];
        super::segment::write_checked_block(&mut bytes, &fields);
        bytes
    }

    /// Reads a limit file's bytes and checks them against the segment they limit (LIM-3):
    /// a limit is authoritative, so one that does not check out is refused, never
    /// ignored. Returns the reason for `CORRUPT` otherwise.
    ///
    /// # Errors
    /// Why the limit is refused.
    pub fn decode(
        bytes: &[u8],
        header: &SegmentHeader,
        segment: &[u8],
    ) -> Result<Self, &'static str> {
        let invalid = "an invalid segment limit (LIM-3)";
        if bytes.len() != LIMIT_LEN || bytes.get(..8) != Some(&LIMIT_MAGIC[..]) {
            return Err(invalid);
        }
        let crc = u32_at(bytes, 60).ok_or(invalid)?;
        if crc32c::crc32c(bytes.get(..60).unwrap_or_default()) != crc {
            return Err(invalid);
        }
        if u32_at(bytes, 8) != Some(LIMIT_VERSION)
            || u32_at(bytes, 12) != Some(0)
            || u32_at(bytes, 56) != Some(0)
        {
            return Err("a segment limit of another version (LIM-2)");
        }
        let mut log_id = [0; 16];
        log_id.copy_from_slice(bytes.get(16..32).unwrap_or(&[0; 16]));
        let limit = Self {
            log_id,
            first_seq: u64_at(bytes, 32).ok_or(invalid)?,
            seq_next: u64_at(bytes, 40).ok_or(invalid)?,
            last_offset: u32_at(bytes, 48).ok_or(invalid)?,
            end: u32_at(bytes, 52).ok_or(invalid)?,
        };
        if limit.log_id != header.log_id || limit.first_seq != header.first_seq {
            return Err("a segment limit of another segment (LIM-3)");
        }
        if limit.seq_next <= limit.first_seq
            || (limit.last_offset as usize) < SEGMENT_HEADER_LEN
            || u64::from(limit.end) > header.capacity
        {
            return Err(invalid);
        }
        let last = segment
            .get(limit.last_offset as usize..limit.end as usize)
            .and_then(|rest| decode_record(rest).ok());
        match last {
            Some((event, len))
                if event.seq == limit.seq_next - 1
                    && limit.last_offset as usize + len == limit.end as usize =>
            {
                Ok(limit)
            }
            _ => Err("a segment limit whose last record does not check out (LIM-3)"),
        }
    }

    /// Reads and checks the limit file at `path` (LIM-3).
    ///
    /// # Errors
    /// `CORRUPT` for a limit that does not check out, `IO`.
    pub fn load(path: &Path, header: &SegmentHeader, segment: &[u8]) -> crate::Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| crate::Error::io("read", path, &e))?;
        Self::decode(&bytes, header, segment)
            .map_err(|reason| super::reader::corrupt(path, 0, reason))
    }
}

/// The file name of the limit of the segment starting at `first_seq` (LOG-1, LIM-1).
pub fn limit_name(first_seq: u64) -> String {
    super::segment::seq_file_name(first_seq, ".lim")
}
