//! Errors that say what happened (issue 12, item 4): an append's outcome is the writer's
//! (`log-format.md` DUR-8), the lock's real error, `INVALID_ID` for an empty id, and a
//! damaged or missing `header.json` reported as `CORRUPT` with its path (`store.md`
//! STORE-4, STORE-8).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use surfacelog::internals::event::{Event, EventSource};
use surfacelog::internals::log::{DiskLog, Durability, LogOptions};
use surfacelog::internals::session::{Boundary, Compaction};
use surfacelog::internals::storage::faulty::{Faults, FaultyStorage};
use surfacelog::internals::store::Store;
use surfacelog::{ErrorKind, Outcome};

mod common;
#[path = "errors/context.rs"]
mod context;
#[path = "errors/header_limit.rs"]
mod header_limit;

use common::{Scratch, log_options, padded_event, scratch, store_options, user_message};

/// A log in a fresh scratch directory on a fault-injecting storage.
fn faulty_log(
    name: &str,
    durability: Durability,
    segment_bytes: u64,
) -> (Scratch, DiskLog, Arc<Faults>) {
    let dir = scratch("errors", name);
    let storage = FaultyStorage::default();
    let faults = Arc::clone(&storage.faults);
    let options = LogOptions {
        storage: Arc::new(storage),
        ..log_options(durability, segment_bytes)
    };
    let (log, _) = DiskLog::open(&dir, options).unwrap();
    (dir, log, faults)
}

/// Every event of `log` reads back as `expected`.
fn assert_reads(log: &dyn EventSource, expected: &[Event]) {
    assert_eq!(log.seq_next(), expected.len() as u64);
    for event in expected {
        let seq = event.seq();
        let read = log.event(seq).unwrap_or_else(|e| panic!("seq {seq}: {e}"));
        assert_eq!(read.unwrap().text(), event.text(), "seq {seq}");
    }
}

/// The log in `dir` reopened on the real filesystem holds exactly `expected`.
fn assert_stored(dir: &Path, expected: &[Event]) {
    let (log, _) = DiskLog::open(dir, log_options(Durability::Sync, 16 << 10)).unwrap();
    assert_reads(&log, expected);
}

#[test]
fn dur_8_an_append_whose_read_back_fails_is_appended() {
    let (dir, mut log, faults) = faulty_log("catch-up", Durability::Sync, 16 << 10);
    // The reader's map of the next segment fails once: the first catch-up (after 256 KiB
    // of appended text, across several 16 KiB segments) cannot read what was written.
    let opens = faults.opens();
    faults.unmappable_open(1, false);
    let events: Vec<Event> = (0..1000).map(|seq| padded_event(seq, 1000)).collect();
    for event in &events {
        let seq = event.seq();
        log.append_one(event.clone())
            .unwrap_or_else(|e| panic!("append {seq} was written, yet: {e}"));
    }
    assert!(
        faults.opens() > opens + 1,
        "the fault was met and later catch-ups opened more"
    );
    assert_reads(&log, &events);
    log.flush().unwrap();
    assert_reads(&log, &events);
    log.close().unwrap();
    assert_stored(&dir, &events);
}

#[test]
fn dur_8_a_reader_that_stays_behind_refuses_appends_before_writing() {
    let (dir, mut log, faults) = faulty_log("catch-up-lasting", Durability::Manual, 1 << 20);
    faults.unmappable_open(1, true);
    let mut events = Vec::new();
    let refused = loop {
        let event = padded_event(events.len() as u64, 64 << 10);
        match log.append_one(event.clone()) {
            Ok(()) => events.push(event),
            Err(error) => break (event, error),
        }
        assert!(events.len() < 1000, "never refused");
    };
    let (event, error) = refused;
    assert_eq!(error.code(), "IO", "{error}");
    assert!(error.to_string().contains("op=mmap"), "{error}");
    // An `IO` refusal met before the write: nothing written (DUR-10).
    assert_eq!(error.outcome(), Outcome::NothingWritten, "{error}");
    // 16 MiB of text waited for the reader: all of it still reads back, from memory.
    assert!(events.len() >= 250, "{} appended", events.len());
    assert_reads(&log, &events);
    // Nothing of the refused append was written, and the session stays writable.
    faults.mappable_again();
    log.append_one(event.clone()).unwrap();
    events.push(event);
    assert_reads(&log, &events);
    log.close().unwrap();
    assert_stored(&dir, &events);
}

