//! Limits that hold (issue 12, item 5): a first event larger than a segment is stored
//! (SEG-7), through the log, a stored session and the `import` command, and reads back
//! after reopen; `segment_bytes` is clamped to the range SEG-7 allows.

use std::path::Path;

use surfacelog::internals::event::EventSource;
use surfacelog::internals::log::segment::{SEGMENT_HEADER_LEN, SegmentHeader, segment_name};
use surfacelog::internals::log::{
    Durability, LogReader, LogWriter, SEGMENT_BYTES_MAX, SEGMENT_BYTES_MIN,
};
use surfacelog::internals::session::kinds;
use surfacelog::internals::store::Store;

mod common;

#[cfg(feature = "cli")]
use common::surfacelog;
use common::{log_options, padded_event, scratch, store_options};

/// The 8 MiB segments of a stored session.
const SEGMENT: u64 = 8 << 20;
/// A first event larger than a segment.
const BIG: usize = 9 << 20;

/// The header of segment `first_seq` in `dir`.
fn header(dir: &Path, first_seq: u64) -> SegmentHeader {
    use std::io::Read;
    let mut bytes = [0; SEGMENT_HEADER_LEN];
    let mut file = std::fs::File::open(dir.join(segment_name(first_seq))).unwrap();
    file.read_exact(&mut bytes).unwrap();
    SegmentHeader::decode(&bytes).unwrap()
}

/// The segment files of `dir`, the `.tmp` files too, by name.
fn segment_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".seg"))
        .collect();
    names.sort();
    names
}

/// SEG-7: an empty segment 0 too small for the first record is replaced by one just
/// large enough, under the same name; the log continues in 8 MiB segments after it, and
/// every event reads back, from a reader opened before the replacement too, and after
/// reopen.
#[test]
fn a_first_event_larger_than_a_segment_is_stored_by_the_log() {
    for durability in [Durability::Sync, Durability::Manual, Durability::Staged] {
        let dir = scratch("limits", "log");
        let (writer, _) = LogWriter::open(&dir, log_options(durability, SEGMENT)).unwrap();
        let mut early = LogReader::open(&dir).unwrap();
        assert_eq!(early.refresh().unwrap(), 0);
        let big = padded_event(0, BIG);
        writer.append(std::slice::from_ref(&big)).unwrap();
        writer.append(&[padded_event(1, 10)]).unwrap();
        writer.flush().unwrap();
        // A reader that mapped the empty segment before it was replaced finds both.
        assert_eq!(early.refresh().unwrap(), 2, "{durability:?}");
        assert_eq!(early.event(0).unwrap().unwrap().text(), big.text());
        writer.close().unwrap();
        let first = header(&dir, 0);
        assert!(first.capacity >= SEGMENT_HEADER_LEN as u64 + BIG as u64);
        assert!(first.capacity <= SEGMENT_HEADER_LEN as u64 + BIG as u64 + 4096);
        assert_eq!(first.index, 0);
        let file_len = std::fs::metadata(dir.join(segment_name(0))).unwrap().len();
        assert_eq!(
            file_len, first.capacity,
            "SEG-6: the file is its capacity long"
        );
        assert_eq!(segment_files(&dir), [segment_name(0), segment_name(1)]);

        let (writer, report) = LogWriter::open(&dir, log_options(durability, SEGMENT)).unwrap();
        assert_eq!(report.torn_tail, None);
        assert_eq!(writer.seq_next(), 2);
        writer.append(&[padded_event(2, 10)]).unwrap();
        writer.close().unwrap();
        let mut reader = LogReader::open(&dir).unwrap();
        assert_eq!(reader.refresh().unwrap(), 3);
        assert_eq!(reader.event(0).unwrap().unwrap().text(), big.text());
        assert_eq!(header(&dir, 1).capacity, SEGMENT);
    }
}

/// SEG-7: the same after a reopen of the empty log (the replacement is not only for a
/// segment this writer created), and for a later empty segment: one a crash left right
/// after a roll is emulated by a log whose last segment holds no record.
#[test]
fn an_oversized_first_record_after_reopen_of_an_empty_log_is_stored() {
    let dir = scratch("limits", "reopen");
    let (writer, _) = LogWriter::open(&dir, log_options(Durability::Sync, SEGMENT)).unwrap();
    writer.close().unwrap();
    let (writer, _) = LogWriter::open(&dir, log_options(Durability::Sync, SEGMENT)).unwrap();
    let big = padded_event(0, BIG);
    writer.append(std::slice::from_ref(&big)).unwrap();
    writer.close().unwrap();
    let mut reader = LogReader::open(&dir).unwrap();
    assert_eq!(reader.refresh().unwrap(), 1);
    assert_eq!(reader.event(0).unwrap().unwrap().text(), big.text());
}

