//! Compact records (`format-spec/log-format.md` §4.2) through the engine: a writer
//! configured for them sets `COMPACT_RECORDS` (SEG-9) and forms chunk runs only from bytes
//! it has not written (REC-17); every event reads back as appended, through a fresh
//! reader, a reopened writer and its index (IDX-1, IDX-2); a damaged run is `CORRUPT` with
//! its file and offset; and real DSH sessions imported into compact logs read, derive and
//! export exactly as from version 1 logs, in fewer bytes.

use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use surfacelog::internals::event::{Event, EventFields, EventSource};
use surfacelog::internals::log::segment::{COMPACT_RECORDS, SEGMENT_HEADER_LEN, SegmentHeader};
use surfacelog::internals::log::{DiskLog, Durability, LogOptions, LogReader, LogWriter};
use surfacelog::internals::record::compact::{self, Choice, ChunkRunBuilder, Record};

mod common;

/// An event of `event_type` with `text`, whose `data` runs from after `"data":` to the
/// `}` closing the envelope (the text's last byte, or the one before a trailing space).
fn event(seq: u64, time: i64, event_type: &str, text: String) -> Event {
    let start = text.find("\"data\":").expect("a data member") + "\"data\":".len();
    let end = text.trim_end().len() - 1;
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

/// What the generator appends: a stream of continuing chunks, or another event.
#[derive(Debug, Clone)]
enum Item {
    /// `count` deltas of chunk kind `kind` (0 text, 1 reasoning, 2 tool call, 3 named tool
    /// call) sharing `turn`, `step`, `index`, with payloads from `payloads`.
    Stream {
        kind: u8,
        turn: u32,
        index: u32,
        payloads: Vec<String>,
    },
    /// A `turn/start`; `spaced` puts a space before its last `}` (kind 2, verbatim).
    Other { turn: u32, spaced: bool },
}

fn items() -> impl Strategy<Value = Vec<Item>> {
    let stream = (
        0u8..4,
        0u32..3,
        0u32..2,
        prop::collection::vec("[a-z \"\\\\é✓]{0,40}", 1..90),
    )
        .prop_map(|(kind, turn, index, payloads)| Item::Stream {
            kind,
            turn,
            index,
            payloads,
        });
    let other = (0u32..3, any::<bool>()).prop_map(|(turn, spaced)| Item::Other { turn, spaced });
    prop::collection::vec(prop_oneof![3 => stream, 1 => other], 1..12)
}

/// The events of `items` from seq 0, with times that move by `steps` (cycled; negative
/// ones included).
fn events_of(items: &[Item], steps: &[i64]) -> Vec<Event> {
    let mut out = Vec::new();
    let mut time = 1_700_000_000_000_i64;
    let mut next_time = |seq: usize| {
        time += steps[seq % steps.len()];
        time
    };
    for item in items {
        match item {
            Item::Stream {
                kind,
                turn,
                index,
                payloads,
            } => {
                for payload in payloads {
                    let seq = out.len() as u64;
                    let time = next_time(out.len());
                    let inside = payload.replace('\\', "\\\\").replace('"', "\\\"");
                    let chunk = match kind {
                        0 => {
                            format!(r#"{{"type":"text-delta","index":{index},"text":"{inside}"}}"#)
                        }
                        1 => format!(
                            r#"{{"type":"reasoning-delta","index":{index},"text":"{inside}"}}"#
                        ),
                        2 => format!(
                            r#"{{"type":"tool-call-delta","index":{index},"id":"c{turn}","argumentsDelta":"{inside}"}}"#
                        ),
                        _ => format!(
                            r#"{{"type":"tool-call-delta","index":{index},"id":"c{turn}","name":"ls","argumentsDelta":"{inside}"}}"#
                        ),
                    };
                    let text = format!(
                        r#"{{"type":"assistant/chunk","seq":{seq},"time":{time},"data":{{"turn":{turn},"step":1,"chunk":{chunk}}}}}"#
                    );
                    out.push(event(seq, time, "assistant/chunk", text));
                }
            }
            Item::Other { turn, spaced } => {
                let seq = out.len() as u64;
                let time = next_time(out.len());
                let space = if *spaced { " " } else { "" };
                let text = format!(
                    r#"{{"type":"turn/start","seq":{seq},"time":{time},"data":{{"turn":{turn}}}{space}}}"#
                );
                out.push(event(seq, time, "turn/start", text));
            }
        }
    }
    out
}

fn options(durability: Durability, segment_bytes: u64) -> LogOptions {
    LogOptions {
        segment_bytes,
        durability,
        compact_records: true,
        ..LogOptions::default()
    }
}

/// The segment files of the log in `dir`, in order: each one's header and bytes.
fn segments(dir: &Path) -> Vec<(SegmentHeader, Vec<u8>)> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| Path::new(n).extension().is_some_and(|e| e == "seg"))
        .collect();
    names.sort();
    names
        .iter()
        .map(|n| {
            let bytes = std::fs::read(dir.join(n)).unwrap();
            (SegmentHeader::decode(&bytes).unwrap(), bytes)
        })
        .collect()
}

/// The seq ranges of the records of every segment of `dir`, decoded in order up to each
/// segment's end marker.
fn records(dir: &Path) -> Vec<std::ops::Range<u64>> {
    let mut out = Vec::new();
    for (header, bytes) in segments(dir) {
        assert_eq!(header.incompat_features, COMPACT_RECORDS);
        let mut at = SEGMENT_HEADER_LEN;
        while let Ok((record, len)) = compact::decode(&bytes[at..]) {
            out.push(record.first_seq()..record.first_seq() + record.count());
            at += len;
        }
        assert!(
            bytes[at..].iter().all(|b| *b == 0),
            "records end at zeros (SEG-5)"
        );
    }
    out
}

/// REC-17's grouping of `batch` on its own: how many records it takes in a segment that
/// holds them all (consecutive continuing chunks join a run under the cap).
fn records_of(batch: &[Event]) -> usize {
    let mut count = 0;
    let mut run = ChunkRunBuilder::default();
    for e in batch {
        match compact::choose(&e.as_ref()).unwrap() {
            Choice::Chunk(member) => {
                if run.members().is_empty() || run.push(member).is_err() {
                    run = ChunkRunBuilder::default();
                    run.push(member).unwrap();
                    count += 1;
                }
            }
            Choice::Event(_) => {
                run = ChunkRunBuilder::default();
                count += 1;
            }
        }
    }
    count
}

