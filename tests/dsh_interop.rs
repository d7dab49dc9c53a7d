//! DSH JSONL import and export beyond the corpus: Zstandard framing and its torn frames,
//! bad input of every kind (each refused with a code and a location, nothing stored, or
//! dropped as a torn tail exactly as the format says), atomic and safe export targets.

// The DSH adapters are the `dsh` feature.
#![cfg(feature = "dsh")]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use surfacelog::internals::adapters::jsonl::{self, Compression, Scan};
use surfacelog::internals::store::{Imported, Store, StoreOptions};

const FIXTURE: &str = "acp-agent--parallel-tool-calls--session.jsonl";

mod common;

fn scratch(name: &str) -> common::Scratch {
    common::scratch("interop", name)
}

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/dsh-sessions")
        .join(name);
    std::fs::read(path).unwrap()
}

fn import_bytes(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    compression: Compression,
) -> (Store, surfacelog::Result<(Imported, Scan)>) {
    let file = dir.join(name);
    std::fs::write(&file, bytes).unwrap();
    let store =
        Store::open_or_create(dir.join(format!("{name}.store")), StoreOptions::default()).unwrap();
    let outcome = jsonl::import_jsonl(&store, &file, compression, None, &mut |_| {});
    assert_eq!(
        std::fs::read(&file).unwrap(),
        bytes,
        "the source is never written"
    );
    (store, outcome)
}

/// Nothing of a refused import is left in the store.
fn assert_nothing_stored(store: &Store) {
    assert!(store.list().unwrap().is_empty());
    assert_eq!(
        std::fs::read_dir(store.dir().join("tmp")).unwrap().count(),
        0
    );
}

/// Imports `raw` (plain JSONL) as file `name`, then exports it again, packed, with
/// `compression`: the bytes exported.
fn reexport(dir: &Path, name: &str, raw: &[u8], compression: Compression) -> Vec<u8> {
    let (store, outcome) = import_bytes(dir, name, raw, Compression::None);
    let (imported, _) = outcome.unwrap_or_else(|e| panic!("{name}: {e}"));
    let out = dir.join(format!("{name}.out"));
    export(&store, &imported.id, &out, true, compression)
}

fn export(store: &Store, id: &str, out: &Path, pack: bool, compression: Compression) -> Vec<u8> {
    let session = store.inspect(id).unwrap();
    jsonl::export_file(out, session.header(), session.log(), pack, compression).unwrap();
    std::fs::read(out).unwrap()
}

/// Session `id` of `store` exported to the JSONL file `out` (a new file, packed rows, no
/// compression) with the originals its import kept (STORE-26); the file's bytes.
fn export_with_originals(store: &Store, id: &str, out: &Path) -> Vec<u8> {
    let session = store.inspect(id).unwrap();
    let originals = surfacelog::internals::adapters::legacy::Originals::read(store, id).unwrap();
    jsonl::export_file_to(
        out,
        jsonl::Publish::New,
        session.header(),
        session.log(),
        &originals,
        true,
        Compression::None,
    )
    .unwrap();
    std::fs::read(out).unwrap()
}

fn zstd_frames(lines: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for frame in lines {
        let mut encoder = zstd::stream::write::Encoder::new(&mut out, 3).unwrap();
        encoder.include_checksum(true).unwrap();
        std::io::Write::write_all(&mut encoder, frame).unwrap();
        encoder.finish().unwrap();
    }
    out
}

fn split_lines(bytes: &[u8]) -> Vec<&[u8]> {
    bytes.split_inclusive(|&b| b == b'\n').collect()
}

#[test]
fn zstd_round_trip_reads_back_the_same_events() {
    // The second fixture's body is one frame of 82 KB: its plaintext reaches the scanner
    // in pieces, with a record cut between two of them.
    for (n, name) in [FIXTURE, "headless-agent--advanced-toolchain--session.jsonl"]
        .into_iter()
        .enumerate()
    {
        let dir = scratch(&format!("zstd-round-trip-{n}"));
        let raw = fixture(name);
        let (store, outcome) = import_bytes(&dir, "raw.jsonl", &raw, Compression::None);
        let (imported, _) = outcome.unwrap();
        let out = dir.join("out.zst");
        let compressed = export(&store, &imported.id, &out, true, Compression::Zstd);
        assert_eq!(&compressed[..4], &[0x28, 0xB5, 0x2F, 0xFD]);
        // Every frame carries a content checksum (ZST-4); the plaintext is the raw file.
        assert_eq!(zstd::stream::decode_all(&compressed[..]).unwrap(), raw);
        let (again, outcome) = import_bytes(&dir, "z.jsonl.zstd", &compressed, Compression::Zstd);
        let (second, scan) = outcome.unwrap();
        assert_eq!((second.events, scan.torn), (imported.events, None));
        let back = dir.join("back.jsonl");
        assert_eq!(
            export(&again, &second.id, &back, true, Compression::None),
            raw
        );
    }
}

#[test]
fn zstd_torn_last_frame_is_dropped_at_every_cut() {
    let dir = scratch("zstd-torn");
    let raw = fixture(FIXTURE);
    let lines = split_lines(&raw);
    // Header frame, a frame of all lines but the last two, and a last frame of two lines.
    let (head, body) = lines.split_at(1);
    let (middle, last) = body.split_at(body.len() - 2);
    let complete = zstd_frames(&[head[0], &middle.concat()]);
    let full = zstd_frames(&[head[0], &middle.concat(), &last.concat()]);
    let middle_events = {
        let (_, outcome) = import_bytes(&dir, "complete.zst", &complete, Compression::Zstd);
        outcome.unwrap().0.events
    };
    for cut in complete.len()..full.len() {
        let name = format!("cut-{cut}.zst");
        let (_, outcome) = import_bytes(&dir, &name, &full[..cut], Compression::Zstd);
        let (imported, scan) = outcome.unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        assert!(imported.events >= middle_events, "cut {cut}");
        if cut > complete.len() {
            assert_eq!(
                scan.torn.map(|t| t.offset),
                Some(complete.len() as u64),
                "cut {cut}"
            );
        }
    }
}

