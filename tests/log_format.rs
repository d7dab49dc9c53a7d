//! The worked example of `format-spec/log-format.md` §11: `format-spec/vectors/segment-v1.seg`
//! is a segment of three records. The encoder must reproduce it byte for byte, and the
//! decoder must read back every field listed in `segment-v1.txt`.

use surfacelog::event::{Event, EventFields, SurfaceOp};
use surfacelog::log::segment::{SEGMENT_HEADER_LEN, SegmentHeader};
use surfacelog::record::{decode, encode_event, frame_len, u32_at};

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
            capacity: CAPACITY
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
                event.text.len(),
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
