//! Chunk records (`format-spec/log-format.md` §4.1, SEG-9): the bytes REC-12 lays down,
//! which events the writer stores as chunk records (REC-11), that every event reads back
//! as the text that was appended whatever its form, that a log written without the
//! feature keeps its records until its next segment, that the log shrinks, and that a
//! damaged chunk record is `CORRUPT` with its file and offset.

use std::fmt::Write as _;
use std::path::Path;

use proptest::prelude::*;
use surfacelog::internals::event::{Event, EventFields, EventSource};
use surfacelog::internals::log::segment::{CHUNK_RECORDS, SEGMENT_HEADER_LEN, SegmentHeader};
use surfacelog::internals::log::{DiskLog, LogOptions, LogReader};
use surfacelog::internals::record::{RecordError, compact, decode, encode, frame_len};

/// A log-only event of type `event_type` with `text`, whose `data` runs from after
/// `"data":` to the text's last byte but one.
fn event(seq: u64, time: i64, event_type: &str, text: String) -> Event {
    let start = text.find("\"data\":").expect("a data member") + "\"data\":".len();
    let end = text.len() - 1;
    Event::new(
        text,
        start..end,
        None,
        EventFields {
            event_type: event_type.to_owned().into(),
            seq,
            time,
            surface_op: None,
            sources: None,
            ignorable: false,
        },
    )
}

fn text_delta(seq: u64, time: i64, text: &str) -> String {
    format!(
        r#"{{"type":"assistant/chunk","seq":{seq},"time":{time},"data":{{"turn":3,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"{text}"}}}}}}"#
    )
}

/// REC-12, byte by byte from the table: a `tool-call-delta` with a name, built here field
/// by field, not by the encoder.
#[test]
fn rec_12_a_chunk_record_has_the_bytes_of_the_table() {
    let text = r#"{"type":"assistant/chunk","seq":7,"time":-5,"data":{"turn":2,"step":4,"chunk":{"type":"tool-call-delta","index":1,"id":"c1","name":"ls","argumentsDelta":"{\"p\":1}"}}}"#;
    let event = event(7, -5, "assistant/chunk", text.to_owned());
    let mut body = Vec::new();
    body.extend_from_slice(&7u64.to_le_bytes()); // seq
    body.extend_from_slice(&(-5i64).to_le_bytes()); // time
    body.extend_from_slice(&0x0020u16.to_le_bytes()); // flags: bit 5 alone
    body.extend_from_slice(&[4, 0]); // kind 4: tool-call-delta with a name; reserved
    for field in [2u32, 4, 1] {
        body.extend_from_slice(&field.to_le_bytes()); // turn, step, index
    }
    let payload = r#"{\"p\":1}"#;
    body.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_le_bytes());
    body.extend_from_slice(&2u16.to_le_bytes()); // id_len
    body.extend_from_slice(&2u16.to_le_bytes()); // name_len
    body.extend_from_slice(b"c1");
    body.extend_from_slice(b"ls");
    body.extend_from_slice(payload.as_bytes());
    let len = u32::try_from(body.len()).unwrap().to_le_bytes();
    let crc = crc32c::crc32c_append(crc32c::crc32c(&len), &body);
    let mut expected = len.to_vec();
    expected.extend_from_slice(&crc.to_le_bytes());
    expected.extend_from_slice(&body);
    expected.resize(expected.len().next_multiple_of(8), 0);

    let stored = compact(&event.as_ref());
    assert!(
        stored.chunk().is_some(),
        "a canonical chunk is stored as a chunk record"
    );
    let mut bytes = Vec::new();
    encode(&stored, &mut bytes);
    assert_eq!(bytes, expected);
    assert_eq!(bytes.len(), frame_len(40 + 2 + 2 + payload.len()));
    let (read, next) = decode(&bytes).expect("the record decodes");
    assert_eq!(next, bytes.len());
    assert_eq!(read.text(), text, "REC-13 rebuilds the text byte for byte");
    assert_eq!(
        read.data(),
        &text[text.find(r#"{"turn""#).unwrap()..text.len() - 1]
    );
    assert_eq!(read.message(), None);
    assert_eq!(read.text_len(), text.len());
    assert_eq!(read, event.as_ref(), "the view equals the appended event's");
}

/// An edit of a record's bytes.
type Change = fn(&mut Vec<u8>);

/// REC-12: a chunk body that breaks a rule is refused even with a matching checksum.
#[test]
fn rec_12_a_chunk_body_the_encoder_never_writes_is_refused() {
    let event = event(1, 2, "assistant/chunk", text_delta(1, 2, "hi"));
    let mut good = Vec::new();
    encode(&compact(&event.as_ref()), &mut good);
    let reseal = |bytes: &mut Vec<u8>| {
        let len = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
        let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[..4]), &bytes[8..8 + len]);
        bytes[4..8].copy_from_slice(&crc.to_le_bytes());
    };
    let cases: [(&str, Change); 6] = [
        ("another flag with bit 5", |b| b[8 + 16] |= 1),
        ("kind 0", |b| b[8 + 18] = 0),
        ("kind 5", |b| b[8 + 18] = 5),
        ("reserved byte", |b| b[8 + 19] = 1),
        ("an id on a text delta", |b| b[8 + 36] = 1),
        ("a quote in the payload", |b| b[8 + 40] = b'"'),
    ];
    for (what, change) in cases {
        let mut bytes = good.clone();
        change(&mut bytes);
        reseal(&mut bytes);
        assert!(
            matches!(
                decode(&bytes),
                Err(RecordError::Body(_) | RecordError::Length)
            ),
            "{what}: {:?}",
            decode(&bytes).map(|(e, _)| e.text().into_owned())
        );
    }
    let mut bytes = good.clone();
    bytes[8 + 41] ^= 0x01;
    assert_eq!(decode(&bytes).err(), Some(RecordError::Checksum));
}