#[test]
fn zstd_damage_in_complete_frames_is_corrupt() {
    let dir = scratch("zstd-damage");
    let raw = fixture(FIXTURE);
    let lines = split_lines(&raw);
    let good = zstd_frames(&[lines[0], &lines[1..].concat()]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("bad-magic", {
            let mut b = good.clone();
            b.extend_from_slice(b"JUNKJUNK");
            b
        }),
        ("skippable", {
            let mut b = good.clone();
            b.extend_from_slice(&[0x50, 0x2A, 0x4D, 0x18, 0, 0, 0, 0]);
            b
        }),
        ("checksum", {
            let mut b = good.clone();
            let n = b.len();
            b[n - 1] ^= 0xFF;
            b
        }),
        (
            "two-lines-in-header",
            zstd_frames(&[&lines[..2].concat(), &lines[2..].concat()]),
        ),
        ("no-final-newline", {
            let body = lines[1..].concat();
            zstd_frames(&[lines[0], &body[..body.len() - 1]])
        }),
    ];
    for (name, bytes) in cases {
        let (store, outcome) = import_bytes(&dir, name, &bytes, Compression::Zstd);
        let error = outcome.err().unwrap_or_else(|| panic!("{name} imported"));
        assert_eq!(error.code(), "CORRUPT", "{name}: {error}");
        assert!(
            error.to_string().contains(name)
                || error.to_string().contains("byte")
                || error.to_string().contains("line"),
            "{name}: {error}"
        );
        assert_nothing_stored(&store);
    }
    // 1 to 3 stray bytes after the last frame are a torn tail (§6.5).
    let mut stray = good.clone();
    stray.extend_from_slice(&[0x28, 0xB5]);
    let (_, outcome) = import_bytes(&dir, "stray", &stray, Compression::Zstd);
    let (_, scan) = outcome.unwrap();
    assert_eq!(scan.torn.map(|t| t.offset), Some(good.len() as u64));
}

#[test]
fn bad_raw_input_is_refused_with_a_location_and_nothing_stored() {
    let dir = scratch("bad-raw");
    let raw = fixture(FIXTURE);
    let lines = split_lines(&raw);
    let body_with = |index: usize, line: &[u8]| {
        let mut out = lines.clone();
        out[index] = line;
        out.concat()
    };
    let last_turn_end = lines
        .iter()
        .rposition(|l| l.windows(10).any(|w| w == b"\"turn/end\""))
        .unwrap();
    assert!(last_turn_end > 3);
    let cases: Vec<(&str, Vec<u8>, &str, &str)> = vec![
        ("empty", Vec::new(), "CORRUPT", "header-less"),
        ("garbage", b"\x00\x01garbage\xff\n".to_vec(), "CORRUPT", "not valid JSON"),
        ("no-newline", lines[0][..lines[0].len() - 1].to_vec(), "CORRUPT", "header-less"),
        ("newer-version", {
            let header = String::from_utf8(lines[0].to_vec()).unwrap().replace("\"version\":0", "\"version\":1");
            let mut out = header.into_bytes();
            out.extend_from_slice(&lines[1..].concat());
            out
        }, "FORMAT_VERSION", "upgrade"),
        ("not-a-header", body_with(0, b"{\"type\":\"session\",\"id\":\"x\"}\n"), "CORRUPT", "not a session header"),
        ("retired-field", {
            let header = String::from_utf8(lines[0].to_vec()).unwrap().replace("\"delegationDepth\":0", "\"delegationDepth\":0,\"sandboxMode\":\"x\"");
            let mut out = header.into_bytes();
            out.extend_from_slice(&lines[1..].concat());
            out
        }, "CORRUPT", "retired"),
        ("invalid-utf8-mid", body_with(2, b"{\"type\":\xff\xfe}\n"), "CORRUPT", "unparsable committed event at line 2"),
        ("seq-gap-mid", {
            let mut out = lines.clone();
            out.remove(2);
            out.concat()
        }, "CORRUPT", "seq gap in committed region at line 2"),
        ("malformed-row-mid", body_with(3, b"{\"type\":\"text-chunks\",\"seq0\":2,\"time0\":0,\"data\":{\"turn\":1,\"step\":1,\"index\":0,\"dt\":[1,1,1],\"texts\":[\"a\",\"b\"]}}\n"), "CORRUPT", "unparsable committed event at line 3"),
        ("blank-line-mid", body_with(3, b"\n"), "CORRUPT", "unparsable"),
    ];
    for (name, bytes, code, text) in cases {
        let (store, outcome) = import_bytes(&dir, name, &bytes, Compression::None);
        let error = outcome.err().unwrap_or_else(|| panic!("{name} imported"));
        assert_eq!(error.code(), code, "{name}: {error}");
        assert!(error.to_string().contains(text), "{name}: {error}");
        // The location is the damaged record's line in the file (the header is line 1),
        // not the committed turn/end that made it damage.
        let damaged = match name {
            "invalid-utf8-mid" | "seq-gap-mid" => Some(3),
            "malformed-row-mid" | "blank-line-mid" => Some(4),
            _ => None,
        };
        if let Some(line) = damaged {
            let place = format!("{name} line {line}");
            assert!(error.to_string().ends_with(&place), "{name}: {error}");
        }
        assert_nothing_stored(&store);
    }
}