/// SEG-7 through a stored session: a 9 MiB first event in 8 MiB segments is appended,
/// read back by the session at once, and again after reopen.
#[test]
fn a_stored_session_takes_a_first_event_larger_than_its_segments() {
    let dir = scratch("limits", "store");
    let store = Store::open_or_create(&dir, store_options(Durability::Sync, SEGMENT)).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    let text = "t".repeat(BIG);
    let data = format!(r#"{{"turn":1,"pad":"{text}"}}"#);
    session
        .append::<kinds::TurnStart>(&data, surfacelog::internals::session::NoSurface)
        .unwrap();
    session.flush().unwrap();
    assert_eq!(session.log().seq_next(), 1);
    assert!(
        session
            .log()
            .event(0)
            .unwrap()
            .unwrap()
            .text()
            .contains(&text)
    );
    session.close().unwrap();
    let (reopened, opened) = store.open_session("s").unwrap();
    assert_eq!(opened.log.torn_tail, None);
    assert!(
        reopened
            .log()
            .event(0)
            .unwrap()
            .unwrap()
            .text()
            .contains(&text)
    );
}

/// SEG-7 through the CLI: `import` of a JSONL file whose first event line is about 9 MiB
/// succeeds, and the session shows it after.
#[cfg(feature = "cli")]
#[test]
fn import_of_a_first_event_line_larger_than_a_segment_succeeds() {
    let dir = scratch("limits", "import");
    let file = dir.join("big.jsonl");
    let text = "x".repeat(BIG);
    let lines = [
        r#"{"type":"session","version":0,"id":"big","createdAt":0,"cwd":"/w","delegationDepth":0}"#
            .to_owned(),
        format!(
            r#"{{"type":"user/message","seq":0,"time":1000,"data":{{"content":[{{"type":"text","text":"{text}"}}],"source":{{"kind":"user"}},"role":"user","id":"u0"}},"surfaceOp":"append"}}"#
        ),
        r#"{"type":"turn/start","seq":1,"time":1000,"data":{"turn":1}}"#.to_owned(),
    ];
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let store = dir.join("store");
    let args = [
        "import",
        "--format",
        "dsh-jsonl",
        file.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
    ];
    let output = surfacelog(&args);
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let show = surfacelog(&["show", "big", "--store", store.to_str().unwrap()]);
    assert!(
        show.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&show.stderr)
    );
    let verify = surfacelog(&["verify", "--store", store.to_str().unwrap()]);
    assert!(
        verify.status.success(),
        "stdout: {}",
        String::from_utf8_lossy(&verify.stdout)
    );
    // And the store opens it for writing again.
    let store = Store::open_or_create(&store, store_options(Durability::Sync, SEGMENT)).unwrap();
    let (session, _) = store.open_session("big").unwrap();
    // Both events, and what import added to close the open turn (contract §8).
    assert!(session.log().seq_next() >= 2);
    assert!(
        session
            .log()
            .event(0)
            .unwrap()
            .unwrap()
            .text()
            .contains(&text)
    );
}

/// SEG-7, crash safety of the replacement: when its rename fails (as if the process died
/// before it), the append fails and poisons the writer, nothing is stored, the log reopens
/// empty and intact without the `.tmp` file, and then takes the same event.
#[test]
fn a_failed_replacement_leaves_the_empty_segment_intact() {
    let dir = scratch("limits", "rename");
    let (writer, faults) = common::faulty_writer(&dir, Durability::Sync, SEGMENT);
    faults.rename.store(1, std::sync::atomic::Ordering::SeqCst);
    let big = padded_event(0, BIG);
    let error = writer.append(std::slice::from_ref(&big)).unwrap_err();
    assert_eq!(error.code(), "IO", "{error}");
    assert_eq!(
        writer
            .append(std::slice::from_ref(&big))
            .unwrap_err()
            .code(),
        "POISONED"
    );
    drop(writer);
    let old = header(&dir, 0);
    assert_eq!(old.capacity, SEGMENT);
    let (writer, report) = LogWriter::open(&dir, log_options(Durability::Sync, SEGMENT)).unwrap();
    assert_eq!(report.torn_tail, None);
    assert_eq!(writer.seq_next(), 0);
    assert_eq!(segment_files(&dir), [segment_name(0)]);
    writer.append(std::slice::from_ref(&big)).unwrap();
    writer.close().unwrap();
    let new = header(&dir, 0);
    assert_eq!((new.log_id, new.index, new.first_seq), (old.log_id, 0, 0));
    let mut reader = LogReader::open(&dir).unwrap();
    assert_eq!(reader.refresh().unwrap(), 1);
    assert_eq!(reader.event(0).unwrap().unwrap().text(), big.text());
}