/// The texts REC-11 stores as chunk records, and near misses it must store as §4
/// records; each with whether it is a chunk record.
fn mixed_events() -> Vec<(Event, bool)> {
    let chunk = "assistant/chunk";
    let texts: Vec<(&str, String, bool)> = vec![
        (chunk, text_delta(0, 1_700_000_000_000, "Hel"), true),
        (chunk, text_delta(1, 1_700_000_000_001, r#"a \"quote\", \\ and \n\u00e9 \/"#), true),
        (chunk, text_delta(2, 1_700_000_000_002, "é ✓ 𝄞"), true),
        (chunk, text_delta(3, -1, ""), true),
        (
            chunk,
            r#"{"type":"assistant/chunk","seq":4,"time":9,"data":{"turn":4294967295,"step":0,"chunk":{"type":"reasoning-delta","index":4294967295,"text":"think"}}}"#.to_owned(),
            true,
        ),
        (
            chunk,
            r#"{"type":"assistant/chunk","seq":5,"time":9,"data":{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":0,"id":"call_1","argumentsDelta":""}}}"#.to_owned(),
            true,
        ),
        // Near misses: every one stays a §4 record.
        (
            chunk,
            r#"{"type":"assistant/chunk","seq":6,"time":9,"data":{"turn":4294967296,"step":1,"chunk":{"type":"text-delta","index":0,"text":"x"}}}"#.to_owned(),
            false,
        ),
        (
            chunk,
            r#"{"type":"assistant/chunk","seq":7,"time":9,"data":{"step":1,"turn":1,"chunk":{"type":"text-delta","index":0,"text":"x"}}}"#.to_owned(),
            false,
        ),
        (
            chunk,
            r#"{"type":"assistant/chunk","seq":8,"time":9,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"x","extra":1}}}"#.to_owned(),
            false,
        ),
        (
            chunk,
            r#"{"type":"assistant/chunk","seq":9,"time":9,"data":{"turn":1,"step":1,"chunk":{"type":"text-start","index":0}}}"#.to_owned(),
            false,
        ),
        (
            chunk,
            r#"{"type":"assistant/chunk","seq":10,"time":9,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"x"}}} "#.to_owned(),
            false,
        ),
        (
            chunk,
            r#"{"type":"assistant/chunk","seq":11,"time":9,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"\x"}}}"#.to_owned(),
            false,
        ),
        (
            chunk,
            r#"{"type":"assistant/chunk","seq":12,"time":09,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"x"}}}"#.to_owned(),
            false,
        ),
        (
            "turn/start",
            r#"{"type":"turn/start","seq":13,"time":9,"data":{"turn":1}}"#.to_owned(),
            false,
        ),
    ];
    texts
        .into_iter()
        .enumerate()
        .map(|(seq, (event_type, text, is_chunk))| {
            let seq = seq as u64;
            let time = match seq {
                0..=2 => 1_700_000_000_000 + i64::try_from(seq).unwrap(),
                3 => -1,
                _ => 9,
            };
            (event(seq, time, event_type, text), is_chunk)
        })
        .collect()
}

/// Version 1 records (§4), with chunk records (§4.1) or without: not the default compact
/// records (§4.2), which store chunks otherwise.
fn options(chunk_records: bool, segment_bytes: u64) -> LogOptions {
    LogOptions {
        segment_bytes,
        chunk_records,
        compact_records: false,
        ..LogOptions::default()
    }
}

/// The headers of the log's segments, in order.
fn segment_headers(dir: &Path) -> Vec<SegmentHeader> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| Path::new(n).extension().is_some_and(|e| e == "seg"))
        .collect();
    names.sort();
    names
        .iter()
        .map(|n| SegmentHeader::decode(&std::fs::read(dir.join(n)).unwrap()).unwrap())
        .collect()
}

