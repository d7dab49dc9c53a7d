//! Damage appearing under a reader that follows a log (RD-6, RCV-13, RCV-14): a refresh
//! whose scan stops before records a durable mark vouches for reports `CORRUPT`, as a
//! fresh reader does, never a shorter log to wait on.

use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use surfacelog::internals::event::EventSource;
use surfacelog::internals::log::segment::segment_name;
use surfacelog::internals::log::{Durability, LogReader, LogWriter};

mod common;

use common::{HookedStorage, Op, log_options, padded_event, scratch};

/// A reader opened while a writer appended 10 events; the writer appends 5 more and closes
/// (its index now vouches for every record); `damage` then changes the last record, given
/// the segment's path and the record's bytes. A fresh reader refuses the log (`CORRUPT`):
/// the index is a durable mark the records stop before. The reader opened before must say
/// the same at its refresh, not stop one record short and wait there for an event that is
/// already lost.
fn follower_refuses_damage_to_the_last_record(
    name: &str,
    damage: impl FnOnce(&Path, Range<usize>),
) {
    let dir = scratch("follow_damage", name);
    let dir = dir.join("log");
    let (writer, _) = LogWriter::open(&dir, log_options(Durability::Sync, 1 << 20)).unwrap();
    for seq in 0..10 {
        writer.append(&[padded_event(seq, 100)]).unwrap();
    }
    let mut follower = LogReader::open(&dir).unwrap();
    assert_eq!(follower.seq_next(), 10);
    let path = dir.join(segment_name(0));
    for seq in 10..14 {
        writer.append(&[padded_event(seq, 100)]).unwrap();
    }
    // Where a record ends: after the segment's last non-zero byte, 8-byte aligned.
    let end_of = |path: &Path| {
        let bytes = std::fs::read(path).unwrap();
        (bytes.iter().rposition(|b| *b != 0).unwrap() + 1).next_multiple_of(8)
    };
    let at = end_of(&path);
    writer.append(&[padded_event(14, 100)]).unwrap();
    writer.close().unwrap();
    let end = end_of(&path);
    assert!(end > at);
    damage(&path, at..end);
    let fresh = LogReader::open(&dir).unwrap_err();
    assert_eq!(fresh.code(), "CORRUPT", "{fresh}");
    match follower.refresh() {
        Err(error) => assert_eq!(error.code(), "CORRUPT", "{error}"),
        Ok(seq_next) => panic!(
            "the follower took the damage for the end of the log at seq {seq_next}, \
             where a fresh reader reports: {fresh}"
        ),
    }
}

/// RD-6, RCV-13: a bit of the last record flipped (its checksum then fails).
#[test]
fn rd_6_a_refresh_that_stops_before_the_index_end_is_corrupt() {
    follower_refuses_damage_to_the_last_record("index", |path, record| {
        let bytes = std::fs::read(path).unwrap();
        let last = record.end
            - 1
            - bytes[..record.end]
                .iter()
                .rev()
                .position(|b| *b != 0)
                .unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        file.write_all_at(&[bytes[last] ^ 0x01], last as u64)
            .unwrap();
    });
}

/// RD-6, RCV-13: the last record's bytes read back as zeros (a lost write, a page a
/// failing disk returns zeroed) instead of a flipped bit: zeros where the index vouches for
/// a record are damage too, never the end marker of a shorter log.
#[test]
fn rd_6_a_refresh_that_stops_at_zeros_before_the_index_end_is_corrupt() {
    follower_refuses_damage_to_the_last_record("zeros", |path, record| {
        let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        file.write_all_at(&vec![0; record.len()], record.start as u64)
            .unwrap();
    });
}

/// What a test runs once, armed by setting it.
type Armed = Arc<std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>>;

/// A storage whose first `open_read` of a path ending `.idx` once armed (`hook` set)
/// runs `hook` first: where a test lets a writer go on while a reader is between its scan
/// and its look at the index.
fn index_hook(hook: &Armed) -> Arc<HookedStorage> {
    let hook = Arc::clone(hook);
    Arc::new(HookedStorage(Box::new(move |op| {
        if let Op::OpenRead(path) = op
            && path.extension().is_some_and(|e| e == "idx")
            && let Some(run) = hook.lock().unwrap().take()
        {
            run();
        }
        Ok(())
    })))
}

/// RD-6, RCV-13, the other way: a refresh that stops at a record being written, while
/// the writer completes it, appends past the reader's map (the file grown, SEG-6) and
/// closes, writing its index, before the reader looks at that index: the records it lists
/// past the map are not damage. The reader reports nothing, and its next refresh maps the
/// file again and reads them all.
#[test]
fn rd_6_an_index_listing_records_past_the_map_is_not_damage() {
    let dir = scratch("follow_damage", "grown");
    let dir = dir.join("log");
    let (writer, _) = LogWriter::open(&dir, log_options(Durability::Sync, 8 << 20)).unwrap();
    for seq in 0..10 {
        writer.append(&[padded_event(seq, 100)]).unwrap();
    }
    let path = dir.join(segment_name(0));
    let mapped_len = std::fs::metadata(&path).unwrap().len();
    let hook = Armed::default();
    let mut follower = LogReader::open_with(&dir, index_hook(&hook)).unwrap();
    assert_eq!(follower.seq_next(), 10);
    // Record 10's first bytes written, as the writer's pwrite of it is seen half done.
    let mut record = Vec::new();
    surfacelog::internals::record::encode_event(&padded_event(10, 100), &mut record);
    let bytes = std::fs::read(&path).unwrap();
    let end = (bytes.iter().rposition(|b| *b != 0).unwrap() + 1).next_multiple_of(8);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&record[..record.len() / 2], end as u64)
        .unwrap();
    *hook.lock().unwrap() = Some(Box::new(move || {
        for seq in 10..40 {
            writer.append(&[padded_event(seq, 8 << 10)]).unwrap();
        }
        writer.close().unwrap();
    }));
    let seq_next = follower.refresh().unwrap();
    assert!(hook.lock().unwrap().is_none(), "the hook ran");
    assert!(
        std::fs::metadata(&path).unwrap().len() > mapped_len,
        "the file grew"
    );
    assert!(seq_next >= 10);
    assert_eq!(follower.refresh().unwrap(), 40);
    for seq in 0..40 {
        assert_eq!(follower.event(seq).unwrap().unwrap().seq, seq);
    }
}

