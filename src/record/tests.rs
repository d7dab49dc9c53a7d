#![expect(
    clippy::indexing_slicing,
    reason = "tests index their own fixed buffers"
)]

use proptest::prelude::*;

use super::*;
use crate::event::{EventFields, Vocabulary};
use crate::limits::SAFE_INTEGER_MAX;
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

/// Recomputes the checksum of the record at the start of `bytes` (REC-2), as a writer
/// would have: what is left to refuse is the body.
fn reseal(bytes: &mut [u8]) {
    let len = u32_at(bytes, 0).unwrap() as usize;
    let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[..4]), &bytes[8..8 + len]);
    bytes[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// The body field at body offset `at`, as a frame offset.
const fn body(at: usize) -> usize {
    FRAME_HEADER_LEN + at
}

fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

fn put_u64(bytes: &mut [u8], at: usize, value: u64) {
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// Applies `change` to the record's flags.
fn change_flags(bytes: &mut [u8], change: impl Fn(u16) -> u16) {
    let flags = change(u16::from_le_bytes([bytes[body(16)], bytes[body(17)]]));
    bytes[body(16)..body(18)].copy_from_slice(&flags.to_le_bytes());
}

/// Moves the boundary between the type and the text by `by` bytes (positive: the type
/// takes the text's first bytes), keeping REC-5 and the spans' positions in the text.
fn move_type_boundary(bytes: &mut [u8], by: i32) {
    let type_len = u16::from_le_bytes([bytes[body(18)], bytes[body(19)]]);
    let type_len = u16::try_from(i32::from(type_len) + by).unwrap();
    bytes[body(18)..body(20)].copy_from_slice(&type_len.to_le_bytes());
    let shift = |v: u32| u32::try_from(i64::from(v) - i64::from(by)).unwrap();
    for at in [24, 28, 32, 36, 40] {
        let v = u32_at(bytes, body(at)).unwrap();
        // The text and the spans within it: the text grows when the type shrinks; the
        // spans keep pointing at the same bytes (a zero span stays zero).
        let v = match (at, v) {
            (24, v) => shift(v),
            (_, 0) => 0,
            (_, v) => shift(v),
        };
        put_u32(bytes, body(at), v);
    }
}

/// The refusal of `bytes` once resealed: its reason, so that each case below fails if
/// the check it is about is removed (another check would refuse it for another reason,
/// or none would).
fn refusal(mut bytes: Vec<u8>) -> &'static str {
    reseal(&mut bytes);
    match decode(&bytes) {
        Err(RecordError::Body(reason)) => reason,
        other => panic!("not refused as a bad body (RCV-8): {other:?}"),
    }
}

/// An event with every optional field: sources, a replace, a message.
fn full_event() -> Event {
    let text = r#"{"type":"user/message","seq":7,"time":5,"data":{"id":"u","role":"user","source":{"kind":"user"},"content":["é"]},"sourceEventSeqs":[2],"surfaceOp":{"op":"replace","start":3,"end":4}}"#;
    let data = text.find("{\"id\"").unwrap()..text.find(",\"sourceEventSeqs\"").unwrap();
    let fields = EventFields {
        event_type: "user/message".into(),
        seq: 7,
        time: 5,
        surface_op: Some(SurfaceOp::Replace { start: 3, end: 4 }),
        sources: Some(vec![2]),
        ignorable: false,
    };
    Event::new(text.to_owned(), data.clone(), Some(data), fields)
}

/// A log-only event: no surface op, no sources, no message.
fn plain_event() -> Event {
    event_from_json(r#"{"type":"t","seq":0,"time":0,"data":"é"}"#)
}

/// Which correct record a non-canonical case starts from.
#[derive(Debug, Clone, Copy)]
enum Base {
    /// [`full_event`].
    Full,
    /// [`full_event`] as an append: bit 1 clear, the replace range zero.
    Append,
    /// [`plain_event`].
    Plain,
}

impl Base {
    fn bytes(self) -> Vec<u8> {
        match self {
            Self::Full => encoded(&full_event()),
            Self::Plain => encoded(&plain_event()),
            Self::Append => {
                let mut bytes = encoded(&full_event());
                change_flags(&mut bytes, |f| f & !FLAG_REPLACE);
                put_u64(&mut bytes, body(48), 0);
                put_u64(&mut bytes, body(56), 0);
                reseal(&mut bytes);
                bytes
            }
        }
    }
}

/// A record the encoder cannot write: the reason it is refused for, the correct record
/// it is made from, and the change that makes it.
type Case = (&'static str, Base, fn(&mut Vec<u8>));

fn non_canonical_cases() -> Vec<Case> {
    vec![
        ("unknown flag bits", Base::Plain, |b| {
            change_flags(b, |f| f | 1 << 6);
        }),
        // Bit 5 makes the body a chunk record's (REC-12), which a §4 body is not.
        ("lengths do not add up", Base::Plain, |b| {
            change_flags(b, |f| f | 1 << 5);
        }),
        ("reserved field is not zero", Base::Plain, |b| {
            put_u32(b, body(44), 1);
        }),
        ("replace flag without surfaceOp", Base::Plain, |b| {
            change_flags(b, |f| f | FLAG_REPLACE);
        }),
        (
            "replace range without the replace flag",
            Base::Append,
            |b| {
                put_u64(b, body(48), 3);
            },
        ),
        (
            "replace range without the replace flag",
            Base::Append,
            |b| {
                put_u64(b, body(56), 4);
            },
        ),
        ("replace range without the replace flag", Base::Plain, |b| {
            put_u64(b, body(56), 1);
        }),
        ("sources without their flag", Base::Full, |b| {
            change_flags(b, |f| f & !FLAG_SOURCES);
        }),
        ("message span without the message flag", Base::Full, |b| {
            change_flags(b, |f| f & !FLAG_MESSAGE);
        }),
        ("message span without the message flag", Base::Plain, |b| {
            put_u32(b, body(40), 1);
        }),
        ("type length outside 1..=256", Base::Plain, |b| {
            move_type_boundary(b, -1);
        }),
        ("time is not a safe integer", Base::Plain, |b| {
            put_u64(b, body(8), 1 << 53);
        }),
        ("time is not a safe integer", Base::Plain, |b| {
            put_u64(b, body(8), (-(1_i64 << 53)).cast_unsigned());
        }),
        ("text is not UTF-8", Base::Plain, |b| {
            // The second byte of the text's `é` (the type is `t`, one byte).
            let at = (body(65)..b.len()).find(|&i| b[i] == 0xC3).unwrap();
            b[at + 1] = 0xFF;
        }),
        ("type is not UTF-8", Base::Plain, |b| {
            b[body(64)] = 0xFF;
        }),
        ("span outside the text", Base::Plain, |b| {
            let text_len = u32_at(b, body(24)).unwrap();
            put_u32(b, body(32), text_len + 1);
        }),
        ("span outside the text", Base::Plain, |b| {
            let end = u32_at(b, body(32)).unwrap();
            put_u32(b, body(28), end + 1);
        }),
        ("span outside the text", Base::Plain, |b| {
            // The data `"é"` starts at its quote; one byte after the `é` starts is inside it.
            let start = u32_at(b, body(28)).unwrap();
            put_u32(b, body(28), start + 2);
        }),
        ("message outside data", Base::Full, |b| {
            let start = u32_at(b, body(28)).unwrap();
            put_u32(b, body(36), start - 1);
        }),
        ("span outside the text", Base::Full, |b| {
            // Inside data, but in the middle of the `é`.
            let text_start = body(64 + 8 + 12);
            let at = (text_start..b.len()).find(|&i| b[i] == 0xC3).unwrap() - text_start;
            put_u32(b, body(40), u32::try_from(at + 1).unwrap());
        }),
        ("lengths do not add up", Base::Plain, |b| {
            let text_len = u32_at(b, body(24)).unwrap();
            put_u32(b, body(24), text_len - 1);
        }),
        ("padding is not zero", Base::Plain, |b| {
            let last = b.len() - 1;
            b[last] = 1;
        }),
    ]
}

/// REC-6, REC-9: every record the encoder cannot write is refused with a body error
/// (RCV-8: `CORRUPT`), even when its checksum matches.
#[test]
fn rec_9_every_non_canonical_body_is_refused() {
    for base in [Base::Full, Base::Append, Base::Plain] {
        assert!(decode(&base.bytes()).is_ok(), "{base:?} is a record");
    }
    for (i, (expected, base, change)) in non_canonical_cases().into_iter().enumerate() {
        let mut bytes = base.bytes();
        change(&mut bytes);
        let reason = refusal(bytes);
        assert!(
            reason.starts_with(expected),
            "case {i}: expected {expected:?}, refused for {reason:?}"
        );
    }
}

/// REC-9: the type may be 256 bytes long but not 257.
#[test]
fn rec_9_a_type_of_257_bytes_is_refused() {
    let long = "a".repeat(EVENT_TYPE_BYTES_MAX);
    let text = format!(r#"{{"type":"{long}","seq":0,"time":0,"data":1}}"#);
    let data = text.len() - 2..text.len() - 1;
    let fields = EventFields {
        event_type: long.into(),
        seq: 0,
        time: 0,
        surface_op: None,
        sources: None,
        ignorable: false,
    };
    let bytes = encoded(&Event::new(text, data, None, fields));
    assert!(decode(&bytes).is_ok(), "256 bytes is a type");
    let mut longer = bytes;
    move_type_boundary(&mut longer, 1);
    assert!(refusal(longer).starts_with("type length outside 1..=256"));
}

/// REC-9: the checks that the fuzz target relies on: a body that passes every check
/// re-encodes to its own bytes (the cases above are those that would not).
fn assert_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok((event, len)) = decode(bytes) {
        let mut again = Vec::new();
        encode(&event, &mut again);
        prop_assert_eq!(
            &again[..],
            &bytes[..len],
            "accepted bytes re-encode to themselves"
        );
    }
    Ok(())
}

fn arb_event() -> impl Strategy<Value = Event> {
    (
        0..=SAFE_INTEGER_MAX.unsigned_abs(),
        -SAFE_INTEGER_MAX..=SAFE_INTEGER_MAX,
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
    /// REC-9, first direction: `decode ∘ encode` is the identity on events.
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
        assert_canonical(&bytes)?;
    }

    /// REC-9, second direction: `encode ∘ decode` is the identity on every byte string
    /// decode accepts. Random bytes rarely pass the checksum, so the bytes here are
    /// records changed in a few places and resealed, as a writer with a bug would write
    /// them: each is refused, or re-encodes to exactly its bytes.
    #[test]
    fn accepted_bytes_re_encode_to_themselves(
        event in arb_event(),
        changes in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        small in any::<bool>(),
    ) {
        let mut bytes = encoded(&event);
        let frame = bytes.len();
        for (at, value) in changes {
            // Anywhere after `len` and `crc`: the body and the padding.
            let at = FRAME_HEADER_LEN + at.index(frame - FRAME_HEADER_LEN);
            // Small values hit the flag, length and span fields' interesting cases.
            bytes[at] = if small { value % 4 } else { value };
        }
        reseal(&mut bytes);
        assert_canonical(&bytes)?;
    }
}