#[test]
fn log_1_a_lock_that_cannot_be_opened_reports_why() {
    let dir = scratch("errors", "lock");
    let (log, _) = DiskLog::open(&dir, log_options(Durability::Sync, 16 << 10)).unwrap();
    log.close().unwrap();
    // `LOCK` exists; opening it fails as on a read-only filesystem.
    let storage = FaultyStorage::default();
    storage.faults.fail_open(1);
    let options = LogOptions {
        storage: Arc::new(storage),
        ..log_options(Durability::Sync, 16 << 10)
    };
    let error = DiskLog::open(&dir, options).unwrap_err();
    assert_eq!(error.code(), "IO", "{error}");
    let surfacelog::ErrorKind::Io { op, path, kind, .. } = error.kind() else {
        panic!("{error}");
    };
    assert_eq!(
        (*op, path.as_path()),
        ("open", dir.join("LOCK").as_path()),
        "{error}"
    );
    assert_eq!(*kind, std::io::ErrorKind::ReadOnlyFilesystem, "{error}");
    // A missing `LOCK` is still created.
    std::fs::remove_file(dir.join("LOCK")).unwrap();
    let (log, _) = DiskLog::open(&dir, log_options(Durability::Sync, 16 << 10)).unwrap();
    log.close().unwrap();
    assert!(dir.join("LOCK").exists());
}

/// A store in a fresh scratch directory.
fn store(name: &str) -> (Scratch, Store) {
    let dir = scratch("errors", name);
    let store = Store::open_or_create(&dir, store_options(Durability::Manual, 64 << 10)).unwrap();
    (dir, store)
}

/// The names under `dir`, recursively, sorted.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path.clone());
            }
            found.push(path);
        }
    }
    found.sort();
    found
}