/// Every event of the log in `dir` read back by a fresh reader, by seq and by iteration,
/// equals `events`: with the indexes the writer wrote (IDX-1), then with none (every
/// segment scanned, IDX-2), which are removed.
fn assert_reads_back(dir: &Path, events: &[Event]) -> Result<(), TestCaseError> {
    assert_read_back(dir, events)?;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "idx") {
            std::fs::remove_file(path).unwrap();
        }
    }
    assert_read_back(dir, events)
}

fn assert_read_back(dir: &Path, events: &[Event]) -> Result<(), TestCaseError> {
    let reader = LogReader::open(dir).unwrap();
    prop_assert_eq!(reader.seq_next(), events.len() as u64);
    for e in events {
        let read = reader.event_at(e.seq()).unwrap();
        prop_assert_eq!(read, e.as_ref(), "seq {}", e.seq());
        prop_assert_eq!(read.text_len(), e.text().len());
    }
    let iterated: Vec<String> = reader
        .iter_from(0)
        .map(|e| e.unwrap().text().into_owned())
        .collect();
    let texts: Vec<&str> = events.iter().map(Event::text).collect();
    prop_assert_eq!(iterated, texts);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// §4.2 through a log: random streams of chunks and other events, appended in random
    /// batches in every durability into segments large or small (runs meet rolls), read
    /// back exactly by a fresh reader; reopened (recovery, the index), appended to and read
    /// back again. In `Sync`, no record holds events of two appends, and with no roll each
    /// append takes exactly REC-17's records.
    #[test]
    fn every_event_reads_back_and_runs_never_span_a_sync_append(
        items in items(),
        steps in prop::collection::vec(-3i64..1_000, 1..5),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        durability in 0u8..4,
        small in any::<bool>(),
    ) {
        let events = events_of(&items, &steps);
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(events.len() + 1)).collect();
        cuts.extend([0, events.len()]);
        cuts.sort_unstable();
        cuts.dedup();
        let durability = match durability {
            0 => Durability::Sync,
            1 => Durability::Batch { max_delay: Duration::from_secs(60) },
            2 => Durability::Manual,
            _ => Durability::Staged,
        };
        let segment_bytes = if small { 700 } else { 1 << 20 };
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = DiskLog::open(dir.path(), options(durability, segment_bytes)).unwrap();
        // A reader beside the writer follows each append once it is on file (RD-2).
        let mut beside = LogReader::open(dir.path()).unwrap();
        for pair in cuts.windows(2) {
            log.append(&events[pair[0]..pair[1]]).unwrap();
            if durability != Durability::Staged {
                log.flush().unwrap();
                prop_assert_eq!(beside.refresh().unwrap(), pair[1] as u64);
                for e in &events[pair[0]..pair[1]] {
                    prop_assert_eq!(beside.event_at(e.seq()).unwrap(), e.as_ref());
                }
            }
        }
        log.close().unwrap();
        assert_reads_back(dir.path(), &events)?;
        let found = records(dir.path());
        prop_assert_eq!(found.last().map_or(0, |r| r.end), events.len() as u64);
        if durability == Durability::Sync {
            for record in &found {
                let batch = cuts.partition_point(|&c| c as u64 <= record.start);
                prop_assert!(record.end <= cuts[batch] as u64, "{record:?} spans {cuts:?}");
            }
            if !small {
                let expected: usize = cuts.windows(2).map(|p| records_of(&events[p[0]..p[1]])).sum();
                prop_assert_eq!(found.len(), expected);
            }
        }
        // Reopened: recovery over the index it wrote at close; then more of the same.
        let more = events_of(&items, &steps);
        let offset = events.len() as u64;
        let more: Vec<Event> = more
            .iter()
            .map(|e| {
                let seq = e.seq() + offset;
                let text = e.text().replacen(&format!("\"seq\":{}", e.seq()), &format!("\"seq\":{seq}"), 1);
                event(seq, e.as_ref().time, e.as_ref().event_type, text)
            })
            .collect();
        let (mut log, _) = DiskLog::open(dir.path(), options(durability, segment_bytes)).unwrap();
        prop_assert_eq!(log.seq_next(), offset);
        log.append(&more).unwrap();
        log.close().unwrap();
        let all: Vec<Event> = events.into_iter().chain(more).collect();
        assert_reads_back(dir.path(), &all)?;
    }
}

/// REC-17: a writer's open run (its chunks not yet encoded) is written when the writer is
/// dropped without `close`, in every buffered durability, in segments small enough that
/// runs meet rolls; a reader beside it finds no event before its record is written; every event reads back through a fresh reader, with the index the
/// drop wrote (IDX-5) and without.
#[test]
fn an_open_run_is_written_and_indexed_when_the_writer_is_dropped() {
    let stream = |kind, turn, n| Item::Stream {
        kind,
        turn,
        index: 0,
        payloads: (0..n).map(|i| format!("p{i}")).collect(),
    };
    let items = [
        Item::Other {
            turn: 1,
            spaced: false,
        },
        stream(0, 1, 120),
        stream(3, 1, 40),
        Item::Other {
            turn: 2,
            spaced: true,
        },
        stream(1, 2, 7),
    ];
    let events = events_of(&items, &[5, -1, 300]);
    let durabilities = [
        Durability::Manual,
        Durability::Staged,
        Durability::Batch {
            max_delay: Duration::from_secs(60),
        },
    ];
    for durability in durabilities {
        for segment_bytes in [700, 1 << 20] {
            let at = format!("{durability:?} {segment_bytes}");
            let dir = tempfile::tempdir().unwrap();
            let (writer, _) =
                LogWriter::open(dir.path(), options(durability, segment_bytes)).unwrap();
            let mut beside = LogReader::open(dir.path()).unwrap();
            for e in &events {
                writer.append(std::slice::from_ref(e)).unwrap();
                let on_file = beside.refresh().unwrap();
                // (`Batch`'s flusher may wake early and write everything.)
                let batch = matches!(durability, Durability::Batch { .. });
                assert!(
                    batch || on_file <= e.seq(),
                    "{at}: seq {} read before its record was written",
                    e.seq()
                );
            }
            drop(writer);
            assert_eq!(beside.refresh().unwrap(), events.len() as u64, "{at}");
            let runs = records(dir.path());
            assert!(runs.iter().any(|r| r.end - r.start > 10), "{at}: {runs:?}");
            assert_reads_back(dir.path(), &events).unwrap();
        }
    }
}

