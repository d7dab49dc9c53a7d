//! The block format of compressed files (log-format.md §14, CZ-3): a header kept as it
//! is, a checksummed block table, and Zstandard frames of the logical bytes after the
//! header; the compression of logical bytes (CZ-5) and their decompression, every block
//! checked, into an unlinked temporary file that readers map (CZ-4). Sealed segments use
//! it (their logical header is their own with `COMPRESSED` clear), and so do message
//! packs (message-pack.md MSP-8, their logical header is their own as version 1).
#![deny(clippy::indexing_slicing)]

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use memmap2::Mmap;

use super::super::reader::{corrupt, read_error};
use super::super::scan::{FileBytes, Source};
use super::super::segment::{COMPRESSED, HeaderError, SEGMENT_HEADER_LEN, SegmentHeader};
use super::is_compressed;
use crate::error::{Error, Result};
use crate::record::u32_at;

/// CZ-3: the smallest `block_bytes`.
const MIN_BLOCK_BYTES: u32 = 4096;
/// CZ-3: the largest `block_bytes`, so that a block's buffer stays bounded.
const MAX_BLOCK_BYTES: u32 = 1 << 26;
/// The logical bytes per block compaction writes (CZ-5): 1 MiB, large enough for
/// Zstandard to find the repetition between a session's turns, small enough that a
/// block's buffer is a small part of a process's memory.
pub(crate) const BLOCK_BYTES: u32 = 1 << 20;

/// What a compressed file stands for (CZ-1): logical bytes that start with `head` (the
/// file's own first `head.len()` bytes, as the file's kind says to change them), followed
/// by the blocks' bytes, `len` bytes in all. The block table starts right after the
/// file's header, at `head.len()`.
pub(crate) struct Logical {
    /// The logical bytes' header: as long as the file's.
    pub head: Vec<u8>,
    /// The logical bytes' length.
    pub len: u64,
    /// Whether the bytes after the head are record frames to their end (a segment, CZ-1):
    /// their lengths are followed as the blocks come, so that bytes that cannot be records
    /// are refused at the first block that holds them, not once the whole claimed length
    /// has been decompressed and written. `None` for other bytes; else the records' format
    /// (SEG-9).
    pub records: Option<crate::record::Format>,
}

/// CZ-1: the logical segment a compressed segment with `header` stands for: its header
/// with `COMPRESSED` clear, `capacity` bytes long.
fn segment_logical(header: &SegmentHeader) -> Logical {
    let head = SegmentHeader {
        incompat_features: header.incompat_features & !COMPRESSED,
        ..*header
    };
    Logical {
        head: head.encode().to_vec(),
        len: header.capacity,
        records: Some(header.format()),
    }
}

/// A compressed file's block table (CZ-3), checked against its header and its length.
struct Table {
    block_bytes: u32,
    /// Per block: its compressed length, the CRC-32C of its compressed bytes and that
    /// of its logical bytes.
    blocks: Vec<Entry>,
    /// Where the first block starts.
    data_at: u64,
    /// The table's bytes as stored, from `block_bytes` to the padding: what a kept copy is
    /// known by (CZ-4), with the checksums of every block's bytes.
    bytes: Vec<u8>,
}

impl Table {
    /// The logical bytes of block `i` of `logical`: their offset and length.
    fn logical(&self, i: usize, logical: &Logical) -> (u64, usize) {
        let at = logical.head.len() as u64 + i as u64 * u64::from(self.block_bytes);
        let len = logical
            .len
            .saturating_sub(at)
            .min(u64::from(self.block_bytes));
        (at, usize::try_from(len).unwrap_or(0))
    }
}

/// A block's entry in the table (CZ-3).
#[derive(Clone, Copy)]
struct Entry {
    compressed_len: u32,
    frame_crc: u32,
    block_crc: u32,
}

/// The bytes of one entry of the table (CZ-3).
const ENTRY_LEN: usize = 12;

/// Where the first block starts in a file whose header is `head_len` bytes and whose table
/// has `count` blocks: after the header, the table and its padding (CZ-3).
fn data_at(head_len: usize, count: usize) -> u64 {
    (head_len + 8 + ENTRY_LEN * count + 4).next_multiple_of(8) as u64
}

/// The most bytes a block of `len` logical bytes compresses to: larger is damage (CZ-3),
/// and the bound keeps the buffer a damaged length would ask for bounded.
fn compressed_bound(len: usize) -> usize {
    zstd::zstd_safe::compress_bound(len)
}

