//! Read-only memory maps of segment, index and checkpoint files: the crate's only `unsafe`.

use std::fs::File;
use std::io;
use std::ops::Range;

use memmap2::{Mmap, UncheckedAdvice};

/// Maps `file` read-only.
///
/// # Errors
/// The OS error.
pub(crate) fn map(file: &File) -> io::Result<Mmap> {
    #[expect(
        unsafe_code,
        reason = "memmap2 cannot prove the file is not changed under the map"
    )]
    // SAFETY: `Mmap::map` is unsafe because another process could truncate or rewrite
    // the file while it is mapped. A segment is never truncated while its log exists
    // (log-format.md SEG-8: recovery overwrites a torn tail with zeros instead), so every
    // mapped page stays backed. Bytes that are still being written are only read after
    // their checksum matches (REC-4), and committed bytes are never written again: the
    // log is append-only. Index files, limit files (LIM-5), checkpoints (CKP-5) and message
    // packs (MSP-6) are replaced by rename or never changed, never rewritten in place, so
    // an existing map keeps the old inode. A map is read only where the bytes are known written (RD-8):
    // every other byte of a segment (a header, a scan past the verified end, a search of
    // the tail) is read with pread, so a hole on a full filesystem or a page past a length
    // another process cut the file to is never touched through a map (SIGBUS).
    let map = unsafe { Mmap::map(file) };
    map
}

/// A file's identity: its device and inode numbers (`fstat`).
pub(crate) type FileIdentity = (u64, u64);

/// The identity of `file`, or `None` when `fstat` fails.
pub(crate) fn identity(file: &File) -> Option<FileIdentity> {
    use std::os::unix::fs::MetadataExt;
    file.metadata().ok().map(|m| (m.dev(), m.ino()))
}

/// The first `len` bytes of `file` (fewer when it is shorter), read with `pread`: a
/// segment's header is read this way, never through its map, since a segment being
/// created may still have a hole there (SEG-6, RD-8). An I/O error reads as no bytes (the
/// header then does not check out, and the map or a later read reports the file).
pub(crate) fn read_head(file: &File, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut bytes = vec![0; len];
    let mut filled = 0;
    while filled < len {
        match file.read_at(bytes.get_mut(filled..).unwrap_or_default(), filled as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => filled += n,
        }
    }
    bytes.truncate(filled);
    bytes
}

/// Releases this process's pages of `map` in `range` (RD-4): they stop counting as its
/// resident memory, and a later read of them faults them in again from the page cache (or
/// the file), with the same bytes. Use it once a range has been read through and is not
/// expected to be read again soon. Best effort: a failure only leaves the pages resident.
/// The range is clamped to the map; the OS works in whole pages, so the pages holding its
/// ends are released too.
pub(crate) fn release(map: &Mmap, range: Range<usize>) {
    let end = range.end.min(map.len());
    let Some(len) = end.checked_sub(range.start).filter(|&len| len > 0) else {
        return;
    };
    #[expect(
        unsafe_code,
        reason = "MADV_DONTNEED would zero an anonymous or private mapping under its borrows"
    )]
    // SAFETY: `madvise(MADV_DONTNEED)` is unsafe in general because on an anonymous or
    // private mapping the released pages read back as zeros, changing memory that may be
    // borrowed. Every `Mmap` of this crate is made by `map` above, so it is a shared
    // (`MAP_SHARED`), read-only mapping of a file: for those the call only drops the
    // process's page-table entries, and the next access faults the page in again from the
    // page cache, which holds the file's current bytes. Those are the bytes a borrow saw
    // before: the same precondition `map` relies on holds here (SEG-8: a segment is never
    // truncated, so no page loses its backing; committed records are never rewritten in
    // place; indexes, limits and checkpoints are replaced by rename). Bytes a writer is
    // still writing may change with or without this call, and readers take them only once
    // their checksum matches (REC-4). `range.start + len` is within the map.
    let _ = unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, range.start, len) };
}

/// Asks the OS to start reading the pages of `map` in `range` into the page cache
/// (`MADV_WILLNEED`, RD-9), without waiting for them and without mapping them: no byte is
/// read through the map here, so this touches no page that may be absent (RD-8), and the
/// pages count towards no process's resident memory until a read faults them in (RD-4).
/// Best effort: a failure only leaves the pages to be read when faulted in. The range is
/// clamped to the map.
pub(crate) fn read_ahead(map: &Mmap, range: Range<usize>) {
    let end = range.end.min(map.len());
    let Some(len) = end.checked_sub(range.start).filter(|&len| len > 0) else {
        return;
    };
    let _ = map.advise_range(memmap2::Advice::WillNeed, range.start, len);
}

/// Little-endian u64s read in place from a shared map (CKP-7: a checkpoint's nodes), so that
/// a surface can borrow them instead of copying them until it first changes.
#[derive(Debug, Clone)]
pub(crate) struct MappedWords {
    map: std::sync::Arc<Mmap>,
    /// Invariant: `start..start + 8 * len` lies within `map`, and `map`'s address plus
    /// `start` is a multiple of 8.
    start: usize,
    len: usize,
}

impl MappedWords {
    /// The `len` u64s at `start` in `map`; `None` when they do not lie within it, are not
    /// 8-byte aligned in memory, or this target is not little-endian (the caller copies
    /// them then).
    pub(crate) fn new(map: std::sync::Arc<Mmap>, start: usize, len: usize) -> Option<Self> {
        let end = len.checked_mul(8)?.checked_add(start)?;
        let bytes = map.get(start..end)?;
        let aligned = bytes.as_ptr().align_offset(align_of::<u64>()) == 0;
        (cfg!(target_endian = "little") && aligned).then_some(Self { map, start, len })
    }