/// SEG-9: a log of version 1 records reopened by a writer configured for compact records
/// keeps appending version 1 records to its last segment, and writes compact records from
/// its next segment on, whatever made it roll; every event reads back.
#[test]
fn a_version_1_log_goes_on_in_compact_records_after_its_next_roll() {
    let items: Vec<Item> = (0..6)
        .map(|turn| Item::Stream {
            kind: turn % 4,
            turn: u32::from(turn),
            index: 0,
            payloads: (0..30).map(|i| format!("w{i}")).collect(),
        })
        .collect();
    let events = events_of(&items, &[3]);
    let (half, rest) = events.split_at(70);
    let dir = tempfile::tempdir().unwrap();
    let v1 = LogOptions {
        segment_bytes: 2000,
        compact_records: false,
        ..LogOptions::default()
    };
    let (mut log, _) = DiskLog::open(dir.path(), v1).unwrap();
    log.append(half).unwrap();
    log.close().unwrap();
    let (mut log, _) = DiskLog::open(dir.path(), options(Durability::Sync, 2000)).unwrap();
    for e in rest {
        log.append(std::slice::from_ref(e)).unwrap();
    }
    log.close().unwrap();
    let formats: Vec<u16> = segments(dir.path())
        .iter()
        .map(|(h, _)| h.incompat_features)
        .collect();
    let first_compact = formats.iter().position(|&f| f == COMPACT_RECORDS).unwrap();
    assert!(first_compact > 0, "{formats:?}");
    assert!(
        formats[first_compact..]
            .iter()
            .all(|&f| f == COMPACT_RECORDS),
        "{formats:?}"
    );
    let reader = LogReader::open(dir.path()).unwrap();
    assert_eq!(reader.seq_next(), events.len() as u64);
    for e in &events {
        assert_eq!(
            reader.event_at(e.seq()).unwrap(),
            e.as_ref(),
            "seq {}",
            e.seq()
        );
    }
}

/// A log of one run of 40 deltas and a `turn/start`, closed (its index lists them).
fn run_log(dir: &Path) -> (Vec<Event>, Vec<u8>) {
    let items = [
        Item::Stream {
            kind: 0,
            turn: 1,
            index: 0,
            payloads: (0..40).map(|i| format!("word {i}")).collect(),
        },
        Item::Other {
            turn: 2,
            spaced: false,
        },
    ];
    let events = events_of(&items, &[5]);
    let (mut log, _) = DiskLog::open(dir, options(Durability::Sync, 1 << 20)).unwrap();
    log.append(&events).unwrap();
    log.close().unwrap();
    let (_, bytes) = segments(dir).remove(0);
    (events, bytes)
}

/// RCV-6, RCV-13, REC-4: one byte changed inside a run (a member's payload) makes every
/// member unreadable, `CORRUPT` naming the segment file and the run's offset, never a
/// shorter log or another text; the event after it stays readable.
#[test]
fn a_damaged_run_is_corrupt_with_its_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (events, mut bytes) = run_log(dir.path());
    assert_eq!(records(dir.path()), vec![0..40, 40..41]);
    let at = SEGMENT_HEADER_LEN
        + bytes[SEGMENT_HEADER_LEN..]
            .windows(7)
            .position(|w| w == b"word 17")
            .unwrap();
    bytes[at + 5] = b'8';
    std::fs::write(dir.path().join("00000000000000000000.seg"), &bytes).unwrap();
    let reader = LogReader::open(dir.path()).unwrap();
    assert_eq!(
        reader.seq_next(),
        41,
        "the index vouches for every event (IDX-5)"
    );
    for seq in [0, 17, 39] {
        let error = reader.event_at(seq).unwrap_err();
        assert_eq!(error.code(), "CORRUPT", "{error}");
        let message = error.to_string();
        assert!(message.contains("00000000000000000000.seg"), "{message}");
        assert!(
            message.contains(&format!("offset={SEGMENT_HEADER_LEN}")),
            "{message}"
        );
    }
    assert_eq!(reader.event_at(40).unwrap().text(), events[40].text());
    // A writer's open takes the vouched prefix unread (IDX-5); its reads of the run are
    // `CORRUPT` too, and it appends after the run without touching it.
    let (mut log, _) = DiskLog::open(dir.path(), options(Durability::Sync, 1 << 20)).unwrap();
    assert_eq!(log.event_at(17).unwrap_err().code(), "CORRUPT");
    let more = events_of(
        &[Item::Other {
            turn: 3,
            spaced: false,
        }],
        &[1],
    );
    let text = more[0].text().replacen("\"seq\":0", "\"seq\":41", 1);
    log.append(&[event(41, more[0].as_ref().time, "turn/start", text)])
        .unwrap();
    log.close().unwrap();
    let after = &segments(dir.path())[0].1;
    assert_eq!(after[..bytes.len().min(464)], bytes[..bytes.len().min(464)]);
}

/// REC-4: a reader that read a run's member checks the run again at every later read of
/// another member: bytes changed in place since (damage under a map) are `CORRUPT`, never
/// a member read from them.
#[test]
fn a_run_changed_after_a_read_is_corrupt_at_the_next() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let (events, bytes) = run_log(dir.path());
    let reader = LogReader::open(dir.path()).unwrap();
    assert_eq!(reader.event_at(3).unwrap().text(), events[3].text());
    let at = SEGMENT_HEADER_LEN
        + bytes[SEGMENT_HEADER_LEN..]
            .windows(7)
            .position(|w| w == b"word 17")
            .unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("00000000000000000000.seg"))
        .unwrap();
    file.write_all_at(b"x", (at + 5) as u64).unwrap();
    for seq in [4, 17, 3] {
        let error = reader.event_at(seq).unwrap_err();
        assert_eq!(error.code(), "CORRUPT", "seq {seq}: {error}");
    }
}

