//! Offset indexes of sealed segments (IDX-1, IDX-2): a rebuildable cache.
#![deny(clippy::indexing_slicing)]

use std::path::Path;

use super::segment::LogId;
use crate::record::{decode as decode_record, u32_at, u64_at};

/// `"surfidx\0"`.
pub const INDEX_MAGIC: [u8; 8] = *b"surfidx\0";
/// The index header's length.
pub const INDEX_HEADER_LEN: usize = 48;

/// The bytes of the index of a segment (IDX-1).
pub fn encode(log_id: &LogId, first_seq: u64, offsets: &[u32], end: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(INDEX_HEADER_LEN + 4 * offsets.len());
    out.extend_from_slice(&INDEX_MAGIC);
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(
        &u32::try_from(offsets.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    out.extend_from_slice(log_id);
    out.extend_from_slice(&first_seq.to_le_bytes());
    out.extend_from_slice(&end.to_le_bytes());
    let mut body = Vec::with_capacity(4 * offsets.len());
    for offset in offsets {
        body.extend_from_slice(&offset.to_le_bytes());
    }
    let crc = crc32c::crc32c_append(crc32c::crc32c(&out), &body);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// The offsets and end an index holds, when its header, checksum, identity and first
/// seq check out (IDX-2); `None` otherwise (the caller rebuilds by scanning).
pub fn decode(bytes: &[u8], log_id: &LogId, first_seq: u64) -> Option<(Vec<u32>, u32)> {
    if bytes.get(..8)? != INDEX_MAGIC || u32_at(bytes, 8)? != 1 {
        return None;
    }
    let count = usize::try_from(u32_at(bytes, 12)?).ok()?;
    if bytes.get(16..32)? != log_id || u64_at(bytes, 32)? != first_seq {
        return None;
    }
    let end = u32_at(bytes, 40)?;
    let body = bytes.get(INDEX_HEADER_LEN..)?;
    if body.len() != count.checked_mul(4)? {
        return None;
    }
    let crc = crc32c::crc32c_append(crc32c::crc32c(bytes.get(..44)?), body);
    if crc != u32_at(bytes, 44)? {
        return None;
    }
    Some((
        body.chunks_exact(4).filter_map(|c| u32_at(c, 0)).collect(),
        end,
    ))
}

/// The offsets and end of a sealed segment from its index file, when the index checks out
/// (IDX-2) and its last offset holds the record it promises, ending at `end`.
pub fn load(
    path: &Path,
    segment: &[u8],
    log_id: &LogId,
    first_seq: u64,
) -> Option<(Vec<u32>, usize)> {
    let bytes = std::fs::read(path).ok()?;
    let (offsets, end) = decode(&bytes, log_id, first_seq)?;
    let end = usize::try_from(end).ok()?;
    let last_ok = offsets.last().is_none_or(|&at| {
        let at = at as usize;
        let record = segment.get(at..).and_then(|rest| decode_record(rest).ok());
        record.is_some_and(|(event, len)| {
            event.seq == first_seq + offsets.len() as u64 - 1 && at + len == end
        })
    });
    last_ok.then_some((offsets, end))
}