    /// The words' bytes, as the file holds them.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.map
            .get(self.start..self.start + 8 * self.len)
            .unwrap_or_default()
    }

    /// The words.
    pub(crate) fn as_slice(&self) -> &[u64] {
        let bytes = self.as_bytes();
        if bytes.len() != 8 * self.len {
            return &[];
        }
        #[expect(
            unsafe_code,
            reason = "reads aligned little-endian u64s in place instead of copying them"
        )]
        #[expect(
            clippy::cast_ptr_alignment,
            reason = "`new` checked that the words are 8-byte aligned"
        )]
        // SAFETY: `new` checked that the `len` words lie within the map (so `bytes` holds
        // `8 * len` bytes, just re-checked above) and that their address is 8-byte
        // aligned, and that the target is little-endian, so each 8 bytes are the u64 the
        // file holds. Every bit pattern is a valid u64. The map lives as long as `self`
        // (the `Arc`), and the bytes do not change under it: checkpoints are replaced by
        // rename, never written in place (CKP-5, the precondition of `map`).
        let words = unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<u64>(), self.len) };
        words
    }
}

/// Little-endian u64s in a file, first read when first needed (CKP-7: a checkpoint's
/// nodes, which opening a session does not read). They are mapped at once, which reads
/// nothing (their pages are faulted in when first read), and the file is closed; where
/// they cannot be read in place (unaligned in the map, a big-endian target, a failed map)
/// the file is kept open and they are read into memory on first need. Either way a later
/// rename over the file's name (CKP-5) does not change what is read.
#[derive(Debug)]
pub(crate) struct FileWords {
    /// The file, while the words are neither mapped nor read.
    file: Option<File>,
    /// Where the words start in the file.
    start: usize,
    len: usize,
    words: std::sync::OnceLock<Words>,
}

/// What the first read of [`FileWords`] found.
#[derive(Debug)]
enum Words {
    Mapped(MappedWords),
    /// Read and copied (unaligned in memory, or a big-endian target), with their CRC-32C.
    Read(Vec<u64>, u32),
    /// Neither mapped nor read (an I/O error, or a file shorter than it was).
    Unreadable,
}

impl FileWords {
    /// The `len` u64s at `start` in `file`, not read yet.
    pub(crate) fn new(file: File, start: usize, len: usize) -> Self {
        let mapped = map(&file)
            .ok()
            .and_then(|m| MappedWords::new(std::sync::Arc::new(m), start, len));
        match mapped {
            Some(words) => Self {
                file: None,
                start,
                len,
                words: std::sync::OnceLock::from(Words::Mapped(words)),
            },
            None => Self {
                file: Some(file),
                start,
                len,
                words: std::sync::OnceLock::new(),
            },
        }
    }

    /// How many words there are, without reading them.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The words: mapped or read on the first call; empty when they cannot be read.
    pub(crate) fn as_slice(&self) -> &[u64] {
        match self.read() {
            Words::Mapped(words) => words.as_slice(),
            Words::Read(words, _) => words,
            Words::Unreadable => &[],
        }
    }

    /// CRC-32C of the words' bytes as the file holds them; `None` when they cannot be
    /// read.
    pub(crate) fn crc(&self) -> Option<u32> {
        match self.read() {
            Words::Mapped(words) => Some(crc32c::crc32c(words.as_bytes())),
            Words::Read(_, crc) => Some(*crc),
            Words::Unreadable => None,
        }
    }

    /// Bytes of heap memory held (words read rather than mapped).
    pub(crate) fn heap_bytes(&self) -> usize {
        match self.words.get() {
            Some(Words::Read(words, _)) => words.capacity() * size_of::<u64>(),
            _ => 0,
        }
    }

    fn read(&self) -> &Words {
        self.words.get_or_init(|| {
            let Some(file) = &self.file else {
                return Words::Unreadable;
            };
            let mut bytes = vec![0; self.len.saturating_mul(8)];
            let read =
                std::os::unix::fs::FileExt::read_exact_at(file, &mut bytes, self.start as u64);
            if read.is_err() {
                return Words::Unreadable;
            }
            let words = bytes
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
                .collect();
            Words::Read(words, crc32c::crc32c(&bytes))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `FileWords` reads the same words, with the same CRC, whether they are mapped in
    /// place (aligned) or read (unaligned in the map), and reads none past the file's end.
    #[test]
    fn file_words_are_the_same_mapped_or_read_and_never_past_the_end() {
        let scratch = tempfile::tempdir().unwrap();
        let path = scratch.path().join("words");
        let words: Vec<u64> = (0..1000_u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        for start in [48_usize, 44] {
            let mut file_bytes = vec![0xAB; start];
            file_bytes.extend_from_slice(&bytes);
            std::fs::write(&path, &file_bytes).unwrap();
            let read = FileWords::new(File::open(&path).unwrap(), start, words.len());
            assert_eq!(read.len(), words.len());
            assert_eq!(read.as_slice(), words.as_slice(), "start {start}");
            assert_eq!(read.crc(), Some(crc32c::crc32c(&bytes)), "start {start}");
            let mapped = matches!(read.words.get(), Some(Words::Mapped(_)));
            assert_eq!(mapped, start == 48, "start {start}");
            assert_eq!(read.heap_bytes() > 0, !mapped);
            let past = FileWords::new(File::open(&path).unwrap(), start + 8, words.len());
            assert_eq!(past.as_slice(), &[] as &[u64]);
            assert_eq!(past.crc(), None);
        }
    }
}