/// The bytes this process has read through `read` and `pread` so far (`/proc/self/io`).
fn bytes_read() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    io.lines()
        .find_map(|line| line.strip_prefix("rchar: "))
        .and_then(|n| n.parse().ok())
        .expect("rchar in /proc/self/io")
}

/// RD-6, IDX-4: an idle follower's refresh of a closed log whose last segment keeps a
/// version-1 index (written by an older build: no `data_crc`, so never a durable mark,
/// RCV-13) tells that from the index's header: it does not read the whole index at every
/// refresh (here one of 16 MiB, sparse: 20 refreshes read a few kilobytes, not 320 MiB).
#[test]
fn rd_6_an_idle_refresh_beside_a_version_1_index_does_not_read_it_whole() {
    use surfacelog::internals::log::segment::index_name;
    let dir = scratch("follow_damage", "v1-index");
    let dir = dir.join("log");
    let (writer, _) = LogWriter::open(&dir, log_options(Durability::Sync, 1 << 20)).unwrap();
    for seq in 0..10 {
        writer.append(&[padded_event(seq, 100)]).unwrap();
    }
    writer.close().unwrap();
    // The version-2 index rewritten as a version 1 header (IDX-4: 48 bytes, no
    // data_crc), followed by 16 MiB of offsets (a sparse file).
    let path = dir.join(index_name(0));
    let v2 = std::fs::read(&path).unwrap();
    let mut v1 = v2[..44].to_vec();
    v1[8..12].copy_from_slice(&1_u32.to_le_bytes());
    v1.extend_from_slice(&[0; 4]);
    std::fs::write(&path, &v1).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(16 << 20).unwrap();
    drop(file);
    let mut follower = LogReader::open(&dir).unwrap();
    assert_eq!(follower.seq_next(), 10);
    let before = bytes_read();
    for _ in 0..20 {
        assert_eq!(follower.refresh().unwrap(), 10);
    }
    // Other tests of this file run in this process at the same time: their reads are
    // small logs, far below one read of this index.
    let read = bytes_read() - before;
    assert!(read < 8 << 20, "20 idle refreshes read {read} bytes");
}

/// RCV-13, RD-6: the last segment's index is the durable mark of the records it lists; an
/// index that cannot be read (`EIO`) is not an index that is missing. A log whose last
/// record is damaged under its index, read while the index's reads fail, is refused (`IO`
/// or `CORRUPT`), by a fresh reader and at a follower's refresh. Before, the failed read
/// was taken for no index, the damage for a torn tail, and the log returned one event
/// short with no error: an I/O error turned into a success.
#[test]
fn an_index_that_cannot_be_read_is_not_taken_for_no_durable_mark() {
    let dir = scratch("follow_damage", "eio");
    let dir = dir.join("log");
    let (writer, _) = LogWriter::open(&dir, log_options(Durability::Sync, 1 << 20)).unwrap();
    for seq in 0..10 {
        writer.append(&[padded_event(seq, 100)]).unwrap();
    }
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let storage = {
        let failing = Arc::clone(&failing);
        Arc::new(HookedStorage(Box::new(move |op| match op {
            Op::OpenRead(path) | Op::Open(path)
                if path.extension().is_some_and(|e| e == "idx")
                    && failing.load(std::sync::atomic::Ordering::SeqCst) =>
            {
                Err(std::io::Error::from_raw_os_error(5))
            }
            _ => Ok(()),
        })))
    };
    let mut follower = LogReader::open_with(&dir, storage.clone()).unwrap();
    assert_eq!(follower.seq_next(), 10);
    writer.append(&[padded_event(10, 100)]).unwrap();
    writer.close().unwrap();
    // The last record's last non-zero byte flipped: its checksum fails.
    let path = dir.join(segment_name(0));
    let bytes = std::fs::read(&path).unwrap();
    let last = bytes.iter().rposition(|b| *b != 0).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&[bytes[last] ^ 0x01], last as u64)
        .unwrap();
    assert_eq!(LogReader::open(&dir).unwrap_err().code(), "CORRUPT");

    failing.store(true, std::sync::atomic::Ordering::SeqCst);
    match LogReader::open_with(&dir, storage) {
        Err(error) => assert!(
            matches!(error.code(), "IO" | "CORRUPT"),
            "{}: {error}",
            error.code()
        ),
        Ok(reader) => panic!(
            "a fresh reader whose index read failed read {} events, one short, as the log",
            reader.seq_next()
        ),
    }
    match follower.refresh() {
        Err(error) => assert!(
            matches!(error.code(), "IO" | "CORRUPT"),
            "{}: {error}",
            error.code()
        ),
        Ok(seq_next) => {
            panic!("a follower whose index read failed took the damage for the end at {seq_next}")
        }
    }
}
