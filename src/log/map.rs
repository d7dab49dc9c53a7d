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
    // log is append-only. Index files, limit files (LIM-5) and checkpoints (CKP-5) are
    // replaced by rename or never changed, never rewritten in place, so an existing map
    // keeps the old inode.
    let map = unsafe { Mmap::map(file) };
    map
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