/// CZ-3: reads and checks the block table of the compressed file `file` that stands for
/// `logical`.
///
/// # Errors
/// `CORRUPT` naming `path` at the table's offset for a table that does not check out,
/// `IO`.
fn read_table<S: Source + ?Sized>(file: &S, path: &Path, logical: &Logical) -> Result<Table> {
    let file_len = file.len() as u64;
    let table_at = logical.head.len();
    let bad = |reason: &str| corrupt(path, table_at, reason);
    let data_len = logical
        .len
        .checked_sub(table_at as u64)
        .filter(|&len| len > 0)
        .ok_or_else(|| bad("the logical bytes must go past the header (CZ-1, CZ-3)"))?;
    check_len(logical, path)?;
    let mut head = [0; 8];
    read_exact(file, path, &mut head, table_at as u64)?;
    let block_bytes = u32_at(&head, 0).unwrap_or(0);
    let count = u32_at(&head, 4).unwrap_or(0);
    if !(MIN_BLOCK_BYTES..=MAX_BLOCK_BYTES).contains(&block_bytes) {
        return Err(bad(&format!(
            "block_bytes {block_bytes} out of range (CZ-3)"
        )));
    }
    if u64::from(count) != data_len.div_ceil(u64::from(block_bytes)) {
        return Err(bad(&format!(
            "block_count {count} does not cover the {data_len} logical bytes after the header \
             in blocks of {block_bytes} (CZ-3)"
        )));
    }
    let count = count as usize;
    let data_at = data_at(table_at, count);
    if data_at > file_len {
        return Err(bad("the file ends inside its block table (CZ-3)"));
    }
    let table_len = usize::try_from(data_at).unwrap_or(usize::MAX) - table_at;
    let mut table = vec![0; table_len];
    read_exact(file, path, &mut table, table_at as u64)?;
    let crc_at = 8 + ENTRY_LEN * count;
    let covered = table.get(..crc_at).unwrap_or_default();
    if u32_at(&table, crc_at) != Some(crc32c::crc32c(covered)) {
        return Err(bad("table_crc does not match (CZ-3)"));
    }
    if table
        .get(crc_at + 4..)
        .is_some_and(|pad| pad.iter().any(|&b| b != 0))
    {
        return Err(bad("non-zero padding after the block table (CZ-3)"));
    }
    let mut blocks = Vec::with_capacity(count);
    let mut end = data_at;
    let mut table = Table {
        block_bytes,
        blocks: Vec::new(),
        data_at,
        bytes: Vec::new(),
    };
    for i in 0..count {
        let entry = 8 + ENTRY_LEN * i;
        let len = u32_at(covered, entry).unwrap_or(0);
        let block = Entry {
            compressed_len: len,
            frame_crc: u32_at(covered, entry + 4).unwrap_or(0),
            block_crc: u32_at(covered, entry + 8).unwrap_or(0),
        };
        let (_, logical_len) = table.logical(i, logical);
        if len == 0 || len as usize > compressed_bound(logical_len) {
            return Err(bad(&format!(
                "block {i}: compressed_len {len} is not a length {logical_len} bytes compress \
                 to (CZ-3)"
            )));
        }
        blocks.push(block);
        end += u64::from(len);
    }
    if end != file_len {
        return Err(bad(&format!(
            "the blocks end at {end}, the file at {file_len} (CZ-3)"
        )));
    }
    table.blocks = blocks;
    table.bytes = covered.to_vec();
    Ok(table)
}

/// The most logical bytes a compressed file may stand for: a segment's largest capacity
/// (SEG-7), and the bound on what a reader writes into its temporary copy of one.
const MAX_LOGICAL_LEN: u64 = u32::MAX as u64;

/// CZ-3: `logical` is at most [`MAX_LOGICAL_LEN`] bytes; `CORRUPT` at the table otherwise.
fn check_len(logical: &Logical, path: &Path) -> Result<()> {
    if logical.len > MAX_LOGICAL_LEN {
        return Err(corrupt(
            path,
            logical.head.len(),
            &format!(
                "stands for {} logical bytes, more than 2^32 - 1 (CZ-3, SEG-7)",
                logical.len
            ),
        ));
    }
    Ok(())
}

/// `buf.len()` bytes of `file` at `offset` (with `pread` for a file); a file that ends
/// first is `CORRUPT` at `offset`.
fn read_exact<S: Source + ?Sized>(
    file: &S,
    path: &Path,
    buf: &mut [u8],
    offset: u64,
) -> Result<()> {
    let at = usize::try_from(offset).unwrap_or(usize::MAX);
    if at.saturating_add(buf.len()) > file.len() {
        return Err(corrupt(path, at, "the file ends early (CZ-3)"));
    }
    file.read_at(at, buf).map_err(|e| read_error(path, at, &e))
}

/// CZ-3, CZ-4: the logical bytes `logical` of the compressed file `file` (at `path`, its
/// header checked by its kind's rules), every block decompressed and checked, handed to
/// `sink` in order with their logical offset: first the logical header (CZ-1), then each
/// block.
///
/// # Errors
/// `CORRUPT` naming `path` and the offset of the table or of the block that does not check
/// out; `IO`; or what `sink` returns.
fn unpack<S: Source + ?Sized>(
    file: &S,
    path: &Path,
    logical: &Logical,
    sink: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
) -> Result<()> {
    let table = read_table(file, path, logical)?;
    unpack_table(file, path, logical, &table, sink)
}

/// [`unpack`] with the file's block table `table`, read and checked already.
///
/// # Errors
/// As [`unpack`].
fn unpack_table<S: Source + ?Sized>(
    file: &S,
    path: &Path,
    logical: &Logical,
    table: &Table,
    sink: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut frames = logical
        .records
        .map(|format| Frames::new(format, logical.head.len() as u64, logical.len));
    sink(0, &logical.head)?;
    let mut decompressor =
        zstd::bulk::Decompressor::new().map_err(|e| Error::io("zstd", path, &e))?;
    let mut bytes = Vec::new();
    each_frame(file, path, table, |i, at, block, compressed| {
        let offset = usize::try_from(at).unwrap_or(usize::MAX);
        let bad = |reason: &str| corrupt(path, offset, &format!("block {i}: {reason} (CZ-3)"));
        let (block_at, block_len) = table.logical(i, logical);
        bytes.clear();
        bytes.reserve_exact(block_len);
        let n = decompressor
            .decompress_to_buffer(compressed, &mut bytes)
            .map_err(|e| bad(&format!("does not decompress: {e}")))?;
        if n != block_len || bytes.len() != block_len {
            return Err(bad(&format!("decompresses to {n} bytes, not {block_len}")));
        }
        if crc32c::crc32c(&bytes) != block.block_crc {
            return Err(bad("its logical bytes do not match block_crc"));
        }
        if let Some(frames) = &mut frames {
            frames.feed(block_at, &bytes).map_err(|(at, reason)| {
                corrupt(path, usize::try_from(at).unwrap_or(usize::MAX), reason)
            })?;
        }
        sink(block_at, &bytes)
    })?;
    if let Some(frames) = frames
        && frames.next != logical.len
    {
        return Err(corrupt(
            path,
            usize::try_from(frames.next).unwrap_or(usize::MAX),
            "the records do not end where the logical segment does (CZ-1)",
        ));
    }
    Ok(())
}