/// REC-20, REC-12: a later read of a run's member through the same reader (which skips
/// the run's other members' strings, `decode_again`) still holds the member it returns to
/// REC-12's rule. The run rewritten in place after a first read, its checksum made to
/// match, with a raw `"` in a member's payload (not the inside of a JSON string: the text
/// returned would carry a key the record does not hold) is `CORRUPT` at the next read of
/// that member, as a fresh reader finds it, never an event whose text is not the record's.
#[test]
fn a_run_rewritten_with_a_matching_checksum_after_a_read_is_corrupt_at_the_next() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let (events, bytes) = run_log(dir.path());
    let reader = LogReader::open(dir.path()).unwrap();
    assert_eq!(reader.event_at(3).unwrap().text(), events[3].text());
    let mut changed = bytes.clone();
    let at = SEGMENT_HEADER_LEN
        + bytes[SEGMENT_HEADER_LEN..]
            .windows(7)
            .position(|w| w == b"word 17")
            .unwrap();
    // `word 17` -> `word"17`: same length, valid UTF-8, not a JSON string's inside.
    changed[at + 4] = b'"';
    // The run is the segment's first record: its `len` varint, then its `crc`.
    let head = &changed[SEGMENT_HEADER_LEN..];
    let n = head.iter().position(|b| b & 0x80 == 0).unwrap() + 1;
    let len = head[..n]
        .iter()
        .enumerate()
        .fold(0_usize, |v, (i, b)| v | usize::from(b & 0x7f) << (7 * i));
    let body = SEGMENT_HEADER_LEN + n + 4;
    let crc = crc32c::crc32c_append(
        crc32c::crc32c(&changed[SEGMENT_HEADER_LEN..SEGMENT_HEADER_LEN + n]),
        &changed[body..body + len],
    );
    changed[SEGMENT_HEADER_LEN + n..body].copy_from_slice(&crc.to_le_bytes());
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("00000000000000000000.seg"))
        .unwrap();
    file.write_all_at(
        &changed[SEGMENT_HEADER_LEN..body + len],
        SEGMENT_HEADER_LEN as u64,
    )
    .unwrap();
    // A fresh reader refuses the run (REC-20).
    let fresh = LogReader::open(dir.path()).unwrap();
    assert_eq!(fresh.event_at(17).unwrap_err().code(), "CORRUPT");
    // The reader that read the run before refuses the member too, naming the file and the
    // run's offset; its other members, whose strings hold, still read as they were.
    let error = reader.event_at(17).unwrap_err();
    assert_eq!(error.code(), "CORRUPT", "{error}");
    let message = error.to_string();
    assert!(message.contains("00000000000000000000.seg"), "{message}");
    assert!(
        message.contains(&format!("offset={SEGMENT_HEADER_LEN}")),
        "{message}"
    );
    assert_eq!(reader.event_at(4).unwrap().text(), events[4].text());
}

/// RCV-3: a run torn by a power cut (its last bytes never written) is a torn tail at a
/// writer's open: the whole append it held goes, the appends before it stay, and the log
/// goes on from the run's first seq.
#[test]
fn a_torn_run_is_dropped_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (events, bytes) = run_log(dir.path());
    // The run is the first record; cut inside it and drop the index (no durable mark).
    std::fs::remove_file(dir.path().join("00000000000000000000.idx")).unwrap();
    let (_, run_len) = compact::decode(&bytes[SEGMENT_HEADER_LEN..]).unwrap();
    let mut torn = bytes.clone();
    for b in &mut torn[SEGMENT_HEADER_LEN + run_len / 2..] {
        *b = 0;
    }
    std::fs::write(dir.path().join("00000000000000000000.seg"), &torn).unwrap();
    let (mut log, _) = DiskLog::open(dir.path(), options(Durability::Sync, 1 << 20)).unwrap();
    assert_eq!(log.seq_next(), 0);
    log.append(&events[..3]).unwrap();
    log.close().unwrap();
    let reader = LogReader::open(dir.path()).unwrap();
    assert_eq!(reader.seq_next(), 3);
    assert_eq!(reader.event_at(2).unwrap().text(), events[2].text());
    assert!(matches!(
        compact::decode(&segments(dir.path())[0].1[SEGMENT_HEADER_LEN..]),
        Ok((Record::Chunks(_), _))
    ));
}

/// Through the store, with DSH sessions imported (the `dsh` feature).
#[cfg(feature = "dsh")]
mod dsh {
    use std::path::Path;

    use surfacelog::internals::adapters::jsonl::{self, Compression};
    use surfacelog::internals::event::EventSource;
    use surfacelog::internals::log::segment::COMPACT_RECORDS;
    use surfacelog::internals::store::{Store, StoreOptions};

    use super::{common, records, segments};

