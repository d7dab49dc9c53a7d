//! The on-disk log (`format-spec/log-format.md`): round trips across segments, readers
//! alongside the writer, the single-writer lock (in this process and from another one),
//! durability modes, poisoning on injected failures, and every recovery case (§7).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use surfacelog::internals::event::{Event, EventFields, EventSource, SurfaceOp};
use surfacelog::internals::log::{DiskLog, Durability, LogOptions, LogReader, LogWriter, TornTail};

mod common;

use common::{faulty_writer, log_options as options};

/// A log directory to be, in a scratch directory removed when the returned path is dropped
/// (even when the test fails).
fn temp_dir(name: &str) -> common::ScratchPath {
    common::scratch_path("log", name)
}

/// A deterministic event: its text depends only on `seq`.
fn event(seq: u64) -> Event {
    let body = "x".repeat(usize::try_from(seq % 97).unwrap());
    let text = format!(
        r#"{{"type":"plugin/t","seq":{seq},"time":{},"data":{{"n":{seq},"pad":"{body}"}}}}"#,
        seq * 3
    );
    let data = text.find("{\"n\"").unwrap()..text.len() - 1;
    let sources = (seq % 4 == 1).then(|| vec![seq - 1]);
    let surface_op = seq.is_multiple_of(5).then_some(SurfaceOp::Replace {
        start: seq,
        end: seq / 2,
    });
    let fields = EventFields {
        event_type: "plugin/t".into(),
        seq,
        time: i64::try_from(seq * 3).unwrap(),
        surface_op,
        sources,
        ignorable: seq.is_multiple_of(7),
    };
    let message = seq.is_multiple_of(3).then(|| data.clone());
    Event::new(text, data, message, fields)
}

fn events(range: std::ops::Range<u64>) -> Vec<Event> {
    range.map(event).collect()
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    found.sort();
    found
}

/// Opens the log in `dir` (manual durability, 1 MiB segments), appends `seqs` and closes
/// it (which indexes the last segment, IDX-5).
fn append_and_close(dir: &Path, seqs: std::ops::Range<u64>) {
    let (writer, _) = LogWriter::open(dir, options(Durability::Manual, 1 << 20)).unwrap();
    writer.append(&events(seqs)).unwrap();
    writer.close().unwrap();
}

fn assert_reads_back(dir: &Path, len: u64) {
    let reader = LogReader::open(dir).unwrap();
    assert_eq!(reader.seq_next(), len);
    for (i, read) in reader.iter_from(0).map(Result::unwrap).enumerate() {
        assert_eq!(read, event(i as u64).as_ref(), "seq {i}");
    }
}

