//! Recovery keeps durable data (log-format.md §7: RCV-12 to RCV-15) and salvage
//! (SLV-1 to SLV-4), through the library and the `surfacelog` binary.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use surfacelog::internals::event::{Event, EventSource};
use surfacelog::internals::log::{Durability, LogOptions, LogReader, LogWriter};
use surfacelog::internals::store::{Store, StoreOptions};

mod common;

#[cfg(feature = "cli")]
use common::surfacelog;
use common::{Scratch, faulty_writer, files_ending, log_options, padded_event, v1_log_options};

fn scratch(name: &str) -> Scratch {
    common::scratch("recovery", name)
}

/// A deterministic event whose text depends only on `seq`.
fn event(seq: u64) -> Event {
    padded_event(seq, usize::try_from(seq * 37 % 300).unwrap())
}

fn events(range: std::ops::Range<u64>) -> Vec<Event> {
    range.map(event).collect()
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    files_ending(dir, ".seg")
}

/// A log in the directory `log` of a new scratch directory `name` (1 MiB segments, the
/// default records), holding `events(0..n)` and closed (so indexed). Keep the scratch
/// directory alive.
fn closed_log(name: &str, durability: Durability, n: u64) -> (Scratch, PathBuf) {
    closed_log_with(name, log_options(durability, 1 << 20), n)
}

/// [`closed_log`] written with `options`.
fn closed_log_with(name: &str, options: LogOptions, n: u64) -> (Scratch, PathBuf) {
    let tmp = scratch(name);
    let dir = tmp.join("log");
    let (writer, _) = LogWriter::open(&dir, options).unwrap();
    writer.append(&events(0..n)).unwrap();
    writer.close().unwrap();
    (tmp, dir)
}