/// The record frames of a logical segment followed by their lengths alone (REC-1) as its
/// blocks come in order (CZ-1: its bytes after the header are records, to its end). Each
/// record is checked when it is read (REC-4); this only refuses, early, bytes that cannot
/// be records at all: a zero length (the zeros a claimed length would be padded with) or a
/// frame past the end.
struct Frames {
    /// The records' format (SEG-9): how a frame's length is written.
    format: crate::record::Format,
    /// Where the next frame starts.
    next: u64,
    /// The logical segment's length.
    end: u64,
    /// The bytes of the previous block from `next` on, when its length field straddles
    /// the boundary (at most 4: a compact record's `len` takes up to 5 bytes, REC-15).
    carry: Vec<u8>,
}

impl Frames {
    fn new(format: crate::record::Format, first: u64, end: u64) -> Self {
        Self {
            format,
            next: first,
            end,
            carry: Vec::new(),
        }
    }

    /// Follows the frames whose length fields lie in `bytes`, the logical bytes at `at`.
    ///
    /// # Errors
    /// The offset and the reason of a length that cannot be a record's.
    fn feed(&mut self, at: u64, bytes: &[u8]) -> std::result::Result<(), (u64, &'static str)> {
        let end = at + bytes.len() as u64;
        let byte = |carry: &[u8], pos: u64| -> u8 {
            if pos >= at {
                usize::try_from(pos - at)
                    .ok()
                    .and_then(|i| bytes.get(i))
                    .copied()
                    .unwrap_or(0)
            } else {
                let from = at - carry.len() as u64;
                usize::try_from(pos - from)
                    .ok()
                    .and_then(|i| carry.get(i))
                    .copied()
                    .unwrap_or(0)
            }
        };
        let field_max = match self.format {
            crate::record::Format::V1 => 4,
            crate::record::Format::Compact => crate::record::compact::LEN_BYTES_MAX as u64,
        };
        while self.next < end {
            // The length field: whole, or cut by the end of the bytes so far (then it is
            // followed once the next block comes).
            let field: Vec<u8> = (self.next..(self.next + field_max).min(end))
                .map(|pos| byte(&self.carry, pos))
                .collect();
            let zero = match self.format {
                crate::record::Format::V1 => field.len() == 4 && field.iter().all(|b| *b == 0),
                crate::record::Format::Compact => field.first() == Some(&0),
            };
            if zero {
                return Err((
                    self.next,
                    "a zero frame length inside the records: a compressed segment's logical \
                     bytes are records to its end (CZ-1)",
                ));
            }
            let Some(frame) = crate::record::announced_len(self.format, &field) else {
                if (field.len() as u64) < field_max {
                    break;
                }
                return Err((
                    self.next,
                    "a record length that frames nothing (REC-1, REC-15): a compressed \
                     segment's logical bytes are records to its end (CZ-1)",
                ));
            };
            let frame = frame as u64;
            if frame > self.end - self.next {
                return Err((
                    self.next,
                    "a record frame past the end of the logical segment (CZ-1, REC-1)",
                ));
            }
            self.next += frame;
        }
        let kept: Vec<u8> = (self.next.max(at - self.carry.len() as u64)..end)
            .map(|pos| byte(&self.carry, pos))
            .collect();
        self.carry = kept;
        Ok(())
    }
}

/// The whole of `file` at `path`, read with `pread` (RD-8).
///
/// # Errors
/// `IO` when its length cannot be read.
fn whole<'a>(file: &'a File, path: &Path) -> Result<FileBytes<'a>> {
    let len = file
        .metadata()
        .map_err(|e| Error::io("stat", path, &e))?
        .len();
    Ok(FileBytes {
        file,
        len: usize::try_from(len).unwrap_or(usize::MAX),
    })
}

/// The largest logical segment [`decompress`] builds in memory: 256 MiB.
const DECOMPRESS_MAX: u64 = 1 << 28;

/// CZ-3: the logical segment of the compressed segment file whose bytes are `bytes`, every
/// block checked (CZ-1: its header with `COMPRESSED` clear), in memory: what the fuzz
/// target and the tests drive. A logical segment above 256 MiB is refused.
///
/// # Errors
/// `CORRUPT` naming `path` and the offset of what does not check out; `FORMAT_VERSION`
/// for a header of another version.
pub fn decompress(bytes: &[u8], path: &Path) -> Result<Vec<u8>> {
    let header = match SegmentHeader::decode(bytes) {
        Ok(header) if is_compressed(&header) => header,
        Ok(_) => return Err(corrupt(path, 0, "not a compressed segment (CZ-2)")),
        Err(HeaderError::Version(found)) => {
            return Err(super::super::segment::version_error(found, path));
        }
        Err(HeaderError::Invalid(reason)) => return Err(corrupt(path, 0, reason)),
    };
    // In memory: bounded well below what a reader's temporary copy may hold.
    if header.capacity > DECOMPRESS_MAX {
        return Err(corrupt(
            path,
            SEGMENT_HEADER_LEN,
            "a logical segment larger than `decompress` takes (256 MiB)",
        ));
    }
    let mut out = Vec::new();
    unpack(bytes, path, &segment_logical(&header), &mut |_, block| {
        out.extend_from_slice(block);
        Ok(())
    })?;
    Ok(out)
}

/// CZ-4: the logical segment of the compressed segment `file` at `path` (header `header`,
/// checked), decompressed and checked into an unlinked temporary file, and that file's
/// map: every byte of it written and checked before it is mapped (RD-8). The file lives in
/// the log's directory `dir` (disk, not memory), or the system's temporary directory when
/// `dir` cannot hold it (a read-only store, a full disk). A copy kept from an earlier read
/// of the same file is mapped again once every block of the file checks out.
///
/// # Errors
/// `CORRUPT` naming `path` and the offset of the damage; `IO`.
pub(crate) fn materialize(
    dir: &Path,
    path: &Path,
    file: &File,
    header: &SegmentHeader,
) -> Result<(File, Mmap)> {
    materialize_logical(dir, path, file, &segment_logical(header))
}