/// SEG-7: `segment_bytes` is clamped where it is used: above 2^32 − 1 to 2^32 − 1 (offsets
/// are 32-bit), below 136 bytes (the header and the smallest record) to 136; the log works in both.
#[test]
fn segment_bytes_is_clamped_to_the_range_seg7_allows() {
    let cases = [
        (6 << 30, SEGMENT_BYTES_MAX),
        (u64::MAX, SEGMENT_BYTES_MAX),
        (0, SEGMENT_BYTES_MIN),
        (1, SEGMENT_BYTES_MIN),
        (135, SEGMENT_BYTES_MIN),
        (136, 136),
        (1 << 20, 1 << 20),
    ];
    for (asked, capacity) in cases {
        assert_eq!(
            log_options(Durability::Manual, asked).segment_capacity(),
            capacity
        );
        let dir = scratch("limits", "clamp");
        let (writer, _) = LogWriter::open(&dir, log_options(Durability::Manual, asked)).unwrap();
        assert_eq!(header(&dir, 0).capacity, capacity, "segment_bytes {asked}");
        let file_len = std::fs::metadata(dir.join(segment_name(0))).unwrap().len();
        // SEG-6: created with room for the first step of records, not its capacity.
        assert_eq!(file_len, capacity.min(64 << 10));
        // Records larger than a small capacity get segments just large enough (SEG-7).
        let events: Vec<_> = (0..40).map(|seq| padded_event(seq, 300)).collect();
        writer.append(&events).unwrap();
        writer.close().unwrap();
        let mut reader = LogReader::open(&dir).unwrap();
        assert_eq!(reader.refresh().unwrap(), 40);
        for seq in 0..40 {
            assert_eq!(
                reader.event(seq).unwrap().unwrap().text(),
                events[usize::try_from(seq).unwrap()].text()
            );
        }
    }
}

/// The bytes a segment file's records and header take: up to its last non-zero byte
/// (SEG-5), rounded to the record alignment.
fn data_end(path: &Path) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |at| at + 1);
    u64::try_from(end.next_multiple_of(8)).unwrap()
}

/// Every file under `dir`: (apparent size, data), where a segment's data ends at its last
/// non-zero byte and any other file is data whole. Each segment's length must be exactly
/// the step its data ends in (SEG-6).
fn footprint(dir: &Path) -> (u64, u64) {
    let (mut apparent, mut data) = (0, 0);
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            let (a, d) = footprint(&path);
            apparent += a;
            data += d;
            continue;
        }
        apparent += meta.len();
        if path.extension().is_some_and(|e| e == "seg") {
            let end = data_end(&path);
            let capacity = {
                let first: u64 = path.file_stem().unwrap().to_str().unwrap().parse().unwrap();
                header(path.parent().unwrap(), first).capacity
            };
            let step = 64 << 10;
            let grown = end
                .max(SEGMENT_HEADER_LEN as u64 + 8)
                .next_multiple_of(step);
            assert_eq!(
                meta.len(),
                grown.min(capacity),
                "{}: a segment file grows in 64 KiB steps to its capacity (SEG-6)",
                path.display()
            );
            data += end;
        } else {
            data += meta.len();
        }
    }
    (apparent, data)
}

/// Issue 12, item 5: a closed session's apparent size is at most its data + 1 MiB (SEG-6):
/// segments grow in 64 KiB steps instead of being created at their capacity (64 MiB by
/// default), through the library, across segment rolls, and after reopen and more appends.
#[test]
fn a_closed_session_is_at_most_one_mib_larger_than_its_data() {
    let scratch = scratch("limits", "apparent");
    for (segment_bytes, turns) in [(64 << 20, 30), (3 << 19, 2_000)] {
        let root = scratch.join(format!("store-{segment_bytes}"));
        let store =
            Store::open_or_create(&root, store_options(Durability::Sync, segment_bytes)).unwrap();
        let mut session = store.create("s", None, None).unwrap();
        for turn in 1..=turns / 2 {
            common::closed_turn(&mut session, turn, &format!("u{turn}"), &"x".repeat(600));
        }
        session.close().unwrap();
        let mut session = store.open_session("s").unwrap().0;
        for turn in turns / 2 + 1..=turns {
            common::closed_turn(&mut session, turn, &format!("u{turn}"), &"x".repeat(600));
        }
        session.close().unwrap();
        let dir = root.join("sessions").join("s");
        let segments = common::files_ending(&dir.join("log"), ".seg").len();
        assert_eq!(
            segments > 1,
            segment_bytes < 64 << 20,
            "{segments} segments"
        );
        let (apparent, data) = footprint(&dir);
        assert!(
            apparent <= data + (1 << 20),
            "apparent {apparent} > data {data} + 1 MiB ({segments} segments)"
        );
    }
}

