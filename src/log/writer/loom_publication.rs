//! loom: how the writer publishes what it has written and made durable, to readers in this
//! process (`seq_on_file`, what `DiskLog` catches up to), to readers of the files (a
//! follower's refresh) and to waiters (the group commit's durable seq). Run with
//! `RUSTFLAGS="--cfg loom" cargo test --release --lib loom_`.
//!
//! The log is real (files in a scratch directory); the storage's syncs only record how far
//! the segment was written when they ran, so a model step costs no disk flush.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::event::{Event, EventFields};
use crate::log::segment::SEGMENT_HEADER_LEN;
use crate::log::{Durability, LogOptions, LogReader, LogWriter};
use crate::record::{body_len, frame_len};
use crate::storage::{FsStorage, Storage};

/// The real filesystem, but a sync records how far the segment was written instead of
/// flushing it. Its counters are std atomics: loom runs one thread at a time, and these
/// are the files' state, not a protocol under test.
#[derive(Debug, Default)]
struct Recording {
    /// The end of the furthest write into a segment (past its header).
    written: AtomicU64,
    /// `written` as the last sync found it: what a power cut would keep.
    durable: AtomicU64,
}

impl Storage for Recording {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        FsStorage.create_dir_all(dir)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        FsStorage.list_dir(dir)
    }
    fn create_file(&self, path: &Path, len: u64) -> io::Result<File> {
        FsStorage.create_file(path, len)
    }
    fn open_file(&self, path: &Path, write: bool) -> io::Result<File> {
        FsStorage.open_file(path, write)
    }
    fn write_at(&self, file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
        FsStorage.write_at(file, offset, bytes)?;
        // Segment records: the header and index files are written at offset 0.
        if offset >= SEGMENT_HEADER_LEN as u64 {
            self.written
                .fetch_max(offset + bytes.len() as u64, Ordering::SeqCst);
        }
        Ok(())
    }
    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        FsStorage.set_len(file, len)
    }
    fn sync_data(&self, _file: &File) -> io::Result<()> {
        let written = self.written.load(Ordering::SeqCst);
        self.durable.fetch_max(written, Ordering::SeqCst);
        Ok(())
    }
    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        FsStorage.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        FsStorage.remove_file(path)
    }
}

/// Event `seq` (< 10, so every record has the same length).
fn event(seq: u64) -> Event {
    let text = format!(r#"{{"type":"plugin/t","seq":{seq},"time":0,"data":{{}}}}"#);
    let data = text.len() - 3..text.len() - 1;
    let fields = EventFields {
        event_type: "plugin/t".into(),
        seq,
        time: 0,
        surface_op: None,
        sources: None,
        ignorable: false,
    };
    Event::new(text, data, None, fields)
}

/// The end of the first `count` records in the first segment (0 for none: the counters
/// start there).
fn end_of(count: u64) -> u64 {
    if count == 0 {
        return 0;
    }
    let record = frame_len(body_len(&event(0).as_ref())) as u64;
    SEGMENT_HEADER_LEN as u64 + count * record
}

/// A Sync-durability writer of a fresh log (one segment holds every record of a model),
/// its storage, and the scratch directory that holds it.
fn writer() -> (Arc<LogWriter>, Arc<Recording>, tempfile::TempDir) {
    let scratch = tempfile::tempdir().unwrap();
    let storage = Arc::new(Recording::default());
    let options = LogOptions {
        segment_bytes: 64 << 10,
        durability: Durability::Sync,
        storage: Arc::clone(&storage) as Arc<dyn Storage>,
        chunk_records: true,
        compact_records: false,
    };
    let (writer, _) = LogWriter::open(scratch.path(), options).unwrap();
    (Arc::new(writer), storage, scratch)
}

/// One append of one event at whatever seq comes next; returns the next seq.
fn append_one(writer: &LogWriter) -> u64 {
    writer.append_with(|seq| vec![event(seq)]).unwrap()
}

/// Two threads append in Sync durability while a third watches what the writer publishes:
/// the written seq (`seq_on_file`) never covers a record not yet written to the file, the
/// durable seq never exceeds the written one nor covers bytes no sync has covered, and an
/// append returns only once its record is synced (DUR-1). A follower of the files never
/// reads past what is written, and sees every committed event once it looks again.
#[test]
fn loom_published_seqs_cover_only_written_and_synced_bytes() {
    loom::model(|| {
        let (writer, storage, scratch) = writer();
        let appenders: Vec<_> = (0..2)
            .map(|_| {
                let writer = Arc::clone(&writer);
                let storage = Arc::clone(&storage);
                loom::thread::spawn(move || {
                    let next = append_one(&writer);
                    assert!(
                        storage.durable.load(Ordering::SeqCst) >= end_of(next),
                        "an append returned before its record was synced"
                    );
                })
            })
            .collect();
        let mut follower = LogReader::open(scratch.path()).unwrap();
        for _ in 0..2 {
            // Durable first, then written: durable then ≤ durable now ≤ written now.
            let durable = writer.shared.commit.durable_seq();
            let written = writer.seq_on_file();
            assert!(durable <= written, "durable {durable} > written {written}");
            assert!(storage.written.load(Ordering::SeqCst) >= end_of(written));
            assert!(storage.durable.load(Ordering::SeqCst) >= end_of(durable));
            let seen = follower.refresh().unwrap();
            assert!(
                seen <= writer.seq_on_file(),
                "a follower read past the writes"
            );
        }
        for appender in appenders {
            appender.join().unwrap();
        }
        assert_eq!(writer.shared.commit.durable_seq(), 2);
        assert_eq!(follower.refresh().unwrap(), 2, "a committed event not seen");
        drop(writer);
        drop(scratch);
    });
}

/// A follower waiting for an event (`Follower::wait_for`, polling the files) while one
/// thread appends it in Sync durability: the wait ends once the event is committed, never
/// before (no lost wake-up: each look reads the files again), and what it then reads is
/// durable.
#[test]
fn loom_a_follower_waiting_for_a_seq_wakes_once_it_is_committed() {
    loom::model(|| {
        let (writer, storage, scratch) = writer();
        let mut follower = crate::store::Follower::over(LogReader::open(scratch.path()).unwrap());
        let appender = {
            let writer = Arc::clone(&writer);
            loom::thread::spawn(move || {
                append_one(&writer);
                append_one(&writer)
            })
        };
        let woke = follower
            .wait_for(1, std::time::Duration::from_secs(600))
            .unwrap();
        assert!(woke, "the wait timed out");
        assert!(writer.seq_on_file() >= 2, "woke before event 1 was written");
        assert!(storage.written.load(Ordering::SeqCst) >= end_of(2));
        assert_eq!(appender.join().unwrap(), 2);
        assert!(storage.durable.load(Ordering::SeqCst) >= end_of(2));
        drop(writer);
        drop(scratch);
    });
}