/// CZ-4: the logical bytes `logical` of the compressed file `file` at `path`, decompressed
/// and checked into an unlinked temporary file in `dir` (or the system's temporary
/// directory), and that file's map, as [`materialize`] says.
///
/// # Errors
/// `CORRUPT` naming `path` and the offset of the damage; `IO`.
pub(crate) fn materialize_logical(
    dir: &Path,
    path: &Path,
    file: &File,
    logical: &Logical,
) -> Result<(File, Mmap)> {
    check_len(logical, path)?;
    let source = whole(file, path)?;
    let table = read_table(&source, path, logical)?;
    let key = CopyKey::of(file, logical, &table);
    if let Some(copy) = key.as_ref().and_then(|key| KEPT.find(key)) {
        // The file's every byte is checked as a first read checks it (CZ-3); only the
        // decompression, whose result is known by the table's checksums, is saved.
        check_frames(&source, path, &table)?;
        let map = super::super::map::map(&copy).map_err(|e| Error::io("mmap", path, &e))?;
        return Ok((copy, map));
    }
    let places = [Some(dir), None];
    // The copy is made from the table its key holds: what is kept is what that table
    // describes, whatever the file holds by a later read.
    let (copy, map) = materialize_into(
        places.iter().map(|place| unlinked_file(*place)),
        path,
        &source,
        logical,
        &table,
    )?;
    if let (Some(key), Ok(kept)) = (key, copy.try_clone()) {
        KEPT.keep(key, kept, logical.len);
    }
    Ok((copy, map))
}

/// CZ-3: every block of `file` (at `path`, whose checked table is `table`) matches its
/// `frame_crc`.
///
/// # Errors
/// `CORRUPT` naming `path` and the block's offset; `IO`.
fn check_frames<S: Source + ?Sized>(file: &S, path: &Path, table: &Table) -> Result<()> {
    each_frame(file, path, table, |_, _, _, _| Ok(()))
}

/// CZ-3: the compressed bytes of each block of `file` (at `path`, whose checked table is
/// `table`), read in order and checked against its `frame_crc`, handed to `each` with the
/// block's number, file offset and table entry.
///
/// # Errors
/// `CORRUPT` naming `path` and the block's offset; `IO`; what `each` returns.
fn each_frame<S: Source + ?Sized>(
    file: &S,
    path: &Path,
    table: &Table,
    mut each: impl FnMut(usize, u64, &Entry, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut compressed = Vec::new();
    let mut at = table.data_at;
    for (i, block) in table.blocks.iter().enumerate() {
        compressed.resize(block.compressed_len as usize, 0);
        read_exact(file, path, &mut compressed, at)?;
        if crc32c::crc32c(&compressed) != block.frame_crc {
            let offset = usize::try_from(at).unwrap_or(usize::MAX);
            return Err(corrupt(
                path,
                offset,
                &format!("block {i}: its compressed bytes do not match frame_crc (CZ-3)"),
            ));
        }
        each(i, at, block, &compressed)?;
        at += u64::from(block.compressed_len);
    }
    Ok(())
}

/// What a decompressed copy is known by (CZ-4): the compressed file (device and inode) and
/// what it stands for, its logical header and length and its block table, which holds the
/// checksum of every block's compressed and logical bytes. A file whose bytes all match a
/// key's table decompresses to the copy made under that key.
#[derive(PartialEq, Eq)]
struct CopyKey {
    device: u64,
    inode: u64,
    head: Vec<u8>,
    len: u64,
    table: Vec<u8>,
}

impl CopyKey {
    /// The key of `file`, standing for `logical` with the checked `table`; `None` when
    /// the file cannot be asked its identity (the copy is then not kept).
    fn of(file: &File, logical: &Logical, table: &Table) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let metadata = file.metadata().ok()?;
        Some(Self {
            device: metadata.dev(),
            inode: metadata.ino(),
            head: logical.head.clone(),
            len: logical.len,
            table: table.bytes.clone(),
        })
    }
}

/// Logical bytes of decompressed copies kept past their last reader: 128 MiB, so that a
/// process that opens the same compressed session again (a host serving requests) maps
/// the copy it made instead of decompressing again, while the temporary disk they hold
/// stays bounded (memory, where the system's temporary directory is a tmpfs).
const KEPT_BYTES: u64 = 128 << 20;

/// Decompressed copies kept past their last reader, at most: each holds a file
/// descriptor.
const KEPT_COPIES: usize = 64;

/// The decompressed copies of this process (CZ-4).
static KEPT: Kept = Kept::new(KEPT_BYTES, KEPT_COPIES);

/// Decompressed copies kept for reuse, the least recently used dropped first past a bound
/// on their logical bytes or their number. A copy in use stays alive through its maps
/// when dropped here.
struct Kept {
    bound: u64,
    most: usize,
    copies: std::sync::Mutex<KeptCopies>,
}

/// The copies of [`Kept`], with the clock that orders their uses.
struct KeptCopies {
    clock: u64,
    copies: Vec<KeptCopy>,
}

/// One kept copy: its key, its file (unlinked), its logical length, and its last use.
struct KeptCopy {
    key: CopyKey,
    file: File,
    len: u64,
    used: u64,
}

impl Kept {
    /// No copies, keeping at most `bound` logical bytes in at most `most` copies.
    const fn new(bound: u64, most: usize) -> Self {
        Self {
            bound,
            most,
            copies: std::sync::Mutex::new(KeptCopies {
                clock: 0,
                copies: Vec::new(),
            }),
        }
    }

    /// The copies, whatever a thread that panicked holding them left: each entry is whole.
    fn lock(&self) -> std::sync::MutexGuard<'_, KeptCopies> {
        self.copies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The copy kept under `key` (its own file handle), marked used.
    fn find(&self, key: &CopyKey) -> Option<File> {
        let mut kept = self.lock();
        kept.clock += 1;
        let clock = kept.clock;
        let copy = kept.copies.iter_mut().find(|copy| copy.key == *key)?;
        copy.used = clock;
        copy.file.try_clone().ok()
    }

