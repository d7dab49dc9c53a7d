//! Segment files: naming (LOG-1) and the 64-byte header (SEG-1 to SEG-3).
#![deny(clippy::indexing_slicing)]

use crate::record::{u32_at, u64_at};

/// The segment header's length (SEG-1).
pub const SEGMENT_HEADER_LEN: usize = 64;
/// `"surflog\0"` (SEG-1).
pub const SEGMENT_MAGIC: [u8; 8] = *b"surflog\0";
/// The one log format version this build reads and writes (VER-1).
pub const FORMAT_VERSION: u32 = 1;

/// The identity of a log: equal in all its segments (SEG-1, SEG-3).
pub type LogId = [u8; 16];

/// A segment header (SEG-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The log's identity.
    pub log_id: LogId,
    /// 0 for the first segment, +1 for each next one.
    pub index: u64,
    /// The seq of the segment's first record.
    pub first_seq: u64,
    /// The most bytes the file may hold: records end before it. The file itself starts
    /// shorter and grows towards it (SEG-6).
    pub capacity: u64,
    /// The incompatible features the segment uses (SEG-9): at most one of
    /// [`CHUNK_RECORDS`] and [`COMPACT_RECORDS`], and [`COMPRESSED`].
    pub incompat_features: u16,
}

/// SEG-9 `incompat_features` bit 0: the segment may hold chunk records (§4.1, REC-11).
pub const CHUNK_RECORDS: u16 = 1 << 0;

/// SEG-9 `incompat_features` bit 1: the file is a compressed sealed segment (§14, CZ-2).
pub const COMPRESSED: u16 = 1 << 1;

/// SEG-9 `incompat_features` bit 2: the segment's records are compact records (§4.2).
pub const COMPACT_RECORDS: u16 = 1 << 2;

/// The step in which the writer grows a segment file ahead of its records (SEG-6): 64 KiB.
pub const SEGMENT_GROW_BYTES: u64 = 64 << 10;

/// SEG-6: the length of a segment file holding its first `end` bytes: `end` rounded up to
/// a multiple of [`SEGMENT_GROW_BYTES`], at most `capacity` (and at least `end`, should
/// `end` exceed `capacity`, which no caller asks for).
#[must_use]
pub fn grown_len(end: u64, capacity: u64) -> u64 {
    let stepped = end
        .div_ceil(SEGMENT_GROW_BYTES)
        .saturating_mul(SEGMENT_GROW_BYTES);
    stepped.min(capacity).max(end)
}

/// SEG-6: whether `len` is a length the writer gives a segment file of `capacity`: the
/// capacity, or a multiple of [`SEGMENT_GROW_BYTES`] below it (0 included: a file whose
/// creation was cut short). Any other length was cut by something else (SEG-8).
#[must_use]
pub fn is_grown_len(len: u64, capacity: u64) -> bool {
    len == capacity || (len < capacity && len.is_multiple_of(SEGMENT_GROW_BYTES))
}

/// SEG-6, SEG-8: why a segment file of `len` bytes, a length its writer never gives it, is
/// damage.
pub(crate) fn cut_short(len: u64, capacity: u64) -> String {
    format!(
        "the segment file is {len} bytes long, neither its capacity ({capacity}) nor a \
         multiple of the 64 KiB steps it grows in (SEG-6): truncated by another process \
         (SEG-8)"
    )
}

/// Bytes every version of a file kind keeps in place (VER-2): its magic (0..8) and its
/// version (8..12). A reader checks them first, before any checksum, so that a later
/// version may change everything after them, the checksum's coverage included.
pub const FROZEN_PREFIX_LEN: usize = 12;

/// The incompatible feature bits this build knows in a segment header (SEG-9):
/// [`CHUNK_RECORDS`], [`COMPACT_RECORDS`], and [`COMPRESSED`] with the `compress` feature.
/// A header with any other bit set is refused.
#[cfg(feature = "compress")]
pub const SEGMENT_INCOMPAT_KNOWN: u16 = CHUNK_RECORDS | COMPACT_RECORDS | COMPRESSED;
/// The incompatible feature bits this build knows in a segment header (SEG-9):
/// [`CHUNK_RECORDS`] and [`COMPACT_RECORDS`] (a build without the `compress` feature
/// refuses [`COMPRESSED`]). A header with any other bit set is refused.
#[cfg(not(feature = "compress"))]
pub const SEGMENT_INCOMPAT_KNOWN: u16 = CHUNK_RECORDS | COMPACT_RECORDS;
/// The compatible feature bits this build knows in a segment header (SEG-9): none; the
/// others are ignored.
pub const SEGMENT_COMPAT_KNOWN: u16 = 0;