#[test]
fn store_3_the_empty_id_is_refused_as_invalid() {
    let (dir, store) = store("empty-id");
    let mut session = store.create("s", None, None).unwrap();
    user_message(&mut session, "hello");
    session.close().unwrap();
    let before = tree(&dir);
    let codes = [
        ("create", store.create("", None, None).map(drop)),
        ("open", store.open_session("").map(drop)),
        ("resume", store.resume("").map(drop)),
        (
            "import",
            store
                .import("", r#"{"version":0,"id":"","createdAt":0}"#)
                .map(drop),
        ),
        ("refuse_existing", store.refuse_existing("")),
        ("fork child", store.fork("s", Boundary::Last, "").map(drop)),
        ("fork source", store.fork("", Boundary::Last, "t").map(drop)),
        ("delete", store.delete("")),
        ("salvage", store.salvage("").map(drop)),
        ("inspect", store.inspect("").map(drop)),
        ("follow", store.follow("").map(drop)),
        ("verify", store.verify(Some(&[""])).map(drop)),
    ];
    for (op, result) in codes {
        let error = result.expect_err(op);
        assert_eq!(error.code(), "INVALID_ID", "{op}: {error}");
        assert!(error.to_string().contains("id=\"\""), "{op}: {error}");
    }
    // Nothing was written, moved or removed.
    assert_eq!(tree(&dir), before);
    assert_eq!(store.list().unwrap().len(), 1);
}

/// A store holding the sessions `ids`, each with one message.
fn store_with(name: &str, ids: &[&str]) -> (Scratch, Store) {
    let (dir, store) = store(name);
    for id in ids {
        let mut session = store.create(id, None, None).unwrap();
        user_message(&mut session, "hello");
        session.close().unwrap();
    }
    (dir, store)
}

/// `error` is `CORRUPT` naming `header`.
fn assert_corrupt_header(error: &surfacelog::Error, header: &Path, what: &str) {
    assert_eq!(error.code(), "CORRUPT", "{what}: {error}");
    let surfacelog::ErrorKind::Corrupt { location, .. } = error.kind() else {
        unreachable!()
    };
    assert_eq!(location, &header.display().to_string(), "{what}: {error}");
}

#[test]
fn store_4_a_damaged_or_missing_header_is_corrupt_with_its_path() {
    let (dir, store) = store_with("header", &["s1", "ok"]);
    let header = dir.join("sessions/s1/header.json");
    let pristine = std::fs::read(&header).unwrap();
    let at = pristine.windows(4).position(|w| w == b"\"s1\"").unwrap() + 2;
    let damages: Vec<(&str, Option<Vec<u8>>)> = vec![
        // '1' (0x31) becomes '0' (0x30): a valid header naming another id.
        ("a flipped bit in the id", Some(flip(&pristine, at, 0x01))),
        // '{' (0x7B) becomes '{' ^ 0x40 = ';'.
        ("not JSON", Some(flip(&pristine, 0, 0x40))),
        ("not UTF-8", Some(flip(&pristine, at, 0x80))),
        (
            "no createdAt",
            Some(b"{\"version\":0,\"id\":\"s1\"}\n".to_vec()),
        ),
        ("deleted", None),
    ];
    for (what, bytes) in damages {
        match bytes {
            Some(bytes) => std::fs::write(&header, bytes).unwrap(),
            None => std::fs::remove_file(&header).unwrap(),
        }
        assert_corrupt_header(&store.open_session("s1").unwrap_err(), &header, what);
        assert_corrupt_header(&store.inspect("s1").unwrap_err(), &header, what);
        assert_corrupt_header(&store.delete("s1").unwrap_err(), &header, what);
        // Creating over it is refused too: the session is there, damaged.
        assert_eq!(
            store.create("s1", None, None).unwrap_err().code(),
            "SESSION_EXISTS"
        );
        // The listing goes on past it, and reports it.
        let listing = store.list().unwrap();
        let ids: Vec<&str> = listing
            .iter()
            .map(surfacelog::internals::event::Header::id)
            .collect();
        assert_eq!(ids, ["ok"], "{what}");
        assert_eq!(listing.damaged.len(), 1, "{what}");
        assert_corrupt_header(&listing.damaged[0], &header, what);
        // Verify shows the session as not ok.
        let report = store.verify(None).unwrap();
        assert!(!report.ok(), "{what}");
        std::fs::write(&header, &pristine).unwrap();
        store.open_session("s1").unwrap();
    }
    // An id the store does not hold is still not found.
    assert_eq!(
        store.open_session("s2").unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
    assert_eq!(store.list().unwrap().len(), 2);
}

fn flip(bytes: &[u8], at: usize, mask: u8) -> Vec<u8> {
    let mut bytes = bytes.to_vec();
    bytes[at] ^= mask;
    bytes
}

/// `EIO`, as the fault-injecting storage fails a write or sync.
const EIO: i32 = 5;

/// The OS error `error` keeps as its `source()`.
fn os_source(error: &surfacelog::Error) -> &std::io::Error {
    std::error::Error::source(error)
        .unwrap_or_else(|| panic!("no source: {error}"))
        .downcast_ref::<std::io::Error>()
        .unwrap_or_else(|| panic!("the source is not an io::Error: {error}"))
}

/// The texts of the events `dir`'s log holds, reopened on the real filesystem.
fn stored_texts(dir: &Path) -> Vec<String> {
    let (log, _) = DiskLog::open(dir, log_options(Durability::Sync, 16 << 10)).unwrap();
    (0..log.seq_next())
        .map(|seq| log.event(seq).unwrap().unwrap().text().to_string())
        .collect()
}

/// After a failed write or sync (`fail`) of a 3-event append, the error is `IO` with the
/// OS error as its source and an unknown fate; later calls are `POISONED`; and the reopened
/// log holds the 3 events whole or none of them (DUR-5, DUR-10, RCV-9).
fn assert_fate_unknown(name: &str, durability: Durability, fail: impl FnOnce(&Faults)) {
    let (dir, mut log, faults) = faulty_log(name, durability, 16 << 10);
    let before: Vec<Event> = (0..10).map(|seq| padded_event(seq, 100)).collect();
    log.append(&before).unwrap();
    log.flush().unwrap();
    fail(&faults);
    let batch: Vec<Event> = (10..13).map(|seq| padded_event(seq, 100)).collect();
    let error = match log.append(&batch) {
        Err(error) => error,
        // Buffered: the write and the sync happen at the flush.
        Ok(()) => log.flush().unwrap_err(),
    };
    assert_eq!(error.code(), "IO", "{name}: {error}");
    assert_eq!(error.outcome(), Outcome::FateUnknown, "{name}: {error}");
    assert!(error.is_fate_unknown());
    let source = os_source(&error);
    assert_eq!(source.raw_os_error(), Some(EIO), "{name}: {source:?}");
    let ErrorKind::Io { kind, .. } = error.kind() else {
        panic!("{error}");
    };
    assert_eq!(source.kind(), *kind, "{name}");
    // Every later call is refused, writing nothing.
    let next = padded_event(10, 100);
    let poisoned = log.append_one(next).unwrap_err();
    assert_eq!(poisoned.code(), "POISONED", "{name}");
    assert_eq!(poisoned.outcome(), Outcome::Poisoned, "{name}");
    assert!(std::error::Error::source(&poisoned).is_none());
    assert_eq!(log.flush().unwrap_err().outcome(), Outcome::Poisoned);
    drop(log);
    // Reopen recovers: the batch is there whole, or absent.
    let texts = stored_texts(&dir);
    let expected: Vec<String> = before
        .iter()
        .chain(&batch)
        .map(|e| e.text().to_string())
        .collect();
    assert!(
        texts.len() == 10 || texts.len() == 13,
        "{name}: {} events",
        texts.len()
    );
    assert_eq!(texts, expected[..texts.len()], "{name}");
}

#[test]
fn dur_10_a_failed_write_leaves_the_append_fate_unknown() {
    // A torn write: 40 bytes of the batch reach the file.
    assert_fate_unknown("fate-write-sync", Durability::Sync, |f| f.fail_write(1, 40));
    assert_fate_unknown("fate-write-manual", Durability::Manual, |f| {
        f.fail_write(1, 40);
    });
}

#[test]
fn dur_10_a_failed_sync_leaves_the_append_fate_unknown() {
    // The records reached the OS; the sync that would make them durable fails.
    assert_fate_unknown("fate-sync-sync", Durability::Sync, |f| f.fail_sync(1));
    assert_fate_unknown("fate-sync-manual", Durability::Manual, |f| f.fail_sync(1));
}

#[test]
fn dur_10_refusals_write_nothing_and_keep_the_session() {
    let (dir, mut log, _faults) = faulty_log("refusal-log", Durability::Sync, 16 << 10);
    log.append_one(padded_event(0, 10)).unwrap();
    let error = log.append_one(padded_event(5, 10)).unwrap_err();
    assert_eq!(error.code(), "SEQ_NOT_CONTIGUOUS");
    assert_eq!(error.outcome(), Outcome::NothingWritten);
    assert!(!error.is_fate_unknown());
    assert!(std::error::Error::source(&error).is_none());
    log.append_one(padded_event(1, 10)).unwrap();
    log.close().unwrap();
    assert_eq!(stored_texts(&dir).len(), 2);

    let (_dir, store) = store("refusal-session");
    let mut session = store.create("s", None, None).unwrap();
    user_message(&mut session, "one");
    let error = session
        .append_dynamic("user/message", &common::user("two"), None)
        .unwrap_err();
    assert_eq!(error.code(), "SURFACE_OP_REQUIRED", "{error}");
    assert_eq!(error.outcome(), Outcome::NothingWritten);
    user_message(&mut session, "three");
    assert_eq!(session.messages().unwrap().len(), 2);
    session.close().unwrap();
}

#[test]
fn dur_10_a_stored_session_reports_a_failed_append_as_fate_unknown() {
    let dir = scratch("errors", "fate-session");
    let storage = FaultyStorage::default();
    let faults = Arc::clone(&storage.faults);
    let options = store_options(Durability::Sync, 64 << 10).storage(Arc::new(storage));
    let store = Store::open_or_create(&dir, options).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    user_message(&mut session, "one");
    faults.fail_sync(1);
    let error = session
        .append::<surfacelog::internals::session::kinds::UserMessage>(
            &common::user("two"),
            surfacelog::internals::session::SurfaceIntent::append(),
        )
        .unwrap_err();
    assert_eq!(error.code(), "IO", "{error}");
    assert_eq!(error.outcome(), Outcome::FateUnknown, "{error}");
    assert_eq!(os_source(&error).raw_os_error(), Some(EIO));
    let later = session
        .append::<surfacelog::internals::session::kinds::UserMessage>(
            &common::user("three"),
            surfacelog::internals::session::SurfaceIntent::append(),
        )
        .unwrap_err();
    assert_eq!(later.outcome(), Outcome::Poisoned, "{later}");
    drop(session);
    let store = Store::open_or_create(&dir, store_options(Durability::Sync, 64 << 10)).unwrap();
    let (session, _) = store.open_session("s").unwrap();
    let messages = session.messages().unwrap();
    assert!(
        messages.len() == 1 || messages.len() == 2,
        "{} messages",
        messages.len()
    );
}

/// A compaction of `turn`, from its user message to its tool result, into `message`: a
/// batch with a replace.
fn compaction_of<'a>(turn: &common::Turn, message: &'a str) -> Compaction<'a> {
    Compaction {
        compaction_id: "k",
        turn: None,
        start: turn.user,
        end: turn.result,
        summary: "[]",
        summary_extra: None,
        message,
    }
}