/// A complete record that repeats a key is JSON to the reference (JSON-4: the last value
/// wins): it is judged by RAW-4 as any record is, its last value of a name counting. Where
/// the reference keeps it, the contract refuses it (§2.1) with the key's place in the file;
/// dropping it would lose a record the reference keeps (and invent a closer for the turn
/// it ended). After damage or with a seq gap it is in the torn tail, unless it is a
/// committed turn/end.
#[test]
fn a_record_that_repeats_a_key_is_refused_not_taken_for_a_torn_tail() {
    /// What the import gives.
    enum Outcome {
        /// `DATA_DUPLICATE_KEY`, at this file offset when given.
        Refused(Option<usize>),
        /// One event kept, the rest a torn tail.
        Torn,
        /// `CORRUPT`: a committed turn/end after damage.
        Corrupt,
    }
    let dir = scratch("duplicate-key");
    let header = br#"{"type":"session","version":0,"id":"s1","createdAt":1,"delegationDepth":0}"#;
    let start = br#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#;
    let end = &br#"{"type":"turn/end","seq":1,"time":2,"data":{"turn":1,"reason":{"kind":"completed"},"turn":1}}"#[..];
    let clean_end =
        &br#"{"type":"turn/end","seq":2,"time":3,"data":{"turn":1,"reason":{"kind":"completed"}}}"#
            [..];
    let cut = &br#"{"type":"step/st"#[..];
    let step =
        &br#"{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1,"step":1}}"#[..];
    let gap = &br#"{"type":"step/start","seq":5,"time":2,"data":{"turn":1,"step":1,"step":1}}"#[..];
    let step_end = &br#"{"type":"step/end","seq":2,"time":3,"data":{"turn":1,"step":1}}"#[..];
    // The key `turn` repeated in `end`, after the header and the turn/start.
    let key = header.len() + 1 + start.len() + 1 + 83;
    let cases: [(&str, Vec<&[u8]>, Outcome); 10] = [
        ("last", vec![end], Outcome::Refused(Some(key))),
        ("middle", vec![end, clean_end], Outcome::Refused(Some(key))),
        ("after-cut", vec![cut, step], Outcome::Torn),
        ("gap", vec![gap], Outcome::Torn),
        ("turn-end-after-cut", vec![cut, end], Outcome::Corrupt),
        // seq 7 then 1: the reference reads 1 and keeps the records.
        ("seq-last-wins", vec![br#"{"type":"step/start","seq":7,"time":2,"data":{"turn":1,"step":1},"seq":1}"#, step_end], Outcome::Refused(None)),
        // A row that repeats a key is a row to the reference.
        ("row", vec![br#"{"type":"text-chunks","seq0":1,"time0":5,"data":{"turn":1,"step":1,"index":0,"dt":[0,0],"texts":["a","b","c"],"index":0}}"#], Outcome::Refused(None)),
        // seq 1 then 7: a gap to the reference.
        ("seq-gap-last", vec![br#"{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1},"seq":7}"#], Outcome::Torn),
        // After damage, only a record whose last type is turn/end is a committed one.
        ("type-last-wins", vec![cut, br#"{"type":"turn/end","seq":1,"time":2,"data":{"turn":1,"reason":{"kind":"completed"}},"type":"step/start"}"#], Outcome::Torn),
        ("turn-end-last-wins", vec![cut, br#"{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1},"type":"turn/end"}"#], Outcome::Corrupt),
    ];
    for (name, body, outcome) in cases {
        let mut bytes = [&header[..], start].join(&b'\n');
        for line in body {
            bytes.push(b'\n');
            bytes.extend_from_slice(line);
        }
        bytes.push(b'\n');
        let (store, imported) = import_bytes(&dir, name, &bytes, Compression::None);
        match outcome {
            Outcome::Refused(at) => {
                let error = imported.expect_err(name);
                assert_eq!(error.code(), "DATA_DUPLICATE_KEY", "{name}: {error}");
                if let Some(at) = at {
                    assert_eq!(&bytes[at..at + 6], b"\"turn\"");
                    let place = format!("{name} offset={at}");
                    assert!(error.to_string().contains(&place), "{name}: {error}");
                }
                assert_nothing_stored(&store);
            }
            Outcome::Torn => {
                let (imported, scan) = imported.unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!((imported.events, imported.closers.len()), (1, 1), "{name}");
                assert!(scan.torn.is_some(), "{name}");
            }
            Outcome::Corrupt => {
                let error = imported.expect_err(name);
                assert_eq!(error.code(), "CORRUPT", "{name}: {error}");
                assert_nothing_stored(&store);
            }
        }
    }
}

const HEADER: &str =
    r#"{"type":"session","version":0,"id":"s1","createdAt":1,"delegationDepth":0}"#;

/// ZST-3: each frame of an export ends with a complete record and its line feed, also
/// when a record reaches the frame size (the line feed went into the next frame), so a
/// cut inside the last frame leaves every earlier record, as a torn tail.
#[test]
fn zstd_export_ends_every_frame_with_a_whole_record() {
    let dir = scratch("zstd-frames");
    let big = format!(
        r#"{{"type":"x/note","seq":0,"time":1,"data":{{"t":"{}"}},"ignorable":true}}"#,
        "x".repeat(jsonl::FRAME_PLAINTEXT_BYTES)
    );
    let small = r#"{"type":"x/note","seq":1,"time":2,"data":{},"ignorable":true}"#;
    let raw = format!("{HEADER}\n{big}\n{small}\n");
    let compressed = reexport(&dir, "raw.jsonl", raw.as_bytes(), Compression::Zstd);
    let mut rest = &compressed[..];
    let mut frames = 0;
    while !rest.is_empty() {
        let size = zstd::zstd_safe::find_frame_compressed_size(rest).unwrap();
        let plain = zstd::stream::decode_all(&rest[..size]).unwrap();
        assert_eq!(plain.last(), Some(&b'\n'), "frame {frames}");
        rest = &rest[size..];
        frames += 1;
    }
    assert_eq!(frames, 3, "the header, the big record, the small one");
    // Torn inside the last frame's checksum: a torn frame whose records all decode
    // (ZST-10), not damage in the complete frame before it.
    let cut = &compressed[..compressed.len() - 2];
    let (_, outcome) = import_bytes(&dir, "cut.jsonl.zstd", cut, Compression::Zstd);
    let (kept, scan) = outcome.unwrap();
    assert_eq!(kept.events, 2);
    assert!(scan.torn.is_some());
}

/// A JSONL file cannot hold an event whose type is a packed row's tag: a reader takes
/// the record for a row (§4.5). Such an event (`SQLite` holds one, SQL-16; a host may append
/// one) makes a JSONL export refuse with `NOT_REPRESENTABLE`, leaving no file.
#[test]
fn an_event_typed_as_a_row_tag_is_not_exported_to_jsonl() {
    let dir = scratch("row-tag-type");
    let store = Store::open_or_create(dir.join("store"), StoreOptions::default()).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    session.append_dynamic("text-chunks", "{}", None).unwrap();
    let out = dir.join("out.jsonl");
    let read = store.inspect("s").unwrap();
    let error =
        jsonl::export_file(&out, read.header(), read.log(), true, Compression::None).unwrap_err();
    assert_eq!((error.code(), error.seq()), ("NOT_REPRESENTABLE", None));
    assert!(error.to_string().contains("event 0"), "{error}");
    assert!(!out.exists());
}

/// DSH header handling beyond the corpus: a header line in another key order is
/// exported as it was read (HDR-14); an id with a lone surrogate (JSON-5, DIR-3) cannot be
/// a store's id and is refused as such (`INVALID_ID`), not as a header of the wrong
/// shape; a `mode/set` event is refused at import (LOAD-9, `LEGACY_EVENT`).
#[test]
fn header_order_lone_surrogate_ids_and_mode_set() {
    let dir = scratch("header-order");
    let header =
        r#"{"version":0,"type":"session","id":"s1","createdAt":1,"delegationDepth":0,"x":1}"#;
    let event = r#"{"type":"x/note","seq":0,"time":1,"data":{},"ignorable":true}"#;
    let raw = format!("{header}\n{event}\n");
    let out = reexport(&dir, "order.jsonl", raw.as_bytes(), Compression::None);
    assert_eq!(String::from_utf8(out).unwrap(), raw);

    // Refused, leaving nothing: the error.
    let refused = |name: &str, text: String| {
        let (store, outcome) = import_bytes(&dir, name, text.as_bytes(), Compression::None);
        let error = outcome.expect_err(name);
        assert_nothing_stored(&store);
        error
    };
    let lone = HEADER.replace(r#""id":"s1""#, r#""id":"a\ud800""#);
    let error = refused("lone.jsonl", format!("{lone}\n"));
    assert_eq!(error.code(), "INVALID_ID", "{error}");

    let mode = r#"{"type":"mode/set","seq":0,"time":1,"data":{},"ignorable":true}"#;
    let error = refused("mode.jsonl", format!("{HEADER}\n{mode}\n"));
    assert_eq!(
        (error.code(), error.seq()),
        ("LEGACY_EVENT", Some(0)),
        "{error}"
    );
}

/// A log of an older pre-release writer: every import-compatibility projection of
/// `dsh-formats.md` §9.2 (LOAD-4) in one session.
const LEGACY: [&str; 13] = [
    r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"trigger":{"kind":"user"}}}"#,
    r#"{"type":"steering/message","seq":1,"time":2,"data":{"turn":1,"content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}"#,
    r#"{"type":"user/message","seq":2,"time":3,"data":{"content":[{"type":"text","text":"again"}],"source":{"kind":"user"}},"surfaceOp":"append"}"#,
    r#"{"type":"step/start","seq":3,"time":4,"data":{"turn":1,"step":1}}"#,
    r#"{"type":"assistant/message","seq":4,"time":5,"data":{"turn":1,"step":1,"content":[{"type":"tool-call","id":"c1","name":"bash","arguments":"{}"}],"provenance":{"provider":"p","model":"m","kind":"x"}},"surfaceOp":"append"}"#,
    r#"{"type":"tool/call","seq":5,"time":6,"data":{"turn":1,"step":1,"callId":"c1","name":"bash","arguments":"{}"}}"#,
    r#"{"type":"tool/result","seq":6,"time":7,"data":{"turn":1,"step":1,"callId":"c1","content":[{"type":"text","text":"out"}],"isError":false},"surfaceOp":"append"}"#,
    r#"{"type":"step/end","seq":7,"time":8,"data":{"turn":1,"step":1}}"#,
    r#"{"type":"turn/end","seq":8,"time":9,"data":{"turn":1,"reason":{"kind":"disposed"}}}"#,
    r#"{"type":"turn/start","seq":9,"time":10,"data":{"turn":2}}"#,
    r#"{"type":"steering/message","seq":10,"time":11,"data":{"turn":2,"message":{"id":"m1","role":"user","content":[],"source":{"kind":"user"}}},"surfaceOp":"append"}"#,
    r#"{"type":"tool/result","seq":11,"time":12,"data":{"turn":1,"step":1,"callId":"c1","content":[{"type":"text","text":""}],"isError":false},"surfaceOp":{"op":"replace","start":6,"end":6},"sourceEventSeqs":[6]}"#,
    r#"{"type":"turn/end","seq":12,"time":13,"data":{"turn":2,"reason":{"kind":"error","step":1,"message":"boom"}}}"#,
];

/// LOAD-4: the import stores each event as the reference's loader sees it (the surface,
/// the messages, the checks of the contract), and an export gives back the file's own
/// bytes from the originals kept beside the log (STORE-26), in JSONL and through `SQLite`.
#[test]
fn legacy_events_are_projected_on_import_and_exported_as_they_were() {
    use surfacelog::internals::adapters::{legacy, sqlite, sqlite_import};
    use surfacelog::internals::json::{Json, equal};
    let dir = scratch("legacy");
    let raw = format!("{HEADER}\n{}\n", LEGACY.join("\n"));
    let (store, outcome) = import_bytes(&dir, "legacy.jsonl", raw.as_bytes(), Compression::None);
    let (imported, scan) = outcome.unwrap();
    assert_eq!(
        (imported.events, imported.closers.len(), scan.torn),
        (13, 0, None)
    );
    let session = store.inspect("s1").unwrap();
    let event = |seq: u64| session.event(seq).unwrap().unwrap();
    assert_eq!(
        event(0).text(),
        r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#
    );
    assert_eq!(event(1).event_type, "user/message");
    assert_eq!(
        event(8).data(),
        r#"{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"disposed"}}}"#
    );
    assert_eq!(
        event(12).data(),
        r#"{"turn":2,"reason":{"kind":"error","error":{"message":"boom","code":"UNKNOWN"}}}"#
    );
    let expected = [
        (
            1,
            r#"{"id":"legacy-message:s1:1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}"#,
        ),
        (
            2,
            r#"{"id":"legacy-message:s1:2","role":"user","content":[{"type":"text","text":"again"}],"source":{"kind":"user"}}"#,
        ),
        (
            4,
            r#"{"id":"legacy-message:s1:4","role":"assistant","content":[{"type":"tool-call","id":"c1","name":"bash","arguments":"{}"}],"source":{"kind":"model","provider":"p","model":"m"}}"#,
        ),
        (
            11,
            r#"{"id":"legacy-message:s1:6","role":"user","content":[{"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":""}],"isError":false}],"source":{"kind":"tool","callId":"c1"}}"#,
        ),
        (
            10,
            r#"{"id":"m1","role":"user","content":[],"source":{"kind":"user"}}"#,
        ),
    ];
    let messages = session.messages().unwrap();
    assert_eq!(messages.len(), expected.len());
    for (message, (seq, json)) in messages.iter().zip(expected) {
        assert_eq!(message.seq, seq);
        let (a, b) = (
            Json::parse(message.json).unwrap(),
            Json::parse(json).unwrap(),
        );
        assert!(equal(a.root(), b.root()), "{}", message.json);
    }
    // The export is the file imported, byte for byte, in both directions through SQLite.
    let originals = legacy::Originals::read(&store, "s1").unwrap();
    assert!(!originals.is_empty());
    let exported = export_with_originals(&store, "s1", &dir.join("legacy.out.jsonl"));
    assert_eq!(String::from_utf8(exported).unwrap(), raw);
    let db = dir.join("legacy.sqlite");
    sqlite::export_session_with(&db, session.header(), session.log(), &originals, true).unwrap();
    let again = Store::open_or_create(dir.join("again.store"), StoreOptions::default()).unwrap();
    sqlite_import::import_sqlite(&again, &db, None).unwrap();
    let back = again.inspect("s1").unwrap();
    // SQLite rebuilds an event's envelope in its own key order (SQL-26): equal values.
    for seq in 0..13 {
        let (a, b) = (back.event(seq).unwrap().unwrap(), event(seq));
        let (a, b) = (a.text(), b.text());
        let (a, b) = (Json::parse(&a).unwrap(), Json::parse(&b).unwrap());
        assert!(equal(a.root(), b.root()), "seq {seq}");
    }
    // The originals went through SQLite too (their envelopes in its key order).
    let originals_back = legacy::Originals::read(&again, "s1").unwrap();
    for seq in 0..13 {
        let (stored_back, stored) = (back.event(seq).unwrap().unwrap(), event(seq));
        match (originals_back.of(&stored_back), originals.of(&stored)) {
            (Some(a), Some(b)) => {
                let (a, b) = (Json::parse(a).unwrap(), Json::parse(b).unwrap());
                assert!(equal(a.root(), b.root()), "seq {seq}");
            }
            (a, b) => assert_eq!(a.is_some(), b.is_some(), "seq {seq}"),
        }
    }
}

/// STORE-26: an original is written back only while the log holds its projection. After
/// a salvage cut the log (SLV-1) and new events took those seqs, the export writes the
/// stored events, not the originals of the events that were cut.
#[test]
fn originals_of_events_a_salvage_cut_are_not_exported() {
    let dir = scratch("legacy-salvage");
    let raw = format!("{HEADER}\n{}\n", LEGACY.join("\n"));
    let (store, outcome) = import_bytes(&dir, "legacy.jsonl", raw.as_bytes(), Compression::None);
    outcome.unwrap();
    // Damage the record of seq 6 (the legacy tool result's output), then salvage.
    let log = store.dir().join("sessions/s1/log");
    let segment = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    let at = bytes
        .windows(12)
        .position(|w| w == br#""text":"out""#)
        .unwrap();
    bytes[at + 9] ^= 0x20;
    std::fs::write(&segment, &bytes).unwrap();
    store.salvage("s1").unwrap();
    let (mut session, _) = store.open_session("s1").unwrap();
    session
        .append_dynamic("x/note", r#"{"n":1}"#, None)
        .unwrap();
    session.close().unwrap();
    let read = store.inspect("s1").unwrap();
    assert!(read.seq_next() > 6);
    let exported = export_with_originals(&store, "s1", &dir.join("salvaged.out.jsonl"));
    let exported = String::from_utf8(exported).unwrap();
    let lines: Vec<&str> = exported.lines().collect();
    for seq in 0..read.seq_next() {
        let line = lines[usize::try_from(seq).unwrap() + 1];
        let stored = read.event(seq).unwrap().unwrap();
        if seq < 6 {
            // Still the projections of the originals: written as imported.
            assert_eq!(line, LEGACY[usize::try_from(seq).unwrap()], "seq {seq}");
        } else {
            assert_eq!(line, stored.text(), "seq {seq}");
        }
    }
}

/// STORE-26: the originals kept beside the log are checked before an export writes any
/// of them: a byte of an original changed, a line's seq changed, a line cut away, each is
/// `CORRUPT` naming the file, and `verify` reports it (STORE-16). Before, the file carried
/// no checksum of its own (its `storedCrc32c` is that of the projection the log stores):
/// the export wrote the changed original, or the projection in place of the original a
/// changed or cut line held, with no error, and `verify` did not look at the file.
#[test]
fn damaged_originals_are_corrupt_not_exported() {
    use surfacelog::internals::adapters::legacy::{ORIGINALS_FILE, Originals};
    let dir = scratch("legacy-damaged");
    let raw = format!("{HEADER}\n{}\n", LEGACY.join("\n"));
    let (store, outcome) = import_bytes(&dir, "legacy.jsonl", raw.as_bytes(), Compression::None);
    outcome.unwrap();
    let path = store.dir().join("sessions/s1").join(ORIGINALS_FILE);
    let intact = std::fs::read_to_string(&path).unwrap();
    assert!(!Originals::read(&store, "s1").unwrap().is_empty());
    let lines: Vec<&str> = intact.lines().collect();
    assert!(lines.len() > 2, "{intact}");
    let damaged = [
        (
            "an original's text",
            intact.replacen(r#""text":"hi""#, r#""text":"hj""#, 1),
        ),
        (
            "a line's seq",
            intact.replacen(r#"{"seq":1,"#, r#"{"seq":3,"#, 1),
        ),
        (
            "the last line cut",
            format!("{}\n", lines[..lines.len() - 1].join("\n")),
        ),
        ("the first line cut", format!("{}\n", lines[1..].join("\n"))),
    ];
    for (what, bytes) in damaged {
        assert_ne!(bytes, intact, "{what}: not damaged");
        std::fs::write(&path, &bytes).unwrap();
        match Originals::read(&store, "s1") {
            Err(error) => {
                assert_eq!(error.code(), "CORRUPT", "{what}: {error}");
                assert!(
                    error.to_string().contains(ORIGINALS_FILE),
                    "{what}: {error}"
                );
            }
            Ok(_) => panic!("{what}: damaged originals read as intact"),
        }
        // `verify` reports what the export refuses.
        let report = store.verify(Some(&["s1"])).unwrap();
        assert!(
            report.sessions[0]
                .problems
                .iter()
                .any(|p| p.rule == "STORE-26" && p.file.ends_with(ORIGINALS_FILE)),
            "{what}: verify found nothing: {:?}",
            report.sessions[0].problems
        );
    }
    std::fs::write(&path, &intact).unwrap();
    assert!(!Originals::read(&store, "s1").unwrap().is_empty());
    assert!(store.verify(Some(&["s1"])).unwrap().ok());
}

/// LOAD-4: what §9.2 calls malformed is refused as a stored session that failed
/// validation (`CORRUPT`, naming the seq and the file), and nothing is stored.
#[test]
fn malformed_legacy_events_are_refused() {
    let dir = scratch("legacy-malformed");
    let start = r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#;
    let cases = [
        (
            "extra-key",
            r#"{"type":"turn/end","seq":1,"time":2,"data":{"turn":1,"reason":{"kind":"completed"},"x":1}}"#,
        ),
        (
            "turn-zero",
            r#"{"type":"turn/end","seq":1,"time":2,"data":{"turn":0,"reason":{"kind":"completed"}}}"#,
        ),
        (
            "completed-extra",
            r#"{"type":"turn/end","seq":1,"time":2,"data":{"turn":1,"reason":{"kind":"completed","at":1}}}"#,
        ),
        (
            "error-shape",
            r#"{"type":"turn/end","seq":1,"time":2,"data":{"turn":1,"reason":{"kind":"error","step":-1,"message":"m"}}}"#,
        ),
        (
            "trigger",
            r#"{"type":"turn/start","seq":1,"time":2,"data":{"turn":1,"trigger":{"kind":""}}}"#,
        ),
        (
            "steering",
            r#"{"type":"steering/message","seq":1,"time":2,"data":{"turn":1,"content":[]},"surfaceOp":"append"}"#,
        ),
    ];
    for (name, event) in cases {
        let raw = format!("{HEADER}\n{start}\n{event}\n");
        let (store, outcome) = import_bytes(&dir, name, raw.as_bytes(), Compression::None);
        let error = outcome.expect_err(name);
        assert_eq!(
            (error.code(), error.seq()),
            ("CORRUPT", Some(1)),
            "{name}: {error}"
        );
        assert!(error.to_string().contains("§9.2"), "{name}: {error}");
        assert!(error.to_string().contains(name), "{name}: {error}");
        assert_nothing_stored(&store);
    }
}

/// ROW-4: in JSONL a run of deltas is one row however long. An export gathers chunks a
/// bounded number at a time, and a run still going on when it writes is held back, not
/// cut: rows longer than that come back as they were, next to shorter runs.
#[test]
fn a_run_longer_than_the_export_gathers_stays_one_row() {
    let dir = scratch("long-run");
    let row = |seq0: usize, index: u32, n: usize| {
        let dt = vec!["0"; n - 1].join(",");
        let texts = vec!["\"a\""; n].join(",");
        format!(
            r#"{{"type":"text-chunks","seq0":{seq0},"time0":5,"data":{{"turn":1,"step":1,"index":{index},"dt":[{dt}],"texts":[{texts}]}}}}"#
        )
    };
    let long = jsonl::RUN_EVENTS_MAX + 1;
    let cases = [
        vec![row(0, 0, long)],
        vec![
            row(0, 0, 3),
            row(3, 1, long + 9_000),
            row(3 + long + 9_000, 2, 4),
        ],
    ];
    for (n, rows) in cases.iter().enumerate() {
        let raw = format!("{HEADER}\n{}\n", rows.join("\n"));
        let name = format!("long-{n}.jsonl");
        let out = reexport(&dir, &name, raw.as_bytes(), Compression::None);
        assert!(out == raw.as_bytes(), "case {n}: the export differs");
    }
}

#[test]
fn a_torn_or_malformed_tail_is_dropped_not_refused() {
    let dir = scratch("torn-raw");
    let raw = fixture(FIXTURE);
    let lines = split_lines(&raw);
    let keep = 6;
    let prefix: Vec<u8> = lines[..keep].concat();
    let tails: Vec<(&str, Vec<u8>)> = vec![
        ("half-line", lines[keep][..lines[keep].len() / 2].to_vec()),
        ("whole-line-no-newline", lines[keep][..lines[keep].len() - 1].to_vec()),
        ("utf8-cut", b"{\"type\":\"x\",\"text\":\"\xe2\x82".to_vec()),
        ("row-with-gap", b"{\"type\":\"text-chunks\",\"seq0\":99,\"time0\":0,\"data\":{\"turn\":1,\"step\":1,\"index\":0,\"dt\":[1,1],\"texts\":[\"a\",\"b\",\"c\"]}}\n".to_vec()),
        ("row-fractional-dt", b"{\"type\":\"text-chunks\",\"seq0\":5,\"time0\":0,\"data\":{\"turn\":1,\"step\":1,\"index\":0,\"dt\":[1.5,1],\"texts\":[\"a\",\"b\",\"c\"]}}\n".to_vec()),
        ("null-line", b"null\n".to_vec()),
        ("crlf-junk", b"\r\n".to_vec()),
    ];
    for (name, tail) in tails {
        let mut bytes = prefix.clone();
        bytes.extend_from_slice(&tail);
        let (store, outcome) = import_bytes(&dir, name, &bytes, Compression::None);
        let (imported, scan) = outcome.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(imported.events, keep as u64 - 1, "{name}");
        assert_eq!(
            scan.torn.as_ref().map(|t| t.offset),
            Some(prefix.len() as u64),
            "{name}"
        );
        // The export is the kept prefix plus the closers of the open turn.
        let out = export(
            &store,
            &imported.id,
            &dir.join(format!("{name}.out")),
            true,
            Compression::None,
        );
        assert!(out.starts_with(&prefix), "{name}");
        let appended = String::from_utf8(out[prefix.len()..].to_vec()).unwrap();
        assert_eq!(appended.lines().count(), imported.closers.len(), "{name}");
    }
}

#[test]
fn deep_nesting_imports_without_recursion() {
    let dir = scratch("deep");
    let depth = 100_000;
    let header = b"{\"type\":\"session\",\"version\":0,\"id\":\"deep\",\"createdAt\":0,\"delegationDepth\":0}\n";
    let mut line =
        String::from("{\"type\":\"session/title\",\"seq\":0,\"time\":0,\"data\":{\"x\":");
    line.push_str(&"[".repeat(depth));
    line.push_str(&"]".repeat(depth));
    line.push_str("}}\n");
    let mut bytes = header.to_vec();
    bytes.extend_from_slice(line.as_bytes());
    let (store, outcome) = import_bytes(&dir, "deep.jsonl", &bytes, Compression::None);
    let (imported, _) = outcome.unwrap();
    assert_eq!(imported.events, 1);
    let out = export(
        &store,
        "deep",
        &dir.join("deep.out"),
        true,
        Compression::None,
    );
    assert_eq!(out, bytes);
}

#[test]
fn duplicate_sessions_and_mismatched_ids_are_refused() {
    let dir = scratch("duplicate");
    let raw = fixture(FIXTURE);
    let file = dir.join("s.jsonl");
    std::fs::write(&file, &raw).unwrap();
    let store = Store::open_or_create(dir.join("store"), StoreOptions::default()).unwrap();
    let (first, _) =
        jsonl::import_jsonl(&store, &file, Compression::None, None, &mut |_| {}).unwrap();
    let again = jsonl::import_jsonl(&store, &file, Compression::None, None, &mut |_| {});
    assert_eq!(again.unwrap_err().code(), "SESSION_EXISTS");
    let other = jsonl::import_jsonl(
        &store,
        &file,
        Compression::None,
        Some("other-id"),
        &mut |_| {},
    );
    assert_eq!(other.unwrap_err().code(), "HEADER_INVALID");
    assert_eq!(store.list().unwrap().len(), 1);
    assert_eq!(store.list().unwrap()[0].id(), first.id);
    assert_eq!(
        std::fs::read_dir(store.dir().join("tmp")).unwrap().count(),
        0
    );
}

#[test]
fn export_targets_are_safe_and_published_atomically() {
    let dir = scratch("targets");
    let raw = fixture(FIXTURE);
    let (store, outcome) = import_bytes(&dir, "s.jsonl", &raw, Compression::None);
    let (imported, _) = outcome.unwrap();
    let session = store.inspect(&imported.id).unwrap();
    let write = |out: &Path| {
        jsonl::export_file(
            out,
            session.header(),
            session.log(),
            true,
            Compression::None,
        )
    };
    // An existing target (file or symlink) is never overwritten or followed.
    let existing = dir.join("existing.jsonl");
    std::fs::write(&existing, b"keep").unwrap();
    assert_eq!(write(&existing).unwrap_err().code(), "UNSAFE_PATH");
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep");
    let link = dir.join("link.jsonl");
    std::os::unix::fs::symlink(dir.join("elsewhere"), &link).unwrap();
    assert_eq!(write(&link).unwrap_err().code(), "UNSAFE_PATH");
    assert!(!dir.join("elsewhere").exists());
    // A directory other users may write to is refused.
    let open_dir = dir.join("open");
    std::fs::create_dir(&open_dir).unwrap();
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(
        write(&open_dir.join("x.jsonl")).unwrap_err().code(),
        "UNSAFE_PATH"
    );
    assert_eq!(std::fs::read_dir(&open_dir).unwrap().count(), 0);
    // A failing writer leaves no file, not even the temporary one.
    let failed = jsonl::publish_file(&dir.join("failed.jsonl"), |_| -> surfacelog::Result<()> {
        Err(surfacelog::internals::error::ErrorKind::Poisoned.into())
    });
    assert_eq!(failed.unwrap_err().code(), "POISONED");
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names
            .iter()
            .any(|n| n.contains("failed") || n.contains(".tmp-")),
        "{names:?}"
    );
    // The published file is private and whole.
    let out = dir.join("ok.jsonl");
    write(&out).unwrap();
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode, std::fs::read(&out).unwrap()), (0o600, raw));
}

#[test]
fn unpacked_export_writes_one_event_per_line_and_reimports_equal() {
    let dir = scratch("no-pack");
    let raw = fixture("acp-agent--packed-chunks--session.jsonl");
    let (store, outcome) = import_bytes(&dir, "p.jsonl", &raw, Compression::None);
    let (imported, _) = outcome.unwrap();
    let out = export(
        &store,
        &imported.id,
        &dir.join("flat.jsonl"),
        false,
        Compression::None,
    );
    assert_eq!(split_lines(&out).len() as u64, imported.events + 1);
    let rows = split_lines(&out)
        .iter()
        .filter(|l| {
            l.starts_with(b"{\"type\":\"") && l.windows(16).any(|w| w == b"-chunks\",\"seq0\":")
        })
        .count();
    assert_eq!(rows, 0);
    assert!(
        split_lines(&raw)
            .iter()
            .any(|l| l.windows(16).any(|w| w == b"-chunks\",\"seq0\":"))
    );
    let (again, outcome) = import_bytes(&dir, "flat.jsonl", &out, Compression::None);
    let (second, _) = outcome.unwrap();
    assert_eq!(second.events, imported.events);
    // Packing it again gives back the original file.
    let packed = export(
        &again,
        &second.id,
        &dir.join("packed.jsonl"),
        true,
        Compression::None,
    );
    assert_eq!(packed, raw);
}

#[test]
fn zstd_lengths_claimed_beyond_the_file_are_torn_not_trusted() {
    let dir = scratch("zstd-claims");
    let raw = fixture(FIXTURE);
    let lines = split_lines(&raw);
    let good = zstd_frames(&[lines[0], &lines[1..].concat()]);
    // A last frame whose raw block claims 2 MiB - 1 bytes, with 10 present: torn.
    let mut block_claim = good.clone();
    let size: u32 = (1 << 21) - 1;
    let header = (size << 3) | 1; // last block, raw
    block_claim.extend_from_slice(&[0x28, 0xB5, 0x2F, 0xFD, 0x04, 0x58]);
    block_claim.extend_from_slice(&header.to_le_bytes()[..3]);
    block_claim.extend_from_slice(b"{\"type\":\"x");
    // A last frame whose header claims 2^60 bytes of content (8-byte size field).
    let mut content_claim = good.clone();
    content_claim.extend_from_slice(&[0x28, 0xB5, 0x2F, 0xFD, 0xC4, 0x58]);
    content_claim.extend_from_slice(&(1u64 << 60).to_le_bytes());
    content_claim.extend_from_slice(&[0x01, 0x00, 0x00]);
    for (name, bytes) in [("block", block_claim), ("content", content_claim)] {
        let (_, outcome) = import_bytes(&dir, name, &bytes, Compression::Zstd);
        match outcome {
            Ok((imported, scan)) => {
                assert_eq!(imported.events, lines.len() as u64 - 1, "{name}");
                assert_eq!(
                    scan.torn.map(|t| t.offset),
                    Some(good.len() as u64),
                    "{name}"
                );
            }
            // A complete frame that does not decode is corruption (ZST-13).
            Err(error) => assert_eq!(error.code(), "CORRUPT", "{name}: {error}"),
        }
    }
}

#[test]
fn a_strict_import_refuses_types_the_reference_does_not_know() {
    let dir = scratch("strict");
    let header = b"{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":0,\"delegationDepth\":0}\n";
    let known = b"{\"type\":\"session/title\",\"seq\":0,\"time\":0,\"data\":{\"title\":\"t\"}}\n";
    let unknown = b"{\"type\":\"x/new\",\"seq\":1,\"time\":0,\"data\":{}}\n";
    let ignorable = b"{\"type\":\"x/new\",\"seq\":1,\"time\":0,\"data\":{},\"ignorable\":true}\n";
    let file = |name: &str, last: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, [&header[..], known, last].concat()).unwrap();
        path
    };
    let (unknown, ignorable) = (
        file("unknown.jsonl", unknown),
        file("ignorable.jsonl", ignorable),
    );
    let strict = { StoreOptions::new().strict_vocabulary(true) };
    // By default every type is kept (contract §11).
    let lenient = Store::open_or_create(dir.join("lenient"), StoreOptions::default()).unwrap();
    let (imported, _) =
        jsonl::import_jsonl(&lenient, &unknown, Compression::None, None, &mut |_| {}).unwrap();
    assert_eq!(imported.events, 2);
    // Strict: LOAD-10, and nothing is stored.
    let store = Store::open_or_create(dir.join("strict"), strict.clone()).unwrap();
    let refused = jsonl::import_jsonl(&store, &unknown, Compression::None, None, &mut |_| {});
    let error = refused.unwrap_err();
    assert_eq!((error.code(), error.seq()), ("UNKNOWN_EVENT_TYPE", Some(1)));
    assert_nothing_stored(&store);
    let (imported, _) =
        jsonl::import_jsonl(&store, &ignorable, Compression::None, None, &mut |_| {}).unwrap();
    assert_eq!(imported.events, 2);
}

/// STORE-6, STORE-14: an import (and a create) whose last step, the sync of `sessions/`
/// after the rename, fails is refused with nothing left in the store. Before, the error
/// was returned with the session already renamed into `sessions/`: the failed import's
/// session was listed and opened, and importing the file again was `SESSION_EXISTS`.
#[test]
fn an_import_whose_publishing_sync_fails_leaves_no_session() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use surfacelog::internals::storage::faulty::FaultyStorage;
    let dir = scratch("publish-sync");
    let file = dir.join("s.jsonl");
    std::fs::write(&file, fixture(FIXTURE)).unwrap();
    let (mut import_reached, mut create_reached) = (false, false);
    // The n-th directory sync fails, in a fresh store each time, for each n up to the
    // syncs a whole import makes.
    for n in 1..24 {
        let storage = FaultyStorage::default();
        let faults = Arc::clone(&storage.faults);
        let options = StoreOptions::default().storage(Arc::new(storage));
        let root = dir.join(format!("store-{n}"));
        let store = Store::open_or_create(&root, options).unwrap();
        let sessions = root.join("sessions");
        let at_sessions = |error: &surfacelog::Error| {
            error.code() == "IO" && error.to_string().contains(&*sessions.to_string_lossy())
        };
        faults.fail_sync_dir(n);
        let outcome = jsonl::import_jsonl(&store, &file, Compression::None, None, &mut |_| {});
        faults.sync_dir.store(0, Ordering::SeqCst);
        if let Err(error) = outcome {
            assert_nothing_stored(&store);
            import_reached |= at_sessions(&error);
            // The file imports once the disk works again.
            jsonl::import_jsonl(&store, &file, Compression::None, None, &mut |_| {}).unwrap();
        }
        // A create shares the publishing step.
        faults.fail_sync_dir(n);
        let outcome = store.create("created", None, None);
        faults.sync_dir.store(0, Ordering::SeqCst);
        if let Err(error) = outcome {
            let listed = store.list().unwrap();
            assert!(
                !listed.headers.iter().any(|h| h.id() == "created"),
                "a failed create left its session: {error}"
            );
            create_reached |= at_sessions(&error);
        }
    }
    assert!(import_reached, "no import failed at the sync of sessions/");
    assert!(create_reached, "no create failed at the sync of sessions/");
}

/// RAW-3, JSON-2, §2.4: a record holding a carriage return as JSON whitespace (records are
/// split at line feeds only) is exported as it was read, a projected legacy event's
/// original too (STORE-26). Before, every text holding a `0D` byte was rewritten as
/// JS-JSON, as one that spans lines must be: its array-index keys moved first and its
/// numbers respelled, so the file did not come back byte for byte.
#[test]
fn a_carriage_return_inside_a_record_is_exported_as_read() {
    let dir = scratch("inner-cr");
    let raw = format!(
        "{HEADER}\n{}\n{}\n{}\n",
        "{\"type\":\"turn/start\",\r\"seq\":0,\"time\":1,\"data\":{\"turn\":1,\"trigger\":{\"kind\":\"user\"}}}",
        "{\"type\":\"x/note\",\"seq\":1,\"time\":1,\r\"data\":{\"b\":1.0,\"0\":2e0},\"ignorable\":true}",
        "{\"type\":\"turn/end\",\"seq\":2,\"time\":1,\"data\":{\"turn\":1,\"reason\":{\"kind\":\"aborted\"}}\r}",
    );
    let (store, outcome) = import_bytes(&dir, "cr.jsonl", raw.as_bytes(), Compression::None);
    let (imported, scan) = outcome.unwrap();
    assert_eq!((imported.events, scan.torn), (3, None));
    let originals = surfacelog::internals::adapters::legacy::Originals::read(&store, "s1").unwrap();
    assert!(
        !originals.is_empty(),
        "the turn/start and turn/end were projected"
    );
    let exported = export_with_originals(&store, "s1", &dir.join("cr.out"));
    assert_eq!(String::from_utf8(exported).unwrap(), raw);
}

/// LOAD-7: an event the import path refuses (here a `user/message` without a message id,
/// inside a raw file and inside the second frame of a Zstandard one) is reported at its
/// file and the offset of its record (raw) or of the frame holding it (Zstandard), with
/// its code, session and seq. Before, such a refusal named the session and the seq only:
/// neither the file nor where in it; and a record repeating a key in a Zstandard file was
/// placed at an offset counted in the plaintext, which is no offset of the file.
#[test]
fn an_event_the_import_refuses_is_named_at_its_file_and_record() {
    let dir = scratch("refusal-place");
    let first = r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#;
    let bad = r#"{"type":"user/message","seq":1,"time":1,"data":{"role":"user","content":[],"source":{"kind":"user"},"id":""},"surfaceOp":"append"}"#;
    let raw = format!("{HEADER}\n{first}\n{bad}\n");
    let record_at = HEADER.len() + 1 + first.len() + 1;
    let (store, outcome) = import_bytes(&dir, "bad.jsonl", raw.as_bytes(), Compression::None);
    let error = outcome.unwrap_err();
    assert_eq!((error.code(), error.seq()), ("MESSAGE_SHAPE", Some(1)));
    let file = dir.join("bad.jsonl");
    assert!(
        error
            .to_string()
            .contains(&format!("at={} offset={record_at}", file.display())),
        "{error}"
    );
    assert_nothing_stored(&store);
    let header_line = format!("{HEADER}\n");
    let body = format!("{first}\n{bad}\n");
    let zstd = zstd_frames(&[header_line.as_bytes(), body.as_bytes()]);
    let frame_at = zstd_frames(&[header_line.as_bytes()]).len();
    let (_, outcome) = import_bytes(&dir, "bad.jsonl.zstd", &zstd, Compression::Zstd);
    let error = outcome.unwrap_err();
    let file = dir.join("bad.jsonl.zstd");
    assert_eq!((error.code(), error.seq()), ("MESSAGE_SHAPE", Some(1)));
    assert!(
        error
            .to_string()
            .contains(&format!("at={} offset={frame_at}", file.display())),
        "{error}"
    );
    let repeated = r#"{"type":"x/note","seq":1,"time":1,"data":{"a":1,"a":2},"ignorable":true}"#;
    let body = format!("{first}\n{repeated}\n");
    let zstd = zstd_frames(&[header_line.as_bytes(), body.as_bytes()]);
    let (_, outcome) = import_bytes(&dir, "repeated.jsonl.zstd", &zstd, Compression::Zstd);
    let error = outcome.unwrap_err();
    let file = dir.join("repeated.jsonl.zstd");
    assert_eq!(error.code(), "DATA_DUPLICATE_KEY", "{error}");
    assert!(
        error
            .to_string()
            .contains(&format!("at={} offset={frame_at}", file.display())),
        "{error}"
    );
}

/// HDR-1, HDR-2, HDR-6: a header given to `create` that carries `"type":"session"` among
/// its keys (an unknown key to the contract, kept) but no `delegationDepth`, or another key
/// order, is exported as a header line the reference reads: in the reference's key order,
/// with `delegationDepth` 0. Before, any header holding `"type":"session"` was taken for a
/// header line read from a DSH file and written as it was: the exported file had no
/// `delegationDepth`, and both the reference and surfacelog's own import refused it as
/// "not a session header".
#[test]
fn a_created_header_with_a_type_key_exports_as_a_readable_header_line() {
    let dir = scratch("typed-header");
    let store = Store::open_or_create(dir.join("store"), StoreOptions::default()).unwrap();
    let header = r#"{"version":0,"type":"session","id":"h","createdAt":7,"note":1}"#;
    let mut session = store.create("h", Some(header), None).unwrap();
    session
        .append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)
        .unwrap();
    session.close().unwrap();
    let out = export(&store, "h", &dir.join("h.jsonl"), true, Compression::None);
    let first = String::from_utf8_lossy(split_lines(&out)[0]);
    assert_eq!(
        first,
        "{\"type\":\"session\",\"version\":0,\"id\":\"h\",\"createdAt\":7,\"delegationDepth\":0,\"note\":1}\n"
    );
    let (_, outcome) = import_bytes(&dir, "again.jsonl", &out, Compression::None);
    let (imported, _) = outcome.unwrap();
    assert_eq!(imported.events, 1);
}