/// Why a header is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// Fewer than 64 bytes, a wrong magic or checksum (SEG-2), or a version of 0, which no
    /// header ever has (a header not yet written, VER-2).
    Invalid(&'static str),
    /// A format version other than [`FORMAT_VERSION`] (VER-1), or incompatible features
    /// this build does not know (SEG-9).
    Version(Unsupported),
}

/// A file this build does not read (VER-1, VER-3): `FORMAT_VERSION`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsupported {
    /// The version the file names.
    pub version: u32,
    /// The incompatible feature bits it sets that this build does not know (0 when the
    /// version alone is refused).
    pub unknown_incompat: u16,
}

/// VER-2: the version of a file of the kind whose magic is `magic`, read before anything
/// else of it: `Ok(version)` for `supported`, `Err(Some(..))` for a version this build
/// does not read, `Err(None)` for bytes that are not such a file (too short, another
/// magic, or version 0, which is never written: the header is not written yet).
pub(crate) fn check_version(
    bytes: &[u8],
    magic: [u8; 8],
    supported: u32,
) -> Result<u32, Option<Unsupported>> {
    if bytes.get(..8) != Some(&magic[..]) {
        return Err(None);
    }
    match u32_at(bytes, 8) {
        None | Some(0) => Err(None),
        Some(version) if version == supported => Ok(version),
        Some(version) => Err(Some(Unsupported {
            version,
            unknown_incompat: 0,
        })),
    }
}

/// VER-3: a file's feature words (`compat` then `incompat`, u16 each, at `at`), checked
/// against what this build knows: an unknown incompatible bit refuses the file; unknown
/// compatible bits are ignored.
pub(crate) fn check_features(
    bytes: &[u8],
    at: usize,
    version: u32,
    incompat_known: u16,
) -> Result<(), Unsupported> {
    let word = u32_at(bytes, at).unwrap_or(0);
    // The high half: `incompat` (the low half, `compat`, is ignored whatever it holds).
    let incompat = u16::try_from(word >> 16).unwrap_or(u16::MAX);
    let unknown_incompat = incompat & !incompat_known;
    if unknown_incompat == 0 {
        Ok(())
    } else {
        Err(Unsupported {
            version,
            unknown_incompat,
        })
    }
}

/// Fills a 64-byte block: each field at its offset, then the CRC-32C of bytes 0..60 in
/// bytes 60..64 (the layout shared by segment headers, SEG-2, and limit files, LIM-2).
pub(crate) fn write_checked_block(bytes: &mut [u8; 64], fields: &[(usize, &[u8])]) {
    for (at, field) in fields {
        if let Some(slot) = bytes.get_mut(*at..at + field.len()) {
            slot.copy_from_slice(field);
        }
    }
    let crc = crc32c::crc32c(&bytes[..60]);
    bytes[60..64].copy_from_slice(&crc.to_le_bytes());
}