    /// The vendored DSH sessions, each imported into a version 1 store and into a compact one
    /// (small segments: runs meet rolls): every event, the messages, the surface and the JSONL
    /// export are the same; `verify` finds nothing; the compact log is smaller.
    #[test]
    fn real_sessions_read_and_export_the_same_from_compact_logs() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/dsh-sessions");
        let mut names: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| Path::new(n).extension().is_some_and(|e| e == "jsonl"))
            .collect();
        names.sort();
        let scratch = common::scratch("compact-records", "real");
        let plain = Store::open_or_create(scratch.join("plain"), StoreOptions::default()).unwrap();
        let compact = Store::open_or_create(
            scratch.join("compact"),
            StoreOptions::default()
                .compact_records(true)
                .segment_bytes(16 << 10),
        )
        .unwrap();
        let (mut imported, mut plain_bytes, mut compact_bytes) = (0, 0, 0);
        for name in &names {
            let file = root.join(name);
            let Ok((a, _)) =
                jsonl::import_jsonl(&plain, &file, Compression::None, None, &mut |_| {})
            else {
                continue;
            };
            let (b, _) = jsonl::import_jsonl(&compact, &file, Compression::None, None, &mut |_| {})
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            imported += 1;
            let (x, y) = (
                plain.inspect(&a.id).unwrap(),
                compact.inspect(&b.id).unwrap(),
            );
            let (lx, ly) = (x.log(), y.log());
            assert_eq!(lx.seq_next(), ly.seq_next(), "{name}");
            for seq in 0..lx.seq_next() {
                assert_eq!(
                    lx.event_at(seq).unwrap(),
                    ly.event_at(seq).unwrap(),
                    "{name} seq {seq}"
                );
            }
            let messages = |m: Vec<surfacelog::Message<'_>>| -> Vec<(u64, String)> {
                m.into_iter().map(|m| (m.seq, m.json.to_owned())).collect()
            };
            assert_eq!(
                messages(x.messages().unwrap()),
                messages(y.messages().unwrap()),
                "{name}"
            );
            assert_eq!(x.surface().nodes(), y.surface().nodes(), "{name}");
            let export = |session: &surfacelog::internals::session::Session<_>, out: &str| {
                let out = scratch.join(out);
                jsonl::export_file(
                    &out,
                    session.header(),
                    session.log(),
                    true,
                    Compression::None,
                )
                .unwrap();
                let bytes = std::fs::read(&out).unwrap();
                std::fs::remove_file(&out).unwrap();
                bytes
            };
            assert_eq!(export(&x, "x.jsonl"), export(&y, "y.jsonl"), "{name}");
            let size = |log: &Path| -> u64 {
                std::fs::read_dir(log)
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .filter(|p| p.extension().is_some_and(|e| e == "seg"))
                    .map(|p| std::fs::metadata(p).unwrap().len())
                    .sum()
            };
            let (fx, fy) = (plain.follow(&a.id).unwrap(), compact.follow(&b.id).unwrap());
            plain_bytes += size(fx.log().dir());
            compact_bytes += size(fy.log().dir());
            for (header, _) in segments(fy.log().dir()) {
                assert_eq!(header.incompat_features, COMPACT_RECORDS, "{name}");
            }
        }
        assert!(imported > 50, "{imported} sessions imported");
        // Forks at every boundary of a few of them agree too.
        forks_agree(&plain, &compact, "b8c89c36-55db-48cf-9f3e-76140cd37aff");
        let report = compact.verify(None).unwrap();
        assert!(report.ok(), "{report:?}");
        assert!(
            compact_bytes * 2 < plain_bytes,
            "compact {compact_bytes} B, plain {plain_bytes} B"
        );
    }

    /// Every fork of `id` in `plain` and in `compact` (the same session, imported into each),
    /// at every boundary: the same outcome, and the same child (events, messages). Returns how
    /// many boundaries fell inside a compact run.
    fn forks_agree(plain: &Store, compact_store: &Store, id: &str) -> usize {
        let source_log = compact_store.follow(id).unwrap();
        let runs: Vec<_> = records(source_log.log().dir())
            .into_iter()
            .filter(|r| r.end - r.start > 1)
            .collect();
        let len = source_log.log().seq_next();
        let mut inside = 0;
        for boundary in 0..len {
            let child = format!("{id}-fork-{boundary}");
            let outcomes = [plain, compact_store].map(|store| {
                store
                    .fork(id, surfacelog::Boundary::Seq(boundary), &child)
                    .map(drop)
                    .map_err(|e| e.code())
            });
            assert_eq!(outcomes[0], outcomes[1], "{id} at {boundary}");
            if outcomes[0].is_err() {
                continue;
            }
            if runs
                .iter()
                .any(|r| r.start <= boundary && boundary + 1 < r.end)
            {
                inside += 1;
            }
            let (x, y) = (
                plain.inspect(&child).unwrap(),
                compact_store.inspect(&child).unwrap(),
            );
            assert_eq!(x.log().seq_next(), y.log().seq_next(), "{child}");
            for seq in 0..x.log().seq_next() {
                let (ex, ey) = (
                    x.log().event_at(seq).unwrap(),
                    y.log().event_at(seq).unwrap(),
                );
                if seq <= boundary {
                    assert_eq!(ex.text(), ey.text(), "{child} seq {seq}");
                } else {
                    // The end-seed marker, stamped by the clock at each fork.
                    assert_eq!(ex.event_type, ey.event_type, "{child} seq {seq}");
                }
            }
            let messages = |m: Vec<surfacelog::Message<'_>>| -> Vec<String> {
                m.into_iter().map(|m| m.json.to_owned()).collect()
            };
            assert_eq!(
                messages(x.messages().unwrap()),
                messages(y.messages().unwrap())
            );
            // The child is a log of its own: it reopens, appends after the prefix, and
            // `verify` finds nothing wrong with what it shares and what it holds.
            drop(compact_store.open_session(&child).unwrap());
            for store in [plain, compact_store] {
                store.remove(&child).unwrap();
            }
        }
        inside
    }

    /// A DSH JSONL session `syn` in `dir`: `rounds` rounds of streamed text deltas outside
    /// any turn (so that a fork may cut their runs: inside an open turn it is refused,
    /// `OPEN_TURN`), `base` deltas in the first and `grow` more in each next, each round
    /// followed by a `session/title`. Returns the file's path.
    fn chunks_outside_turns(dir: &Path, rounds: u64, base: u64, grow: u64) -> std::path::PathBuf {
        let mut lines = vec![
            r#"{"type":"session","version":0,"id":"syn","createdAt":1,"cwd":"/","delegationDepth":0}"#
                .to_owned(),
        ];
        let mut seq = 0;
        for round in 0..rounds {
            for k in 0..(base + round * grow) {
                lines.push(format!(
                    r#"{{"type":"assistant/chunk","seq":{seq},"time":{},"data":{{"turn":{round},"step":1,"chunk":{{"type":"text-delta","index":0,"text":"w{k} "}}}}}}"#,
                    1000 + seq
                ));
                seq += 1;
            }
            lines.push(format!(
                r#"{{"type":"session/title","seq":{seq},"time":{},"data":{{"title":"t{round}"}}}}"#,
                1000 + seq
            ));
            seq += 1;
        }
        let file = dir.join("syn.jsonl");
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        file
    }

    /// STORE-10, §4.2: a fork whose boundary falls inside a compact run shares the segment up
    /// to the record before the run and starts its own segment with the run's members before
    /// the boundary; it reads, derives and reopens as a fork of a version 1 log does. The
    /// session here has chunks outside any turn, so that forks may cut runs (inside an open
    /// turn, a fork is refused: `OPEN_TURN`); small segments put runs at segment starts too.
    #[test]
    fn a_fork_inside_a_run_reads_as_from_a_version_1_log() {
        let scratch = common::scratch("compact-records", "fork");
        let file = chunks_outside_turns(&scratch, 4, 7, 5);
        let plain = Store::open_or_create(scratch.join("plain"), StoreOptions::default()).unwrap();
        let compact_store = Store::open_or_create(
            scratch.join("compact"),
            StoreOptions::default()
                .compact_records(true)
                .segment_bytes(400),
        )
        .unwrap();
        let (a, _) =
            jsonl::import_jsonl(&plain, &file, Compression::None, None, &mut |_| {}).unwrap();
        let (b, _) =
            jsonl::import_jsonl(&compact_store, &file, Compression::None, None, &mut |_| {})
                .unwrap();
        assert_eq!(a.id, b.id);
        let inside = forks_agree(&plain, &compact_store, &a.id);
        assert!(inside >= 20, "{inside} forks inside runs");
        let report = compact_store.verify(None).unwrap();
        assert!(report.ok(), "{report:?}");
    }

    /// IDX-1, §4.2: a compact segment holds far more events than one per 72 bytes (the
    /// members of a run take a few bytes each), and its index lists one offset per event:
    /// `verify` finds nothing wrong with such an index, and checks it. (Failed before the
    /// fix: "IDX-1 ... more offsets than the segment can hold", reported as a warning, and
    /// the index not checked against its segment.)
    #[test]
    fn verify_takes_the_index_of_a_segment_of_runs() {
        let scratch = common::scratch("compact-records", "dense-index");
        let mut lines = vec![
            r#"{"type":"session","version":0,"id":"dense","createdAt":1,"cwd":"/","delegationDepth":0}"#
                .to_owned(),
        ];
        for seq in 0..600 {
            lines.push(format!(
                r#"{{"type":"assistant/chunk","seq":{seq},"time":{},"data":{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"w"}}}}}}"#,
                1000 + seq
            ));
        }
        let file = scratch.join("dense.jsonl");
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        let store = Store::open_or_create(
            scratch.join("compact"),
            StoreOptions::default()
                .compact_records(true)
                .segment_bytes(4096),
        )
        .unwrap();
        let (source, _) =
            jsonl::import_jsonl(&store, &file, Compression::None, None, &mut |_| {}).unwrap();
        let log_dir = store.dir().join("sessions").join(&source.id).join("log");
        let (_, first) = segments(&log_dir).remove(0);
        let index = std::fs::metadata(log_dir.join("00000000000000000000.idx")).unwrap();
        assert!(
            index.len() > 56 + 4 * (first.len() as u64 / 72 + 1),
            "{} events in {} bytes",
            (index.len() - 56) / 4,
            first.len()
        );
        let report = store.verify(None).unwrap();
        assert!(report.problems().next().is_none(), "{report:?}");
    }

    /// Forks each child `child-{b}` (forked at `b`, three members into a run of `runs`)
    /// inside the run its own segment starts with (the members its fork carried): the
    /// grandchild's own segment takes that segment's place; it reopens and reads the
    /// source's events. Returns how many grandchildren it made.
    fn fork_grandchildren(store: &Store, source: &str, runs: &[std::ops::Range<u64>]) -> usize {
        let mut grandchildren = 0;
        for run in runs {
            let boundary = run.start + 3;
            if boundary + 1 >= run.end {
                continue;
            }
            let child = format!("child-{boundary}");
            let grandchild = format!("grandchild-{boundary}");
            let session = store
                .fork(
                    &child,
                    surfacelog::Boundary::Seq(run.start + 1),
                    &grandchild,
                )
                .unwrap();
            session.close().unwrap();
            let (session, _) = store.open_session(&grandchild).unwrap();
            session.close().unwrap();
            let inspected = store.inspect(&grandchild).unwrap();
            let source_log = store.inspect(source).unwrap();
            for s in 0..=run.start + 1 {
                assert_eq!(
                    inspected.log().event_at(s).unwrap().text(),
                    source_log.log().event_at(s).unwrap().text(),
                    "{grandchild} seq {s}"
                );
            }
            grandchildren += 1;
        }
        grandchildren
    }

    /// STORE-10, §4.2: the children of forks inside runs, kept: each takes appends,
    /// reopens with them, and `verify` finds nothing wrong with any of them (the shared
    /// segments, the limits, the own segments that start at a run's first seq).
    #[test]
    fn children_of_forks_inside_runs_append_reopen_and_verify() {
        use surfacelog::{NoSurface, kinds::TurnStart};
        let scratch = common::scratch("compact-records", "fork-children");
        let file = chunks_outside_turns(&scratch, 3, 6, 4);
        for segment_bytes in [400, 1 << 20] {
            let store = Store::open_or_create(
                scratch.join(format!("compact-{segment_bytes}")),
                StoreOptions::default()
                    .compact_records(true)
                    .segment_bytes(segment_bytes),
            )
            .unwrap();
            let (source, _) =
                jsonl::import_jsonl(&store, &file, Compression::None, None, &mut |_| {}).unwrap();
            let seq = source.events;
            let runs: Vec<_> = records(&store.dir().join("sessions").join(&source.id).join("log"))
                .into_iter()
                .filter(|r| r.end - r.start > 1)
                .collect();
            let mut children = Vec::new();
            for boundary in 0..seq {
                if !runs
                    .iter()
                    .any(|r| r.start <= boundary && boundary + 1 < r.end)
                {
                    continue;
                }
                let child = format!("child-{boundary}");
                let mut session = store
                    .fork(&source.id, surfacelog::Boundary::Seq(boundary), &child)
                    .unwrap();
                session
                    .append::<TurnStart>(r#"{"turn":9}"#, NoSurface)
                    .unwrap();
                session.close().unwrap();
                let (session, _) = store.open_session(&child).unwrap();
                let mut session = session;
                session
                    .append::<TurnStart>(r#"{"turn":10}"#, NoSurface)
                    .unwrap();
                session.close().unwrap();
                let inspected = store.inspect(&child).unwrap();
                // The prefix, the end-seed marker, the two appends and the repair closer
                // of the turn the first left open.
                assert_eq!(inspected.log().seq_next(), boundary + 5, "{child}");
                let source_log = store.inspect(&source.id).unwrap();
                for s in 0..=boundary {
                    assert_eq!(
                        inspected.log().event_at(s).unwrap().text(),
                        source_log.log().event_at(s).unwrap().text(),
                        "{child} seq {s}"
                    );
                }
                children.push(child);
            }
            assert!(children.len() >= 10, "{} forks inside runs", children.len());
            assert!(fork_grandchildren(&store, &source.id, &runs) > 0);
            let report = store.verify(None).unwrap();
            assert!(report.ok(), "{segment_bytes}: {report:?}");
        }
    }
}

/// MSP-8: a store writing compact records compresses the message pack it writes (version
/// 2); the messages read through it are those of a version 1 store's plain pack.
#[cfg(feature = "compress")]
#[test]
fn a_compact_store_writes_its_message_pack_compressed() {
    use surfacelog::{NoSurface, Store, StoreOptions, SurfaceIntent, kinds};
    let scratch = common::scratch("compact-records", "pack");
    let mut read = Vec::new();
    for compact in [false, true] {
        let options = StoreOptions::new().compact_records(compact).message_pack(1);
        let store = Store::open_or_create(scratch.join(format!("{compact}")), options).unwrap();
        let mut s = store.create("s", None, None).unwrap();
        for turn in 1..=40 {
            s.append::<kinds::TurnStart>(&format!(r#"{{"turn":{turn}}}"#), NoSurface)
                .unwrap();
            let text = "a message long enough to compress well ".repeat(20);
            s.append::<kinds::UserMessage>(
                &format!(r#"{{"id":"u{turn}","role":"user","source":{{"kind":"user"}},"content":[{{"type":"text","text":"{text}"}}]}}"#),
                SurfaceIntent::append(),
            )
            .unwrap();
            let end = format!(r#"{{"turn":{turn},"reason":{{"kind":"completed"}}}}"#);
            s.append::<kinds::TurnEnd>(&end, NoSurface).unwrap();
        }
        s.close().unwrap();
        let pack = std::fs::read(scratch.join(format!("{compact}/sessions/s/messages"))).unwrap();
        let version = u32::from_le_bytes(pack[8..12].try_into().unwrap());
        assert_eq!(version, if compact { 2 } else { 1 });
        let (s, _) = store.open_session("s").unwrap();
        assert!(s.message_texts().is_some(), "the pack is used");
        read.push(
            s.messages()
                .unwrap()
                .iter()
                .map(|m| m.json.to_owned())
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(read[0].len(), 40);
    assert_eq!(read[0], read[1]);
    // A pack that compression would not shrink (one short message: the block table costs
    // more) is written plain, and used.
    let store = Store::open_or_create(
        scratch.join("small"),
        StoreOptions::new().compact_records(true).message_pack(1),
    )
    .unwrap();
    let mut s = store.create("s", None, None).unwrap();
    s.append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)
        .unwrap();
    s.append::<kinds::UserMessage>(
        r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#,
        SurfaceIntent::append(),
    )
    .unwrap();
    s.close().unwrap();
    let pack = std::fs::read(scratch.join("small/sessions/s/messages")).unwrap();
    assert_eq!(u32::from_le_bytes(pack[8..12].try_into().unwrap()), 1);
    let (s, _) = store.open_session("s").unwrap();
    assert!(s.message_texts().is_some(), "the pack is used");
    assert_eq!(s.messages().unwrap().len(), 1);
}

/// A log in `dir` whose compact segment holds `first`, reopened in `Manual` durability by a
/// writer configured with or without compact records.
fn reopened_after_one(dir: &Path, first: &Event, compact_writer: bool) -> DiskLog {
    let (mut log, _) = DiskLog::open(dir, options(Durability::Sync, 1 << 20)).unwrap();
    log.append(std::slice::from_ref(first)).unwrap();
    log.close().unwrap();
    let manual = LogOptions {
        compact_records: compact_writer,
        ..options(Durability::Manual, 1 << 20)
    };
    DiskLog::open(dir, manual).unwrap().0
}

/// A refused append leaves no trace and does not poison the writer, in a compact segment
/// whatever the writer is configured for: one opened without `compact_records` over a log
/// whose last segment is compact writes compact records there, so it checks every event
/// of an append against them first (REC-20) as a writer configured for them does. (Failed
/// before the fix: the refusal came mid-append, poisoned the writer and lost the appends
/// still in its write buffer.)
#[test]
fn an_append_no_compact_record_holds_is_refused_whole_in_a_compact_segment() {
    let dir = tempfile::tempdir().unwrap();
    let items = vec![
        Item::Other {
            turn: 1,
            spaced: false,
        };
        4
    ];
    let events = events_of(&items, &[3]);
    let mut log = reopened_after_one(dir.path(), &events[0], false);
    log.append(&events[1..2]).unwrap();
    // A time past 2^53 − 1: a version 1 record holds it, no compact record does.
    let far = event(3, i64::MAX, "turn/start", events[3].text().to_owned());
    let error = log.append(&[events[2].clone(), far]).unwrap_err();
    assert_eq!(error.code(), "ENVELOPE_INVALID", "{error}");
    assert_eq!(log.seq_next(), 2);
    log.append(&events[2..3]).unwrap();
    log.close().unwrap();
    assert_reads_back(dir.path(), &events[..3]).unwrap();
}

/// The same refusal of one event appended alone: in a compact segment of either writer,
/// with appends buffered before it, and with a chunk run open (not yet encoded) before it.
/// Nothing is written for it, the writer is not poisoned, and what came before is kept.
/// (Fails when a lone event skips the check before writing: a refusal from the write
/// itself poisons the writer.)
#[test]
fn one_event_no_compact_record_holds_is_refused_with_nothing_written() {
    let items: Vec<Item> = (0..3)
        .map(|_| Item::Other {
            turn: 1,
            spaced: false,
        })
        .chain([Item::Stream {
            kind: 0,
            turn: 1,
            index: 0,
            payloads: vec!["ab".to_owned(); 4],
        }])
        .collect();
    let events = events_of(&items, &[3]);
    for compact_writer in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut log = reopened_after_one(dir.path(), &events[0], compact_writer);
        for (k, e) in events.iter().enumerate().skip(1) {
            log.append(std::slice::from_ref(e)).unwrap();
            let seq = e.seq() + 1;
            let far = event(seq, i64::MAX, "turn/start", events[0].text().to_owned());
            let error = log.append(&[far]).unwrap_err();
            assert_eq!(
                error.code(),
                "ENVELOPE_INVALID",
                "{compact_writer} {k}: {error}"
            );
            assert_eq!(log.seq_next(), seq, "{compact_writer} {k}");
        }
        log.close().unwrap();
        assert_reads_back(dir.path(), &events).unwrap();
        let runs = records(dir.path());
        assert!(
            runs.iter().any(|r| r.end - r.start == 4),
            "{compact_writer}: the chunks share a record: {runs:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// SEG-9: writers configured with and without compact records take turns on one log
    /// (small segments: each meets segments of the other format, last and rolled into),
    /// in every durability: every event reads back, after each writer and at the end.
    #[test]
    fn writers_of_either_format_take_turns_on_one_log(
        items in items(),
        turns in prop::collection::vec((any::<bool>(), 0u8..3, 1usize..40), 1..6),
    ) {
        let events = events_of(&items, &[7]);
        let dir = tempfile::tempdir().unwrap();
        let mut at = 0;
        for (compact, durability, take) in turns {
            let durability = match durability {
                0 => Durability::Sync,
                1 => Durability::Manual,
                _ => Durability::Batch { max_delay: Duration::from_secs(60) },
            };
            let options = LogOptions {
                compact_records: compact,
                ..options(durability, 600)
            };
            let (mut log, _) = DiskLog::open(dir.path(), options).unwrap();
            prop_assert_eq!(log.seq_next(), at as u64);
            let to = (at + take).min(events.len());
            for pair in [at, usize::midpoint(at, to), to].windows(2) {
                log.append(&events[pair[0]..pair[1]]).unwrap();
            }
            log.close().unwrap();
            at = to;
            assert_read_back(dir.path(), &events[..at])?;
        }
    }
}

/// SEG-9: a store asked for logs an older build opens (`chunk_records(false)`) writes
/// neither chunk records nor compact records, whichever was asked before.
#[test]
fn chunk_records_off_turns_compact_records_off() {
    use surfacelog::StoreOptions;
    let scratch = common::scratch("compact-records", "off");
    let options = StoreOptions::new()
        .compact_records(true)
        .chunk_records(false);
    assert_eq!(one_turn_store(&scratch.join("store"), options), [0]);
}

/// The `incompat_features` of the segments of the log of session "s", one `turn/start`,
/// created in a new store at `dir` with `options`; the session reads back its events.
fn one_turn_store(dir: &Path, options: surfacelog::StoreOptions) -> Vec<u16> {
    use surfacelog::{NoSurface, Store, kinds};
    let store = Store::open_or_create(dir, options).unwrap();
    let mut s = store.create("s", None, None).unwrap();
    s.append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)
        .unwrap();
    let appended = s.seq_next();
    s.close().unwrap();
    assert_eq!(store.inspect("s").unwrap().seq_next(), appended);
    let log = store.follow("s").unwrap();
    features(log.log().dir())
}

/// The `incompat_features` of the segments of the log in `dir`, in order.
fn features(dir: &Path) -> Vec<u16> {
    segments(dir)
        .iter()
        .map(|(h, _)| h.incompat_features)
        .collect()
}

/// SEG-9, §4.2: compact records are the default. A log of `LogOptions::default()` and a
/// store of `StoreOptions::new()` create segments that set `COMPACT_RECORDS`; a store asked
/// for `compact_records(false)` writes version 1 records with chunk records
/// (`CHUNK_RECORDS`), one asked for `chunk_records(false)` version 1 records without them;
/// every event reads back.
#[test]
fn compact_records_are_the_default() {
    use surfacelog::StoreOptions;
    use surfacelog::internals::log::segment::CHUNK_RECORDS;
    assert!(LogOptions::default().compact_records);
    assert_eq!(LogOptions::default().segment_features(), COMPACT_RECORDS);
    let dir = tempfile::tempdir().unwrap();
    let text = r#"{"type":"turn/start","seq":0,"time":5,"data":{"turn":1}}"#.to_owned();
    let events = [event(0, 5, "turn/start", text)];
    let (mut log, _) = DiskLog::open(dir.path(), LogOptions::default()).unwrap();
    log.append(&events).unwrap();
    log.close().unwrap();
    assert_eq!(features(dir.path()), [COMPACT_RECORDS]);
    assert_eq!(records(dir.path()), vec![0..1]);
    assert_read_back(dir.path(), &events).unwrap();

    let scratch = common::scratch("compact-records", "default");
    for (name, options, features) in [
        ("default", StoreOptions::new(), COMPACT_RECORDS),
        (
            "version-1",
            StoreOptions::new().compact_records(false),
            CHUNK_RECORDS,
        ),
        (
            "no-chunk-records",
            StoreOptions::new().chunk_records(false),
            0,
        ),
    ] {
        let found = one_turn_store(&scratch.join(name), options);
        assert_eq!(found, [features], "{name}");
    }
}

/// CMP-3, §4.2: compaction into compact records of a version 1 segment holding an event no
/// compact record holds (a source seq past 2^53 − 1, which a version 1 record holds, written
/// through the internal log API) keeps that segment as it is and rewrites the others: the
/// segment is healthy, so it is never `CORRUPT`, and every event reads back as it was.
#[test]
fn compaction_into_compact_records_keeps_a_segment_no_compact_record_holds() {
    use surfacelog::internals::log::{CompactOptions, compact_with};
    let dir = tempfile::tempdir().unwrap();
    let v1 = LogOptions {
        segment_bytes: 400,
        durability: Durability::Sync,
        compact_records: false,
        ..LogOptions::default()
    };
    let text = |seq: u64| {
        format!(r#"{{"type":"turn/start","seq":{seq},"time":5,"data":{{"turn":{seq}}}}}"#)
    };
    let mut events: Vec<Event> = (0..12)
        .map(|seq| event(seq, 5, "turn/start", text(seq)))
        .collect();
    // Seq 1 cites a source no compact record holds (REC-20: past 2^53 − 1).
    let odd = &events[1];
    events[1] = Event::new(
        odd.text().to_owned(),
        odd.as_ref().data_span(),
        None,
        EventFields {
            event_type: "turn/start".to_owned().into(),
            seq: 1,
            time: 5,
            surface_op: None,
            sources: Some(vec![1 << 60]),
            ignorable: false,
        },
    );
    let (mut log, _) = DiskLog::open(dir.path(), v1).unwrap();
    for event in &events {
        log.append(std::slice::from_ref(event)).unwrap();
    }
    log.close().unwrap();
    let before = segments(dir.path());
    assert!(before.len() > 2, "{} segments", before.len());
    let report = compact_with(
        &surfacelog::internals::storage::FsStorage,
        dir.path(),
        CompactOptions::new().compact_records(true),
    )
    .unwrap();
    assert_eq!(report.kept.first().map(|k| k.0), Some(0), "{report:?}");
    assert_eq!(report.rewritten.len(), before.len() - 2, "{report:?}");
    let after = segments(dir.path());
    assert_eq!(
        after[0], before[0],
        "the segment holding seq 1 is kept whole"
    );
    let reader = LogReader::open(dir.path()).unwrap();
    for event in &events {
        assert_eq!(reader.event_at(event.seq()).unwrap(), event.as_ref());
    }
}
