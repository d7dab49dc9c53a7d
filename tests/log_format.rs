//! The worked example of `format-spec/log-format.md` §11: `format-spec/vectors/segment-v1.seg`
//! is a segment of three records. The encoder must reproduce it byte for byte, and the
//! decoder must read back every field listed in `segment-v1.txt`.

use std::path::Path;

use surfacelog::internals::event::{Event, EventFields, EventSource, SurfaceOp};
use surfacelog::internals::log::segment::{SEGMENT_HEADER_LEN, SegmentHeader, segment_name};
use surfacelog::internals::log::{DiskLog, LogOptions, LogReader};
use surfacelog::internals::record::{decode, encode_event, frame_len, u32_at};

const VECTOR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/format-spec/vectors/segment-v1.seg"
);
const LOG_ID: [u8; 16] = *b"example-log-id-1";
const CAPACITY: u64 = 1024;
const USER: &str =
    r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#;

fn example_events() -> Vec<Event> {
    let make = |text: String, data_key: &str, fields: EventFields, message: bool| {
        let start = text.find(data_key).unwrap() + data_key.len();
        let data = start
            ..start
                + if fields.event_type == "turn/start" {
                    10
                } else {
                    USER.len()
                };
        Event::new(text, data.clone(), message.then_some(data), fields)
    };
    let fields = |event_type: &str, seq, surface_op, sources| EventFields {
        event_type: event_type.to_owned().into(),
        seq,
        time: 1_700_000_000_000 + i64::try_from(seq).unwrap(),
        surface_op,
        sources,
        ignorable: false,
    };
    vec![
        make(
            r#"{"type":"turn/start","seq":0,"time":1700000000000,"data":{"turn":1}}"#.into(),
            "\"data\":",
            fields("turn/start", 0, None, None),
            false,
        ),
        make(
            format!(
                r#"{{"type":"user/message","seq":1,"time":1700000000001,"data":{USER},"surfaceOp":"append"}}"#
            ),
            "\"data\":",
            fields("user/message", 1, Some(SurfaceOp::Append), None),
            true,
        ),
        make(
            format!(
                r#"{{"type":"user/message","seq":2,"time":1700000000002,"data":{USER},"sourceEventSeqs":[1],"surfaceOp":{{"op":"replace","start":1,"end":1}}}}"#
            ),
            "\"data\":",
            fields(
                "user/message",
                2,
                Some(SurfaceOp::Replace { start: 1, end: 1 }),
                Some(vec![1]),
            ),
            true,
        ),
    ]
}

fn example_bytes() -> Vec<u8> {
    let header = SegmentHeader {
        log_id: LOG_ID,
        index: 0,
        first_seq: 0,
        capacity: CAPACITY,
        incompat_features: 0,
    };
    let mut bytes = header.encode().to_vec();
    for event in example_events() {
        encode_event(&event, &mut bytes);
    }
    bytes.resize(usize::try_from(CAPACITY).unwrap(), 0);
    bytes
}

#[test]
fn the_encoder_reproduces_the_vector_byte_for_byte() {
    let vector = std::fs::read(VECTOR).expect("the vector is committed");
    assert_eq!(example_bytes(), vector);
}

#[test]
fn the_decoder_reads_every_listed_field() {
    let vector = std::fs::read(VECTOR).unwrap();
    let header = SegmentHeader::decode(&vector).unwrap();
    assert_eq!(
        header,
        SegmentHeader {
            log_id: LOG_ID,
            index: 0,
            first_seq: 0,
            capacity: CAPACITY,
            incompat_features: 0,
        }
    );
    assert_eq!(&vector[..8], b"surflog\0");
    let mut offset = SEGMENT_HEADER_LEN;
    let expected = [
        (0, 68, "turn/start", None, 0u16),
        (1, 171, "user/message", Some(SurfaceOp::Append), 0b1_0001),
        (
            2,
            219,
            "user/message",
            Some(SurfaceOp::Replace { start: 1, end: 1 }),
            0b1_0111,
        ),
    ];
    for (seq, text_len, event_type, op, flags) in expected {
        let (event, len) = decode(&vector[offset..]).unwrap();
        assert_eq!(
            (
                event.seq,
                event.text().len(),
                event.event_type,
                event.surface_op
            ),
            (seq, text_len, event_type, op)
        );
        assert_eq!(
            u16::from_le_bytes([vector[offset + 24], vector[offset + 25]]),
            flags,
            "flags of seq {seq}"
        );
        assert_eq!(len, frame_len(u32_at(&vector, offset).unwrap() as usize));
        assert_eq!(offset % 8, 0);
        offset += len;
    }
    assert_eq!(u32_at(&vector, offset), Some(0), "the end marker (REC-1)");
    assert!(
        vector[offset..].iter().all(|b| *b == 0),
        "zeros to the end (SEG-5)"
    );
}