impl SegmentHeader {
    /// The header's 64 bytes.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut bytes = [0; SEGMENT_HEADER_LEN];
        let fields: [(usize, &[u8]); 8] = [
            (0, &SEGMENT_MAGIC),
            (8, &FORMAT_VERSION.to_le_bytes()),
            (
                12,
                &u32::try_from(SEGMENT_HEADER_LEN).unwrap_or(0).to_le_bytes(),
            ),
            (16, &self.log_id),
            (32, &self.index.to_le_bytes()),
            (40, &self.first_seq.to_le_bytes()),
            (48, &self.capacity.to_le_bytes()),
            (58, &self.incompat_features.to_le_bytes()),
        ];
        write_checked_block(&mut bytes, &fields);
        bytes
    }

    /// Reads a header from the start of a segment file (SEG-2): its magic and version
    /// first (VER-2), then its checksum, then its features (SEG-9) and fields.
    ///
    /// # Errors
    /// [`HeaderError`].
    pub fn decode(bytes: &[u8]) -> Result<Self, HeaderError> {
        // VER-2: magic and version before anything else, the checksum included.
        let version = match check_version(bytes, SEGMENT_MAGIC, FORMAT_VERSION) {
            Ok(version) => version,
            Err(Some(unsupported)) => return Err(HeaderError::Version(unsupported)),
            Err(None) if bytes.get(..8) == Some(&SEGMENT_MAGIC[..]) => {
                return Err(HeaderError::Invalid("version 0: header not written"));
            }
            Err(None) => return Err(HeaderError::Invalid("wrong magic")),
        };
        let header = bytes
            .get(..SEGMENT_HEADER_LEN)
            .ok_or(HeaderError::Invalid("shorter than 64 bytes"))?;
        let crc = u32_at(header, 60).unwrap_or(0);
        if crc32c::crc32c(header.get(..60).unwrap_or_default()) != crc {
            return Err(HeaderError::Invalid("header checksum mismatch"));
        }
        // SEG-9: under the checksum, so that damage is `CORRUPT`, not a feature.
        check_features(header, 56, version, SEGMENT_INCOMPAT_KNOWN)
            .map_err(HeaderError::Version)?;
        if u32_at(header, 12).map(|n| n as usize) != Some(SEGMENT_HEADER_LEN) {
            return Err(HeaderError::Invalid("header length"));
        }
        let incompat_features =
            u32_at(header, 56).map_or(0, |word| u16::try_from(word >> 16).unwrap_or(0));
        // SEG-9: one record format per segment; no writer sets both.
        if incompat_features & (CHUNK_RECORDS | COMPACT_RECORDS) == CHUNK_RECORDS | COMPACT_RECORDS
        {
            return Err(HeaderError::Invalid(
                "both CHUNK_RECORDS and COMPACT_RECORDS are set (SEG-9)",
            ));
        }
        let mut log_id = [0; 16];
        log_id.copy_from_slice(header.get(16..32).unwrap_or(&[0; 16]));
        Ok(Self {
            log_id,
            index: u64_at(header, 32).unwrap_or(0),
            first_seq: u64_at(header, 40).unwrap_or(0),
            capacity: u64_at(header, 48).unwrap_or(0),
            // Checked above: only bits this build knows.
            incompat_features,
        })
    }

    /// The records the segment holds (SEG-9): compact records when it sets
    /// [`COMPACT_RECORDS`], else version 1 records.
    #[must_use]
    pub fn format(&self) -> crate::record::Format {
        if self.incompat_features & COMPACT_RECORDS != 0 {
            crate::record::Format::Compact
        } else {
            crate::record::Format::V1
        }
    }
}

/// `FORMAT_VERSION` for the segment at `path` of another version (VER-1), or setting
/// incompatible features this build does not know (SEG-9, VER-3), naming them, the file
/// and the offset of the field that says so (RD-7): `format_version` at 8,
/// `incompat_features` at 58.
pub fn version_error(found: Unsupported, path: &std::path::Path) -> crate::Error {
    let offset = if found.unknown_incompat == 0 { 8 } else { 58 };
    unsupported_error(found, FORMAT_VERSION).at_place(path, offset)
}

/// `FORMAT_VERSION` for a file of a kind whose supported version is `supported`: the
/// version found, and the unknown incompatible feature bits when those are why (VER-3).
pub(crate) fn unsupported_error(found: Unsupported, supported: u32) -> crate::Error {
    let Unsupported {
        version,
        unknown_incompat,
    } = found;
    let found = if unknown_incompat == 0 {
        version.to_string()
    } else {
        format!("{version} with unknown incompat features {unknown_incompat:#06x}")
    };
    crate::ErrorKind::FormatVersion {
        found,
        newer: version >= supported,
    }
    .into()
}

/// The file name of the segment starting at `first_seq` (LOG-1).
pub fn segment_name(first_seq: u64) -> String {
    seq_file_name(first_seq, ".seg")
}

/// The file name of a segment's offset index (LOG-1, IDX-1).
pub fn index_name(first_seq: u64) -> String {
    seq_file_name(first_seq, ".idx")
}

