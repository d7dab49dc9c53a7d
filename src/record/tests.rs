#![expect(
    clippy::indexing_slicing,
    reason = "tests index their own fixed buffers"
)]

use proptest::prelude::*;

use super::*;
use crate::event::{EventFields, Vocabulary};
use crate::surface::Surface;

fn event_from_json(text: &str) -> Event {
    let (_, log) = Surface::fold_json(&[text], &Vocabulary::dsh_v0()).unwrap();
    log.events()[0].clone()
}

fn encoded(event: &Event) -> Vec<u8> {
    let mut out = Vec::new();
    encode_event(event, &mut out);
    out
}

#[test]
fn rec_5_a_record_round_trips_with_every_field() {
    let text = r#"{"type":"user/message","seq":0,"time":-5,"data":{"id":"u","role":"user","source":{"kind":"user"},"content":[]},"sourceEventSeqs":[],"surfaceOp":{"op":"replace","start":3,"end":1},"ignorable":true}"#;
    // Built directly: the pure fold would refuse the replace of a missing node.
    let fields = EventFields {
        event_type: "user/message".into(),
        seq: 7,
        time: -5,
        surface_op: Some(SurfaceOp::Replace { start: 3, end: 1 }),
        sources: Some(vec![1, 3, u64::MAX]),
        ignorable: true,
    };
    let data = text.find("{\"id\"").unwrap()..text.find(",\"sourceEventSeqs\"").unwrap();
    let event = Event::new(text.to_owned(), data.clone(), Some(data), fields);
    let bytes = encoded(&event);
    assert_eq!(bytes.len() % RECORD_ALIGN, 0);
    let (decoded, len) = decode(&bytes).unwrap();
    assert_eq!(len, bytes.len());
    assert_eq!(decoded, event.as_ref());
    assert_eq!(decoded.sources.unwrap().to_vec(), vec![1, 3, u64::MAX]);
}

#[test]
fn rec_1_a_zero_length_is_the_end_and_short_bytes_are_truncated() {
    assert_eq!(decode(&[0; 16]).unwrap_err(), RecordError::End);
    assert_eq!(decode(&[1, 0]).unwrap_err(), RecordError::Truncated);
    assert_eq!(
        decode(&[8, 0, 0, 0, 0, 0, 0, 0]).unwrap_err(),
        RecordError::Length
    );
    let bytes = encoded(&event_from_json(
        r#"{"type":"t","seq":0,"time":0,"data":null}"#,
    ));
    assert_eq!(
        decode(&bytes[..bytes.len() - 8]).unwrap_err(),
        RecordError::Truncated
    );
}

#[test]
fn rec_2_the_checksum_covers_the_length() {
    let bytes = encoded(&event_from_json(
        r#"{"type":"t","seq":0,"time":0,"data":[1,2,3]}"#,
    ));
    let mut longer = bytes.clone();
    longer[0] += 8;
    longer.extend_from_slice(&[0; 8]);
    assert_eq!(decode(&longer).unwrap_err(), RecordError::Checksum);
}

#[test]
fn rec_6_bodies_that_checksum_but_break_the_rules_are_refused() {
    let bytes = encoded(&event_from_json(
        r#"{"type":"t","seq":0,"time":0,"data":1}"#,
    ));
    let reseal = |mut bytes: Vec<u8>| {
        let len = u32_at(&bytes, 0).unwrap() as usize;
        let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[..4]), &bytes[8..8 + len]);
        bytes[4..8].copy_from_slice(&crc.to_le_bytes());
        decode(&bytes).map(|_| ())
    };
    let mut unknown_flag = bytes.clone();
    unknown_flag[8 + 16] |= 0x80;
    assert!(matches!(reseal(unknown_flag), Err(RecordError::Body(_))));
    let mut data_out_of_text = bytes.clone();
    data_out_of_text[8 + 32] = 0xFF;
    assert!(matches!(
        reseal(data_out_of_text),
        Err(RecordError::Body(_))
    ));
    let mut bad_count = bytes.clone();
    bad_count[8 + 20] = 1;
    assert!(matches!(reseal(bad_count), Err(RecordError::Body(_))));
    let mut padding = bytes.clone();
    let last = padding.len() - 1;
    padding[last] = 1;
    assert!(matches!(reseal(padding), Err(RecordError::Body(_))));
}

fn arb_event() -> impl Strategy<Value = Event> {
    (
        0..u64::MAX / 2,
        any::<i64>(),
        "[a-z/]{1,20}",
        "[ -~é😀]{0,40}",
        prop::option::of(prop::collection::vec(any::<u64>(), 0..20)),
        prop::option::of((any::<u64>(), any::<u64>(), any::<bool>())),
        any::<bool>(),
    )
        .prop_map(|(seq, time, event_type, text, sources, op, ignorable)| {
            let mut data = String::new();
            crate::json::push_js_string(&mut data, text.as_bytes());
            let full = format!("{{\"data\":{data}}}");
            let span = 8..full.len() - 1;
            let surface_op = op.map(|(start, end, replace)| {
                if replace {
                    SurfaceOp::Replace { start, end }
                } else {
                    SurfaceOp::Append
                }
            });
            let message = ignorable.then(|| span.clone());
            let fields = EventFields {
                event_type: event_type.into(),
                seq,
                time,
                surface_op,
                sources,
                ignorable,
            };
            Event::new(full, span, message, fields)
        })
}

proptest! {
    #[test]
    fn records_round_trip(event in arb_event()) {
        let bytes = encoded(&event);
        let (decoded, len) = decode(&bytes).unwrap();
        prop_assert_eq!(len, bytes.len());
        prop_assert_eq!(decoded, event.as_ref());
    }

    #[test]
    fn every_single_bit_flip_is_detected(event in arb_event(), bit in any::<prop::sample::Index>()) {
        let mut bytes = encoded(&event);
        let at = bit.index(bytes.len() * 8);
        bytes[at / 8] ^= 1 << (at % 8);
        prop_assert!(decode(&bytes).is_err(), "flip of bit {} accepted", at);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode(&bytes);
    }
}