/// The bytes of the records of every segment: each segment's frames up to its end marker.
fn record_bytes(dir: &Path) -> usize {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "seg") {
            let bytes = std::fs::read(&path).unwrap();
            let mut at = SEGMENT_HEADER_LEN;
            while let Ok((_, len)) = decode(&bytes[at..]) {
                at += len;
                total += len;
            }
            assert_eq!(decode(&bytes[at..]).err(), Some(RecordError::End));
        }
    }
    total
}

/// Every event of `dir`'s log, read back by a fresh reader: its text and whether it is
/// stored as a chunk record.
fn read_back(dir: &Path) -> Vec<(String, bool)> {
    let reader = LogReader::open(dir).unwrap();
    (0..reader.seq_next())
        .map(|seq| {
            let e = reader.event_at(seq).unwrap();
            assert_eq!(e.text_len(), e.text().len());
            (e.text().into_owned(), e.chunk().is_some())
        })
        .collect()
}

/// REC-11, SEG-9: a writer with the feature sets the bit, stores exactly the canonical
/// chunks as chunk records, and every event reads back as appended, with and without it.
#[test]
fn rec_11_exactly_the_canonical_chunks_become_chunk_records_and_all_read_back() {
    let events = mixed_events();
    let plain: Vec<Event> = events.iter().map(|(e, _)| e.clone()).collect();
    for chunk_records in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = DiskLog::open(dir.path(), options(chunk_records, 1 << 20)).unwrap();
        log.append(&plain).unwrap();
        for (seq, (e, _)) in events.iter().enumerate() {
            assert_eq!(log.event_at(seq as u64).unwrap().text(), e.text());
        }
        log.close().unwrap();
        let headers = segment_headers(dir.path());
        assert_eq!(
            headers[0].incompat_features,
            if chunk_records { CHUNK_RECORDS } else { 0 }
        );
        let found = read_back(dir.path());
        assert_eq!(found.len(), events.len());
        for ((text, is_chunk), (e, expected)) in found.iter().zip(&events) {
            assert_eq!(text, e.text(), "seq {}", e.seq());
            assert_eq!(
                *is_chunk,
                *expected && chunk_records,
                "seq {}: {text}",
                e.seq()
            );
        }
    }
}