    /// Keeps `file`, the copy of `len` logical bytes known by `key`, dropping the least
    /// recently used copies past the bounds. A copy larger than the bound is not kept.
    fn keep(&self, key: CopyKey, file: File, len: u64) {
        if len > self.bound {
            return;
        }
        let mut kept = self.lock();
        kept.clock += 1;
        let used = kept.clock;
        kept.copies.retain(|copy| copy.key != key);
        kept.copies.push(KeptCopy {
            key,
            file,
            len,
            used,
        });
        while kept.copies.len() > self.most
            || kept.copies.iter().map(|copy| copy.len).sum::<u64>() > self.bound
        {
            let oldest = kept
                .copies
                .iter()
                .enumerate()
                .min_by_key(|(_, copy)| copy.used)
                .map(|(i, _)| i);
            if let Some(oldest) = oldest {
                kept.copies.swap_remove(oldest);
            }
        }
    }

    /// Drops every kept copy (a copy still mapped lives on until its last map goes).
    fn clear(&self) {
        self.lock().copies.clear();
    }
}

/// Drops the decompressed copies this process keeps for reuse (CZ-4), freeing the
/// temporary disk of those no reader maps any more.
pub fn release_decompressed_copies() {
    KEPT.clear();
}

/// CZ-4: the logical bytes `logical` of `file` at `path`, decompressed into the first of
/// `copies` that can be created and written whole, and its map. A copy that cannot be
/// created or written (a full disk, a quota, a read-only directory) is dropped, which
/// removes it, and the next is tried; damage is reported at once.
///
/// # Errors
/// `CORRUPT` naming `path` and the offset of the damage; `IO`: the last copy's failure, or
/// the map's.
fn materialize_into(
    copies: impl Iterator<Item = std::io::Result<File>>,
    path: &Path,
    source: &FileBytes<'_>,
    logical: &Logical,
    table: &Table,
) -> Result<(File, Mmap)> {
    #[cfg(test)]
    tests::DECOMPRESSED.with(|made| made.set(made.get() + 1));
    let mut failure = None;
    for copy in copies {
        let copy = match copy {
            Ok(copy) => copy,
            Err(e) => {
                failure = Some(Error::io("create a decompressed copy of", path, &e));
                continue;
            }
        };
        let mut write_failed = false;
        let mut written = |e: std::io::Error| {
            write_failed = true;
            Error::io("write the decompressed copy of", path, &e)
        };
        let filled = match copy.set_len(logical.len) {
            Err(e) => Err(written(e)),
            Ok(()) => unpack_table(source, path, logical, table, &mut |at, bytes| {
                copy.write_all_at(bytes, at).map_err(&mut written)
            }),
        };
        match filled {
            Ok(()) => {
                let map = super::super::map::map(&copy).map_err(|e| Error::io("mmap", path, &e))?;
                return Ok((copy, map));
            }
            Err(e) if write_failed => failure = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(failure.unwrap_or_else(|| {
        Error::io(
            "create a decompressed copy of",
            path,
            &std::io::Error::other("no place to keep it"),
        )
    }))
}

/// An unlinked temporary file in `dir`, or in the system's temporary directory for
/// `None`. Where the file system does not support `O_TMPFILE` (NFS), the file is created
/// under a name ending `.tmp`, which it keeps only until it is unlinked at once: should a
/// crash come between the two, a writer's open removes it with the other `.tmp` files a
/// crash leaves (LOG-1).
fn unlinked_file(dir: Option<&Path>) -> std::io::Result<File> {
    let dir = dir.map_or_else(std::env::temp_dir, Path::to_path_buf);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let unnamed = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(rustix::fs::OFlags::TMPFILE.bits().cast_signed())
            .mode(0o600)
            .open(&dir);
        match unnamed {
            Ok(file) => return Ok(file),
            // What Linux returns where a file system has no O_TMPFILE (open(2)).
            Err(e)
                if !matches!(
                    rustix::io::Errno::from_io_error(&e),
                    Some(
                        rustix::io::Errno::OPNOTSUPP
                            | rustix::io::Errno::ISDIR
                            | rustix::io::Errno::NOENT
                    )
                ) =>
            {
                return Err(e);
            }
            Err(_) => {}
        }
    }
    unlinked_named_file(&dir)
}

/// An unlinked temporary file in `dir`, made under a name ending `.tmp` (LOG-1) and
/// unlinked at once: where `O_TMPFILE` is not supported.
fn unlinked_named_file(dir: &Path) -> std::io::Result<File> {
    let named = named_copy(dir)?;
    let (file, name) = named.into_parts();
    // A writer's open may have removed the name already (LOG-1): either way it is gone.
    match name.close() {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        Ok(()) | Err(_) => Ok(file),
    }
}

/// A temporary file in `dir` under a name ending `.tmp`, removed when it is dropped.
fn named_copy(dir: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    tempfile::Builder::new()
        .prefix("decompressed-")
        .suffix(".tmp")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .tempfile_in(dir)
}

/// The name a decompressed copy has until it is unlinked, where `O_TMPFILE` is not
/// supported (the file is removed before this returns).
#[cfg(test)]
pub(crate) fn unlinked_named_file_for_tests(dir: &Path) -> String {
    let named = named_copy(dir).unwrap_or_else(|e| panic!("{e}"));
    named
        .path()
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// CZ-5: whether the compressed segment `file` (at `path`, header `header`) decompresses,
/// every block checked, to the logical segment `logical` byte for byte.
///
/// # Errors
/// `CORRUPT` naming `path` and the offset of the first difference or damage; `IO`.
pub(crate) fn check_unpacks_to(
    file: &File,
    path: &Path,
    header: &SegmentHeader,
    logical: &[u8],
) -> Result<()> {
    check_logical(file, path, &segment_logical(header), logical)
}

/// CZ-5: whether the compressed file `file` at `path`, standing for `layout`, decompresses,
/// every block checked, to `expected` byte for byte.
///
/// # Errors
/// `CORRUPT` naming `path` and the offset of the first difference or damage; `IO`.
pub(crate) fn check_logical(
    file: &File,
    path: &Path,
    layout: &Logical,
    expected: &[u8],
) -> Result<()> {
    let differs = |at: usize| {
        corrupt(
            path,
            at,
            "the compressed file does not decompress to the bytes it was made from (CZ-5)",
        )
    };
    let mut end = 0;
    unpack(&whole(file, path)?, path, layout, &mut |at, bytes| {
        let at = usize::try_from(at).unwrap_or(usize::MAX);
        if at != end || expected.get(at..at + bytes.len()) != Some(bytes) {
            return Err(differs(at));
        }
        end = at + bytes.len();
        Ok(())
    })?;
    if end != expected.len() {
        return Err(differs(end));
    }
    Ok(())
}

/// CZ-5: the compressed file for the logical segment `logical` (a plain segment whose
/// `capacity` is its length, CZ-1), in blocks of `block_bytes`, at Zstandard level `level`.
/// `None` when `logical` is not such a segment.
///
/// # Errors
/// The compressor's error.
pub fn compress(logical: &[u8], block_bytes: u32, level: i32) -> std::io::Result<Option<Vec<u8>>> {
    let header = match SegmentHeader::decode(logical) {
        Ok(header)
            if header.capacity == logical.len() as u64
                && !is_compressed(&header)
                && logical.len() > SEGMENT_HEADER_LEN =>
        {
            header
        }
        Ok(_) | Err(HeaderError::Invalid(_) | HeaderError::Version(_)) => return Ok(None),
    };
    let stored = SegmentHeader {
        incompat_features: header.incompat_features | COMPRESSED,
        ..header
    };
    compress_logical(&stored.encode(), logical, block_bytes, level).map(Some)
}

/// CZ-3, CZ-5: the compressed file whose header is `stored_head` for the logical bytes
/// `logical` (whose own header, as long as `stored_head`, the reader rebuilds from it): the
/// header, the block table and the blocks of `logical` after its header, in blocks of
/// `block_bytes`, at Zstandard level `level`.
///
/// # Errors
/// The compressor's error.
pub(crate) fn compress_logical(
    stored_head: &[u8],
    logical: &[u8],
    block_bytes: u32,
    level: i32,
) -> std::io::Result<Vec<u8>> {
    let data = logical.get(stored_head.len()..).unwrap_or_default();
    let mut compressor = zstd::bulk::Compressor::new(level)?;
    let mut blocks = Vec::new();
    let mut table = Vec::new();
    table.extend_from_slice(&block_bytes.to_le_bytes());
    let count = data.len().div_ceil(block_bytes as usize);
    table.extend_from_slice(&u32::try_from(count).unwrap_or(u32::MAX).to_le_bytes());
    for block in data.chunks(block_bytes as usize) {
        let frame = compressor.compress(block)?;
        table.extend_from_slice(&u32::try_from(frame.len()).unwrap_or(u32::MAX).to_le_bytes());
        table.extend_from_slice(&crc32c::crc32c(&frame).to_le_bytes());
        table.extend_from_slice(&crc32c::crc32c(block).to_le_bytes());
        blocks.push(frame);
    }
    let crc = crc32c::crc32c(&table);
    table.extend_from_slice(&crc.to_le_bytes());
    let mut out = stored_head.to_vec();
    out.extend_from_slice(&table);
    out.resize(
        usize::try_from(data_at(stored_head.len(), count)).unwrap_or(usize::MAX),
        0,
    );
    for frame in blocks {
        out.extend_from_slice(&frame);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![expect(clippy::indexing_slicing, reason = "tests index their own buffers")]
    use super::*;

    thread_local! {
        /// How many times this thread decompressed a file into a copy.
        pub(super) static DECOMPRESSED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    fn decompressed() -> usize {
        DECOMPRESSED.with(std::cell::Cell::get)
    }

    /// A logical segment: a header and about `data_len` bytes (rounded up to a multiple of 8,
    /// at least 48) of record frames to its end (CZ-1), their bodies filler: frames of 48 to
    /// about 250 bytes, each a length, a checksum field and bytes that compress somewhat.
    fn logical(data_len: usize, seed: u8) -> Vec<u8> {
        let data_len = data_len.next_multiple_of(8).max(48);
        let header = SegmentHeader {
            log_id: [seed; 16],
            index: 3,
            first_seq: 40,
            capacity: (SEGMENT_HEADER_LEN + data_len) as u64,
            incompat_features: super::super::super::segment::CHUNK_RECORDS,
        };
        let mut bytes = header.encode().to_vec();
        let filler = |i: u64| {
            u8::try_from((i * 2_654_435_761 % 251 + u64::from(seed)) % 7 * 31 % 256).unwrap_or(0)
        };
        let mut remaining = data_len;
        let mut n = 0_u64;
        while remaining > 0 {
            let want = usize::try_from(48 + (n * 2_654_435_761 + u64::from(seed)) % 200).unwrap();
            let want = want.next_multiple_of(8);
            let frame = if want + 48 > remaining {
                remaining
            } else {
                want
            };
            let len = u32::try_from(frame - 8).unwrap();
            bytes.extend_from_slice(&len.to_le_bytes());
            bytes.extend_from_slice(&u32::try_from(n).unwrap().to_le_bytes());
            let at = bytes.len() as u64;
            bytes.extend((0..u64::from(len)).map(|i| filler(at + i)));
            remaining -= frame;
            n += 1;
        }
        bytes
    }

    fn unpacked(file: &File, path: &Path) -> Result<Vec<u8>> {
        let header = SegmentHeader::decode(&super::super::super::map::read_head(file, 64))
            .map_err(|_| corrupt(path, 0, "header"))?;
        let mut out = Vec::new();
        unpack(
            &whole(file, path)?,
            path,
            &segment_logical(&header),
            &mut |at, bytes| {
                assert_eq!(at, out.len() as u64);
                out.extend_from_slice(bytes);
                Ok(())
            },
        )?;
        let bytes = std::fs::read(path).unwrap();
        assert_eq!(
            decompress(&bytes, path).as_ref().ok(),
            Some(&out),
            "the same from memory"
        );
        Ok(out)
    }

    fn stored(bytes: &[u8]) -> (tempfile::NamedTempFile, File) {
        let named = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(named.path(), bytes).unwrap();
        let file = File::open(named.path()).unwrap();
        (named, file)
    }

    #[test]
    fn a_compressed_segment_unpacks_to_its_logical_segment() {
        for (len, block) in [
            (1, 4096),
            (4096, 4096),
            (4097, 4096),
            (100_000, 4096),
            (300_000, BLOCK_BYTES),
        ] {
            let logical = logical(len, 7);
            let packed = compress(&logical, block, 3).unwrap().unwrap();
            let header = SegmentHeader::decode(&packed).unwrap();
            assert!(is_compressed(&header));
            assert_eq!(segment_logical(&header).head[..], logical[..64]);
            let (named, file) = stored(&packed);
            assert_eq!(
                unpacked(&file, named.path()).unwrap(),
                logical,
                "{len} in {block}"
            );
            let (_, map) =
                materialize(named.path().parent().unwrap(), named.path(), &file, &header).unwrap();
            assert_eq!(&map[..], &logical[..]);
        }
    }

    #[test]
    fn only_a_plain_segment_whose_capacity_is_its_length_is_compressed() {
        let plain = logical(5000, 1);
        let packed = compress(&plain, 4096, 3).unwrap().unwrap();
        assert_eq!(
            compress(&packed, 4096, 3).unwrap(),
            None,
            "already compressed"
        );
        let mut longer = plain.clone();
        longer.push(0);
        assert_eq!(
            compress(&longer, 4096, 3).unwrap(),
            None,
            "capacity is not its length"
        );
        assert_eq!(compress(&plain[..64], 4096, 3).unwrap(), None, "no records");
    }

    /// CZ-3: every change to a byte after the header, every cut and every extension is
    /// refused with `CORRUPT` naming the file, never unpacked to other bytes.
    #[test]
    fn every_damage_to_a_compressed_segment_is_refused() {
        let logical = logical(20_000, 3);
        let packed = compress(&logical, 4096, 3).unwrap().unwrap();
        let check = |bytes: &[u8], what: &str| {
            let (named, file) = stored(bytes);
            match unpacked(&file, named.path()) {
                Ok(out) => panic!("{what}: unpacked {} bytes", out.len()),
                Err(error) => {
                    assert_eq!(error.code(), "CORRUPT", "{what}: {error}");
                    assert!(
                        error
                            .to_string()
                            .contains(&named.path().display().to_string()),
                        "{what}: {error}"
                    );
                }
            }
        };
        for at in SEGMENT_HEADER_LEN..packed.len() {
            for flip in [0x01, 0x80, 0xFF] {
                let mut damaged = packed.clone();
                damaged[at] ^= flip;
                check(&damaged, &format!("byte {at} ^ {flip:#x}"));
            }
        }
        for len in [64, 65, 72, 100, packed.len() - 1] {
            check(&packed[..len], &format!("cut to {len}"));
        }
        let mut longer = packed.clone();
        longer.push(0);
        check(&longer, "one byte more");
    }

    /// A file the copy cannot be written to: opened for reading only.
    fn unwritable(dir: &Path) -> File {
        let path = dir.join("read-only");
        std::fs::write(&path, b"").unwrap();
        File::open(&path).unwrap()
    }

    /// CZ-4: a copy that cannot be created or written (a full disk in the log's directory)
    /// is not an error while another place can hold it; the bytes mapped are the logical
    /// segment's, whatever place failed first.
    #[test]
    fn a_copy_that_cannot_be_written_is_kept_in_the_next_place() {
        let scratch = tempfile::tempdir().unwrap();
        let logical = logical(30_000, 5);
        let packed = compress(&logical, 4096, 3).unwrap().unwrap();
        let header = SegmentHeader::decode(&packed).unwrap();
        let (named, file) = stored(&packed);
        let layout = segment_logical(&header);
        let source = whole(&file, named.path()).unwrap();
        let table = read_table(&source, named.path(), &layout).unwrap();
        let full = || Err(std::io::Error::from(std::io::ErrorKind::StorageFull));
        for (first, what) in [
            (Ok(unwritable(scratch.path())), "written"),
            (full(), "created"),
        ] {
            let copies = [first, unlinked_file(Some(scratch.path()))];
            let (_, map) =
                materialize_into(copies.into_iter(), named.path(), &source, &layout, &table)
                    .unwrap_or_else(|e| panic!("a first copy that cannot be {what}: {e}"));
            assert_eq!(&map[..], &logical[..], "a first copy that cannot be {what}");
        }
        // Both places fail: the last failure is the error.
        for (copies, last) in [
            (
                [Ok(unwritable(scratch.path())), full()],
                "create a decompressed copy",
            ),
            (
                [full(), Ok(unwritable(scratch.path()))],
                "write the decompressed copy",
            ),
        ] {
            let error =
                materialize_into(copies.into_iter(), named.path(), &source, &layout, &table)
                    .unwrap_err();
            assert_eq!(error.code(), "IO", "{error}");
            assert!(error.to_string().contains(last), "{error}");
        }
    }

    /// CZ-4: damage is reported from the first place: no second copy is made of bytes that
    /// do not check out.
    #[test]
    fn damage_is_not_taken_for_a_place_that_failed() {
        let logical = logical(30_000, 6);
        let mut packed = compress(&logical, 4096, 3).unwrap().unwrap();
        let last = packed.len() - 1;
        packed[last] ^= 0x40;
        let header = SegmentHeader::decode(&packed).unwrap();
        let (named, file) = stored(&packed);
        let mut taken = 0;
        let copies = std::iter::from_fn(|| {
            taken += 1;
            Some(unlinked_file(None))
        });
        let layout = segment_logical(&header);
        let source = whole(&file, named.path()).unwrap();
        let table = read_table(&source, named.path(), &layout).unwrap();
        let error = materialize_into(copies, named.path(), &source, &layout, &table).unwrap_err();
        assert_eq!(error.code(), "CORRUPT", "{error}");
        assert_eq!(taken, 1);
    }

    /// LOG-1: the copy leaves no name behind in the directory that holds it, whether the
    /// file system gives an unnamed file or the copy is made under a name and unlinked.
    #[test]
    fn a_copy_leaves_no_name_behind() {
        let scratch = tempfile::tempdir().unwrap();
        let names = || std::fs::read_dir(scratch.path()).unwrap().count();
        let copy = unlinked_file(Some(scratch.path())).unwrap();
        copy.write_all_at(b"logical", 0).unwrap();
        assert_eq!(names(), 0);
        let named = unlinked_named_file(scratch.path()).unwrap();
        named.write_all_at(b"logical", 0).unwrap();
        let mut read = [0; 7];
        named.read_exact_at(&mut read, 0).unwrap();
        assert_eq!(&read, b"logical");
        assert_eq!(names(), 0);
    }

    /// CZ-4: a file opened again maps the copy kept from its first read, its every byte
    /// checked again; a file changed in place is decompressed again or refused.
    #[test]
    fn a_kept_copy_is_mapped_again_while_its_file_checks_out() {
        let first = logical(50_000, 8);
        let packed = compress(&first, 4096, 3).unwrap().unwrap();
        let header = SegmentHeader::decode(&packed).unwrap();
        let (named, file) = stored(&packed);
        let dir = named.path().parent().unwrap();
        let before = decompressed();
        let (_, map) = materialize(dir, named.path(), &file, &header).unwrap();
        assert_eq!(&map[..], &first[..]);
        drop(map);
        let (_, map) = materialize(dir, named.path(), &file, &header).unwrap();
        assert_eq!(&map[..], &first[..]);
        assert_eq!(
            decompressed() - before,
            1,
            "the second read maps the kept copy"
        );

        // The same file (inode) rewritten with other logical bytes of the same header.
        let mut second = first.clone();
        second[72..100].fill(b'x'); // inside the first record's body
        let repacked = compress(&second, 4096, 3).unwrap().unwrap();
        std::fs::write(named.path(), &repacked).unwrap();
        let (_, map) = materialize(dir, named.path(), &file, &header).unwrap();
        assert_eq!(&map[..], &second[..]);
        assert_eq!(decompressed() - before, 2, "another table is another copy");

        // A block damaged in place under a table that still checks out: refused, as a
        // first read refuses it, though its copy is kept.
        let mut damaged = repacked;
        let last = damaged.len() - 3;
        damaged[last] ^= 0x10;
        std::fs::write(named.path(), &damaged).unwrap();
        let error = materialize(dir, named.path(), &file, &header).unwrap_err();
        assert_eq!(error.code(), "CORRUPT", "{error}");
        assert!(error.to_string().contains("frame_crc"), "{error}");
        assert_eq!(decompressed() - before, 2);
    }

    /// CZ-4: the kept copies hold at most their bound of logical bytes, the least recently
    /// used dropped first; a copy larger than the bound is not kept.
    #[test]
    fn kept_copies_stay_within_their_bound() {
        let kept = Kept::new(100, 3);
        let key = |n: u8| CopyKey {
            device: 1,
            inode: u64::from(n),
            head: vec![n],
            len: 1,
            table: vec![n],
        };
        let copy = || tempfile::tempfile().unwrap();
        kept.keep(key(1), copy(), 60);
        kept.keep(key(2), copy(), 30);
        assert!(kept.find(&key(1)).is_some());
        kept.keep(key(3), copy(), 30);
        assert!(kept.find(&key(2)).is_none(), "the least recently used goes");
        assert!(kept.find(&key(1)).is_some());
        assert!(kept.find(&key(3)).is_some());
        kept.keep(key(4), copy(), 101);
        assert!(kept.find(&key(4)).is_none(), "larger than the bound");
        kept.keep(key(3), copy(), 40);
        assert!(
            kept.find(&key(1)).is_some(),
            "a key kept again replaces its copy"
        );
        let held: u64 = kept.lock().copies.iter().map(|copy| copy.len).sum();
        assert_eq!(held, 100);
        kept.keep(key(5), copy(), 0);
        kept.keep(key(6), copy(), 0);
        assert_eq!(kept.lock().copies.len(), 3, "at most 3 copies");
        assert!(kept.find(&key(3)).is_none(), "the least recently used goes");
        kept.clear();
        assert!(kept.find(&key(1)).is_none());
    }

    /// CZ-1: bytes that cannot be records are refused at the first block holding them, not
    /// after the whole claimed length is decompressed: a segment claiming 16 MiB of zeros
    /// (a few hundred bytes compressed) is refused at offset 64 before any block reaches
    /// the copy; a frame running past the end is refused too.
    #[test]
    fn bytes_that_cannot_be_records_are_refused_at_their_block() {
        let header = SegmentHeader {
            log_id: [9; 16],
            index: 1,
            first_seq: 7,
            capacity: 64 + (16 << 20),
            incompat_features: 0,
        };
        let mut zeros = header.encode().to_vec();
        zeros.resize(64 + (16 << 20), 0);
        let packed = compress(&zeros, BLOCK_BYTES, 3).unwrap().unwrap();
        assert!(packed.len() < 4096, "{} bytes", packed.len());
        let (named, file) = stored(&packed);
        let header = SegmentHeader::decode(&packed).unwrap();
        let mut blocks = 0;
        let error = unpack(
            &whole(&file, named.path()).unwrap(),
            named.path(),
            &segment_logical(&header),
            &mut |at, _| {
                if at > 0 {
                    blocks += 1;
                }
                Ok(())
            },
        )
        .unwrap_err();
        assert_eq!(error.code(), "CORRUPT", "{error}");
        assert!(error.to_string().contains("offset=64"), "{error}");
        assert_eq!(blocks, 0, "no block reached the copy");

        let mut long = logical(5000, 4);
        let capacity = long.len();
        // The first frame's length made to run past the end.
        long[64..68].copy_from_slice(&u32::try_from(capacity).unwrap().to_le_bytes());
        let packed = compress(&long, 4096, 3).unwrap().unwrap();
        let (named, file) = stored(&packed);
        let error = unpacked(&file, named.path()).unwrap_err();
        assert!(error.to_string().contains("past the end"), "{error}");
    }
}