/// The options of a writer of each record format, `Manual` durability and 1 MiB segments:
/// version 1 records (§4, §4.1) and compact records (§4.2, the default), named.
fn both_formats() -> [(&'static str, LogOptions); 2] {
    [
        ("v1", v1_log_options(Durability::Manual, 1 << 20)),
        ("compact", log_options(Durability::Manual, 1 << 20)),
    ]
}

/// A store made by `surfacelog demo` in the directory `store` of a new scratch directory
/// `name`. Keep the scratch directory alive.
#[cfg(feature = "cli")]
fn demo_store(name: &str) -> (Scratch, PathBuf) {
    let tmp = scratch(name);
    let store_dir = tmp.join("store");
    let store_arg = store_dir.to_str().unwrap();
    assert!(surfacelog(&["demo", "--store", store_arg]).status.success());
    (tmp, store_dir)
}

/// An offset inside the checksummed bytes of the record holding `seq` in the segment file
/// `segment` (its middle: past a version 1 frame header or a compact record's `len` and
/// `crc`, before its padding), found by walking the records in the segment's format.
fn inside_record(segment: &Path, seq: u64) -> usize {
    let record = common::record_of_seq(segment, seq);
    let at = record.at.start.midpoint(record.at.end);
    assert!(at >= record.at.start + 8, "{record:?}");
    at
}

/// RCV-13: a flipped byte in the last record of a closed log is damage to a record its
/// index lists as durable: `CORRUPT` with the file and offset, nothing changed, never a
/// torn tail (before: zeroed and reported as `TORN_TAIL`).
#[test]
fn rcv_13_damage_in_the_last_indexed_record_is_corrupt_not_a_torn_tail() {
    for (format, options) in both_formats() {
        let (_tmp, dir) = closed_log_with("last-indexed", options, 20);
        let segment = segments(&dir).pop().unwrap();
        let at = inside_record(&segment, 19);
        let mut bytes = std::fs::read(&segment).unwrap();
        bytes[at] ^= 0x08;
        std::fs::write(&segment, &bytes).unwrap();
        let err = LogWriter::open(&dir, LogOptions::default()).unwrap_err();
        assert_eq!(err.code(), "CORRUPT", "{format}: {err}");
        assert!(err.to_string().contains("RCV-13"), "{format}: {err}");
        assert!(
            err.to_string().contains("00000000000000000000.seg offset="),
            "{format}: {err}"
        );
        assert_eq!(std::fs::read(&segment).unwrap(), bytes, "nothing changed");
        assert!(files_ending(&dir, ".quarantine").is_empty());
    }
}

/// RCV-12 (replacing RCV-4): damage followed by valid records past every durable mark, as
/// a power cut leaves when only some unsynced pages reached the disk, is set aside into a
/// quarantine file (the bytes exactly) and dropped; the log opens with the prefix.
#[test]
fn rcv_12_damage_with_valid_records_after_above_the_mark_is_quarantined() {
    for (format, options) in both_formats() {
        let (_tmp, dir) = closed_log_with("quarantine", options.clone(), 10);
        let (writer, _) = LogWriter::open(&dir, options).unwrap();
        writer.append(&events(10..30)).unwrap();
        writer.flush().unwrap();
        // The process dies before close: its index still vouches for the first 10 only.
        let segment = segments(&dir).pop().unwrap();
        let index = segment.with_extension("idx");
        let vouched = std::fs::read(&index).unwrap();
        drop(writer);
        std::fs::write(&index, &vouched).unwrap();
        let damaged = inside_record(&segment, 15);
        let mut bytes = std::fs::read(&segment).unwrap();
        bytes[damaged] ^= 0x01;
        std::fs::write(&segment, &bytes).unwrap();
        let (writer, report) = LogWriter::open(&dir, LogOptions::default()).unwrap();
        assert_eq!(writer.seq_next(), 15, "{format}");
        let torn = report.torn_tail.expect("reported");
        assert_eq!(torn.code(), "TORN_TAIL");
        let from = usize::try_from(torn.offset).unwrap();
        assert!(from < damaged, "{format}");
        let kept = std::fs::read(&torn.quarantine).unwrap();
        assert_eq!(kept.len() as u64, torn.bytes);
        assert_eq!(kept, bytes[from..from + kept.len()], "the bytes exactly");
        assert_eq!(
            torn.quarantine.file_name().unwrap().to_string_lossy(),
            format!("00000000000000000000.{from}.quarantine")
        );
        // The log goes on; a second tail set aside at the same offset never overwrites the first.
        writer.append(&events(15..16)).unwrap();
        drop(writer);
        let mut bytes = std::fs::read(&segment).unwrap();
        std::fs::write(&index, &vouched).unwrap();
        bytes[from + 3] ^= 0x40;
        std::fs::write(&segment, &bytes).unwrap();
        let (writer, report) = LogWriter::open(&dir, LogOptions::default()).unwrap();
        assert_eq!(writer.seq_next(), 15, "{format}");
        let second = report.torn_tail.unwrap().quarantine;
        assert_ne!(second, torn.quarantine);
        assert_eq!(
            std::fs::read(&torn.quarantine).unwrap(),
            kept,
            "not overwritten"
        );
        drop(writer);
        // A quarantine file is not taken for a segment by readers.
        assert_eq!(LogReader::open(&dir).unwrap().seq_next(), 15);
    }
}

/// The damaged record's seq is below the mark the index vouched for, even with valid
/// records after it: `CORRUPT`, nothing changed (RCV-13: damage below the mark).
#[test]
fn rcv_13_damage_below_the_vouched_prefix_found_by_a_scan_stays_corrupt() {
    for (format, options) in both_formats() {
        let (_tmp, dir) = closed_log_with("below-mark", options, 20);
        let segment = segments(&dir).pop().unwrap();
        // Both the 19th record and the 20th (which the vouched check reads) are damaged.
        let places = [18, 19].map(|seq| inside_record(&segment, seq));
        let mut bytes = std::fs::read(&segment).unwrap();
        for at in places {
            bytes[at] ^= 0x10;
        }
        std::fs::write(&segment, &bytes).unwrap();
        let err = LogWriter::open(&dir, LogOptions::default()).unwrap_err();
        assert_eq!(err.code(), "CORRUPT", "{format}: {err}");
        assert_eq!(std::fs::read(&segment).unwrap(), bytes);
    }
}

/// RCV-15: records found past the vouched prefix (a killed process's, maybe in the page
/// cache only) are synced once at open before anything can claim them durable; a log
/// closed cleanly is opened without a sync.
#[test]
fn rcv_15_open_syncs_records_past_the_vouched_prefix_and_only_then() {
    let (_tmp, dir) = closed_log("sync-at-open", Durability::Manual, 10);
    let open_counting = || {
        let (writer, faults) = faulty_writer(&dir, Durability::Manual, 1 << 20);
        let syncs = faults.syncs();
        (writer, syncs)
    };
    let (writer, syncs) = open_counting();
    assert_eq!(syncs, 0, "a cleanly closed log: no sync");
    drop(writer);
    // Records the index does not cover (a process killed before close).
    std::fs::remove_file(segments(&dir)[0].with_extension("idx")).unwrap();
    let (writer, syncs) = open_counting();
    assert_eq!(syncs, 1, "recovered records are synced once");
    assert_eq!(writer.seq_next(), 10);
}

/// The power-cut model: records appended in `Manual` or `Batch` durability without a sync
/// may reach the disk in any subset of their 4 KiB pages. Whatever subset did, open
/// succeeds, every record up to the durable mark is intact, and the rest is either kept
/// intact or set aside byte for byte in a quarantine file: never `CORRUPT`.
fn power_cut(durability: Durability, synced: u64, unsynced: u64, pages: &[bool]) {
    let (_tmp, dir) = closed_log("power-cut", durability, synced);
    let segment = segments(&dir).pop().unwrap();
    let index = segment.with_extension("idx");
    let durable = std::fs::read(&segment).unwrap();
    let durable_index = std::fs::read(&index).unwrap();
    let (writer, _) = LogWriter::open(&dir, log_options(durability, 1 << 20)).unwrap();
    for seq in synced..synced + unsynced {
        writer.append(&[event(seq)]).unwrap();
    }
    writer.close().unwrap();
    let written = std::fs::read(&segment).unwrap();
    // The disk after the cut: the durable state, plus the pages in `pages` that made it.
    let mut disk = durable.clone();
    let first_page = (durable_end(&durable) / 4096) * 4096;
    let last = written.iter().rposition(|b| *b != 0).unwrap() + 1;
    for (i, start) in (first_page..last).step_by(4096).enumerate() {
        if pages.get(i).copied().unwrap_or(false) {
            let end = (start + 4096).min(written.len());
            disk[start..end].copy_from_slice(&written[start..end]);
        }
    }
    std::fs::write(&segment, &disk).unwrap();
    std::fs::write(&index, &durable_index).unwrap();
    let (writer, report) = LogWriter::open(&dir, log_options(durability, 1 << 20))
        .unwrap_or_else(|e| panic!("a power cut never makes a log unopenable: {e}"));
    let kept = writer.seq_next();
    assert!(kept >= synced, "the durable records are kept");
    drop(writer);
    let reader = LogReader::open(&dir).unwrap();
    for seq in 0..kept {
        assert_eq!(
            reader.event(seq).unwrap().unwrap().text(),
            event(seq).text(),
            "seq {seq}"
        );
    }
    if let Some(torn) = report.torn_tail {
        let from = usize::try_from(torn.offset).unwrap();
        let set_aside = std::fs::read(&torn.quarantine).unwrap();
        assert_eq!(set_aside, disk[from..from + set_aside.len()]);
        assert!(disk[from + set_aside.len()..].iter().all(|b| *b == 0));
    }
}

/// Just past the last non-zero byte.
fn durable_end(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|b| *b != 0).map_or(64, |at| at + 1)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn a_power_cut_in_any_buffered_mode_never_makes_a_log_unopenable(
        batch in any::<bool>(),
        synced in 1u64..30,
        unsynced in 1u64..80,
        pages in prop::collection::vec(any::<bool>(), 12),
    ) {
        let durability = if batch {
            Durability::Batch { max_delay: std::time::Duration::from_secs(3600) }
        } else {
            Durability::Manual
        };
        power_cut(durability, synced, unsynced, &pages);
    }
}

