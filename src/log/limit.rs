//! Segment limits (LIM-1 to LIM-6): a small checksummed file that ends a segment, shared
//! with another log by a hard link, before its physical end. A fork links the segment
//! holding its boundary instead of copying it, and the limit says where the child's part
//! of it ends.
#![deny(clippy::indexing_slicing)]

use std::path::Path;

use super::segment::{
    LogId, SEGMENT_HEADER_LEN, SegmentHeader, Unsupported, check_features, check_version,
    unsupported_error,
};
use crate::record::{decode_as, u32_at, u64_at};

/// `"surflim\0"` (LIM-2).
pub const LIMIT_MAGIC: [u8; 8] = *b"surflim\0";
/// The limit file version this build reads and writes (LIM-2).
pub const LIMIT_VERSION: u32 = 1;
/// The length of a limit file (LIM-2).
pub const LIMIT_LEN: usize = 64;
/// The incompatible feature bits this build knows in a limit file (LIM-7): none.
pub const LIMIT_INCOMPAT_KNOWN: u16 = 0;

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
    /// its magic and version first (VER-2), then its length and checksum, its features
    /// (LIM-7) and fields. A limit is authoritative, so one that does not check out is
    /// refused, never ignored.
    ///
    /// # Errors
    /// Why the limit is refused: [`LimitError::Version`] for a file of a version or with
    /// incompatible features this build does not read, [`LimitError::Record`] for a limit
    /// that checks out over a segment whose record at its last offset does not,
    /// [`LimitError::Invalid`] otherwise.
    pub fn decode(
        bytes: &[u8],
        header: &SegmentHeader,
        segment: &[u8],
    ) -> Result<Self, LimitError> {
        let invalid = LimitError::Invalid("an invalid segment limit (LIM-3)");
        // VER-2: magic and version before the length and the checksum, which a later
        // version may change.
        let version = check_version(bytes, LIMIT_MAGIC, LIMIT_VERSION)
            .map_err(|found| found.map_or(invalid, LimitError::Version))?;
        if bytes.len() != LIMIT_LEN {
            return Err(invalid);
        }
        let crc = u32_at(bytes, 60).ok_or(invalid)?;
        if crc32c::crc32c(bytes.get(..60).unwrap_or_default()) != crc {
            return Err(invalid);
        }
        // LIM-7: the features under the checksum; the other reserved field is zero.
        check_features(bytes, 12, version, LIMIT_INCOMPAT_KNOWN).map_err(LimitError::Version)?;
        if u32_at(bytes, 56) != Some(0) {
            return Err(LimitError::Invalid(
                "a segment limit with a non-zero reserved field (LIM-2)",
            ));
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
            return Err(LimitError::Invalid(
                "a segment limit of another segment (LIM-3)",
            ));
        }
        if limit.seq_next <= limit.first_seq
            || (limit.last_offset as usize) < SEGMENT_HEADER_LEN
            || u64::from(limit.end) > header.capacity
        {
            return Err(invalid);
        }
        let last = segment
            .get(limit.last_offset as usize..limit.end as usize)
            .and_then(|rest| decode_as(header.format(), rest).ok());
        // LIM-3: the record at `last_offset` ends the limited part: its last event is
        // `seq_next − 1` (a compact run ends there too), and it ends at `end`.
        match last {
            Some((record, len))
                if record.seq_end() == limit.seq_next
                    && limit.last_offset as usize + len == limit.end as usize =>
            {
                Ok(limit)
            }
            // The limit checks out; the segment's record under it does not: damage in
            // the segment, at that record (RCV-13).
            _ => Err(LimitError::Record(limit.last_offset)),
        }
    }

    /// Reads and checks the limit file at `path` (LIM-3).
    ///
    /// # Errors
    /// `CORRUPT` for a limit that does not check out (at the limit file), or for the
    /// segment's record under it that does not (at the segment and the record's offset,
    /// RCV-13), `FORMAT_VERSION` for one of a
    /// version or with incompatible features this build does not read (VER-2, LIM-7),
    /// `IO`.
    pub fn load(
        storage: &dyn crate::storage::Storage,
        path: &Path,
        header: &SegmentHeader,
        segment: &[u8],
    ) -> crate::Result<Self> {
        // A limit file is a few dozen bytes (LIM-1); a longer one is not read whole.
        let bytes = crate::storage::read_file_at_most(storage, path, 1 << 20)
            .map_err(|e| crate::Error::io("read", path, &e))?
            .unwrap_or_else(|| vec![0xFF]);
        Self::decode(&bytes, header, segment).map_err(|error| match error {
            LimitError::Invalid(reason) => super::reader::corrupt(path, 0, reason),
            LimitError::Record(offset) => {
                super::reader::corrupt(&path.with_extension("seg"), offset as usize, LAST_RECORD)
            }
            LimitError::Version(found) => unsupported_error(found, LIMIT_VERSION).at_place(path, 8),
        })
    }
}