/// `first_seq` as 20 decimal digits, zero-padded (LOG-1).
fn seq_digits(first_seq: u64) -> [u8; 20] {
    let mut digits = [b'0'; 20];
    let mut rest = first_seq;
    for digit in digits.iter_mut().rev() {
        // `rest % 10` is below 10, so the cast is exact.
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    digits
}

/// `first_seq` as 20 decimal digits, zero-padded, then `suffix` (LOG-1): what
/// `format!("{first_seq:020}{suffix}")` gives, without the formatting machinery (open
/// names every segment of the chain).
pub(crate) fn seq_file_name(first_seq: u64, suffix: &str) -> String {
    let digits = seq_digits(first_seq);
    let mut name = String::with_capacity(20 + suffix.len());
    // u64::MAX has 20 digits, so none is lost; digits are ASCII.
    name.push_str(std::str::from_utf8(&digits).unwrap_or_default());
    name.push_str(suffix);
    name
}

/// The path of the file named for `first_seq` with `suffix` in `dir`: what
/// `dir.join(seq_file_name(first_seq, suffix))` gives, in one allocation and without
/// parsing `dir`'s components.
pub(crate) fn seq_file_path(
    dir: &std::path::Path,
    first_seq: u64,
    suffix: &str,
) -> std::path::PathBuf {
    let digits = seq_digits(first_seq);
    let dir = dir.as_os_str();
    let mut path = std::ffi::OsString::with_capacity(dir.len() + 21 + suffix.len());
    path.push(dir);
    if !dir.is_empty() && !dir.as_encoded_bytes().ends_with(b"/") {
        path.push("/");
    }
    path.push(std::str::from_utf8(&digits).unwrap_or_default());
    path.push(suffix);
    path.into()
}

/// The `first_seq` a segment file name encodes, or `None` for other names.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    parse_first_seq(name.strip_suffix(".seg")?)
}

/// The `first_seq` of a file name's stem: 20 decimal digits (LOG-1), or `None`.
pub(crate) fn parse_first_seq(digits: &str) -> Option<u64> {
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())?
}

/// CZ-1: the logical segment of the plain segment `bytes` (a file's bytes): its header,
/// with `capacity` set to the end of its records, and its records, nothing after them:
/// what compaction compresses. `None` when its header does not check out.
#[must_use]
pub fn logical_segment(bytes: &[u8]) -> Option<Vec<u8>> {
    let header = SegmentHeader::decode(bytes).ok()?;
    let mut end = SEGMENT_HEADER_LEN;
    let format = header.format();
    while let Some(Ok((_, len))) = bytes
        .get(end..)
        .map(|rest| crate::record::decode_as(format, rest))
    {
        end += len;
    }
    let mut logical = bytes.get(..end)?.to_vec();
    let head = SegmentHeader {
        capacity: end as u64,
        ..header
    }
    .encode();
    logical
        .get_mut(..SEGMENT_HEADER_LEN)?
        .copy_from_slice(&head);
    Some(logical)
}

/// The header bytes of segment `file`, read with `pread` (RD-8); fewer when it is shorter.
pub(crate) fn read_head(file: &std::fs::File) -> Vec<u8> {
    super::map::read_head(file, SEGMENT_HEADER_LEN)
}

pub(crate) use super::compressed::materialize;
/// A logical segment compressed (§14, CZ-5), and a compressed segment file's logical
/// segment, every block checked (CZ-3).
#[cfg(feature = "compress")]
pub use super::compressed::{compress, decompress};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// SEG-6: a grown length holds the bytes, is a length the writer may set, and
        /// wastes less than one step unless capped by the capacity.
        #[test]
        fn grown_lengths_hold_their_bytes_in_steps(
            capacity in 136_u64..=u64::from(u32::MAX),
            end in 0_u64..=u64::from(u32::MAX),
        ) {
            let end = end.min(capacity);
            let len = grown_len(end, capacity);
            prop_assert!(len >= end && len <= capacity);
            prop_assert!(is_grown_len(len, capacity));
            prop_assert!(len == capacity || len - end < SEGMENT_GROW_BYTES);
            // A length off the steps (and short of the capacity) is never one.
            let off = len.saturating_sub(8);
            prop_assert_eq!(is_grown_len(off, capacity), off == 0 || off.is_multiple_of(SEGMENT_GROW_BYTES));
        }

        /// The hand-made names and paths equal what the formatter and `Path::join` give.
        #[test]
        fn seq_file_names_and_paths_match_format_and_join(
            first_seq in prop_oneof![any::<u64>(), 0..1000_u64, Just(u64::MAX)],
            dir in prop_oneof![
                Just(String::new()), Just("/".to_owned()), Just("log".to_owned()),
                Just("/tmp/s/log/".to_owned()), "[a-z/]{0,12}",
            ],
        ) {
            for suffix in [".seg", ".idx", ".lim"] {
                let name = seq_file_name(first_seq, suffix);
                prop_assert_eq!(&name, &format!("{first_seq:020}{suffix}"));
                let dir = std::path::Path::new(&dir);
                prop_assert_eq!(seq_file_path(dir, first_seq, suffix), dir.join(&name));
            }
            prop_assert_eq!(parse_segment_name(&segment_name(first_seq)), Some(first_seq));
        }
    }
}