/// A log directory in the temp directory, removed when dropped (even when a test fails).
struct TempLog(tempfile::TempDir);

impl TempLog {
    /// A log directory holding the vector, changed by `change`, as its one segment.
    fn with_vector(name: &str, change: impl FnOnce(&mut [u8])) -> Self {
        let scratch = tempfile::Builder::new()
            .prefix(&format!("surfacelog-log-format-{name}-"))
            .tempdir()
            .unwrap();
        let dir = scratch.path();
        let mut bytes = std::fs::read(VECTOR).unwrap();
        change(&mut bytes);
        std::fs::write(dir.join(segment_name(0)), bytes).unwrap();
        std::fs::write(dir.join("LOCK"), b"").unwrap();
        Self(scratch)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

/// Rewrites the header's CRC (SEG-1) over its changed bytes.
fn reseal_header(bytes: &mut [u8]) {
    let crc = crc32c::crc32c(&bytes[..60]);
    bytes[60..64].copy_from_slice(&crc.to_le_bytes());
}

/// The error of a reader's and of a writer's open of `log`: both must refuse alike.
fn open_errors(log: &TempLog) -> [surfacelog::Error; 2] {
    let reader = LogReader::open(log.path()).expect_err("a reader refuses the log");
    [reader, writer_error(log)]
}

/// The error of a writer's open of `log`.
fn writer_error(log: &TempLog) -> surfacelog::Error {
    let Err(error) = DiskLog::open(log.path(), LogOptions::default()) else {
        panic!("a writer refuses the log");
    };
    error
}

/// VER-2: a segment of a later version is refused as such (`FORMAT_VERSION`), not as
/// damage, although its checksum is not version 1's: the version is read first.
#[test]
fn ver_2_a_later_segment_version_is_refused_before_its_checksum() {
    let log = TempLog::with_vector("v2", |b| {
        b[8..12].copy_from_slice(&2u32.to_le_bytes());
        // A later version may checksum other bytes: version 1's CRC does not match.
        b[60] ^= 0xFF;
    });
    for error in open_errors(&log) {
        assert_eq!(error.code(), "FORMAT_VERSION", "{error}");
        assert!(error.to_string().contains("found=2"), "{error}");
    }
}

/// VER-2: a version-1 header whose checksum fails is damage (`CORRUPT` at a writer's
/// open, RCV-7: segment 0 is never torn away), and a version of 0 (never written) is an
/// invalid header, not a version.
#[test]
fn ver_2_a_version_1_header_with_a_bad_checksum_is_corrupt() {
    for (name, at, value) in [("crc", 60, 0xFF), ("v0", 8, 0x01)] {
        let log = TempLog::with_vector(name, |b| b[at] ^= value);
        let error = writer_error(&log);
        assert_eq!(error.code(), "CORRUPT", "{name}: {error}");
    }
}

/// SEG-9, VER-3: an incompatible feature bit this build does not know refuses the log
/// (`FORMAT_VERSION`, naming the bits); a compatible one is ignored. Bit 2,
/// `COMPACT_RECORDS` (§4.2), is known: set over version 1 records, they are no compact
/// records (never read as events), and set with `CHUNK_RECORDS` the header is one no
/// writer writes (`CORRUPT`).
#[test]
fn seg_9_unknown_incompat_features_refuse_and_unknown_compat_features_are_ignored() {
    let log = TempLog::with_vector("incompat", |b| {
        b[58] = 0x08;
        reseal_header(b);
    });
    for error in open_errors(&log) {
        assert_eq!(error.code(), "FORMAT_VERSION", "{error}");
        assert!(
            error.to_string().contains("incompat features 0x0008"),
            "{error}"
        );
    }
    // Version 1 records under the bit are no compact records: a reader never reads them
    // as events (they are the last segment's tail, which RD-6 leaves to a writer's
    // recovery, §7, as it leaves any bytes no valid record follows).
    let log = TempLog::with_vector("compact", |b| {
        b[58] = 0x04;
        reseal_header(b);
    });
    match LogReader::open(log.path()) {
        Ok(reader) => assert_eq!(reader.seq_next(), 0),
        Err(error) => assert_eq!(error.code(), "CORRUPT", "{error}"),
    }
    let log = TempLog::with_vector("both", |b| {
        b[58] = 0x05;
        reseal_header(b);
    });
    for error in open_errors(&log) {
        assert_eq!(error.code(), "CORRUPT", "{error}");
    }
    let log = TempLog::with_vector("compat", |b| {
        b[56] = 0x01;
        b[57] = 0x80;
        reseal_header(b);
    });
    let reader = LogReader::open(log.path()).unwrap();
    assert_eq!(reader.seq_next(), 3);
    let (writer, _) = DiskLog::open(log.path(), LogOptions::default()).unwrap();
    assert_eq!(writer.seq_next(), 3);
    writer.close().unwrap();
}

/// SEG-9, CZ-6: the `COMPRESSED` bit on the only (so the last) segment: a build without
/// the `compress` feature refuses it as an unknown feature (`FORMAT_VERSION`), one with it
/// as a compressed last segment, which nothing writes (`CORRUPT`).
#[test]
fn seg_9_the_compressed_bit_is_known_only_with_its_feature() {
    let log = TempLog::with_vector("compressed-bit", |b| {
        b[58] |= 0x02;
        reseal_header(b);
    });
    for error in open_errors(&log) {
        if cfg!(feature = "compress") {
            assert_eq!(error.code(), "CORRUPT", "{error}");
            assert!(error.to_string().contains("CZ-6"), "{error}");
        } else {
            assert_eq!(error.code(), "FORMAT_VERSION", "{error}");
            assert!(
                error.to_string().contains("incompat features 0x0002"),
                "{error}"
            );
        }
    }
}

/// CZ-1, CZ-3: `segment-v1-compressed.seg` is the worked example's segment compressed (in
/// 4 KiB blocks at level 3): it decompresses to the example's logical segment (its header
/// with `capacity` the records' end, its bytes up to there), and this build's compression
/// of that segment decompresses to the same bytes.
#[cfg(feature = "compress")]
#[test]
fn cz_3_the_compressed_vector_decompresses_to_the_worked_example() {
    use surfacelog::internals::log::segment::{COMPRESSED, compress, decompress, logical_segment};
    let bytes = std::fs::read(VECTOR).unwrap();
    let logical = logical_segment(&bytes).unwrap();
    // The three records, and the header with `capacity` where they end.
    let end = logical.len();
    assert_eq!(end, 784);
    assert_eq!(logical[64..], bytes[64..end]);
    assert_eq!(SegmentHeader::decode(&logical).unwrap().capacity, 784);
    let path = Path::new(VECTOR).with_file_name("segment-v1-compressed.seg");
    let ours = compress(&logical, 4096, 3).unwrap().unwrap();
    // How the vector was made: `SURFACELOG_WRITE_VECTORS=1 cargo test --test log_format`.
    if std::env::var_os("SURFACELOG_WRITE_VECTORS").is_some() {
        std::fs::write(&path, &ours).unwrap();
    }
    let compressed = std::fs::read(&path).unwrap();
    let stored = SegmentHeader::decode(&compressed).unwrap();
    assert_eq!(stored.incompat_features, COMPRESSED);
    assert_eq!(stored.capacity, end as u64);
    assert_eq!(decompress(&compressed, &path).unwrap(), logical);
    assert_eq!(decompress(&ours, &path).unwrap(), logical);
}

/// REC-9, RCV-8: a record whose checksum matches but whose implied field disagrees with
/// its flags (a replace range on a record without the replace flag) is `CORRUPT` at a
/// writer's open, never decoded, never a torn tail.
#[test]
fn rec_9_a_non_canonical_record_is_corrupt_at_open() {
    let log = TempLog::with_vector("noncanonical", |b| {
        let (frame, body) = (SEGMENT_HEADER_LEN, SEGMENT_HEADER_LEN + 8);
        b[body + 48] = 5; // replace_start of the turn/start, which has no surfaceOp
        let len = u32_at(b, frame).unwrap() as usize;
        let crc = crc32c::crc32c_append(crc32c::crc32c(&b[frame..frame + 4]), &b[body..body + len]);
        b[frame + 4..frame + 8].copy_from_slice(&crc.to_le_bytes());
    });
    let error = writer_error(&log);
    assert_eq!(error.code(), "CORRUPT", "{error}");
    assert!(error.to_string().contains("RCV-8"), "{error}");
}