/// The texts of the session's messages, in order.
fn message_texts<L: surfacelog::internals::session::SessionLog>(
    session: &surfacelog::internals::session::Session<L>,
) -> Vec<String> {
    let messages = session.messages().unwrap();
    messages.iter().map(|m| m.json.to_owned()).collect()
}

#[test]
fn a_batch_that_is_not_written_leaves_the_surface_as_it_was() {
    use surfacelog::internals::session::SurfaceIntent;
    // A batch of appends (its steps taken back by a cut), and a compaction, a batch with a
    // replace (taken back from the copy made before it): the write of each fails.
    for replace in [false, true] {
        let dir = scratch("errors", if replace { "batch-replace" } else { "batch" });
        let storage = FaultyStorage::default();
        let faults = Arc::clone(&storage.faults);
        let options = store_options(Durability::Sync, 64 << 10).storage(Arc::new(storage));
        let store = Store::open_or_create(&dir, options).unwrap();
        let mut session = store.create("s", None, None).unwrap();
        let first = common::numbered_turn(&mut session, 1);
        common::numbered_turn(&mut session, 2);
        let nodes = session.surface().nodes().to_vec();
        let generation = session.surface().replace_generation();
        let seq_next = session.surface().seq_next();
        let messages = message_texts(&session);
        faults.fail_sync(1);
        let error = if replace {
            let message = common::user("summary");
            session
                .compact(&compaction_of(&first, &message))
                .map(|_| ())
        } else {
            session
                .append_all(&[
                    ("turn/start", r#"{"turn":3}"#, None),
                    (
                        "user/message",
                        &common::user("u3"),
                        Some(SurfaceIntent::append()),
                    ),
                ])
                .map(|_| ())
        }
        .unwrap_err();
        assert_eq!(error.code(), "IO", "{error}");
        assert_eq!(session.surface().nodes(), &nodes[..]);
        assert_eq!(session.surface().replace_generation(), generation);
        assert_eq!(session.surface().seq_next(), seq_next);
        assert_eq!(message_texts(&session), messages);
    }
}

#[test]
fn a_batch_that_panics_leaves_the_surface_as_it_was() {
    // A compaction is a batch with a replace; the write of its records panics. The panic
    // reaches the caller, and the session's surface is the one before the batch.
    let dir = scratch("errors", "batch-panic");
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hook = {
        let armed = Arc::clone(&armed);
        move |op: common::Op<'_>| {
            let write = matches!(op, common::Op::Write);
            let armed = write && armed.swap(false, std::sync::atomic::Ordering::SeqCst);
            assert!(!armed, "the storage panics at a write (a bug)");
            Ok(())
        }
    };
    let storage = Arc::new(common::HookedStorage(Box::new(hook)));
    let options = store_options(Durability::Sync, 64 << 10).storage(storage);
    let store = Store::open_or_create(&dir, options).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    let first = common::numbered_turn(&mut session, 1);
    common::numbered_turn(&mut session, 2);
    let before = session.surface().clone();
    armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let message = common::user("summary");
    let compaction = compaction_of(&first, &message);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        session.compact(&compaction)
    }));
    assert!(outcome.is_err(), "the storage's panic reaches the caller");
    assert!(
        !armed.load(std::sync::atomic::Ordering::SeqCst),
        "it panicked"
    );
    assert_eq!(session.surface(), &before);
}