#[test]
fn a_million_events_round_trip_across_many_segments() {
    let dir = temp_dir("million");
    let (writer, report) = LogWriter::open(&dir, options(Durability::Manual, 4 << 20)).unwrap();
    assert_eq!(report.torn_tail, None);
    let total = 1_000_000;
    for start in (0..total).step_by(10_000) {
        writer.append(&events(start..start + 10_000)).unwrap();
    }
    writer.close().unwrap();
    let files = segments(&dir);
    assert!(files.len() > 20, "{} segments", files.len());
    let reader = LogReader::open(&dir).unwrap();
    assert_eq!(reader.seq_next(), total);
    let mut count = 0;
    for (i, read) in reader.iter_from(0).map(Result::unwrap).enumerate() {
        assert_eq!(read.seq, i as u64);
        count += 1;
    }
    assert_eq!(count, total);
    // Random access agrees with iteration.
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    for _ in 0..20_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let seq = state % total;
        assert_eq!(reader.event(seq).unwrap(), Some(event(seq).as_ref()));
    }
    assert!(reader.event(total).unwrap().is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn reopening_continues_the_log_in_every_durability_mode() {
    let modes = [
        Durability::Sync,
        Durability::Batch {
            max_delay: Duration::from_millis(5),
        },
        Durability::Manual,
        Durability::Staged,
    ];
    for (i, durability) in modes.into_iter().enumerate() {
        let dir = temp_dir(&format!("reopen-{i}"));
        let (writer, _) = LogWriter::open(&dir, options(durability, 64 << 10)).unwrap();
        for seq in 0..300 {
            assert_eq!(writer.append(&[event(seq)]).unwrap(), seq + 1);
        }
        drop(writer);
        let (writer, report) = LogWriter::open(&dir, options(durability, 64 << 10)).unwrap();
        assert_eq!(report.torn_tail, None);
        assert_eq!(writer.seq_next(), 300);
        writer.append(&events(300..400)).unwrap();
        writer.close().unwrap();
        assert_reads_back(&dir, 400);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn batch_mode_syncs_in_the_background() {
    let dir = temp_dir("batch");
    let batch = Durability::Batch {
        max_delay: Duration::from_millis(10),
    };
    let (writer, faults) = faulty_writer(&dir, batch, 1 << 20);
    let before = faults.syncs();
    writer.append(&events(0..10)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while faults.syncs() == before && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        faults.syncs() > before,
        "no background sync within the delay"
    );
    writer.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn concurrent_appenders_share_syncs_and_readers_see_a_committed_prefix() {
    let dir = temp_dir("concurrent");
    let (writer, faults) = faulty_writer(&dir, Durability::Sync, 256 << 10);
    let writer = Arc::new(writer);
    let appends_per_thread = 200;
    let threads = 8;
    let syncs_before = faults.syncs();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let dir = dir.to_path_buf();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut reader = LogReader::open(&dir).unwrap();
                let mut checked = 0;
                loop {
                    let done = stop.load(std::sync::atomic::Ordering::SeqCst);
                    let seen = reader.refresh().unwrap();
                    for read in reader.iter_from(checked).map(Result::unwrap) {
                        assert_eq!(read.seq, checked, "readers see a contiguous prefix");
                        assert_eq!(read.text().len(), event(checked).text().len());
                        checked += 1;
                    }
                    assert_eq!(checked, seen);
                    if done {
                        return checked;
                    }
                }
            })
        })
        .collect();
    // Each thread appends one event at a time; the writer hands out the seqs.
    let appenders: Vec<_> = (0..threads)
        .map(|_| {
            let writer = Arc::clone(&writer);
            std::thread::spawn(move || {
                for _ in 0..appends_per_thread {
                    writer.append_with(|seq| vec![event(seq)]).unwrap();
                }
            })
        })
        .collect();
    for appender in appenders {
        appender.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let total = threads * appends_per_thread;
    for reader in readers {
        assert_eq!(reader.join().unwrap(), total);
    }
    let syncs = faults.syncs() - syncs_before;
    assert!(
        syncs < total,
        "waiting appends share syncs (group commit): {syncs} for {total}"
    );
    assert_reads_back(&dir, total);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(feature = "cli")]
#[test]
fn a_second_writer_is_refused_with_locked() {
    let dir = temp_dir("locked");
    let (writer, _) = LogWriter::open(&dir, LogOptions::default()).unwrap();
    let err = LogWriter::open(&dir, LogOptions::default()).unwrap_err();
    assert_eq!(err.code(), "LOCKED");
    // From another process: the CLI's `log` command tries to take the writer lock.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_surfacelog"))
        .args(["log", dir.to_str().unwrap(), "--check-writer"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&output.stderr).starts_with("error[LOCKED]"),
        "{output:?}"
    );
    // Readers need no lock, in this process or another.
    writer.append(&events(0..5)).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_surfacelog"))
        .args(["log", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("\"events\":5"),
        "{output:?}"
    );
    drop(writer);
    let (_writer, _) = LogWriter::open(&dir, LogOptions::default()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_write_poisons_and_reopen_drops_the_torn_bytes() {
    let dir = temp_dir("poison-write");
    let (writer, faults) = faulty_writer(&dir, Durability::Sync, 1 << 20);
    writer.append(&events(0..10)).unwrap();
    faults.fail_write(1, 50);
    let err = writer.append(&events(10..12)).unwrap_err();
    assert_eq!(err.code(), "IO");
    assert_eq!(
        writer.append(&events(10..12)).unwrap_err().code(),
        "POISONED"
    );
    assert_eq!(writer.flush().unwrap_err().code(), "POISONED");
    drop(writer);
    let (writer, report) = LogWriter::open(&dir, LogOptions::default()).unwrap();
    let torn = report.torn_tail.expect("the partial write is a torn tail");
    assert_eq!(torn.code(), "TORN_TAIL");
    assert!(torn.bytes > 0 && torn.bytes <= 50, "{torn:?}");
    assert_eq!(writer.seq_next(), 10);
    writer.append(&events(10..20)).unwrap();
    drop(writer);
    assert_reads_back(&dir, 20);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_sync_poisons_every_waiter_and_never_reports_success() {
    let dir = temp_dir("poison-sync");
    let (writer, faults) = faulty_writer(&dir, Durability::Sync, 1 << 20);
    writer.append(&events(0..3)).unwrap();
    faults.fail_sync(1);
    assert_eq!(writer.append(&events(3..4)).unwrap_err().code(), "IO");
    assert_eq!(writer.append(&events(4..5)).unwrap_err().code(), "POISONED");
    drop(writer);
    let (writer, _) = LogWriter::open(&dir, LogOptions::default()).unwrap();
    // The write reached the OS before the sync failed; whether it is kept is not
    // promised, but nothing after it was written.
    assert!(writer.seq_next() == 3 || writer.seq_next() == 4);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn dur_6_a_failed_background_sync_of_a_sealed_segment_fails_the_flush() {
    let dir = temp_dir("staged-sync");
    let (writer, faults) = faulty_writer(&dir, Durability::Staged, 16 << 10);
    // The first sync is the first sealed segment's, run in the background.
    faults.fail_sync(1);
    // Enough for several 16 KiB segments in either record format.
    writer.append(&events(0..1000)).unwrap();
    assert!(segments(&dir).len() > 3, "the appends sealed segments");
    let error = writer.flush().unwrap_err();
    assert_eq!(error.code(), "IO");
    // The sealed segments' syncs run on threads of their own: whichever reaches the disk
    // first fails, so the error names one of them (not always the first).
    assert!(
        error.to_string().contains(".seg"),
        "the failure names a sealed segment: {error}"
    );
    assert_eq!(
        writer.append(&events(400..401)).unwrap_err().code(),
        "POISONED"
    );
    assert_eq!(writer.flush().unwrap_err().code(), "POISONED");
    drop(writer);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn dur_6_staged_segments_are_synced_by_the_flush_and_read_back() {
    let dir = temp_dir("staged");
    let (writer, faults) = faulty_writer(&dir, Durability::Staged, 16 << 10);
    let syncs_before = faults.syncs();
    writer.append(&events(0..2000)).unwrap();
    let sealed = segments(&dir).len() - 1;
    assert!(sealed > 10);
    writer.flush().unwrap();
    // Each sealed segment once, then the active one; new segments are not synced when
    // created (DUR-6).
    assert_eq!(faults.syncs() - syncs_before, sealed as u64 + 1);
    writer.close().unwrap();
    assert_reads_back(&dir, 2000);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_disk_log_reads_its_own_appends_back_across_segments() {
    let dir = temp_dir("disklog-own");
    let (mut log, _) = DiskLog::open(&dir, options(Durability::Manual, 16 << 10)).unwrap();
    let mut next = 0;
    for size in [1, 7, 100, 3, 250, 1, 600, 40].into_iter().cycle().take(40) {
        log.append_owned(events(next..next + size)).unwrap();
        next += size;
        assert_eq!(log.seq_next(), next);
        // Every event reads back, whether still buffered, written or in a sealed segment.
        for seq in (0..next).step_by(13).chain(next - 1..next) {
            assert_eq!(
                log.event(seq).unwrap().unwrap().text(),
                event(seq).text(),
                "seq {seq}"
            );
        }
    }
    assert!(segments(&dir).len() > 20);
    log.flush().unwrap();
    drop(log);
    assert_reads_back(&dir, next);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes `n` events, returns the last segment and the offset of the last record.
fn log_with(dir: &Path, n: u64) -> (PathBuf, usize) {
    let (writer, _) = LogWriter::open(dir, options(Durability::Manual, 1 << 20)).unwrap();
    writer.append(&events(0..n - 1)).unwrap();
    writer.close().unwrap();
    let segment = segments(dir).pop().unwrap();
    let bytes = std::fs::read(&segment).unwrap();
    let end_before = end_of_data(&bytes);
    let (writer, _) = LogWriter::open(dir, options(Durability::Manual, 1 << 20)).unwrap();
    writer.append(&[event(n - 1)]).unwrap();
    writer.close().unwrap();
    (segment, end_before)
}

fn end_of_data(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .rposition(|b| *b != 0)
        .map_or(64, |at| (at + 1).next_multiple_of(8))
}

#[test]
fn rcv_3_a_torn_last_record_is_dropped_at_every_byte_offset() {
    let dir = temp_dir("torn-every");
    let (segment, last_start) = log_with(&dir, 20);
    let pristine = std::fs::read(&segment).unwrap();
    let last_end = end_of_data(&pristine);
    // The body ends at the last non-zero byte; cuts in the padding after it damage nothing.
    let body_end = pristine.iter().rposition(|b| *b != 0).unwrap() + 1;
    for cut in last_start..body_end {
        let mut bytes = pristine.clone();
        bytes[cut..last_end].fill(0);
        // Also leave the torn bytes as garbage instead of zeros, half the time.
        if cut % 2 == 1 && cut > last_start {
            bytes[last_start] ^= 0x01;
        }
        std::fs::write(&segment, &bytes).unwrap();
        // A torn last write is never indexed: the index is written after the sync that
        // makes its records durable (IDX-5), and an index listing the torn record would
        // make it durable damage (RCV-13).
        let _ = std::fs::remove_file(segment.with_extension("idx"));
        let (writer, report) = LogWriter::open(&dir, LogOptions::default()).unwrap();
        assert_eq!(writer.seq_next(), 19, "cut at {cut}");
        let dirty = bytes[last_start..].iter().any(|b| *b != 0);
        assert_eq!(
            report.torn_tail.is_some(),
            dirty,
            "cut at {cut}: {report:?}"
        );
        drop(writer);
        assert!(
            std::fs::read(&segment).unwrap()[last_start..]
                .iter()
                .all(|b| *b == 0)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rcv_4_damage_followed_by_valid_records_is_corrupt_and_nothing_changes() {
    let dir = temp_dir("corrupt-middle");
    let (segment, _) = log_with(&dir, 30);
    let mut bytes = std::fs::read(&segment).unwrap();
    // Flip a byte inside the 6th record.
    let reader = LogReader::open(&dir).unwrap();
    let sixth = reader.event(5).unwrap().unwrap().text();
    let at = bytes
        .windows(sixth.len())
        .position(|w| w == sixth.as_bytes())
        .unwrap()
        + 3;
    drop(reader);
    bytes[at] ^= 0x20;
    std::fs::write(&segment, &bytes).unwrap();
    // Close indexed every record: the damage lies under the vouched prefix, which open
    // takes without reading it (IDX-5). It is found when the record is read (RCV-6).
    let (writer, report) = LogWriter::open(&dir, LogOptions::default()).unwrap();
    assert_eq!((writer.seq_next(), report.torn_tail), (30, None));
    drop(writer);
    let reader = LogReader::open(&dir).unwrap();
    assert!(
        reader.event(5).unwrap_err().code() == "CORRUPT",
        "a damaged record is never returned: reading it is an error"
    );
    assert!(reader.event(4).unwrap().is_some() && reader.event(6).unwrap().is_some());
    drop(reader);
    assert_eq!(
        std::fs::read(&segment).unwrap(),
        bytes,
        "nothing is changed"
    );
    // Without the index nothing marks the records durable (§7): the damage and everything
    // after it may be writes a power cut kept only some of, so they are set aside into a
    // quarantine file, byte for byte, and dropped from the segment (RCV-12, not RCV-4).
    std::fs::remove_file(segment.with_extension("idx")).unwrap();
    let (writer, report) = LogWriter::open(&dir, LogOptions::default()).unwrap();
    assert_eq!(writer.seq_next(), 5);
    drop(writer);
    let torn = report.torn_tail.unwrap();
    let kept = std::fs::read(&torn.quarantine).unwrap();
    let from = usize::try_from(torn.offset).unwrap();
    assert_eq!(kept.len() as u64, torn.bytes);
    assert_eq!(kept, bytes[from..from + kept.len()]);
    assert!(from < at && at < from + kept.len());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rcv_2_garbage_after_the_end_is_a_torn_tail() {
    let dir = temp_dir("garbage");
    let (segment, _) = log_with(&dir, 5);
    let mut bytes = std::fs::read(&segment).unwrap();
    let end = end_of_data(&bytes);
    bytes[end + 16..end + 40].fill(0xAB);
    std::fs::write(&segment, &bytes).unwrap();
    let (writer, report) = LogWriter::open(&dir, LogOptions::default()).unwrap();
    assert_eq!(writer.seq_next(), 5);
    let torn: TornTail = report.torn_tail.unwrap();
    assert_eq!(torn.offset, end as u64);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A segment header with `edit` applied and its checksum recomputed (SEG-1).
fn resealed(segment: &[u8], edit: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut bytes = segment.to_vec();
    edit(&mut bytes);
    let crc = crc32c::crc32c(&bytes[..60]);
    bytes[60..64].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// The first seq of a segment file, from its name (LOG-1).
fn first_seq_of(path: &Path) -> u64 {
    path.file_stem().unwrap().to_str().unwrap().parse().unwrap()
}

/// Asserts that the sealed segment `bad` is refused with `code` on the first access into
/// it, with its path, and that the segments around it read back: the log opens, for
/// writing and reading, since sealed segments are not read at open (§7).
fn assert_refused_on_first_access(dir: &Path, bad: &Path, next: &Path, code: &str) {
    let (writer, report) = LogWriter::open(dir, LogOptions::default()).unwrap();
    assert_eq!((writer.seq_next(), report.torn_tail), (2000, None));
    drop(writer);
    let reader = LogReader::open(dir).unwrap();
    assert_eq!(reader.seq_next(), 2000);
    let (first, after) = (first_seq_of(bad), first_seq_of(next));
    for seq in [first, after - 1] {
        let error = reader.event(seq).expect_err("seq {seq} is never returned");
        assert_eq!(error.code(), code, "{error}");
        if code == "CORRUPT" {
            assert!(error.to_string().contains(bad.to_str().unwrap()), "{error}");
        }
    }
    for seq in [0, first - 1, after, 1999] {
        assert_eq!(reader.event(seq).unwrap(), Some(event(seq).as_ref()));
    }
    let read: Vec<_> = reader.iter_from(0).collect();
    assert_eq!(
        read.len() as u64,
        2000,
        "a read in order does not stop there"
    );
    let first = usize::try_from(first).unwrap();
    assert!(read[..first].iter().all(Result::is_ok));
    assert_eq!(
        read[first].as_ref().unwrap_err().code(),
        code,
        "the first unreadable event is an error, not the end"
    );
}

#[test]
fn seg_2_seg_3_foreign_stale_and_newer_segments_are_refused() {
    let dir = temp_dir("segments");
    let (writer, _) = LogWriter::open(&dir, options(Durability::Manual, 64 << 10)).unwrap();
    writer.append(&events(0..2000)).unwrap();
    writer.close().unwrap();
    let files = segments(&dir);
    assert!(files.len() >= 4);
    let original = std::fs::read(&files[1]).unwrap();
    // A sealed segment is opened and checked on the first access into it, not at open:
    // another log's identity, another index or first seq, a damaged header, a newer
    // format version.
    let foreign = resealed(&original, |b| b[16] ^= 0xFF);
    let stale_index = resealed(&original, |b| b[32] ^= 0x01);
    let stale_first = resealed(&original, |b| b[40] ^= 0x01);
    let mut damaged = original.clone();
    damaged[20] ^= 0x01;
    let newer = resealed(&original, |b| b[8] = 2);
    for (bytes, code) in [
        (&foreign, "CORRUPT"),
        (&stale_index, "CORRUPT"),
        (&stale_first, "CORRUPT"),
        (&damaged, "CORRUPT"),
        (&newer, "FORMAT_VERSION"),
    ] {
        std::fs::write(&files[1], bytes).unwrap();
        assert_refused_on_first_access(&dir, &files[1], &files[2], code);
    }
    std::fs::write(&files[1], &original).unwrap();
    // The last segment is checked at open.
    let last = files.last().unwrap();
    let pristine_last = std::fs::read(last).unwrap();
    for (bytes, code) in [
        (resealed(&pristine_last, |b| b[32] ^= 0x01), "CORRUPT"),
        (resealed(&pristine_last, |b| b[8] = 2), "FORMAT_VERSION"),
    ] {
        std::fs::write(last, &bytes).unwrap();
        let error = LogWriter::open(&dir, LogOptions::default()).unwrap_err();
        assert_eq!(error.code(), code, "{error}");
        assert_eq!(LogReader::open(&dir).unwrap_err().code(), code);
    }
    std::fs::write(last, &pristine_last).unwrap();
    // A missing segment: the names no longer continue the last segment's index (LOG-2).
    let moved = dir.join("moved");
    std::fs::rename(&files[1], &moved).unwrap();
    assert_eq!(
        LogWriter::open(&dir, LogOptions::default())
            .unwrap_err()
            .code(),
        "CORRUPT"
    );
    assert_eq!(LogReader::open(&dir).unwrap_err().code(), "CORRUPT");
    std::fs::rename(&moved, &files[1]).unwrap();
    let (writer, report) = LogWriter::open(&dir, LogOptions::default()).unwrap();
    assert_eq!(report.torn_tail, None);
    assert_eq!(writer.seq_next(), 2000);
    drop(writer);
    assert_reads_back(&dir, 2000);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rcv_7_a_segment_whose_creation_was_cut_short_is_removed() {
    let dir = temp_dir("torn-header");
    let (writer, _) = LogWriter::open(&dir, options(Durability::Manual, 64 << 10)).unwrap();
    writer.append(&events(0..500)).unwrap();
    writer.close().unwrap();
    let last = segments(&dir).pop().unwrap();
    let reader = LogReader::open(&dir).unwrap();
    let next_first = reader.seq_next();
    drop(reader);
    // A crash after creating the next file but before its header was durable.
    let next = dir.join(format!("{next_first:020}.seg"));
    std::fs::write(&next, vec![0; 4096]).unwrap();
    assert_eq!(
        LogReader::open(&dir).unwrap().seq_next(),
        next_first,
        "readers skip it"
    );
    let (writer, report) = LogWriter::open(&dir, options(Durability::Manual, 64 << 10)).unwrap();
    assert_eq!(report.removed_segment, Some(next.clone()));
    assert_eq!(writer.seq_next(), next_first);
    writer
        .append(&events(next_first..next_first + 500))
        .unwrap();
    writer.close().unwrap();
    assert!(last.exists());
    assert_reads_back(&dir, next_first + 500);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn appends_must_continue_the_log() {
    let dir = temp_dir("gap");
    let (writer, _) = LogWriter::open(&dir, LogOptions::default()).unwrap();
    writer.append(&events(0..3)).unwrap();
    assert_eq!(
        writer.append(&[event(4)]).unwrap_err().code(),
        "SEQ_NOT_CONTIGUOUS"
    );
    assert_eq!(writer.append(&events(3..4)).unwrap(), 4);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_record_larger_than_a_segment_gets_its_own_segment() {
    let dir = temp_dir("oversize");
    let (writer, _) = LogWriter::open(&dir, options(Durability::Manual, 4096)).unwrap();
    let text = format!(
        r#"{{"type":"big","seq":1,"time":0,"data":"{}"}}"#,
        "y".repeat(20_000)
    );
    let data = text.find("\"yy").unwrap()..text.len() - 1;
    let fields = EventFields {
        event_type: "big".into(),
        seq: 1,
        time: 0,
        surface_op: None,
        sources: None,
        ignorable: false,
    };
    writer
        .append(&[
            event(0),
            Event::new(text.clone(), data, None, fields),
            event(2),
        ])
        .unwrap();
    writer.close().unwrap();
    let reader = LogReader::open(&dir).unwrap();
    assert_eq!(reader.seq_next(), 3);
    assert_eq!(reader.event(1).unwrap().unwrap().text(), text);
    assert_eq!(reader.event(2).unwrap(), Some(event(2).as_ref()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn idx_2_a_damaged_or_missing_index_is_rebuilt_by_scanning() {
    let dir = temp_dir("index");
    let (writer, _) = LogWriter::open(&dir, options(Durability::Manual, 32 << 10)).unwrap();
    writer.append(&events(0..1000)).unwrap();
    writer.close().unwrap();
    let mut indexes: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "idx"))
        .collect();
    indexes.sort();
    assert!(indexes.len() >= 3, "sealed segments have indexes");
    let mut damaged = std::fs::read(&indexes[0]).unwrap();
    let last = damaged.len() - 1;
    damaged[last] ^= 0xFF;
    std::fs::write(&indexes[0], &damaged).unwrap();
    std::fs::remove_file(&indexes[1]).unwrap();
    // An index whose offsets point at the wrong records is caught by its checksum, and
    // one that is valid but stale (fewer records) only costs a scan of the rest.
    assert_reads_back(&dir, 1000);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn dur_3_buffered_appends_reach_readers_when_written() {
    let dir = temp_dir("buffered");
    let (writer, _) = LogWriter::open(&dir, options(Durability::Manual, 1 << 20)).unwrap();
    writer.append(&events(0..3)).unwrap();
    assert_eq!(writer.seq_next(), 3);
    let mut reader = LogReader::open(&dir).unwrap();
    assert_eq!(
        reader.seq_next(),
        0,
        "small appends wait in the write buffer"
    );
    writer.flush().unwrap();
    assert_eq!(reader.refresh().unwrap(), 3);
    // A full buffer is written without a flush.
    let many: Vec<Event> = events(3..1003);
    writer.append(&many).unwrap();
    assert!(
        reader.refresh().unwrap() > 3,
        "64 KiB of records are written at once"
    );
    drop(writer);
    assert_reads_back(&dir, 1003);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn seg_7_a_sealed_segment_filled_to_its_last_byte_reopens() {
    // Found by a store test: records that fill a segment exactly leave no room for an end
    // marker, and recovery took that for damage (RCV-6).
    let dir = temp_dir("full-segment");
    let fixed = |seq: u64| {
        let text = r#"{"type":"t","seq":0,"time":0,"data":"0123456789"}"#.to_owned();
        let data = text.find("\"0123").unwrap()..text.len() - 1;
        common::log_only_event("t", seq, text, data)
    };
    let mut one = Vec::new();
    surfacelog::internals::record::encode_event(&fixed(0), &mut one);
    let capacity = 64 + 4 * one.len() as u64;
    // Version 1 records, whose size `encode_event` gives.
    let v1 = common::v1_log_options(Durability::Manual, capacity);
    let (writer, _) = LogWriter::open(&dir, v1).unwrap();
    let all: Vec<Event> = (0..10).map(fixed).collect();
    writer.append(&all).unwrap();
    writer.close().unwrap();
    let first = std::fs::read(segments(&dir)[0].clone()).unwrap();
    assert_eq!(first.len() as u64, capacity);
    assert!(
        first[first.len() - 8..].iter().any(|b| *b != 0),
        "the first segment is full to its last byte"
    );
    let (writer, report) = LogWriter::open(&dir, LogOptions::default()).unwrap();
    assert_eq!((writer.seq_next(), report.torn_tail), (10, None));
    drop(writer);
    // Without indexes the sealed segments are scanned, and must still be accepted.
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "idx") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let (writer, _) = LogWriter::open(&dir, LogOptions::default()).unwrap();
    assert_eq!(writer.seq_next(), 10);
    drop(writer);
    assert_eq!(LogReader::open(&dir).unwrap().seq_next(), 10);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn idx_5_close_indexes_the_last_segment_and_reopen_scans_only_what_follows() {
    let dir = temp_dir("vouched");
    append_and_close(&dir, 0..100);
    let index = dir.join(format!("{:020}.idx", 0));
    let first_index = std::fs::read(&index).expect("close indexes the last segment");
    assert_eq!(first_index[8..12], 2u32.to_le_bytes(), "index version 2");
    assert_eq!(first_index[12..16], 100u32.to_le_bytes(), "every record");
    // Records appended after the index was written: a stale index only vouches for the
    // prefix it lists, and open finds the rest by scanning.
    append_and_close(&dir, 100..150);
    std::fs::write(&index, &first_index).unwrap();
    let segment = segments(&dir).pop().unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    let end = end_of_data(&bytes);
    bytes[end + 24..end + 40].fill(0xAB);
    std::fs::write(&segment, &bytes).unwrap();
    let (writer, report) = LogWriter::open(&dir, LogOptions::default()).unwrap();
    assert_eq!(writer.seq_next(), 150);
    assert_eq!(report.torn_tail.map(|t| t.offset), Some(end as u64));
    drop(writer);
    assert_reads_back(&dir, 150);
    // Damage under the vouched prefix is not read at open (IDX-5): open succeeds and
    // changes nothing, and the damaged record is never returned (REC-4, RCV-6).
    let (writer, _) = LogWriter::open(&dir, LogOptions::default()).unwrap();
    drop(writer);
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[64 + 40] ^= 0x01;
    std::fs::write(&segment, &bytes).unwrap();
    let (writer, report) = LogWriter::open(&dir, LogOptions::default()).unwrap();
    assert_eq!((writer.seq_next(), report.torn_tail), (150, None));
    drop(writer);
    let reader = LogReader::open(&dir).unwrap();
    assert_eq!(reader.seq_next(), 150);
    assert!(
        reader.event(0).unwrap_err().code() == "CORRUPT",
        "a damaged record is never returned: reading it is an error"
    );
    assert_eq!(reader.event(149).unwrap(), Some(event(149).as_ref()));
    drop(reader);
    assert_eq!(
        std::fs::read(&segment).unwrap(),
        bytes,
        "nothing is changed"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The bytes of an index file whose header field at `at` is `value`, its `crc` recomputed.
fn reindexed(index: &[u8], at: usize, value: u32) -> Vec<u8> {
    let mut bytes = index.to_vec();
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[..52]), &bytes[56..]);
    bytes[52..56].copy_from_slice(&crc.to_le_bytes());
    bytes
}

#[test]
fn idx_5_an_index_whose_last_record_does_not_match_is_ignored_and_the_segment_scanned() {
    let dir = temp_dir("vouched-mismatch");
    append_and_close(&dir, 0..100);
    let segment = segments(&dir).pop().unwrap();
    let index = segment.with_extension("idx");
    let pristine = std::fs::read(&index).unwrap();
    let offset =
        |k: usize| u32::from_le_bytes(pristine[56 + 4 * k..60 + 4 * k].try_into().unwrap());
    // Damage record 10, under the prefix the index vouches for.
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[offset(10) as usize + 20] ^= 0x01;
    std::fs::write(&segment, &bytes).unwrap();
    let (writer, _) = LogWriter::open(&dir, LogOptions::default()).unwrap();
    assert_eq!(
        writer.seq_next(),
        100,
        "the vouched prefix is not read at open"
    );
    drop(writer);
    let error = LogReader::open(&dir).unwrap().event(10).unwrap_err();
    assert_eq!(error.code(), "CORRUPT", "{error}");
    // Indexes whose last listed record does not match: its `end` is not the record's end;
    // its last offset holds another seq; it lists a record more than the segment holds.
    let end = u32::from_le_bytes(pristine[40..44].try_into().unwrap());
    let mut another_seq = pristine.clone();
    another_seq[56 + 4 * 99..56 + 4 * 100].copy_from_slice(&offset(98).to_le_bytes());
    let another_seq = reindexed(&another_seq, 40, offset(99));
    let mut one_more = pristine.clone();
    one_more.extend_from_slice(&end.to_le_bytes());
    let one_more = reindexed(&one_more, 12, 101);
    for bad in [reindexed(&pristine, 40, end + 8), another_seq, one_more] {
        std::fs::write(&index, &bad).unwrap();
        // Each is ignored: the segment is scanned from its first record, and the damage
        // refused at open (RCV-4).
        let err = LogWriter::open(&dir, LogOptions::default()).unwrap_err();
        assert_eq!(err.code(), "CORRUPT", "{err}");
        // A reader does not take the damage for the end of the log either (RD-6).
        let err = LogReader::open(&dir).unwrap_err();
        assert_eq!(err.code(), "CORRUPT", "{err}");
        assert!(err.to_string().contains("offset="), "{err}");
    }
    std::fs::write(&index, &pristine).unwrap();
    assert_eq!(LogReader::open(&dir).unwrap().seq_next(), 100);
    assert_eq!(
        std::fs::read(&segment).unwrap(),
        bytes,
        "nothing is changed"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn idx_5_a_poisoned_writer_vouches_for_nothing() {
    let dir = temp_dir("vouched-poisoned");
    let (writer, faults) = faulty_writer(&dir, Durability::Sync, 1 << 20);
    writer.append(&events(0..10)).unwrap();
    faults.fail_write(1, 30);
    assert_eq!(writer.append(&events(10..12)).unwrap_err().code(), "IO");
    drop(writer);
    assert!(
        !dir.join(format!("{:020}.idx", 0)).exists(),
        "no index is written over bytes whose fate is unknown"
    );
    let (writer, report) = LogWriter::open(&dir, LogOptions::default()).unwrap();
    assert!(report.torn_tail.is_some());
    assert_eq!(writer.seq_next(), 10);
    drop(writer);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn idx_3_sealed_segments_are_read_on_first_access_and_checked_against_the_names() {
    let dir = temp_dir("lazy-sealed");
    let (writer, _) = LogWriter::open(&dir, options(Durability::Manual, 32 << 10)).unwrap();
    writer.append(&events(0..600)).unwrap();
    writer.close().unwrap();
    let files = segments(&dir);
    assert!(files.len() >= 3);
    // An index claiming fewer records than the names say is not used; the segment is
    // scanned on first access.
    let index = files[0].with_extension("idx");
    let count: u32 = files[1]
        .file_stem()
        .and_then(|stem| stem.to_str()?.parse().ok())
        .unwrap();
    let mut stale = std::fs::read(&index).unwrap();
    stale[12..16].copy_from_slice(&(count - 1).to_le_bytes());
    stale.truncate(stale.len() - 4);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&stale[..52]), &stale[56..]);
    stale[52..56].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&index, &stale).unwrap();
    assert_reads_back(&dir, 600);
    // Damage in a sealed segment is found when it is read, never returned.
    let mut bytes = std::fs::read(&files[0]).unwrap();
    bytes[64 + 30] ^= 0x01;
    std::fs::write(&files[0], &bytes).unwrap();
    let reader = LogReader::open(&dir).unwrap();
    assert_eq!(reader.seq_next(), 600);
    assert!(
        reader.event(0).unwrap_err().code() == "CORRUPT",
        "a damaged record is never returned: reading it is an error"
    );
    assert!(reader.event(599).unwrap().is_some());
    drop(reader);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The environment variable that makes this test binary the resident-memory child of
/// `rd_4_a_reader_releases_the_pages_it_has_read_through`.
const RSS_CHILD: &str = "SURFACELOG_LOG_TEST_RSS_CHILD";

/// The bytes of file-backed resident memory of this process (`RssFile`).
fn rss_file_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("RssFile:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb << 10
}

/// A ~4 KiB log-only event.
fn large_event(seq: u64) -> Event {
    common::padded_event(seq, 4000)
}

/// RD-4: a reader releases the pages of what it has scanned or iterated through, so a
/// process that appends, rescans or reads a 64 MiB log holds a small part of it resident
/// (importing a 1 GB file once held all of it: `RssFile` grew with the log). Measured in a
/// child process (this test binary again, running only this test), where no other test
/// maps files meanwhile.
#[test]
fn rd_4_a_reader_releases_the_pages_it_has_read_through() {
    if std::env::var_os(RSS_CHILD).is_some() {
        rss_child();
        return;
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "rd_4_a_reader_releases_the_pages_it_has_read_through",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(RSS_CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("rd_4 measured"), "{stdout}\n{stderr}");
    println!("{stdout}");
}

/// The child of `rd_4_a_reader_releases_the_pages_it_has_read_through`: appends 64 MiB
/// through a `DiskLog` (whose reader scans each record as it is written), then reads the log
/// back through a fresh reader (iterating, then reading each seq in order twice), then
/// through one that must scan every sealed segment (no indexes). Each phase may grow `RssFile` by at most a quarter of the log.
fn rss_child() {
    let dir = temp_dir("rss");
    let log_bytes: u64 = 64 << 20;
    let count = log_bytes / 4096;
    let bound = log_bytes / 4;
    let before = rss_file_bytes();
    let (mut log, _) =
        surfacelog::internals::log::DiskLog::open(&dir, options(Durability::Manual, 4 << 20))
            .unwrap();
    for start in (0..count).step_by(256) {
        let batch: Vec<Event> = (start..(start + 256).min(count)).map(large_event).collect();
        log.append_owned(batch).unwrap();
    }
    log.flush().unwrap();
    assert_eq!(log.seq_next(), count);
    let appended = rss_file_bytes().saturating_sub(before);
    log.close().unwrap();
    assert!(appended < bound, "appending: RssFile +{appended} bytes");

    let before = rss_file_bytes();
    let reader = LogReader::open(&dir).unwrap();
    let text_bytes: usize = reader
        .iter_from(0)
        .map(Result::unwrap)
        .map(|e| e.text().len())
        .sum();
    assert!(text_bytes as u64 > log_bytes * 9 / 10, "{text_bytes}");
    let iterated = rss_file_bytes().saturating_sub(before);
    drop(reader);
    assert!(iterated < bound, "iterating: RssFile +{iterated} bytes");

    // Reads by seq in order, as a store's open without a checkpoint makes them (the repair
    // scan, then the fold): two passes through `event`, not `iter_from`.
    let before = rss_file_bytes();
    let reader = LogReader::open(&dir).unwrap();
    for _pass in 0..2 {
        for seq in 0..count {
            assert_eq!(reader.event(seq).unwrap().unwrap().seq, seq);
        }
    }
    let read = rss_file_bytes().saturating_sub(before);
    drop(reader);
    assert!(read < bound, "reading in seq order: RssFile +{read} bytes");

    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "idx") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let before = rss_file_bytes();
    let reader = LogReader::open(&dir).unwrap();
    // One read per segment: each scans its segment (IDX-2), then keeps about a page.
    for seq in (0..count).step_by(1024) {
        assert_eq!(reader.event(seq).unwrap().unwrap().seq, seq);
    }
    let scanned = rss_file_bytes().saturating_sub(before);
    drop(reader);
    assert!(
        scanned < bound,
        "scanning sealed segments: RssFile +{scanned} bytes"
    );
    println!(
        "rd_4 measured: RssFile +{appended} appending, +{iterated} iterating, +{read} reading in order, +{scanned} scanning, of a {log_bytes}-byte log"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// IDX-5: a reopened writer takes its last segment's indexed prefix from the index and
/// reads those offsets back only when it next writes the index: the new index lists every
/// record at the same offsets as that of a writer that never reopened. When the index no
/// longer lists exactly that prefix (removed or replaced meanwhile), the writer writes
/// none, and the next open scans what the index on disk does not cover.
#[test]
fn idx_5_a_reopened_writer_indexes_its_vouched_prefix_when_it_next_indexes() {
    let index_of = |dir: &Path| dir.join(format!("{:020}.idx", 0));
    // count, end and the offsets: what does not depend on the log's identity.
    let layout = |bytes: &[u8]| {
        (
            bytes[12..16].to_vec(),
            bytes[40..44].to_vec(),
            bytes[56..].to_vec(),
        )
    };
    let straight = temp_dir("reindex-straight");
    append_and_close(&straight, 0..150);
    let expected = layout(&std::fs::read(index_of(&straight)).unwrap());
    std::fs::remove_dir_all(&straight).unwrap();

    let dir = temp_dir("reindex");
    append_and_close(&dir, 0..100);
    let first_index = std::fs::read(index_of(&dir)).unwrap();
    append_and_close(&dir, 100..150);
    assert_eq!(layout(&std::fs::read(index_of(&dir)).unwrap()), expected);
    assert_reads_back(&dir, 150);

    // The index replaced by an older one (100 records, not the 150 the writer took).
    let (writer, _) = LogWriter::open(&dir, options(Durability::Manual, 1 << 20)).unwrap();
    std::fs::write(index_of(&dir), &first_index).unwrap();
    writer.append(&events(150..160)).unwrap();
    writer.close().unwrap();
    assert_eq!(
        std::fs::read(index_of(&dir)).unwrap(),
        first_index,
        "not rewritten"
    );
    assert_reads_back(&dir, 160);
    // The index removed.
    let (writer, _) = LogWriter::open(&dir, options(Durability::Manual, 1 << 20)).unwrap();
    std::fs::remove_file(index_of(&dir)).unwrap();
    writer.append(&events(160..170)).unwrap();
    writer.close().unwrap();
    assert!(
        !index_of(&dir).exists(),
        "no index without the prefix's offsets"
    );
    assert_reads_back(&dir, 170);
    // The next open scans the segment; its writer indexes everything again.
    append_and_close(&dir, 170..171);
    assert_eq!(
        std::fs::read(index_of(&dir)).unwrap()[12..16],
        171u32.to_le_bytes()
    );
    assert_reads_back(&dir, 171);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// IDX-5, IDX-2: open checks the index's header, length and last offset only; a damaged
/// offset before the last is found when the offsets are first read (the index's `crc`),
/// and the records are then found by a scan, so every record reads back, through a
/// reader of its own and through the writer's log. The writer, which reads the offsets
/// back when it next indexes, writes no index from a damaged one.
#[test]
fn idx_5_a_damaged_offset_under_the_vouched_prefix_is_found_on_first_read() {
    let dir = temp_dir("damaged-offset");
    append_and_close(&dir, 0..100);
    let index = dir.join(format!("{:020}.idx", 0));
    let mut damaged = std::fs::read(&index).unwrap();
    damaged[56 + 4 * 10] ^= 0x10;
    std::fs::write(&index, &damaged).unwrap();
    let (log, report) = DiskLog::open(&dir, options(Durability::Manual, 1 << 20)).unwrap();
    assert_eq!((log.seq_next(), report.torn_tail), (100, None));
    // 99 first: the last listed record, read without reading the index (IDX-5).
    for seq in [99, 10, 0, 50] {
        assert_eq!(
            log.event(seq).unwrap(),
            Some(event(seq).as_ref()),
            "seq {seq}"
        );
    }
    drop(log);
    assert_reads_back(&dir, 100);
    append_and_close(&dir, 100..110);
    assert_eq!(
        std::fs::read(&index).unwrap(),
        damaged,
        "no index is written from a damaged one"
    );
    assert_reads_back(&dir, 110);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The descriptors this process holds on files under `dir` (`/proc/self/fd`): the tests
/// running meanwhile open none there.
#[cfg(target_os = "linux")]
fn descriptors_under(dir: &Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir))
        .count()
}

#[cfg(target_os = "linux")]
#[test]
fn rd_2_readers_following_a_log_hold_no_descriptor_per_segment() {
    // A writer (and its own reader, RD-5) and a follower in this process, through a dozen
    // segments: each closes a segment's file once it has moved on to the next (RD-2).
    let dir = temp_dir("descriptors");
    let (mut log, _) = DiskLog::open(&dir, options(Durability::Manual, 64 << 10)).unwrap();
    log.append(&events(0..100)).unwrap();
    log.flush().unwrap();
    let mut follower = LogReader::open(&dir).unwrap();
    let at_start = descriptors_under(&dir);
    let mut seq = 100;
    while segments(&dir).len() < 12 {
        log.append(&events(seq..seq + 200)).unwrap();
        seq += 200;
        log.flush().unwrap();
        assert_eq!(follower.refresh().unwrap(), seq);
        assert_eq!(log.event_at(seq - 1).unwrap(), event(seq - 1).as_ref());
    }
    let held = descriptors_under(&dir);
    assert!(
        held <= at_start,
        "{held} descriptors under the log after 12 segments, {at_start} after the first"
    );
    // Every event still reads back, through the maps kept and the names opened again.
    for (i, read) in follower.iter_from(0).enumerate() {
        assert_eq!(read.unwrap(), event(i as u64).as_ref(), "seq {i}");
    }
    assert_eq!(descriptors_under(&dir), held);
}

/// RD-1, RD-8: a follower that cannot open the next segment (here `EROFS`; `EMFILE` or
/// `EIO` alike) reports `IO` naming it, rather than taking the failure for "no next
/// segment yet" and stopping short of events the log holds; its next refresh, once the
/// open succeeds, reads on.
#[test]
fn a_next_segment_the_reader_cannot_open_is_an_io_error_not_the_end() {
    use surfacelog::internals::storage::faulty::FaultyStorage;
    let dir = temp_dir("next-unopenable");
    let (mut log, _) = DiskLog::open(&dir, options(Durability::Manual, 64 << 10)).unwrap();
    log.append(&events(0..100)).unwrap();
    log.flush().unwrap();
    let storage = Arc::new(FaultyStorage::default());
    let mut follower = LogReader::open_with(&dir, storage.clone()).unwrap();
    assert_eq!(follower.refresh().unwrap(), 100);
    let segments_before = segments(&dir).len();
    let mut seq = 100;
    while segments(&dir).len() == segments_before {
        log.append(&events(seq..seq + 200)).unwrap();
        seq += 200;
    }
    log.flush().unwrap();
    storage.faults.fail_open(1);
    let error = follower.refresh().unwrap_err();
    assert_eq!(error.code(), "IO", "{error}");
    assert!(error.to_string().contains(".seg"), "{error}");
    assert_eq!(follower.refresh().unwrap(), seq);
    for (i, read) in follower.iter_from(0).enumerate() {
        assert_eq!(read.unwrap(), event(i as u64).as_ref(), "seq {i}");
    }
}

/// `error` is `CORRUPT` naming the file `path` and an offset.
fn assert_corrupt_at(error: &surfacelog::Error, path: &Path) {
    assert_eq!(error.code(), "CORRUPT", "{error}");
    let text = error.to_string();
    assert!(text.contains(path.to_str().unwrap()), "{text}");
    assert!(text.contains("offset="), "{text}");
}

/// A log of `segments_wanted` segments of 1 KiB whose reader was opened while only the
/// first existed, and the writer closed: the directory, that reader (its last segment the
/// first) and the number of events.
fn rolled_past_a_reader(segments_wanted: usize) -> (common::ScratchPath, LogReader, u64) {
    let dir = temp_dir("rolled");
    let (writer, _) = LogWriter::open(&dir, options(Durability::Manual, 1024)).unwrap();
    writer.append(&events(0..2)).unwrap();
    writer.flush().unwrap();
    let reader = LogReader::open(&dir).unwrap();
    assert_eq!((reader.seq_next(), segments(&dir).len()), (2, 1));
    let mut next = 2;
    while segments(&dir).len() < segments_wanted {
        writer.append(&events(next..next + 1)).unwrap();
        next += 1;
    }
    writer.append(&events(next..next + 1)).unwrap();
    writer.close().unwrap();
    (dir, reader, next + 1)
}

/// RD-2, RCV-6: a reader following a log (`refresh`) whose last segment was sealed since
/// it looked never takes damage there for the end of the log: a record of the sealed
/// segment that does not check out, or zeros where its last record was, or a missing
/// segment after it. A reader opened afresh on the same files sees every event; the
/// following one reports `CORRUPT` naming the segment and the offset where its records stop.
#[test]
fn rd_2_a_following_reader_reports_damage_where_its_segment_was_sealed() {
    type Damage = fn(&[PathBuf]);
    /// The bytes of the segment file `segment` and where its last record lies in them,
    /// found by walking its records in its format.
    fn last_record(segment: &Path) -> (Vec<u8>, std::ops::Range<usize>) {
        let bytes = std::fs::read(segment).unwrap();
        let record = common::segment_records(&bytes).pop().unwrap().at;
        assert!(record.len() > 20, "{record:?}");
        (bytes, record)
    }
    let flip_last_record: Damage = |segs| {
        let (mut bytes, record) = last_record(&segs[0]);
        bytes[record.start + 20] ^= 0xFF; // inside the body: the checksum fails
        std::fs::write(&segs[0], bytes).unwrap();
    };
    let zero_last_record: Damage = |segs| {
        let (mut bytes, record) = last_record(&segs[0]);
        bytes[record].fill(0);
        std::fs::write(&segs[0], bytes).unwrap();
    };
    let remove_second: Damage = |segs| {
        std::fs::remove_file(&segs[1]).unwrap();
        let _ = std::fs::remove_file(segs[1].with_extension("idx"));
    };
    for (name, damage) in [
        ("a damaged last record", flip_last_record),
        ("a zeroed last record", zero_last_record),
        ("a missing segment", remove_second),
    ] {
        let (dir, mut reader, total) = rolled_past_a_reader(3);
        let segs = segments(&dir);
        damage(&segs);
        let error = match reader.refresh() {
            Ok(n) => panic!("{name}: refresh returned Ok({n}) over a log of {total} events"),
            Err(error) => error,
        };
        assert_corrupt_at(&error, &segs[0]);
        // The same files read afresh: every event, or the same refusal.
        match LogReader::open(&dir) {
            Ok(fresh) => {
                assert_eq!(fresh.seq_next(), total, "{name}");
                assert!(fresh.iter_from(0).any(|e| e.is_err()), "{name}");
            }
            Err(error) => assert_eq!(error.code(), "CORRUPT", "{name}: {error}"),
        }
    }
    // Undamaged, the same reader follows the log to its end.
    let (_dir, mut reader, total) = rolled_past_a_reader(3);
    assert_eq!(reader.refresh().unwrap(), total);
}

/// RD-2, RCV-7: a next segment whose header does not check out but that holds valid
/// records is damage for a following reader, as it is at open; never "being created".
#[test]
fn rd_2_a_following_reader_reports_a_damaged_next_segment_header() {
    let (dir, mut reader, total) = rolled_past_a_reader(2);
    let segs = segments(&dir);
    assert_eq!(segs.len(), 2);
    let mut bytes = std::fs::read(&segs[1]).unwrap();
    bytes[20] ^= 0xFF; // a byte of its log_id: the header's checksum fails
    std::fs::write(&segs[1], bytes).unwrap();
    assert!(LogReader::open(&dir).is_err(), "a fresh reader refuses it");
    let error = reader.refresh().map(|n| (n, total)).unwrap_err();
    assert_corrupt_at(&error, &segs[1]);
}

/// REC-9: a record's seq is a safe integer. A crafted segment at seq `u64::MAX` holding a
/// record of that seq is refused as `CORRUPT`, without a panic or a wrapped seq.
#[test]
fn rec_9_a_record_at_the_last_u64_seq_is_corrupt() {
    use surfacelog::internals::log::segment::SegmentHeader;
    use surfacelog::internals::record::encode_event;
    let dir = temp_dir("max-seq");
    // A log of version 1 records, whose frame the crafted record below has.
    let (writer, _) =
        LogWriter::open(&dir, common::v1_log_options(Durability::Manual, 1 << 20)).unwrap();
    writer.append(&events(0..2)).unwrap();
    writer.close().unwrap();
    let header = SegmentHeader::decode(&std::fs::read(&segments(&dir)[0]).unwrap()).unwrap();
    let header = SegmentHeader {
        index: 1,
        first_seq: u64::MAX,
        capacity: 4096,
        ..header
    };
    let mut bytes = header.encode().to_vec();
    // The record of an event of seq 0, its seq then set to u64::MAX and its checksum
    // recomputed (REC-2): what no encoder writes.
    let record = bytes.len();
    encode_event(&event(0), &mut bytes);
    bytes[record + 8..record + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    let len = u32::from_le_bytes(bytes[record..record + 4].try_into().unwrap()) as usize;
    let crc = crc32c::crc32c_append(
        crc32c::crc32c(&bytes[record..record + 4]),
        &bytes[record + 8..record + 8 + len],
    );
    bytes[record + 4..record + 8].copy_from_slice(&crc.to_le_bytes());
    bytes.resize(4096, 0);
    std::fs::write(dir.join(format!("{:020}.seg", u64::MAX)), &bytes).unwrap();
    let error = LogReader::open(&dir).map(|r| r.seq_next()).unwrap_err();
    assert_eq!(error.code(), "CORRUPT", "{error}");
}

/// A hook, run once.
type Once = Box<dyn FnOnce() + Send>;

/// A hook run once, by a [`common::HookedStorage`], at the first listing of a directory:
/// the moment a writer in another process makes progress while a following reader lists
/// the log directory.
#[derive(Default)]
struct Moments {
    on_list: std::sync::Mutex<Option<Once>>,
}

impl Moments {
    /// A storage running the hook.
    fn storage(self: &Arc<Self>) -> Arc<common::HookedStorage> {
        let moments = Arc::clone(self);
        Arc::new(common::HookedStorage(Box::new(move |op| {
            if matches!(op, common::Op::List(_)) {
                let hook = moments.on_list.lock().unwrap().take();
                if let Some(hook) = hook {
                    hook();
                }
            }
            Ok(())
        })))
    }
}

/// RD-1, RD-2, SEG-6: a following reader whose last segment held no record lists the
/// directory; meanwhile the writer appends records to that segment, seals it and creates
/// the next one, whose header it has not written yet ("being created"). Every byte on disk
/// is a state a live writer passes through: the refresh returns the records (or fewer),
/// never `CORRUPT`.
#[test]
fn rd_2_a_segment_being_created_while_the_reader_lists_is_not_damage() {
    let dir = temp_dir("being-created");
    let (writer, _) = LogWriter::open(&dir, options(Durability::Manual, 1024)).unwrap();
    writer.flush().unwrap();
    let moments = Arc::new(Moments::default());
    let mut reader = LogReader::open_with(&dir, moments.storage()).unwrap();
    assert_eq!(reader.seq_next(), 0);
    let next = dir.join(format!("{:020}.seg", 3));
    *moments.on_list.lock().unwrap() = Some(Box::new(move || {
        writer.append(&events(0..3)).unwrap();
        writer.flush().unwrap();
        let file = std::fs::File::create_new(&next).unwrap();
        file.set_len(1024).unwrap();
        std::mem::forget(writer); // still running: it keeps its lock
    }));
    let refreshed = reader.refresh();
    assert!(
        matches!(refreshed, Ok(n) if n <= 3),
        "a segment being created taken for damage: {refreshed:?}"
    );
}

/// RD-2, RCV-7, SEG-6: a following reader reads the next segment's header while the writer
/// has just created the file (zeros: being created); before the reader judges that file
/// (opening it again, reading its records and index), the writer writes the header, fills
/// the segment and rolls past it. The stale header is never judged against the fresh file.
#[test]
fn rd_2_a_header_written_since_the_reader_read_it_is_not_damage() {
    let dir = temp_dir("stale-header");
    let (writer, _) = LogWriter::open(&dir, options(Durability::Manual, 1024)).unwrap();
    writer.append(&events(0..2)).unwrap();
    writer.flush().unwrap();
    let moments = Arc::new(Moments::default());
    let mut reader = LogReader::open_with(&dir, moments.storage()).unwrap();
    assert_eq!(reader.seq_next(), 2);
    let mut seq = 2;
    while segments(&dir).len() < 2 {
        writer.append(&events(seq..seq + 1)).unwrap();
        seq += 1;
    }
    writer.flush().unwrap();
    // The second segment as the writer's create_file leaves it: length set, zeros.
    let second = segments(&dir)[1].clone();
    let mut bytes = std::fs::read(&second).unwrap();
    let written = bytes.clone();
    bytes.fill(0);
    std::fs::write(&second, &bytes).unwrap();
    let at = second.clone();
    // While the reader, having read the header as zeros, looks for later segments: the
    // writer catches up (writes the header, fills the segment, rolls past it).
    *moments.on_list.lock().unwrap() = Some(Box::new(move || {
        std::fs::write(&at, &written).unwrap();
        let mut seq = seq;
        while segments(at.parent().unwrap()).len() < 3 {
            writer.append(&events(seq..seq + 1)).unwrap();
            seq += 1;
        }
        writer.flush().unwrap();
        std::mem::forget(writer);
    }));
    let refreshed = reader.refresh();
    assert!(
        refreshed.is_ok(),
        "a header written since the reader read it taken for damage: {refreshed:?}"
    );
}

/// `writer` appending one event at a time on a thread of its own until the flag is set;
/// the thread closes it and returns how many it appended.
fn appending(
    writer: LogWriter,
) -> (
    Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<u64>,
) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    let appender = std::thread::spawn(move || {
        let mut seq = 0;
        while !stopping.load(std::sync::atomic::Ordering::SeqCst) {
            writer.append(&events(seq..seq + 1)).unwrap();
            seq += 1;
        }
        writer.close().unwrap();
        seq
    });
    (stop, appender)
}

/// RD-2, RD-6: a writer rolling often, a reader refreshing in a loop: the log is never
/// damaged, so every refresh succeeds, and a fresh reader reads every event.
#[test]
fn rd_2_a_reader_following_a_writer_that_rolls_reports_no_damage() {
    let dir = temp_dir("live-roll");
    let (writer, _) = LogWriter::open(&dir, options(Durability::Manual, 1024)).unwrap();
    writer.flush().unwrap();
    let mut reader = LogReader::open(&dir).unwrap();
    let (stop, appender) = appending(writer);
    let started = std::time::Instant::now();
    let mut errors = Vec::new();
    while started.elapsed() < Duration::from_secs(2) {
        if let Err(error) = reader.refresh() {
            errors.push(error.to_string());
            reader = LogReader::open(&dir).unwrap();
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let written = appender.join().unwrap();
    assert!(
        errors.is_empty(),
        "{} false reports, the first: {}",
        errors.len(),
        errors[0]
    );
    assert_eq!(reader.refresh().unwrap(), written);
    let fresh = LogReader::open(&dir).unwrap();
    assert_eq!(fresh.seq_next(), written);
    assert!(fresh.iter_from(0).all(|e| e.is_ok()));
}

/// RD-2, SEG-7, CZ-4: a following reader whose last segment held no record when it looked,
/// since replaced by a larger one (SEG-7), filled, sealed and compressed by a compaction,
/// maps the compressed segment's logical bytes, never the compressed file as records.
#[cfg(feature = "compress")]
#[test]
fn rd_2_a_replaced_last_segment_compressed_since_is_read_through_its_logical_bytes() {
    let dir = temp_dir("replaced-compressed");
    let (writer, _) = LogWriter::open(&dir, options(Durability::Manual, 512)).unwrap();
    writer.flush().unwrap();
    let mut reader = LogReader::open(&dir).unwrap();
    assert_eq!(reader.refresh().unwrap(), 0);
    writer.append(&[common::padded_event(0, 2000)]).unwrap(); // too large: replaced (SEG-7)
    writer.append(&events(1..4)).unwrap();
    writer.close().unwrap();
    let options = surfacelog::CompactOptions::new().compress(true);
    let report = surfacelog::internals::log::compact_with(
        &surfacelog::internals::storage::FsStorage,
        &dir,
        options,
    )
    .unwrap();
    assert!(!report.rewritten.is_empty(), "a segment compressed");
    assert_eq!(LogReader::open(&dir).unwrap().seq_next(), 4);
    assert_eq!(reader.refresh().unwrap(), 4);
    assert!(reader.iter_from(0).all(|e| e.is_ok()));
}

/// RD-2, RCV-7: the next segment judged as being created is the file the reader opened,
/// never its name opened again: here, while the reader looks for later segments, another
/// file takes the name (as a compaction's rename does once the writer has filled the
/// segment and rolled past it), shorter than the one the reader mapped. The file the reader
/// opened is still one being created: no damage, and no read past another file's end.
#[test]
fn rd_2_the_next_segment_is_judged_as_opened_not_as_renamed_since() {
    let dir = temp_dir("unborn-renamed");
    let (writer, _) = LogWriter::open(&dir, options(Durability::Manual, 1024)).unwrap();
    writer.append(&events(0..2)).unwrap();
    writer.flush().unwrap();
    let moments = Arc::new(Moments::default());
    let mut reader = LogReader::open_with(&dir, moments.storage()).unwrap();
    let mut seq = 2;
    while segments(&dir).len() < 2 {
        writer.append(&events(seq..seq + 1)).unwrap();
        seq += 1;
    }
    writer.flush().unwrap();
    std::mem::forget(writer); // still running: it keeps its lock
    let second = segments(&dir)[1].clone();
    let written = std::fs::read(&second).unwrap();
    std::fs::write(&second, vec![0u8; written.len()]).unwrap(); // as create_file leaves it
    let at = second.clone();
    *moments.on_list.lock().unwrap() = Some(Box::new(move || {
        let tmp = at.with_extension("tmp");
        std::fs::write(&tmp, &written[..64]).unwrap();
        std::fs::rename(&tmp, &at).unwrap();
    }));
    let refreshed = reader.refresh();
    assert_eq!(refreshed.map_err(|e| e.to_string()), Ok(seq - 1));
}

/// LOG-2, RD-2: a writer rolling often, readers opened fresh in a loop: the log is never
/// damaged, so every open succeeds. Before, an open could list the directory while the
/// writer rolled (a listing is no snapshot: the new segment's name could be missed while
/// the index it was given after its first records was seen, or the segment created and
/// indexed after the open found none under its name), and refused the log as one whose
/// last segment was gone beside its index (CORRUPT).
#[test]
fn log_2_readers_opened_beside_a_writer_that_rolls_report_no_damage() {
    let dir = temp_dir("open-roll");
    let (writer, _) = LogWriter::open(&dir, options(Durability::Manual, 1024)).unwrap();
    writer.flush().unwrap();
    let (stop, appender) = appending(writer);
    let started = std::time::Instant::now();
    let mut errors = Vec::new();
    let mut opens = 0;
    while started.elapsed() < Duration::from_secs(3) {
        opens += 1;
        if let Err(error) = LogReader::open(&dir) {
            errors.push(error.to_string());
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let written = appender.join().unwrap();
    assert!(
        errors.is_empty(),
        "{} of {opens} opens refused, the first: {}",
        errors.len(),
        errors[0]
    );
    assert_eq!(LogReader::open(&dir).unwrap().seq_next(), written);
}

/// RCV-7, LOG-1: a writer's recovery holds the log's lock, so no segment is created beside
/// it, and the last segment's header reads the same each time but for a fault. A read of
/// the header that failed (`read_head` stops at an error and returns the bytes before it,
/// which then do not decode), here simulated by the header's bytes being unreadable while
/// the chain is listed and readable again by the time the segment is judged, made the
/// segment look torn; the judgement found its records (damage), then read the header
/// again, took the header that now checks out for a creation beside a reader, and
/// called the segment a torn creation: the writer removed it, records and all, and
/// appended over their seqs. The writer must never take a second read as a creation: the
/// log is refused, or opened whole, and the segment is kept.
#[test]
fn rcv_7_a_writer_never_removes_a_segment_whose_header_read_failed_once() {
    use common::{HookedStorage, Op};
    use surfacelog::internals::log::segment::segment_name;
    let dir = temp_dir("header-read-once");
    let (writer, _) = LogWriter::open(&dir, options(Durability::Manual, 1024)).unwrap();
    let written = 40;
    for seq in 0..written {
        writer.append(&events(seq..seq + 1)).unwrap();
    }
    writer.close().unwrap();
    let mut segments: Vec<u64> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".seg")?.parse().ok()
        })
        .collect();
    segments.sort_unstable();
    let (&last, rest) = segments.split_last().unwrap();
    let previous = dir.join(segment_name(*rest.last().unwrap()));
    let last_path = dir.join(segment_name(last));
    let header = std::fs::read(&last_path).unwrap()[..64].to_vec();
    let state = Arc::new(std::sync::Mutex::new(0_u8));
    let (hook_last, hook_previous, hook_state) = (last_path.clone(), previous, Arc::clone(&state));
    let storage = HookedStorage(Box::new(move |op| {
        use std::os::unix::fs::FileExt;
        let mut state = hook_state.lock().unwrap();
        match op {
            // The header unreadable for the chain's first read of it...
            Op::Opened(path) if path == hook_last && *state == 0 => {
                let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
                file.write_at(&[0; 64], 0).unwrap();
                *state = 1;
            }
            // ...and readable again right after.
            Op::Opened(path) if path == hook_previous && *state == 1 => {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&hook_last)
                    .unwrap();
                file.write_at(&header, 0).unwrap();
                *state = 2;
            }
            _ => {}
        }
        Ok(())
    }));
    let mut hooked = options(Durability::Manual, 1024);
    hooked.storage = Arc::new(storage);
    let opened = LogWriter::open(&dir, hooked);
    assert_eq!(
        *state.lock().unwrap(),
        2,
        "the header was read unreadable once"
    );
    if let Ok((writer, report)) = opened {
        assert_eq!(report.removed_segment, None);
        writer.close().unwrap();
    }
    assert!(
        last_path.exists(),
        "the segment holding seqs from {last} was removed"
    );
    assert_eq!(LogReader::open(&dir).unwrap().seq_next(), written);
}
