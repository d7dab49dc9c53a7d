//! Compressed sealed segments (log-format.md §14, CZ-1 to CZ-7): which segments are
//! compressed, and, with the `compress` feature, their block format (`blocks`). Without
//! the feature a compressed segment is refused at its header (SEG-9), and these entry
//! points refuse or do nothing the same way.

#[cfg(not(feature = "compress"))]
use std::{fs::File, path::Path};

#[cfg(not(feature = "compress"))]
use memmap2::Mmap;

use super::segment::{COMPRESSED, SegmentHeader};
#[cfg(not(feature = "compress"))]
use crate::error::Result;

#[cfg(feature = "compress")]
mod blocks;

#[cfg(all(test, feature = "compress"))]
pub(crate) use blocks::unlinked_named_file_for_tests;
#[cfg(feature = "compress")]
pub(crate) use blocks::{
    BLOCK_BYTES, Logical, check_logical, check_unpacks_to, compress_logical, materialize,
    materialize_logical,
};
#[cfg(feature = "compress")]
pub use blocks::{compress, decompress, release_decompressed_copies};

/// Whether a segment's header says its file is compressed (SEG-9, CZ-2).
pub(crate) fn is_compressed(header: &SegmentHeader) -> bool {
    header.incompat_features & COMPRESSED != 0
}

/// Without the `compress` feature nothing is compressed, so nothing is checked.
///
/// # Errors
/// Never.
#[cfg(not(feature = "compress"))]
#[expect(
    clippy::unnecessary_wraps,
    reason = "the signature of the `compress` feature's function"
)]
pub(crate) fn check_unpacks_to(
    _file: &File,
    _path: &Path,
    _header: &SegmentHeader,
    _logical: &[u8],
) -> Result<()> {
    Ok(())
}

/// Without the `compress` feature a compressed segment is refused at its header (SEG-9), so
/// this is reached only if a caller skipped that check: refused the same way.
///
/// # Errors
/// `FORMAT_VERSION`, always.
#[cfg(not(feature = "compress"))]
pub(crate) fn materialize(
    _dir: &Path,
    path: &Path,
    _file: &File,
    _header: &SegmentHeader,
) -> Result<(File, Mmap)> {
    Err(super::segment::version_error(
        super::segment::Unsupported {
            version: super::segment::FORMAT_VERSION,
            unknown_incompat: COMPRESSED,
        },
        path,
    ))
}
