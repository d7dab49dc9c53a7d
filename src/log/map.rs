//! Read-only memory maps of segment, index and checkpoint files: the crate's only `unsafe`.

use std::fs::File;
use std::io;

use memmap2::Mmap;

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