/// A store with one closed session `s` of `n` events (small segments, so several).
fn store_with_session(tmp: &Path, n: u64) -> Store {
    let options = StoreOptions::new().segment_bytes(4096);
    let store = Store::open_or_create(tmp, options).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    for i in 0..n {
        session
            .append_dynamic(
                "plugin/x",
                &format!(r#"{{"i":{i},"pad":"{}"}}"#, "z".repeat(200)),
                None,
            )
            .unwrap();
    }
    session.close().unwrap();
    store
}

/// RCV-14: a checkpoint ahead of the log (here: the last segment deleted) is data loss,
/// `CORRUPT` naming what is missing, for a writer's open and a read-only inspection;
/// before, the open refolded and reported only a stale checkpoint.
#[test]
fn rcv_14_a_missing_last_segment_is_corrupt_not_a_stale_checkpoint() {
    let tmp = scratch("missing-last");
    let store = store_with_session(&tmp, 40);
    let log = tmp.join("sessions/s/log");
    let last = segments(&log).pop().unwrap();
    assert!(segments(&log).len() > 2);
    std::fs::remove_file(&last).unwrap();
    let err = store.open_session("s").unwrap_err();
    assert_eq!(err.code(), "CORRUPT");
    assert!(
        err.to_string()
            .contains(&*last.file_name().unwrap().to_string_lossy()),
        "names the missing segment: {err}"
    );
    let err = store.inspect("s").unwrap_err();
    assert_eq!(err.code(), "CORRUPT");
    assert!(err.to_string().contains("missing"), "{err}");
    // Salvage drops the checkpoint, a cache covering more than remains; then it opens.
    let report = store.salvage("s").unwrap();
    assert!(report.checkpoint_removed);
    assert!(report.log.set_aside.is_empty());
    let (session, _) = store.open_session("s").unwrap();
    assert_eq!(session.seq_next(), report.log.seq_next);
}

/// SLV-1 to SLV-3: damage in a sealed segment ends the prefix there; the rest of that
/// segment goes to a quarantine file and every later segment is moved aside whole (never
/// deleted); the session then opens with the prefix, and a live writer refuses salvage.
#[test]
fn salvage_keeps_the_longest_valid_prefix_and_sets_the_rest_aside() {
    let tmp = scratch("salvage");
    let store = store_with_session(&tmp, 40);
    let log = tmp.join("sessions/s/log");
    let all = segments(&log);
    let sealed = &all[1];
    let next_first: u64 = all[2]
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut bytes = std::fs::read(sealed).unwrap();
    // A byte of the sealed segment's last record.
    let damaged = durable_end(&bytes) - 2;
    bytes[damaged] ^= 0x01;
    std::fs::write(sealed, &bytes).unwrap();
    // Found on read, not at open (RCV-6): the checkpoint covers the whole log.
    let (writer, _) = store.open_session("s").unwrap();
    assert_eq!(
        store.salvage("s").unwrap_err().code(),
        "LOCKED",
        "never under a live writer"
    );
    drop(writer);
    let report = store.salvage("s").unwrap();
    let lost = report.log.first_lost_seq.expect("something was set aside");
    assert_eq!(lost, report.log.seq_next);
    assert_eq!(
        lost,
        next_first - 1,
        "every record before the damaged one is kept"
    );
    let first = &report.log.set_aside[0];
    assert_eq!(&first.from, sealed);
    let set_aside = std::fs::read(&first.quarantine).unwrap();
    let from = usize::try_from(first.offset).unwrap();
    assert!(from <= damaged && damaged < from + set_aside.len());
    assert_eq!(set_aside, bytes[from..from + set_aside.len()]);
    for later in &all[2..] {
        assert!(!later.exists(), "moved aside");
        assert!(
            report
                .log
                .set_aside
                .iter()
                .any(|a| &a.from == later && a.quarantine.exists()),
            "{later:?} kept in quarantine"
        );
    }
    let (session, opened) = store.open_session("s").unwrap();
    assert!(session.seq_next() >= lost);
    assert_eq!(opened.log.torn_tail, None);
    drop(session);
    // Salvaging a sound log sets nothing aside.
    let again = store.salvage("s").unwrap();
    assert_eq!(again.log.first_lost_seq, None);
}

/// The demo store: "flip a byte in the last record of a closed session". Before, a
/// writer's open zeroed it as a torn tail and repair appended an invented
/// `turn/end {interrupted}`; now the open is `CORRUPT` and `surfacelog salvage` sets the
/// record aside and says so.
#[cfg(feature = "cli")]
#[test]
fn demo_a_flipped_byte_in_the_last_record_is_corrupt_and_salvage_sets_it_aside() {
    let (_tmp, store_dir) = demo_store("demo-last");
    let store_arg = store_dir.to_str().unwrap();
    let store = Store::open_or_create(&store_dir, StoreOptions::default()).unwrap();
    let (session, _) = store.open_session("demo").unwrap();
    let n = session.seq_next();
    assert_eq!(
        session.event(n - 1).unwrap().unwrap().event_type,
        "turn/end"
    );
    drop(session);
    let segment = store_dir.join("sessions/demo/log/00000000000000000000.seg");
    let at = inside_record(&segment, n - 1);
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[at] ^= 0x02;
    std::fs::write(&segment, &bytes).unwrap();
    let err = store.open_session("demo").unwrap_err();
    assert_eq!(err.code(), "CORRUPT", "{err}");
    assert_eq!(std::fs::read(&segment).unwrap(), bytes, "nothing changed");
    let output = surfacelog(&["salvage", "demo", "--store", store_arg, "--json"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        stdout.contains(&format!("\"firstLostSeq\":{}", n - 1)),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("\"kept\":{}", n - 1)), "{stdout}");
    assert!(stdout.contains(".quarantine\""), "{stdout}");
    let (session, opened) = store.open_session("demo").unwrap();
    // The prefix is kept; the session is open again (the crash repair closes its turn).
    assert_eq!(opened.log.torn_tail, None);
    assert!(session.seq_next() >= n - 1);
    drop(session);
    // The fork shares the segment by a hard link: salvage replaced the demo's copy, so the
    // fork still opens (its limit lies before the damage).
    assert!(store.open_session("demo-fork").is_ok());
}

/// The demo store: "delete the fork's last segment". Before, `show demo-fork` exited 0
/// with 12 events of 13 and `Store::open_session` reported only a stale checkpoint.
#[cfg(feature = "cli")]
#[test]
fn demo_a_deleted_last_segment_of_the_fork_is_corrupt_through_the_cli() {
    let (_tmp, store_dir) = demo_store("demo-fork");
    let store_arg = store_dir.to_str().unwrap();
    let log = store_dir.join("sessions/demo-fork/log");
    let last = segments(&log).pop().unwrap();
    assert!(last.ends_with("00000000000000000012.seg"));
    std::fs::remove_file(&last).unwrap();
    let output = surfacelog(&["show", "demo-fork", "--store", store_arg, "--json"]);
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("error[CORRUPT]"), "{stderr}");
    let store = Store::open_or_create(&store_dir, StoreOptions::default()).unwrap();
    let err = store.open_session("demo-fork").unwrap_err();
    assert_eq!(err.code(), "CORRUPT");
    assert!(
        err.to_string().contains("00000000000000000012.seg"),
        "{err}"
    );
    let output = surfacelog(&["salvage", "demo-fork", "--store", store_arg]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.contains("checkpoint removed"), "{stdout}");
    let (session, _) = store.open_session("demo-fork").unwrap();
    assert!(session.seq_next() >= 12);
}