/// Issue 12, item 5, through the CLI: the demo's store, a few sessions of a few KB each,
/// is no longer ~64 MiB apparent per session.
#[cfg(feature = "cli")]
#[test]
fn the_demo_store_is_not_sparse_giants() {
    let scratch = scratch("limits", "demo-size");
    let root = scratch.join("store");
    let output = surfacelog(&["demo", "--store", root.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    let sessions = std::fs::read_dir(root.join("sessions")).unwrap();
    let mut checked = 0;
    for entry in sessions {
        let (apparent, data) = footprint(&entry.unwrap().path());
        assert!(
            apparent <= data + (1 << 20),
            "apparent {apparent}, data {data}"
        );
        checked += 1;
    }
    assert!(checked > 0, "the demo left no session to measure");
}

/// SEG-6, SEG-8: a segment's length is always its capacity or a 64 KiB step, whatever a
/// crash keeps. A last segment cut by another process to any other length, even past its
/// records, is `CORRUPT` naming the file, for the writer's open and for a reader: never a
/// torn tail set aside and repaired.
#[test]
fn a_segment_cut_to_a_length_the_writer_never_sets_is_corrupt() {
    let scratch = scratch("limits", "cut");
    let dir = scratch.join("log");
    let (writer, _) = LogWriter::open(&dir, log_options(Durability::Sync, SEGMENT)).unwrap();
    let events: Vec<_> = (0..10).map(|seq| padded_event(seq, 300)).collect();
    writer.append(&events).unwrap();
    writer.close().unwrap();
    let path = dir.join(segment_name(0));
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    assert_eq!(file.metadata().unwrap().len(), 64 << 10);
    for len in [(64 << 10) - 8, 10_000] {
        file.set_len(len).unwrap();
        let error = LogWriter::open(&dir, log_options(Durability::Sync, SEGMENT)).unwrap_err();
        assert_eq!(error.code(), "CORRUPT", "{error}");
        let text = error.to_string();
        assert!(
            text.contains(&*path.to_string_lossy()) && text.contains("truncated"),
            "{text}"
        );
        let error = LogReader::open(&dir).unwrap_err();
        assert_eq!(error.code(), "CORRUPT", "{error}");
        assert!(
            common::files_ending(&dir, ".quarantine").is_empty(),
            "nothing set aside"
        );
    }
    // Back at a step the writer sets, the log opens with every event.
    file.set_len(64 << 10).unwrap();
    let mut reader = LogReader::open(&dir).unwrap();
    assert_eq!(reader.refresh().unwrap(), 10);
}

/// SEG-6, RD-2: a reader that mapped a segment at its first step reads the records the
/// writer wrote after growing it, step after step, without reopening; and a writer
/// reopened on a grown segment appends on from its length.
#[test]
fn a_reader_follows_a_segment_as_it_grows() {
    let scratch = scratch("limits", "grow");
    let dir = scratch.join("log");
    let path = dir.join(segment_name(0));
    let batch =
        |from: u64| -> Vec<_> { (from..from + 100).map(|s| padded_event(s, 1_000)).collect() };
    let mut reader = None;
    let mut lengths = Vec::new();
    for round in 0..2_u64 {
        // Three batches, a reopen of the writer, three more.
        let (writer, _) = LogWriter::open(&dir, log_options(Durability::Manual, SEGMENT)).unwrap();
        let reader = reader.get_or_insert_with(|| LogReader::open(&dir).unwrap());
        for step in 0..3 {
            let first = (round * 3 + step) * 100;
            let events = batch(first);
            writer.append(&events).unwrap();
            writer.flush().unwrap();
            assert_eq!(reader.refresh().unwrap(), first + 100);
            for (i, event) in events.iter().enumerate() {
                let seq = first + u64::try_from(i).unwrap();
                assert_eq!(reader.event(seq).unwrap().unwrap().text(), event.text());
            }
            lengths.push(std::fs::metadata(&path).unwrap().len());
        }
        writer.close().unwrap();
    }
    assert!(
        lengths.windows(2).all(|w| w[0] < w[1])
            && lengths.iter().all(|l| l % (64 << 10) == 0 && *l < SEGMENT),
        "the file grows in 64 KiB steps: {lengths:?}"
    );
}