/// Contract §11: a refusal names its session, and a read's its seq: an event or the
/// messages read through `inspect` at a damaged record, a follower's open of a damaged
/// log, and `LOCKED` from a delete, a salvage or an export's check while a writer holds
/// the session.
#[test]
fn reads_and_locked_refusals_name_the_session_and_the_seq() {
    let (dir, store) = store("context");
    let mut session = store.create("s", None, None).unwrap();
    let turn = common::closed_turn(&mut session, 1, "a question to damage", "output");
    session.close().unwrap();
    let segment = dir.join("sessions/s/log/00000000000000000000.seg");
    let bytes = std::fs::read(&segment).unwrap();
    let at = bytes
        .windows(20)
        .position(|w| w == b"a question to damage")
        .unwrap();
    std::fs::write(&segment, flip(&bytes, at, 0x20)).unwrap();
    let _ = std::fs::remove_file(dir.join("sessions/s/messages"));
    let inspected = store.inspect("s").unwrap();
    let error = inspected.event(turn.user).unwrap_err();
    assert_eq!(
        (error.code(), error.session(), error.seq()),
        ("CORRUPT", Some("s"), Some(turn.user)),
        "{error}"
    );
    let error = inspected.messages().unwrap_err();
    assert_eq!(
        (error.code(), error.session(), error.seq()),
        ("CORRUPT", Some("s"), Some(turn.user)),
        "{error}"
    );
    drop(inspected);
    // A missing first segment: the follower's and inspect's open name the session.
    let (dir, store) = store_with("context-open", &["t"]);
    let log = dir.join("sessions/t/log");
    std::fs::rename(log.join("00000000000000000000.seg"), dir.join("aside.seg")).unwrap();
    for error in [
        store.follow("t").map(|_| ()).unwrap_err(),
        store.inspect("t").map(|_| ()).unwrap_err(),
    ] {
        assert_eq!(
            (error.code(), error.session()),
            ("CORRUPT", Some("t")),
            "{error}"
        );
    }
    std::fs::rename(dir.join("aside.seg"), log.join("00000000000000000000.seg")).unwrap();
    let (_writer, _) = store.open_session("t").unwrap();
    for error in [
        store.delete("t").unwrap_err(),
        store.salvage("t").map(|_| ()).unwrap_err(),
        store.check_no_writer("t").unwrap_err(),
    ] {
        assert_eq!(
            (error.code(), error.session()),
            ("LOCKED", Some("t")),
            "{error}"
        );
    }
}