/// REC-14: the same chunks take well under half the bytes as chunk records.
#[test]
fn rec_14_chunk_records_shrink_a_log_of_chunks() {
    let events: Vec<Event> = (0..200)
        .map(|seq| {
            event(
                seq,
                1_700_000_000_000 + i64::try_from(seq).unwrap(),
                "assistant/chunk",
                text_delta(
                    seq,
                    1_700_000_000_000 + i64::try_from(seq).unwrap(),
                    "word ",
                ),
            )
        })
        .collect();
    let mut sizes = Vec::new();
    for chunk_records in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = DiskLog::open(dir.path(), options(chunk_records, 1 << 20)).unwrap();
        log.append(&events).unwrap();
        log.close().unwrap();
        sizes.push(record_bytes(dir.path()));
    }
    let [v1, chunks] = sizes[..] else {
        unreachable!()
    };
    assert_eq!(chunks, 200 * frame_len(40 + "word ".len()));
    assert!(
        chunks * 3 < v1,
        "{chunks} bytes as chunk records against {v1}"
    );
}

/// SEG-9: a log created without the feature keeps §4 records in its last segment when a
/// writer with the feature appends to it, and sets the bit from its next segment on.
#[test]
fn seg_9_an_old_last_segment_keeps_its_records_until_the_roll() {
    let dir = tempfile::tempdir().unwrap();
    let segment_bytes = 4096;
    let chunk = |seq: u64| event(seq, 5, "assistant/chunk", text_delta(seq, 5, "abc"));
    let (mut log, _) = DiskLog::open(dir.path(), options(false, segment_bytes)).unwrap();
    log.append(&(0..3).map(chunk).collect::<Vec<_>>()).unwrap();
    log.close().unwrap();
    let (mut log, _) = DiskLog::open(dir.path(), options(true, segment_bytes)).unwrap();
    log.append(&(3..60).map(chunk).collect::<Vec<_>>()).unwrap();
    log.close().unwrap();
    let headers = segment_headers(dir.path());
    assert!(headers.len() >= 2, "the appends rolled");
    assert_eq!(
        headers[0].incompat_features, 0,
        "the old segment is as it was"
    );
    assert!(
        headers[1..]
            .iter()
            .all(|h| h.incompat_features == CHUNK_RECORDS)
    );
    let found = read_back(dir.path());
    assert_eq!(found.len(), 60);
    let second = headers[1].first_seq;
    for (seq, (text, is_chunk)) in found.iter().enumerate() {
        let seq = seq as u64;
        assert_eq!(text, chunk(seq).text());
        assert_eq!(*is_chunk, seq >= second, "seq {seq}");
    }
}

/// The engine's rule: a damaged chunk record is `CORRUPT` naming its file and offset,
/// never the end of the data, never a shorter text.
#[test]
fn a_damaged_chunk_record_is_corrupt_with_its_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let chunk = |seq: u64| event(seq, 5, "assistant/chunk", text_delta(seq, 5, "abcdef"));
    let (mut log, _) = DiskLog::open(dir.path(), options(true, 1 << 20)).unwrap();
    log.append(&(0..4).map(chunk).collect::<Vec<_>>()).unwrap();
    log.close().unwrap();
    let path = dir.path().join("00000000000000000000.seg");
    let mut bytes = std::fs::read(&path).unwrap();
    let second = SEGMENT_HEADER_LEN + frame_len(40 + 6);
    bytes[second + 8 + 40 + 2] ^= 0x20; // a payload byte of seq 1
    std::fs::write(&path, &bytes).unwrap();
    let read = LogReader::open(dir.path())
        .and_then(|r| (0..4).try_for_each(|seq| r.event_at(seq).map(drop)));
    let error = read.expect_err("the damage is found");
    assert_eq!(error.code(), "CORRUPT", "{error}");
    let message = error.to_string();
    assert!(message.contains("00000000000000000000.seg"), "{message}");
    assert!(message.contains(&second.to_string()), "{message}");
}

