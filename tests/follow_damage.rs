//! Damage appearing under a reader that follows a log (RD-6, RCV-13, RCV-14): a refresh
//! whose scan stops before records a durable mark vouches for reports `CORRUPT`, as a
//! fresh reader does, never a shorter log to wait on.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use surfacelog::internals::event::EventSource;
use surfacelog::internals::log::segment::segment_name;
use surfacelog::internals::log::{Durability, LogReader, LogWriter};
use surfacelog::internals::storage::{FsStorage, Storage};

mod common;

use common::{log_options, padded_event, scratch};

/// Flips a bit of the last non-zero byte of segment 0 of the log in `dir`: the last
/// record's body, whose checksum then fails.
fn damage_last_record(dir: &Path) {
    let path = dir.join(segment_name(0));
    let bytes = std::fs::read(&path).unwrap();
    let last = bytes.iter().rposition(|b| *b != 0).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&[bytes[last] ^ 0x01], last as u64)
        .unwrap();
}

/// RD-6, RCV-13: a reader opened while a writer appended; the writer appends more and
/// closes (its index now vouches for every record); the last record is then damaged. A
/// fresh reader refuses the log (`CORRUPT`): the index is a durable mark the records stop
/// before. The reader opened before must say the same at its refresh, not stop one record
/// short and wait there for an event that is already lost.
#[test]
fn rd_6_a_refresh_that_stops_before_the_index_end_is_corrupt() {
    let dir = scratch("follow_damage", "index");
    let dir = dir.join("log");
    let (writer, _) = LogWriter::open(&dir, log_options(Durability::Sync, 1 << 20)).unwrap();
    for seq in 0..10 {
        writer.append(&[padded_event(seq, 100)]).unwrap();
    }
    let mut follower = LogReader::open(&dir).unwrap();
    assert_eq!(follower.seq_next(), 10);
    for seq in 10..15 {
        writer.append(&[padded_event(seq, 100)]).unwrap();
    }
    writer.close().unwrap();
    damage_last_record(&dir);
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

/// The file system's storage whose `open_read` of a path ending `.idx` runs a hook first
/// (once armed): where a test lets a writer go on while a reader is between its scan and
/// its look at the index.
struct IndexHook(std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>);

impl std::fmt::Debug for IndexHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IndexHook")
    }
}

impl Storage for IndexHook {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        FsStorage.create_dir_all(dir)
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        FsStorage.list_dir(dir)
    }
    fn create_file(&self, path: &Path, len: u64) -> std::io::Result<std::fs::File> {
        FsStorage.create_file(path, len)
    }
    fn open_file(&self, path: &Path, write: bool) -> std::io::Result<std::fs::File> {
        FsStorage.open_file(path, write)
    }
    fn write_at(&self, file: &std::fs::File, offset: u64, bytes: &[u8]) -> std::io::Result<()> {
        FsStorage.write_at(file, offset, bytes)
    }
    fn set_len(&self, file: &std::fs::File, len: u64) -> std::io::Result<()> {
        FsStorage.set_len(file, len)
    }
    fn sync_data(&self, file: &std::fs::File) -> std::io::Result<()> {
        FsStorage.sync_data(file)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        FsStorage.sync_dir(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        FsStorage.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        FsStorage.remove_file(path)
    }
    fn open_read(&self, path: &Path) -> std::io::Result<std::fs::File> {
        if path.extension().is_some_and(|e| e == "idx")
            && let Some(hook) = self.0.lock().unwrap().take()
        {
            hook();
        }
        FsStorage.open_read(path)
    }
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
    let hook = Arc::new(IndexHook(std::sync::Mutex::new(None)));
    let mut follower = LogReader::open_with(&dir, hook.clone()).unwrap();
    assert_eq!(follower.seq_next(), 10);
    // Record 10's first bytes written, as the writer's pwrite of it is seen half done.
    let mut record = Vec::new();
    surfacelog::internals::record::encode_event(&padded_event(10, 100), &mut record);
    let bytes = std::fs::read(&path).unwrap();
    let end = (bytes.iter().rposition(|b| *b != 0).unwrap() + 1).next_multiple_of(8);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&record[..record.len() / 2], end as u64)
        .unwrap();
    *hook.0.lock().unwrap() = Some(Box::new(move || {
        for seq in 10..40 {
            writer.append(&[padded_event(seq, 8 << 10)]).unwrap();
        }
        writer.close().unwrap();
    }));
    let seq_next = follower.refresh().unwrap();
    assert!(hook.0.lock().unwrap().is_none(), "the hook ran");
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

/// RD-6, RCV-13: as above, with the last record's bytes read back as zeros (a lost write,
/// a page a failing disk returns zeroed) instead of a flipped bit: zeros where the index
/// vouches for a record are damage too, never the end marker of a shorter log. A fresh
/// reader refuses the log; the reader opened before must not wait one record short.
#[test]
fn rd_6_a_refresh_that_stops_at_zeros_before_the_index_end_is_corrupt() {
    let dir = scratch("follow_damage", "zeros");
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
    // Where record 14 starts: after record 13's last non-zero byte, 8-byte aligned.
    let end_of = |path: &Path| {
        let bytes = std::fs::read(path).unwrap();
        (bytes.iter().rposition(|b| *b != 0).unwrap() + 1).next_multiple_of(8)
    };
    let at = end_of(&path);
    writer.append(&[padded_event(14, 100)]).unwrap();
    writer.close().unwrap();
    let end = end_of(&path);
    assert!(end > at);
    // Record 14, the last, zeroed whole.
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&vec![0; end - at], at as u64).unwrap();
    let fresh = LogReader::open(&dir).unwrap_err();
    assert_eq!(fresh.code(), "CORRUPT", "{fresh}");
    match follower.refresh() {
        Err(error) => assert_eq!(error.code(), "CORRUPT", "{error}"),
        Ok(seq_next) => panic!(
            "the follower took the zeros for the end of the log at seq {seq_next}, \
             where a fresh reader reports: {fresh}"
        ),
    }
}