/// DUR-13, CKP-5: a roll whose directory sync failed poisons the writer, the new segment's
/// name in the page cache only. A writer reopened and closed with nothing appended syncs
/// the log directory before its checkpoint records that segment (a power loss would
/// otherwise drop a name the checkpoint requires, RCV-14); a checkpointed open and close
/// of a log whose names are durable syncs none.
#[test]
fn dur_13_a_flush_makes_the_segment_names_durable_before_a_checkpoint_records_them() {
    let dir = scratch("errors", "dir-sync");
    let storage = FaultyStorage::default();
    let faults = Arc::clone(&storage.faults);
    let options = store_options(Durability::Sync, 1024).storage(Arc::new(storage));
    let store = Store::open_or_create(&dir, options).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    let log = dir.join("sessions/s/log");
    let segments = || {
        std::fs::read_dir(&log)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "seg")
            })
            .count()
    };
    // Whole turns until one's roll fails at its directory sync (the first append's sync
    // syncs the directory too, DUR-9: not planned to fail).
    for turn in 1.. {
        let before = segments();
        if turn > 1 {
            faults.fail_sync_dir(1);
        }
        let started = session.append::<surfacelog::kinds::TurnStart>(
            &format!(r#"{{"turn":{turn}}}"#),
            surfacelog::NoSurface,
        );
        faults
            .sync_dir
            .store(0, std::sync::atomic::Ordering::SeqCst);
        if started.is_err() {
            assert_eq!(segments(), before + 1, "the roll created a segment");
            break;
        }
        user_message(
            &mut session,
            &format!("hello {}", "x".repeat(turn * 7 % 50)),
        );
        common::turn_end(&mut session, turn as u64);
        assert!(turn < 200, "no roll");
    }
    drop(session);
    let synced_log = || faults.dirs_synced().iter().filter(|d| **d == log).count();
    let before = synced_log();
    let (session, _) = store.open_session("s").unwrap();
    session.close().unwrap();
    assert_eq!(
        synced_log(),
        before + 1,
        "the close synced the log directory"
    );
    // A turn into the new segment, then opened again from the checkpoint's chain with
    // nothing appended: no sync.
    let (mut session, _) = store.open_session("s").unwrap();
    common::turn_start(&mut session, 1000);
    common::turn_end(&mut session, 1000);
    session.close().unwrap();
    let before = synced_log();
    let (session, opened) = store.open_session("s").unwrap();
    assert!(opened.log.from_known_chain);
    session.close().unwrap();
    assert_eq!(
        synced_log(),
        before,
        "a checkpointed open and close syncs nothing"
    );
}
