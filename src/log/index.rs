//! Offset indexes of segments (IDX-1 to IDX-5): a rebuildable cache. A sealed segment's
//! index is read on the first random access into it, not at open; the last segment's
//! index vouches for a prefix that open takes without reading it, as it takes a sealed
//! segment: each of its records is checked when it is read (REC-4).
#![deny(clippy::indexing_slicing)]

use std::path::Path;

use super::segment::{LogId, SEGMENT_HEADER_LEN};
use crate::record::{Format, decode_as, u32_at, u64_at};
use crate::storage::Storage;

/// The largest index file read: a segment of 2^32 − 1 bytes holds fewer than 2^26
/// records (each at least 64 bytes), 4 bytes each in its index; a longer file is not read
/// (the index is a cache, IDX-2: the segment is scanned instead).
const INDEX_BYTES_MAX: u64 = 512 << 20;

/// `"surfidx\0"`.
pub const INDEX_MAGIC: [u8; 8] = *b"surfidx\0";
/// The index version this build writes (IDX-1); version 1 is still read (IDX-4).
pub const INDEX_VERSION: u32 = 2;
/// The index header's length in version 2.
pub const INDEX_HEADER_LEN: usize = 56;
/// The index header's length in version 1.
const INDEX_V1_HEADER_LEN: usize = 48;

/// What an index says about its segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    /// The offset of each record, in order.
    pub offsets: Vec<u32>,
    /// The offset just past the last record.
    pub end: usize,
    /// CRC-32C of the segment's bytes from the header to `end` (IDX-1); `None` in a
    /// version-1 index.
    pub data_crc: Option<u32>,
}