/// The inside of a JSON string for `s`, escaping the way `variant` picks.
fn json_inside(s: &str, variant: u8) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' if variant.is_multiple_of(2) => out.push_str("\\n"),
            '/' if variant.is_multiple_of(3) => out.push_str("\\/"),
            c if (c as u32) < 0x20 || (variant.is_multiple_of(5) && !c.is_ascii()) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    write!(out, "\\u{unit:04x}").unwrap();
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// A chunk text from random fields; `near_miss` spoils it in one of a few ways REC-11
/// must not take for a chunk record.
fn chunk_text(
    seq: u64,
    time: i64,
    fields: &(u8, u64, u32, u32, String, String, u8),
    near_miss: u8,
) -> String {
    let (kind, turn, step, index, id, payload, variant) = fields;
    let turn = if near_miss == 1 {
        u64::from(u32::MAX) + 1 + turn
    } else {
        *turn
    };
    let payload = json_inside(payload, *variant);
    let id = json_inside(id, *variant);
    let chunk = match kind % 4 {
        0 => format!(r#"{{"type":"text-delta","index":{index},"text":"{payload}"}}"#),
        1 => format!(r#"{{"type":"reasoning-delta","index":{index},"text":"{payload}"}}"#),
        2 => format!(
            r#"{{"type":"tool-call-delta","index":{index},"id":"{id}","argumentsDelta":"{payload}"}}"#
        ),
        _ => format!(
            r#"{{"type":"tool-call-delta","index":{index},"id":"{id}","name":"n{id}","argumentsDelta":"{payload}"}}"#
        ),
    };
    let data = if near_miss == 2 {
        format!(r#"{{"step":{step},"turn":{turn},"chunk":{chunk}}}"#)
    } else {
        format!(r#"{{"turn":{turn},"step":{step},"chunk":{chunk}}}"#)
    };
    let space = if near_miss == 3 { " " } else { "" };
    format!(r#"{{"type":"assistant/chunk","seq":{seq},"time":{time},"data":{data}{space}}}"#)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// REC-11, REC-13 over random chunks and near misses: through a log with the feature,
    /// every text reads back byte for byte, and the chunk records are exactly the
    /// canonical ones.
    #[test]
    fn every_chunk_text_reads_back_as_appended(
        chunks in proptest::collection::vec(
            ((any::<u8>(), 0u64..5_000_000_000, any::<u32>(), any::<u32>(), "[a-z_0-9]{0,12}", any::<String>(), any::<u8>()),
             prop_oneof![4 => Just(0u8), 1 => 1u8..4],
             -3i64..1_800_000_000_000),
            1..40),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let events: Vec<(Event, bool)> = chunks
            .iter()
            .enumerate()
            .map(|(seq, (fields, near_miss, time))| {
                let seq = seq as u64;
                let text = chunk_text(seq, *time, fields, *near_miss);
                let canonical = *near_miss == 0 && u32::try_from(fields.1).is_ok();
                (event(seq, *time, "assistant/chunk", text), canonical)
            })
            .collect();
        let (mut log, _) = DiskLog::open(dir.path(), options(true, 1 << 20)).unwrap();
        log.append(&events.iter().map(|(e, _)| e.clone()).collect::<Vec<_>>()).unwrap();
        log.close().unwrap();
        let found = read_back(dir.path());
        prop_assert_eq!(found.len(), events.len());
        for ((text, is_chunk), (e, canonical)) in found.iter().zip(&events) {
            prop_assert_eq!(text.as_str(), e.text());
            prop_assert_eq!(*is_chunk, *canonical, "{}", text);
        }
    }
}