/// RCV-7, SEG-6: a zeroed last segment an earlier build left when a crash cut its creation
/// short (created at its full configured capacity, more than 64 KiB) is still a torn
/// creation when the segment before it has another capacity (one made for an oversized
/// record): the writer's configured capacity is one its creation leaves. It is removed,
/// and every event is kept.
#[test]
fn rcv_7_an_earlier_builds_torn_creation_at_the_configured_capacity_is_removed() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("log");
    let options = || log_options(Durability::Manual, 256 << 10);
    let (writer, _) = LogWriter::open(&dir, options()).unwrap();
    writer.append(&[padded_event(0, 10)]).unwrap();
    writer.append(&[padded_event(1, 400 << 10)]).unwrap();
    writer.close().unwrap();
    let segments = files_ending(&dir, ".seg");
    assert_eq!(
        segments.len(),
        2,
        "the oversized record has a segment of its own"
    );
    let torn = dir.join("00000000000000000002.seg");
    std::fs::write(&torn, vec![0; 256 << 10]).unwrap();
    let (writer, report) = LogWriter::open(&dir, options()).unwrap();
    assert_eq!(report.removed_segment.as_deref(), Some(torn.as_path()));
    assert_eq!(writer.seq_next(), 2);
    writer.close().unwrap();
}