/// The bytes of the index of a segment (IDX-1).
pub fn encode(log_id: &LogId, first_seq: u64, offsets: &[u32], end: u32, data_crc: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(INDEX_HEADER_LEN + 4 * offsets.len());
    out.extend_from_slice(&INDEX_MAGIC);
    out.extend_from_slice(&INDEX_VERSION.to_le_bytes());
    out.extend_from_slice(
        &u32::try_from(offsets.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    out.extend_from_slice(log_id);
    out.extend_from_slice(&first_seq.to_le_bytes());
    out.extend_from_slice(&end.to_le_bytes());
    out.extend_from_slice(&data_crc.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    let crc_at = out.len();
    out.extend_from_slice(&0u32.to_le_bytes());
    for offset in offsets {
        out.extend_from_slice(&offset.to_le_bytes());
    }
    let crc = crc32c::crc32c_append(
        crc32c::crc32c(out.get(..crc_at).unwrap_or_default()),
        out.get(INDEX_HEADER_LEN..).unwrap_or_default(),
    );
    if let Some(slot) = out.get_mut(crc_at..crc_at + 4) {
        slot.copy_from_slice(&crc.to_le_bytes());
    }
    out
}

/// An index's header fields, once its magic, version, identity and first seq check out.
struct Header {
    /// 56 in version 2, 48 in version 1 (IDX-4).
    len: usize,
    /// Where `crc` is.
    crc_at: usize,
    count: usize,
    end: usize,
    /// `None` in version 1.
    data_crc: Option<u32>,
}

/// The header at the start of `bytes` (at least its length in the version it names), when
/// it is an index of this segment (`log_id`, `first_seq`): IDX-1, IDX-4.
fn header(bytes: &[u8], log_id: &LogId, first_seq: u64) -> Option<Header> {
    if bytes.get(..8)? != INDEX_MAGIC {
        return None;
    }
    // IDX-4: version 1 has no data checksum and a shorter header.
    let (len, crc_at, data_crc) = match u32_at(bytes, 8)? {
        1 => (INDEX_V1_HEADER_LEN, 44, None),
        INDEX_VERSION if u32_at(bytes, 48)? == 0 => {
            (INDEX_HEADER_LEN, 52, Some(u32_at(bytes, 44)?))
        }
        _ => return None,
    };
    if bytes.get(16..32)? != log_id || u64_at(bytes, 32)? != first_seq {
        return None;
    }
    Some(Header {
        len,
        crc_at,
        count: usize::try_from(u32_at(bytes, 12)?).ok()?,
        end: usize::try_from(u32_at(bytes, 40)?).ok()?,
        data_crc,
    })
}

/// How many records the index whose header starts `bytes` lists, when that header is an
/// index of this segment (`log_id`, `first_seq`; IDX-1, IDX-4); its offsets and checksum
/// are not read.
pub(crate) fn listed_count(bytes: &[u8], log_id: &LogId, first_seq: u64) -> Option<usize> {
    header(bytes, log_id, first_seq).map(|h| h.count)
}

/// The index held in `bytes`, when its header, checksum, identity and first seq check
/// out (IDX-2); `None` otherwise (the caller rebuilds by scanning).
pub fn decode(bytes: &[u8], log_id: &LogId, first_seq: u64) -> Option<Index> {
    let header = header(bytes, log_id, first_seq)?;
    let body = bytes.get(header.len..)?;
    if body.len() != header.count.checked_mul(4)? {
        return None;
    }
    let crc = crc32c::crc32c_append(crc32c::crc32c(bytes.get(..header.crc_at)?), body);
    if crc != u32_at(bytes, header.crc_at)? {
        return None;
    }
    // Whole 4-byte arrays, so that the conversion is a plain copy on a little-endian host.
    let (words, _) = body.as_chunks::<4>();
    let offsets = words.iter().map(|w| u32::from_le_bytes(*w)).collect();
    Some(Index {
        offsets,
        end: header.end,
        data_crc: header.data_crc,
    })
}

/// The index file of a segment when it checks out (IDX-2) and its last offset holds the
/// record it promises (a record of the segment's `format` whose last event is the last it
/// lists), ending at its `end`.
pub(crate) fn load(
    storage: &dyn Storage,
    path: &Path,
    segment: &[u8],
    log_id: &LogId,
    first_seq: u64,
    format: Format,
) -> Option<Index> {
    let bytes = crate::storage::read_file_at_most(storage, path, INDEX_BYTES_MAX).ok()??;
    let index = decode(&bytes, log_id, first_seq)?;
    let last_ok = match index.offsets.last() {
        None => index.end == SEGMENT_HEADER_LEN,
        Some(&at) => {
            let at = at as usize;
            let record = segment
                .get(at..)
                .and_then(|rest| decode_as(format, rest).ok());
            record.is_some_and(|(record, len)| {
                record.seq_end() == first_seq + index.offsets.len() as u64 && at + len == index.end
            })
        }
    };
    last_ok.then_some(index)
}

/// What the last segment's index vouches for at open (IDX-5), read without its offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Vouched {
    /// How many records it lists: the prefix.
    pub count: usize,
    /// Just past the last of them.
    pub end: usize,
    /// CRC-32C of the segment's bytes from its header to `end` (IDX-1).
    pub data_crc: u32,
    /// The offset of the last of them (checked: its record is there); unused when
    /// `count` is 0.
    pub last_offset: u32,
}

/// IDX-5: the prefix of the last segment its index vouches for, from the index's header,
/// its length and its last offset alone: a version-2 header (magic, version, zero
/// `reserved`) for this segment (`log_id`, `first_seq`), a file of exactly the header and
/// `count` offsets, and the record at the last offset valid (REC-4), with seq
/// `first_seq + count − 1`, ending at `end`. An O(1) check, like a limit's (LIM-3): the
/// records before the last are not read here but when they are read (REC-4), and the
/// offsets and the index's `crc` when the offsets are first needed (`load`, IDX-2).
/// Open then scans only what follows (log-format.md §7).
///
/// # Errors
/// `IO` (`UNSAFE_PATH` for a link or a file that is not regular) when the index cannot be
/// opened, other than being absent, or read: never taken for no index ([`open_mark`]).
pub(crate) fn vouched_prefix(
    storage: &dyn Storage,
    path: &Path,
    segment: &[u8],
    log_id: &LogId,
    first_seq: u64,
    format: Format,
) -> crate::Result<Option<Vouched>> {
    let Some(file) = open_mark(storage, path)? else {
        return Ok(None);
    };
    let mut bytes = [0; INDEX_HEADER_LEN];
    if !read_mark(&file, &mut bytes, 0, path)? {
        return Ok(None);
    }
    // Version 2 only: a version-1 index has no `data_crc` for the writer to carry on.
    let Some(Header {
        len,
        count,
        end,
        data_crc: Some(data_crc),
        ..
    }) = header(&bytes, log_id, first_seq)
    else {
        return Ok(None);
    };
    let file_len = file
        .metadata()
        .map_err(|e| crate::Error::io("stat", path, &e))?
        .len();
    let expected = count
        .checked_mul(4)
        .and_then(|offsets| len.checked_add(offsets))
        .and_then(|len| u64::try_from(len).ok());
    if expected != Some(file_len) {
        return Ok(None);
    }
    let mut vouched = Vouched {
        count,
        end,
        data_crc,
        last_offset: 0,
    };
    let Some(last) = count.checked_sub(1) else {
        return Ok((end == SEGMENT_HEADER_LEN).then_some(vouched));
    };
    let mut offset = [0; 4];
    let Ok(at) = u64::try_from(INDEX_HEADER_LEN + 4 * last) else {
        return Ok(None);
    };
    if !read_mark(&file, &mut offset, at, path)? {
        return Ok(None);
    }
    vouched.last_offset = u32::from_le_bytes(offset);
    let at = vouched.last_offset as usize;
    let Some((record, len)) = segment
        .get(at..)
        .and_then(|rest| decode_as(format, rest).ok())
    else {
        return Ok(None);
    };
    // The last listed event is the record's last (a compact run's members share its offset).
    Ok((record.seq_end() == first_seq + count as u64 && at + len == end).then_some(vouched))
}

/// The index at `path` opened as a durable mark (RCV-13): `None` when there is none. An
/// index that cannot be opened for another reason is not one that is missing: that is
/// `IO` (or `UNSAFE_PATH` for a link or a file that is not regular, STORE-1), never taken
/// for the absence of the mark, which would let damage under it pass for the log's end.
fn open_mark(storage: &dyn Storage, path: &Path) -> crate::Result<Option<std::fs::File>> {
    match storage.open_read(path) {
        Ok(file) => Ok(Some(file)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(crate::Error::io("open", path, &e)),
    }
}

/// Reads `buf.len()` bytes of the index `file` at `at`: `false` when the file is shorter
/// (a torn cache, IDX-2: no mark); a failed read is `IO` ([`open_mark`]).
fn read_mark(file: &std::fs::File, buf: &mut [u8], at: u64, path: &Path) -> crate::Result<bool> {
    use std::os::unix::fs::FileExt;
    match file.read_exact_at(buf, at) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(crate::Error::io("read", path, &e)),
    }
}

/// The last segment's durable marks from its index (log-format.md §7): the prefix the
/// index vouches for (IDX-5), and the offset below which every record was durable: the
/// vouched prefix's end, or, when the vouched check fails, the end of an index that checks
/// out whole (RCV-13, [`durable_listing`]), or the first record's offset when there is
/// neither. Recovery and readers both refuse a scan that stops before it.
///
/// # Errors
/// As [`vouched_prefix`]: an index that cannot be read is not a missing mark (RCV-13).
pub(crate) fn durable_marks(
    storage: &dyn Storage,
    path: &Path,
    segment: &[u8],
    log_id: &LogId,
    first_seq: u64,
    format: Format,
) -> crate::Result<(Option<Vouched>, usize)> {
    if let Some(vouched) = vouched_prefix(storage, path, segment, log_id, first_seq, format)? {
        return Ok((Some(vouched), vouched.end));
    }
    let listed = durable_listing(storage, path, log_id, first_seq)?;
    Ok((None, listed.map_or(SEGMENT_HEADER_LEN, |(_, end)| end)))
}

/// A durable mark (log-format.md §7, IDX-5) when the vouched check at open fails: the
/// whole version-2 index of the last segment, read with its `crc` (IDX-2). An index that
/// checks out was written only after the sync that made every record it lists durable
/// (IDX-5), so those records were durable even when the last of them no longer checks:
/// recovery then refuses damage below its `end` (`CORRUPT`) instead of taking it for a
/// torn tail. Returns how many records it lists and its `end`. Read when the vouched check
/// failed (at open, and at a follower's refresh that stops, RD-6: every idle one); a
/// missing file costs one failed open, and an index that cannot be a durable mark (version
/// 1, or another segment's) the read of its header, never of its offsets.
///
/// # Errors
/// As [`vouched_prefix`].
pub(super) fn durable_listing(
    storage: &dyn Storage,
    path: &Path,
    log_id: &LogId,
    first_seq: u64,
) -> crate::Result<Option<(usize, usize)>> {
    use std::io::Read;
    let Some(file) = open_mark(storage, path)? else {
        return Ok(None);
    };
    let mut head = [0; INDEX_HEADER_LEN];
    if !read_mark(&file, &mut head, 0, path)? {
        return Ok(None);
    }
    if header(&head, log_id, first_seq)
        .and_then(|h| h.data_crc)
        .is_none()
    {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    (&file)
        .take(INDEX_BYTES_MAX.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| crate::Error::io("read", path, &e))?;
    if bytes.len() as u64 > INDEX_BYTES_MAX {
        return Ok(None);
    }
    Ok(decode(&bytes, log_id, first_seq)
        .filter(|index| index.data_crc.is_some())
        .map(|index| (index.offsets.len(), index.end)))
}

/// Removes the index of the segment starting at `first_seq` from the log directory `dir`,
/// durably (the directory synced when one was removed), before a shorter file takes the
/// segment's name (compaction's rewrite, CMP-3; salvage's cut, SLV-2): no crash may leave
/// it beside that file, where an index that checks out whole would be a durable mark past
/// the file's end (RCV-13).
///
/// # Errors
/// `IO` when the index cannot be removed (other than being absent) or the directory synced.
pub(crate) fn remove_durably(
    storage: &dyn Storage,
    dir: &Path,
    first_seq: u64,
) -> crate::Result<()> {
    let index = dir.join(super::segment::index_name(first_seq));
    match storage.remove_file(&index) {
        Ok(()) => storage
            .sync_dir(dir)
            .map_err(|e| crate::Error::io("fsync", dir, &e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(crate::Error::io("remove", &index, &e)),
    }
}