/// Why a limit file is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitError {
    /// It does not check out (LIM-3): `CORRUPT` at the limit file.
    Invalid(&'static str),
    /// It checks out, but the segment's record at its last offset (given) does not carry
    /// its last seq or end at its end (LIM-3): `CORRUPT` at the segment and that offset
    /// (RCV-13).
    Record(u32),
    /// A version, or incompatible features, this build does not read (VER-2, LIM-7):
    /// `FORMAT_VERSION`.
    Version(Unsupported),
}

/// Why [`LimitError::Record`] is damage.
pub const LAST_RECORD: &str =
    "the record a segment limit ends at does not check out (LIM-3, RCV-13)";

/// The file name of the limit of the segment starting at `first_seq` (LOG-1, LIM-1).
pub fn limit_name(first_seq: u64) -> String {
    super::segment::seq_file_name(first_seq, ".lim")
}

#[cfg(test)]
mod tests {
    #![expect(
        clippy::indexing_slicing,
        reason = "tests index their own fixed buffers"
    )]
    use super::*;
    use crate::event::{Event, EventFields};

    /// A segment of one record, and the limit that ends it after that record.
    fn limited() -> (SegmentHeader, Vec<u8>, Limit) {
        let header = SegmentHeader {
            log_id: *b"limited-log-id-1",
            index: 0,
            first_seq: 0,
            capacity: 4096,
            incompat_features: 0,
        };
        let text = r#"{"type":"t","seq":0,"time":0,"data":1}"#;
        let fields = EventFields {
            event_type: "t".into(),
            seq: 0,
            time: 0,
            surface_op: None,
            sources: None,
            ignorable: false,
        };
        let event = Event::new(
            text.to_owned(),
            text.len() - 2..text.len() - 1,
            None,
            fields,
        );
        let mut segment = header.encode().to_vec();
        crate::record::encode_event(&event, &mut segment);
        let limit = Limit {
            log_id: header.log_id,
            first_seq: 0,
            seq_next: 1,
            last_offset: 64,
            end: u32::try_from(segment.len()).unwrap(),
        };
        segment.resize(4096, 0);
        (header, segment, limit)
    }

    fn reseal(bytes: &mut [u8; LIMIT_LEN]) {
        let crc = crc32c::crc32c(&bytes[..60]);
        bytes[60..64].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn lim_3_a_limit_round_trips() {
        let (header, segment, limit) = limited();
        assert_eq!(Limit::decode(&limit.encode(), &header, &segment), Ok(limit));
    }

    /// VER-2: a later version is refused as a version (`FORMAT_VERSION`), not as damage,
    /// whatever its length and checksum: they are read after the version.
    #[test]
    fn ver_2_a_later_limit_version_is_refused_before_its_length_and_checksum() {
        let (header, segment, limit) = limited();
        let mut bytes = limit.encode().to_vec();
        bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
        bytes.extend_from_slice(&[0; 16]);
        let found = Unsupported {
            version: 2,
            unknown_incompat: 0,
        };
        assert_eq!(
            Limit::decode(&bytes, &header, &segment),
            Err(LimitError::Version(found))
        );
        let error = unsupported_error(found, LIMIT_VERSION);
        assert_eq!(error.code(), "FORMAT_VERSION");
        // A version-1 limit whose checksum fails, or of version 0, is damage.
        let mut damaged = limit.encode();
        damaged[60] ^= 1;
        assert!(matches!(
            Limit::decode(&damaged, &header, &segment),
            Err(LimitError::Invalid(_))
        ));
        let mut zero = limit.encode();
        zero[8..12].fill(0);
        reseal(&mut zero);
        assert!(matches!(
            Limit::decode(&zero, &header, &segment),
            Err(LimitError::Invalid(_))
        ));
    }

    /// LIM-7, VER-3: an unknown incompatible feature bit refuses the limit, naming the
    /// bit; an unknown compatible one is ignored; the other reserved field stays zero.
    #[test]
    fn lim_7_unknown_incompat_features_refuse_and_unknown_compat_features_are_ignored() {
        let (header, segment, limit) = limited();
        let mut incompat = limit.encode();
        incompat[15] = 0x80;
        reseal(&mut incompat);
        let refused = Limit::decode(&incompat, &header, &segment);
        assert_eq!(
            refused,
            Err(LimitError::Version(Unsupported {
                version: 1,
                unknown_incompat: 0x8000,
            }))
        );
        let Err(LimitError::Version(found)) = refused else {
            unreachable!()
        };
        let message = unsupported_error(found, LIMIT_VERSION).to_string();
        assert!(message.contains("incompat features 0x8000"), "{message}");
        let mut compat = limit.encode();
        compat[12] = 0x01;
        compat[13] = 0x40;
        reseal(&mut compat);
        assert_eq!(Limit::decode(&compat, &header, &segment), Ok(limit));
        let mut reserved = limit.encode();
        reserved[56] = 1;
        reseal(&mut reserved);
        assert!(matches!(
            Limit::decode(&reserved, &header, &segment),
            Err(LimitError::Invalid(_))
        ));
    }
}
