//! The store of sessions on disk: create, open (recovery, repair exactly once), resume,
//! list, delete and purge, id escaping, and reopen equivalence with an in-memory session.

use std::path::PathBuf;
use std::sync::Arc;

use surfacelog::internals::log::{Durability, LogOptions};
use surfacelog::internals::session::{NoSurface, Prune, Session, SessionLog, SurfaceIntent, kinds};
use surfacelog::internals::store::{Store, StoreOptions};

mod common;

use common::{
    assistant, compact, files_ending, numbered_turn, prune_to_empty, tool_call, tool_result,
    turn_end, turn_start, user, user_message,
};

/// A store in a scratch directory, removed when the returned path is dropped (even when
/// the test fails).
fn temp_store(name: &str) -> (common::ScratchPath, Store) {
    let dir = common::scratch_path("store", name);
    let store = Store::open_or_create(&dir, store_options()).unwrap();
    (dir, store)
}

/// The options of [`temp_store`]: small segments, checkpoints every 100 events.
fn store_options() -> StoreOptions {
    common::store_options(Durability::Manual, 64 << 10)
}

/// [`store_options`] with 16 KiB segments, so that a few dozen turns span several in either
/// record format (compact records, the default, take about a third of the bytes of
/// version 1 records).
fn smaller_segments() -> StoreOptions {
    store_options().segment_bytes(16 << 10)
}

/// A workload on any session: turns with tool calls, a prune and a nested compaction.
fn workload<L: SessionLog>(session: &mut Session<L>, turns: u64) {
    let mut first_user = None;
    for turn in 1..=turns {
        let stored = numbered_turn(session, turn);
        first_user.get_or_insert(stored.user);
        if turn % 3 == 0 {
            prune_to_empty(session, stored.result);
        }
        if turn % 5 == 0 {
            let start = session.surface().nodes()[0];
            let end = *session.surface().nodes().last().unwrap();
            compact(session, start, end, &format!("summary{turn}"));
        }
    }
    assert!(first_user.is_some());
}

/// The segment files of session `s` in the store at `dir`, in log order.
fn segments_of_s(dir: &std::path::Path) -> Vec<PathBuf> {
    files_ending(&dir.join("sessions/s/log"), ".seg")
}

/// Event texts, surface nodes, messages, transcript and replace generation.
type State = (Vec<String>, Vec<u64>, Vec<(u64, String)>, Vec<u64>, u64);

fn state<L: SessionLog>(session: &Session<L>) -> State {
    let log = session.log();
    let texts = (0..log.seq_next())
        .map(|s| log.event(s).unwrap().unwrap().text().into_owned())
        .collect();
    let messages = session
        .messages()
        .unwrap()
        .iter()
        .map(|m| (m.seq, m.json.to_owned()))
        .collect();
    (
        texts,
        session.surface().nodes().to_vec(),
        messages,
        session.transcript().unwrap(),
        session.surface().replace_generation(),
    )
}

#[test]
fn a_stored_session_reopens_equal_to_the_same_session_in_memory() {
    let (dir, store) = temp_store("equivalence");
    let mut stored = store.create("s1", None, None).unwrap();
    let mut memory = Session::create("s1", None, None, common::session_options()).unwrap();
    workload(&mut stored, 23);
    workload(&mut memory, 23);
    assert_eq!(state(&stored), state(&memory));
    drop(stored);
    let (reopened, opened) = store.open_session("s1").unwrap();
    assert_eq!(opened.closers, 0);
    assert_eq!(opened.log.torn_tail, None);
    assert_eq!(state(&reopened), state(&memory));
    assert_eq!(reopened.first_live_seq(), memory.seq_next());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_interrupted_turn_is_repaired_durably_exactly_once() {
    let (dir, store) = temp_store("repair");
    let mut session = store.create("s", None, None).unwrap();
    session
        .append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)
        .unwrap();
    session
        .append::<kinds::StepStart>(r#"{"turn":1,"step":1}"#, NoSurface)
        .unwrap();
    session
        .append::<kinds::AssistantMessage>(&assistant(1, &tool_call(1)), SurfaceIntent::append())
        .unwrap();
    session.flush().unwrap();
    drop(session); // the process "dies" inside the turn
    let (session, opened) = store.open_session("s").unwrap();
    assert_eq!(opened.closers, 3, "tool/result, step/end, turn/end");
    let types: Vec<&str> = (3..6)
        .map(|s| session.event(s).unwrap().unwrap().event_type)
        .collect();
    assert_eq!(types, ["tool/result", "step/end", "turn/end"]);
    drop(session);
    let (session, opened) = store.open_session("s").unwrap();
    assert_eq!(opened.closers, 0, "the closers were persisted");
    assert_eq!(session.seq_next(), 6);
    drop(session);
    let (session, _) = store.resume("s").unwrap();
    assert_eq!(
        session.event(6).unwrap().unwrap().event_type,
        "session/end-seed"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_torn_tail_is_dropped_and_reported_and_damage_is_refused() {
    let (dir, store) = temp_store("torn");
    let mut session = store.create("s", None, None).unwrap();
    for i in 0..10 {
        session
            .append_dynamic("plugin/x", &format!(r#"{{"i":{i}}}"#), None)
            .unwrap();
    }
    session.flush().unwrap();
    drop(session);
    let segment = dir.join("sessions/s/log/00000000000000000000.seg");
    tear_last_record(&segment);
    // The flush's checkpoint covers the torn record, which a crash during its write never
    // allows (CKP-5: a checkpoint follows the sync of what it covers; RCV-14).
    std::fs::remove_file(dir.join("sessions/s/checkpoint")).unwrap();
    let (session, opened) = store.open_session("s").unwrap();
    assert_eq!(
        opened
            .log
            .torn_tail
            .as_ref()
            .map(surfacelog::internals::log::TornTail::code),
        Some("TORN_TAIL")
    );
    assert_eq!(session.seq_next(), 9);
    drop(session);
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[200] ^= 0x40;
    std::fs::write(&segment, &bytes).unwrap();
    // Close indexed the segment, so the damage lies under the vouched prefix, which open
    // takes without reading it (log-format.md IDX-5), and under the checkpoint: open
    // succeeds, and the damaged record is never returned (RCV-6).
    let (session, _) = store.open_session("s").unwrap();
    assert_eq!(session.seq_next(), 9);
    let log = session.log();
    let damaged = (0..9)
        .filter(|&seq| surfacelog::internals::event::EventSource::event(log, seq).is_err())
        .count();
    assert_eq!(damaged, 1, "the damaged record is not returned");
    drop(session);
    assert_eq!(std::fs::read(&segment).unwrap(), bytes, "nothing changed");
    // A fold over the whole log reads it, and refuses the session.
    std::fs::remove_file(dir.join("sessions/s/checkpoint")).unwrap();
    let err = store.open_session("s").unwrap_err();
    assert_eq!(err.code(), "CORRUPT");
    assert_eq!(err.session(), Some("s"));
    assert_eq!(std::fs::read(&segment).unwrap(), bytes, "nothing changed");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn ids_are_escaped_and_round_trip_and_list_reads_headers_only() {
    let (dir, store) = temp_store("ids");
    let long = "n".repeat(400);
    let ids = ["a/b", "..", ".", "é🙂 x", long.as_str(), "a%2Fb"];
    for id in ids {
        let session = store.create(id, None, Some(&[])).unwrap();
        assert_eq!(session.id(), id);
    }
    for name in std::fs::read_dir(dir.join("sessions")).unwrap() {
        let name = name.unwrap().file_name().into_string().unwrap();
        assert!(
            !name.contains('/') && name != "." && name != ".." && name.len() <= 200,
            "{name}"
        );
    }
    // list never opens a log: it works with every log directory gone.
    for entry in std::fs::read_dir(dir.join("sessions")).unwrap() {
        std::fs::remove_dir_all(entry.unwrap().path().join("log")).unwrap();
    }
    let mut listed: Vec<String> = store
        .list()
        .unwrap()
        .iter()
        .map(|h| h.id().to_owned())
        .collect();
    let mut expected: Vec<String> = ids.iter().map(|s| (*s).to_owned()).collect();
    listed.sort();
    expected.sort();
    assert_eq!(listed, expected);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn create_open_delete_refusals() {
    let (dir, store) = temp_store("refusals");
    let session = store.create("s", None, None).unwrap();
    assert_eq!(
        store.create("s", None, None).unwrap_err().code(),
        "SESSION_EXISTS"
    );
    assert_eq!(store.open_session("s").unwrap_err().code(), "LOCKED");
    assert_eq!(store.delete("s").unwrap_err().code(), "LOCKED");
    assert_eq!(
        store.open_session("nope").unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
    drop(session);
    // A refused create leaves nothing behind.
    let bad_seed = [r#"{"type":"turn/start","seq":1,"time":0,"data":{}}"#];
    assert_eq!(
        store.create("t", None, Some(&bad_seed)).unwrap_err().code(),
        "SEQ_NOT_CONTIGUOUS"
    );
    assert_eq!(std::fs::read_dir(dir.join("tmp")).unwrap().count(), 0);
    assert_eq!(
        store.open_session("t").unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
    store.delete("s").unwrap();
    assert_eq!(
        store.open_session("s").unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
    assert_eq!(std::fs::read_dir(dir.join("trash")).unwrap().count(), 1);
    store.purge().unwrap();
    assert_eq!(std::fs::read_dir(dir.join("trash")).unwrap().count(), 0);
    // A store of another version is refused.
    std::fs::write(
        dir.join("STORE"),
        r#"{"format":"surfacelog-store","version":2}"#,
    )
    .unwrap();
    assert_eq!(
        Store::open_or_create(&dir, StoreOptions::default())
            .unwrap_err()
            .code(),
        "FORMAT_VERSION"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn store_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, store) = temp_store("modes");
    drop(store.create("s", None, None).unwrap());
    let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(dir.join("sessions/s")), 0o700);
    assert_eq!(mode(dir.join("sessions/s/header.json")), 0o600);
    assert_eq!(
        mode(dir.join("sessions/s/log/00000000000000000000.seg")),
        0o600
    );
    // STORE-1: a symbolic link inside the store is refused, not followed.
    let elsewhere = dir.join("elsewhere");
    std::fs::rename(dir.join("sessions/s/log"), &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.join("sessions/s/log")).unwrap();
    assert_eq!(store.open_session("s").unwrap_err().code(), "UNSAFE_PATH");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The `.seg` files of a log directory, sorted.
fn segment_files(log: &std::path::Path) -> Vec<PathBuf> {
    let mut segments: Vec<_> = std::fs::read_dir(log)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segments.sort();
    segments
}

#[test]
fn store_10_fork_links_every_segment_and_limits_the_boundary_one() {
    use std::os::unix::fs::MetadataExt;
    use surfacelog::internals::session::Boundary;
    let dir = common::scratch_path("store", "fork");
    let store = Store::open_or_create(&dir, smaller_segments()).unwrap();
    let mut source = store
        .create(
            "src",
            Some(r#"{"version":0,"id":"src","createdAt":5,"cwd":"/w"}"#),
            None,
        )
        .unwrap();
    workload(&mut source, 60);
    source
        .append::<kinds::TurnStart>(r#"{"turn":61}"#, NoSurface)
        .unwrap();
    source.flush().unwrap();
    let boundary = source.seq_next() - 2;
    let source_texts = state(&source).0;
    assert_eq!(
        store.fork("src", Boundary::Last, "src").unwrap_err().code(),
        "SESSION_EXISTS"
    );
    assert_eq!(
        store.fork("nope", Boundary::Last, "c").unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
    assert_eq!(
        store
            .fork("src", Boundary::Seq(source.seq_next()), "c")
            .unwrap_err()
            .code(),
        "INVALID_BOUNDARY"
    );
    assert_eq!(
        store.fork("src", Boundary::Last, "c").unwrap_err().code(),
        "OPEN_TURN"
    );
    let child = store.fork("src", Boundary::Seq(boundary), "c").unwrap();
    assert_eq!(
        child.header().text(),
        format!(
            r#"{{"version":0,"id":"c","createdAt":1000,"cwd":"/w","parentSession":"src","seedLength":{}}}"#,
            boundary + 1
        )
    );
    assert_eq!(child.first_live_seq(), boundary + 1);
    let child_texts = state(&child).0;
    let prefix = usize::try_from(boundary).unwrap() + 1;
    assert_eq!(
        child_texts.len(),
        prefix + 1,
        "the prefix plus the end-seed"
    );
    assert_eq!(child_texts[..prefix], source_texts[..prefix]);
    assert!(child_texts[prefix].contains("session/end-seed"));
    let child_log = dir.join("sessions/c/log");
    let mut segments = segment_files(&child_log);
    assert!(segments.len() >= 3, "{segments:?}");
    let own = segments.pop().unwrap();
    assert_eq!(
        std::fs::metadata(&own).unwrap().nlink(),
        1,
        "the end-seed starts a segment of the child's own (LIM-4)"
    );
    for shared in &segments {
        assert_eq!(
            std::fs::metadata(shared).unwrap().nlink(),
            2,
            "{} is shared",
            shared.display()
        );
    }
    let limited = segments.last().unwrap().with_extension("lim");
    assert!(limited.exists(), "the boundary segment is limited (LIM-1)");
    drop(child);
    assert_eq!(state(&source).0, source_texts, "the source is unchanged");
    neither_log_sees_or_writes_the_other(&dir, &store, source, &child_texts, &segments);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// LIM-4 after a fork: the source's appends to the segment it shares stay out of the child,
/// and the child's appends never touch a shared file.
fn neither_log_sees_or_writes_the_other(
    dir: &std::path::Path,
    store: &Store,
    mut source: surfacelog::internals::store::StoredSession,
    child_texts: &[String],
    segments: &[PathBuf],
) {
    use std::os::unix::fs::MetadataExt;
    let child_log = dir.join("sessions/c/log");
    // The source appends to the segment it shares: the child sees none of it (LIM-4).
    workload(&mut source, 3);
    source.flush().unwrap();
    let source_texts = state(&source).0;
    drop(source);
    let (reopened, _) = store.open_session("c").unwrap();
    assert_eq!(state(&reopened).0, child_texts);
    drop(reopened);
    assert_eq!(
        surfacelog::internals::event::EventSource::seq_next(
            &surfacelog::internals::log::LogReader::open(&child_log).unwrap()
        ),
        child_texts.len() as u64,
        "a follower of the child stops at the limit too"
    );

    // The child appends past a roll: the source's files are untouched.
    let source_log = dir.join("sessions/src/log");
    let source_bytes: Vec<Vec<u8>> = segment_files(&source_log)
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let (mut child, _) = store.open_session("c").unwrap();
    workload(&mut child, 30);
    child.close().unwrap();
    let after: Vec<Vec<u8>> = segment_files(&source_log)
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    assert!(
        after == source_bytes,
        "the child never writes a shared file"
    );
    for shared in segments {
        assert_eq!(std::fs::metadata(shared).unwrap().nlink(), 2);
    }
    let (source, _) = store.open_session("src").unwrap();
    assert_eq!(state(&source).0, source_texts);
    let (child, _) = store.open_session("c").unwrap();
    assert_eq!(state(&child).0[..child_texts.len()], child_texts[..]);
    drop((source, child));
}

#[test]
fn lim_3_a_damaged_limit_is_refused_never_ignored() {
    use surfacelog::internals::session::Boundary;
    let (dir, store) = temp_store("fork-limit");
    let mut source = store.create("src", None, None).unwrap();
    workload(&mut source, 40);
    source.flush().unwrap();
    let boundary = source.seq_next() / 2;
    workload(&mut source, 5);
    drop(source);
    let boundary = (0..boundary)
        .rev()
        .find(|&seq| store.fork("src", Boundary::Seq(seq), "c").is_ok())
        .expect("a boundary outside a turn");
    let limit = std::fs::read_dir(dir.join("sessions/c/log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "lim"))
        .expect("the boundary segment is limited");
    let pristine = std::fs::read(&limit).unwrap();
    for at in [0, 20, 40, 48, 52, 61] {
        let mut bytes = pristine.clone();
        bytes[at] ^= 0x04;
        std::fs::write(&limit, &bytes).unwrap();
        let err = store.open_session("c").unwrap_err();
        assert_eq!(err.code(), "CORRUPT", "byte {at}: {err}");
        assert_eq!(
            surfacelog::internals::log::LogReader::open(&dir.join("sessions/c/log"))
                .unwrap_err()
                .code(),
            "CORRUPT"
        );
    }
    // A limit whose checksum is right but whose end is not its last record's end.
    let mut bytes = pristine.clone();
    let end = u32::from_le_bytes(bytes[52..56].try_into().unwrap()) + 8;
    bytes[52..56].copy_from_slice(&end.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..60]);
    bytes[60..64].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&limit, &bytes).unwrap();
    assert_eq!(store.open_session("c").unwrap_err().code(), "CORRUPT");
    std::fs::write(&limit, &pristine).unwrap();
    let (child, _) = store.open_session("c").unwrap();
    assert_eq!(child.seq_next(), boundary + 2);
    drop(child);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn store_13_a_fork_cut_short_leaves_no_half_made_child() {
    use surfacelog::internals::session::Boundary;
    use surfacelog::internals::storage::faulty::FaultyStorage;
    let (dir, plain) = temp_store("fork-crash");
    let mut source = plain.create("src", None, None).unwrap();
    workload(&mut source, 30);
    source.close().unwrap();
    let expected = {
        let (source, _) = plain.open_session("src").unwrap();
        state(&source).0
    };
    let storage = FaultyStorage::default();
    let faults = Arc::clone(&storage.faults);
    let options = StoreOptions::new().log_options(LogOptions {
        storage: Arc::new(storage),
        ..plain_options()
    });
    let store = Store::open_or_create(&dir, options).unwrap();
    // The child is published with its end-seed marker already durable: three files are
    // synced (header, limit, the child's own segment holding the marker), none after the
    // publish, so no crash leaves a published child without its marker.
    let before = faults.syncs();
    let child = store.fork("src", Boundary::Last, "d").unwrap();
    assert_eq!(faults.syncs() - before, 3, "syncs of one fork");
    assert_eq!(child.seq_next(), expected.len() as u64 + 1);
    assert_eq!(child.first_live_seq(), expected.len() as u64);
    drop(child);
    let (child, _) = plain.open_session("d").unwrap();
    let last = surfacelog::internals::event::EventSource::event(child.log(), child.seq_next() - 1)
        .unwrap();
    assert_eq!(
        last.unwrap().event_type,
        "session/end-seed",
        "the marker is stored"
    );
    drop(child);
    plain.delete("d").unwrap();
    plain.purge().unwrap();
    let mut failed = 0;
    for n in 1.. {
        faults.fail_sync(n);
        match store.fork("src", Boundary::Last, "c") {
            Ok(child) => {
                assert_eq!(state(&child).0[..expected.len()], expected[..]);
                break;
            }
            Err(error) => {
                failed += 1;
                assert_eq!(error.code(), "IO", "sync {n}: {error}");
                // Either no child, or a whole one (the publish renamed it before its
                // last sync failed): never a part of one.
                if dir.join("sessions/c").exists() {
                    let (child, _) = plain.open_session("c").unwrap();
                    assert_eq!(state(&child).0[..expected.len()], expected[..]);
                    drop(child);
                    plain.delete("c").unwrap();
                    plain.purge().unwrap();
                }
            }
        }
        faults.fail_sync(u64::MAX / 2);
        assert!(n < 50, "the fork never succeeded");
    }
    // Header, limit, the child's own segment holding the end-seed: the boundary segment
    // is durable (its source was closed), and nothing is synced after the publish.
    assert!(failed >= 3, "every sync of the fork was tried: {failed}");
    let (source, _) = plain.open_session("src").unwrap();
    assert_eq!(state(&source).0, expected, "the source is unchanged");
    drop(source);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn plain_options() -> LogOptions {
    LogOptions {
        durability: Durability::Manual,
        segment_bytes: 64 << 10,
        ..LogOptions::default()
    }
}

#[test]
fn followers_see_appends_and_inspect_never_repairs() {
    let (dir, store) = temp_store("follow");
    let mut session = store.create("s", None, None).unwrap();
    let mut follower = store.follow("s").unwrap();
    assert!(
        !follower
            .wait_for(0, std::time::Duration::from_millis(20))
            .unwrap()
    );
    let writer = std::thread::spawn(move || {
        for i in 0..50 {
            session
                .append_dynamic("plugin/x", &format!(r#"{{"i":{i}}}"#), None)
                .unwrap();
        }
        session
            .append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)
            .unwrap();
        session.flush().unwrap();
        session
    });
    assert!(
        follower
            .wait_for(50, std::time::Duration::from_secs(10))
            .unwrap()
    );
    assert_eq!(
        surfacelog::internals::event::EventSource::event(follower.log(), 50)
            .unwrap()
            .unwrap()
            .event_type,
        "turn/start"
    );
    let session = writer.join().unwrap();
    // Issue 11: a read-only path never repairs, not even in memory: the events as stored.
    let inspected = store.inspect("s").unwrap();
    assert_eq!(inspected.seq_next(), 51, "no closer is invented");
    assert_eq!(
        inspected.event(50).unwrap().unwrap().event_type,
        "turn/start"
    );
    assert!(inspected.event(51).unwrap().is_none());
    drop(inspected);
    drop(session);
    let (reopened, opened) = store.open_session("s").unwrap();
    assert_eq!(opened.closers, 1, "inspect wrote nothing; open repairs");
    assert_eq!(reopened.seq_next(), 52);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn ckp_3_opening_uses_a_matching_checkpoint_and_rebuilds_any_other() {
    use surfacelog::internals::store::checkpoint::Unusable;
    let (dir, store) = temp_store("checkpoint");
    let mut session = store.create("s", None, None).unwrap();
    workload(&mut session, 40);
    session.flush().unwrap();
    let flushed_at = session.seq_next();
    // More events after the last checkpoint, then a crash inside a tool call.
    workload(&mut session, 3);
    session
        .append::<kinds::TurnStart>(r#"{"turn":44}"#, NoSurface)
        .unwrap();
    session
        .append::<kinds::StepStart>(r#"{"turn":44,"step":1}"#, NoSurface)
        .unwrap();
    session
        .append::<kinds::AssistantMessage>(&assistant(44, &tool_call(44)), SurfaceIntent::append())
        .unwrap();
    drop(session);
    let checkpoint = dir.join("sessions/s/checkpoint");
    let saved = std::fs::read(&checkpoint).unwrap();
    let (from_checkpoint, opened) = store.open_session("s").unwrap();
    assert!(
        matches!(opened.checkpoint, Ok(seq) if seq >= flushed_at),
        "{:?}",
        opened.checkpoint
    );
    assert_eq!(opened.closers, 3);
    let expected = state(&from_checkpoint);
    drop(from_checkpoint);
    // The same log without, with a damaged, and with a foreign checkpoint.
    let cases: [(&str, Option<Vec<u8>>, Unusable); 2] = [
        ("missing", None, Unusable::Missing),
        (
            "damaged",
            Some({
                let mut b = saved.clone();
                b[20] ^= 1;
                b
            }),
            Unusable::Corrupt,
        ),
    ];
    for (what, bytes, why) in cases {
        match bytes {
            Some(bytes) => std::fs::write(&checkpoint, bytes).unwrap(),
            None => std::fs::remove_file(&checkpoint).unwrap(),
        }
        let (session, opened) = store.open_session("s").unwrap();
        assert_eq!(opened.checkpoint, Err(why), "{what}");
        assert_eq!(opened.closers, 0, "{what}: repaired once already");
        assert_eq!(state(&session), expected, "{what}");
    }
    // Another log's checkpoint no longer than this log: stale (CKP-3). One longer than the
    // log would be missing events (RCV-14), `CORRUPT`.
    let mut other = store.create("t", None, None).unwrap();
    other.append_dynamic("plugin/x", "{}", None).unwrap();
    workload(&mut other, 5);
    other.flush().unwrap();
    drop(other);
    std::fs::copy(dir.join("sessions/t/checkpoint"), &checkpoint).unwrap();
    let (session, opened) = store.open_session("s").unwrap();
    assert_eq!(
        opened.checkpoint,
        Err(Unusable::Stale),
        "another log's checkpoint"
    );
    assert_eq!(state(&session), expected);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(feature = "cli")]
#[test]
fn a_follower_in_another_process_sees_appends() {
    let (dir, store) = temp_store("follow-process");
    let mut session = store.create("s", None, None).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_surfacelog"))
        .args([
            "wait",
            "s",
            "20",
            "--store",
            dir.to_str().unwrap(),
            "--timeout-ms",
            "20000",
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    for i in 0..21 {
        session
            .append_dynamic("plugin/x", &format!(r#"{{"i":{i}}}"#), None)
            .unwrap();
    }
    // Manual durability buffers small appends; followers see them once written.
    session.flush().unwrap();
    let status = child.wait_with_output().unwrap().status;
    assert!(status.success(), "{status:?}");
    let timeout = std::process::Command::new(env!("CARGO_BIN_EXE_surfacelog"))
        .args([
            "wait",
            "s",
            "99",
            "--store",
            dir.to_str().unwrap(),
            "--timeout-ms",
            "50",
        ])
        .output()
        .unwrap();
    assert_eq!(timeout.status.code(), Some(4));
    drop(session);
    std::fs::remove_dir_all(&dir).unwrap();
}

mod reopen_equivalence {
    //! Random workloads, closed and reopened at random points (with and without the
    //! checkpoint), always equal the same workload on an in-memory session.
    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Turn(bool),
        Prune,
        Compact,
        Reopen { keep_checkpoint: bool },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => any::<bool>().prop_map(Op::Turn),
            1 => Just(Op::Prune),
            1 => Just(Op::Compact),
            1 => any::<bool>().prop_map(|keep_checkpoint| Op::Reopen { keep_checkpoint }),
        ]
    }

    fn apply<L: SessionLog>(session: &mut Session<L>, op: &Op, turn: u64) {
        match op {
            Op::Turn(with_tool) => {
                session
                    .append::<kinds::TurnStart>(&format!(r#"{{"turn":{turn}}}"#), NoSurface)
                    .unwrap();
                session
                    .append::<kinds::UserMessage>(
                        &user(&format!("u{turn}")),
                        SurfaceIntent::append(),
                    )
                    .unwrap();
                if *with_tool {
                    session
                        .append::<kinds::AssistantMessage>(
                            &assistant(turn, &tool_call(turn)),
                            SurfaceIntent::append(),
                        )
                        .unwrap();
                    session
                        .append::<kinds::ToolResult>(
                            &tool_result(turn, &format!("c{turn}"), &format!("output of c{turn}")),
                            SurfaceIntent::append(),
                        )
                        .unwrap();
                }
                session
                    .append::<kinds::TurnEnd>(&format!(r#"{{"turn":{turn}}}"#), NoSurface)
                    .unwrap();
            }
            Op::Prune => {
                let target = session
                    .surface()
                    .nodes()
                    .iter()
                    .copied()
                    .find(|s| session.event(*s).unwrap().unwrap().event_type == "tool/result");
                if let Some(seq) = target {
                    session
                        .prune(&Prune {
                            seq,
                            content: "[]",
                            shadowed_token_count: 0,
                        })
                        .unwrap();
                }
            }
            Op::Compact => {
                let nodes = session.surface().nodes().to_vec();
                if let (Some(&start), Some(&end)) = (nodes.first(), nodes.last()) {
                    compact(session, start, end, "summary");
                }
            }
            Op::Reopen { .. } => {}
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn reopened_sessions_equal_in_memory_ones(ops in prop::collection::vec(op(), 1..30)) {
            let (dir, store) = temp_store("reopen-prop");
            let options = common::session_options();
            let mut memory = Session::create("s", None, None, options).unwrap();
            let mut stored = store.create("s", None, None).unwrap();
            for (turn, op) in (1..).zip(&ops) {
                apply(&mut memory, op, turn);
                apply(&mut stored, op, turn);
                if let Op::Reopen { keep_checkpoint } = op {
                    drop(stored);
                    if !keep_checkpoint {
                        let _ = std::fs::remove_file(dir.join("sessions/s/checkpoint"));
                    }
                    let (reopened, opened) = store.open_session("s").unwrap();
                    prop_assert_eq!(opened.closers, 0);
                    stored = reopened;
                }
                prop_assert_eq!(state(&stored), state(&memory));
            }
            drop(stored);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

#[test]
fn a_record_damaged_under_a_checkpoint_is_reported_not_skipped() {
    let (dir, store) = temp_store("damage-under-checkpoint");
    let mut session = store.create("s", None, None).unwrap();
    workload(&mut session, 200);
    session.close().unwrap();
    // Damage a record in a sealed segment, which open takes from its index (IDX-2).
    let segments = segments_of_s(&dir);
    assert!(segments.len() >= 2, "{segments:?}");
    let mut bytes = std::fs::read(&segments[0]).unwrap();
    bytes[300] ^= 0x01;
    std::fs::write(&segments[0], &bytes).unwrap();
    std::fs::remove_file(dir.join("sessions/s/checkpoint")).unwrap();
    let err = store.open_session("s").unwrap_err();
    assert_eq!(err.code(), "CORRUPT", "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// log-format.md §7: a sealed segment is opened and checked on the first access into it,
/// not at open. One whose header does not check out is `CORRUPT`, with its path, when it
/// is read: by a fold (an open without the checkpoint), by a read of one of its events,
/// and by a fork, which checks every segment it links.
#[test]
fn a_sealed_segment_with_a_bad_header_is_corrupt_on_first_access() {
    use surfacelog::internals::event::EventSource;
    use surfacelog::internals::session::Boundary;
    let (dir, store) = temp_store("bad-sealed-header");
    let mut session = store.create("s", None, None).unwrap();
    workload(&mut session, 200);
    session.close().unwrap();
    let segments = segments_of_s(&dir);
    assert!(segments.len() >= 3, "{segments:?}");
    let bad = &segments[1];
    let first: u64 = bad.file_stem().unwrap().to_str().unwrap().parse().unwrap();
    let mut bytes = std::fs::read(bad).unwrap();
    bytes[0] ^= 0x01;
    std::fs::write(bad, &bytes).unwrap();
    let names_bad = |error: &surfacelog::Error| {
        assert_eq!(error.code(), "CORRUPT", "{error}");
        assert!(error.to_string().contains(bad.to_str().unwrap()), "{error}");
    };
    // With the checkpoint, open reads nothing of it.
    let (session, _) = store.open_session("s").unwrap();
    names_bad(&session.log().event(first).unwrap_err());
    assert!(session.log().event(first - 1).unwrap().is_some());
    drop(session);
    names_bad(&store.fork("s", Boundary::Last, "c").unwrap_err());
    assert!(!dir.join("sessions/c").exists(), "nothing is published");
    // A fold reads it.
    std::fs::remove_file(dir.join("sessions/s/checkpoint")).unwrap();
    let error = store.open_session("s").unwrap_err();
    names_bad(&error);
    assert_eq!((error.session(), error.seq()), (Some("s"), Some(first)));
    assert_eq!(std::fs::read(bad).unwrap(), bytes, "nothing changed");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// STORE-10: the end-seed marker a fork writes into its child's own segment is written once
/// (contract §5: none when the prefix already ends with one), for an empty prefix too
/// (segment 0 of the child), and the child appends after it and reopens the same.
#[test]
fn store_10_a_fork_end_seeds_its_child_once_even_from_an_empty_prefix() {
    use surfacelog::internals::session::Boundary;
    let (dir, store) = temp_store("fork-seed");
    drop(store.create("empty", None, None).unwrap());
    let mut child = store.fork("empty", Boundary::Last, "c0").unwrap();
    assert_eq!((child.seq_next(), child.first_live_seq()), (1, 0));
    let marker = |session: &surfacelog::internals::store::StoredSession, seq| {
        surfacelog::internals::event::EventSource::event(session.log(), seq)
            .unwrap()
            .unwrap()
            .event_type
            .to_owned()
    };
    assert_eq!(marker(&child, 0), "session/end-seed");
    child
        .append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)
        .unwrap();
    child.close().unwrap();
    let (child, opened) = store.open_session("c0").unwrap();
    assert_eq!(
        (child.seq_next(), opened.closers),
        (3, 1),
        "closer of turn 1"
    );
    drop(child);
    // A fork of a fork at its marker: the prefix ends with one, so no second marker.
    drop(store.fork("c0", Boundary::Seq(0), "c1").unwrap());
    let (grandchild, _) = store.open_session("c1").unwrap();
    assert_eq!(grandchild.seq_next(), 1);
    assert_eq!(marker(&grandchild, 0), "session/end-seed");
    drop(grandchild);
    let (resumed, _) = store.resume("c1").unwrap();
    assert_eq!(resumed.seq_next(), 1, "resume adds no second marker");
    drop(resumed);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// CKP-7: an open with a checkpoint reads the surface's nodes in place from the mapped
/// checkpoint (no copy: the surface holds no heap for them) and copies them at its first
/// change; the nodes stay right when the file is replaced or removed meanwhile.
#[test]
fn ckp_7_an_opened_surface_borrows_its_nodes_until_it_changes() {
    let (dir, store) = temp_store("ckp-borrow");
    let mut session = store.create("s", None, None).unwrap();
    workload(&mut session, 4);
    for turn in 5..=100 {
        turn_start(&mut session, turn);
        user_message(&mut session, &format!("u{turn}"));
        turn_end(&mut session, turn);
    }
    session.close().unwrap();
    let expected = {
        let (session, _) = store.open_session("s").unwrap();
        state(&session)
    };
    let (mut session, opened) = store.open_session("s").unwrap();
    assert!(opened.checkpoint.is_ok(), "{:?}", opened.checkpoint);
    let nodes_bytes = session.surface().nodes().len() * 8;
    assert!(nodes_bytes > 0);
    assert!(
        session.surface().heap_bytes() < nodes_bytes,
        "borrowed: {} heap bytes for {nodes_bytes} bytes of nodes",
        session.surface().heap_bytes()
    );
    // Replaced by a flush (rename), then removed: the map keeps the old bytes.
    session.flush().unwrap();
    std::fs::remove_file(dir.join("sessions/s/checkpoint")).unwrap();
    assert_eq!(state(&session), expected);
    turn_start(&mut session, 101);
    user_message(&mut session, "u-late");
    assert!(session.surface().heap_bytes() >= nodes_bytes + 8, "copied");
    assert_eq!(
        session.surface().nodes()[..expected.1.len()],
        expected.1[..]
    );
    assert_eq!(session.surface().nodes().len(), expected.1.len() + 1);
    drop(session);
    let (reopened, _) = store.open_session("s").unwrap();
    assert_eq!(reopened.surface().nodes().len(), expected.1.len() + 1);
    drop(reopened);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The checkpoint's bytes with the node words changed by `change`, and both CRCs
/// recomputed as `checkpoint.md` CKP-1 lays them out (the nodes' own CRC, then the CRC of
/// every other byte before it): a checkpoint whose CRCs hold but whose nodes may not.
fn with_nodes(bytes: &[u8], change: impl FnOnce(&mut Vec<u64>)) -> Vec<u8> {
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let count = usize::try_from(word(32)).unwrap();
    let nodes_end = 48 + 8 * count;
    let mut nodes: Vec<u64> = (0..count).map(|i| word(48 + 8 * i)).collect();
    change(&mut nodes);
    let mut out = bytes[..48].to_vec();
    out.extend(nodes.iter().flat_map(|n| n.to_le_bytes()));
    out.extend_from_slice(&bytes[nodes_end..bytes.len() - 8]);
    let nodes_crc = crc32c::crc32c(&out[48..nodes_end]);
    let mut covered = out[..48].to_vec();
    covered.extend_from_slice(&out[nodes_end..]);
    covered.extend_from_slice(&nodes_crc.to_le_bytes());
    out.extend_from_slice(&nodes_crc.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&covered).to_le_bytes());
    out
}

/// CKP-2, CKP-7: open reads none of the nodes; their first read checks them (their CRC,
/// then the surface invariants) and, when they fail, takes them from a fold of the log, so
/// damaged nodes are never seen; when the log cannot be folded either, the surface reads
/// as empty and says so, without a panic.
#[test]
fn ckp_2_nodes_are_checked_on_first_read_and_refolded_when_they_fail() {
    use surfacelog::internals::surface::NodeState;
    let (dir, store) = temp_store("ckp-deferred");
    let mut session = store.create("s", None, None).unwrap();
    workload(&mut session, 12);
    session.close().unwrap();
    let checkpoint = dir.join("sessions/s/checkpoint");
    let saved = std::fs::read(&checkpoint).unwrap();
    let expected = {
        let (session, opened) = store.open_session("s").unwrap();
        assert!(opened.checkpoint.is_ok(), "{:?}", opened.checkpoint);
        assert_eq!(session.surface().node_state(), NodeState::Unchecked);
        let keys_bytes = session.surface().replacement_keys().len() * 16;
        assert_eq!(session.surface().heap_bytes(), keys_bytes, "no node copied");
        let expected = state(&session);
        assert_eq!(session.surface().node_state(), NodeState::Checked);
        expected
    };
    assert!(expected.1.len() >= 4, "{:?}", expected.1);
    assert!(
        expected.4 >= 2,
        "replacements on the surface: {:?}",
        expected.4
    );
    assert_eq!(
        std::fs::read(&checkpoint).unwrap(),
        saved,
        "a plain open writes none"
    );
    let nodes_at = 48;
    let cases: [(&str, Vec<u8>); 4] = [
        ("a node bit flipped", {
            let mut b = saved.clone();
            b[nodes_at + 8] ^= 0x04;
            b
        }),
        (
            "two nodes swapped, CRCs recomputed",
            with_nodes(&saved, |n| n.swap(0, 1)),
        ),
        (
            "a node past seq_next, CRCs recomputed",
            with_nodes(&saved, |n| {
                *n.last_mut().unwrap() = 1 << 40;
            }),
        ),
        (
            "a replacement seq missing, CRCs recomputed",
            with_nodes(&saved, |n| {
                // Keys still increase, but the last node (a replacement, or not) is renamed
                // to a seq that is no replacement and no node.
                let last = n.len() - 1;
                n[last] += 1;
            }),
        ),
    ];
    for (what, bytes) in cases {
        assert_ne!(bytes, saved, "{what}");
        std::fs::write(&checkpoint, &bytes).unwrap();
        let (session, opened) = store.open_session("s").unwrap();
        assert!(
            opened.checkpoint.is_ok(),
            "{what}: the header and keys are sound"
        );
        assert_eq!(
            session.surface().node_state(),
            NodeState::Unchecked,
            "{what}"
        );
        assert_eq!(state(&session), expected, "{what}");
        assert_eq!(
            session.surface().node_state(),
            NodeState::Refolded,
            "{what}"
        );
        // The next checkpoint written is sound again.
        session.close().unwrap();
        let (session, _) = store.open_session("s").unwrap();
        assert_eq!(state(&session), expected, "{what}: rewritten");
        assert_eq!(session.surface().node_state(), NodeState::Checked, "{what}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// CKP-2: damaged nodes over a log that cannot be folded either (a record under the
/// checkpoint is damaged): the surface reads as empty and [`NodeState::Lost`] says so;
/// nothing panics, and reads of the damaged record still report it.
#[test]
fn ckp_2_damaged_nodes_over_a_damaged_log_read_as_lost() {
    use surfacelog::internals::surface::NodeState;
    let (dir, store) = temp_store("ckp-lost");
    let mut session = store.create("s", None, None).unwrap();
    workload(&mut session, 200);
    session.close().unwrap();
    let segments = segments_of_s(&dir);
    assert!(segments.len() >= 2, "{segments:?}");
    let mut bytes = std::fs::read(&segments[0]).unwrap();
    bytes[300] ^= 0x01;
    std::fs::write(&segments[0], &bytes).unwrap();
    let checkpoint = dir.join("sessions/s/checkpoint");
    let mut ckp = std::fs::read(&checkpoint).unwrap();
    ckp[48] ^= 0x01;
    std::fs::write(&checkpoint, &ckp).unwrap();
    let (session, opened) = store.open_session("s").unwrap();
    assert!(opened.checkpoint.is_ok(), "{:?}", opened.checkpoint);
    assert!(session.surface().nodes().is_empty());
    assert_eq!(session.messages().unwrap_err().code(), "CORRUPT");
    assert_eq!(session.surface().node_state(), NodeState::Lost);
    // Nothing lands on it, and it is never checkpointed.
    let mut session = session;
    let err = session
        .append::<kinds::TurnStart>(r#"{"turn":201}"#, NoSurface)
        .and_then(|_| session.append::<kinds::UserMessage>(&user("late"), SurfaceIntent::append()))
        .unwrap_err();
    assert_eq!(err.code(), "CORRUPT", "{err}");
    session.flush().unwrap();
    drop(session);
    assert_eq!(std::fs::read(&checkpoint).unwrap(), ckp, "not rewritten");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// CKP-2: damaged nodes whose fold of the log fails reading it (`EIO` opening a segment)
/// are lost for that session, and its reads say `IO`, the error met, not `CORRUPT`: the
/// log may be sound, and a session opened again (the disk readable) reads it whole.
/// Before, the I/O error was taken for damage under the checkpoint (`CORRUPT`).
#[test]
fn ckp_2_nodes_whose_refold_meets_an_io_error_say_io() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (dir, store) = temp_store("ckp-lost-io");
    let mut session = store.create("s", None, None).unwrap();
    workload(&mut session, 20);
    session.close().unwrap();
    let truth = store.open_session("s").unwrap().0.messages().unwrap().len();
    let checkpoint = dir.join("sessions/s/checkpoint");
    let mut ckp = std::fs::read(&checkpoint).unwrap();
    ckp[48] ^= 0x01;
    std::fs::write(&checkpoint, &ckp).unwrap();
    let failing = Arc::new(AtomicBool::new(false));
    let hook = {
        let failing = Arc::clone(&failing);
        move |op: common::Op<'_>| match op {
            common::Op::Open(path)
                if failing.load(Ordering::SeqCst)
                    && path.extension().is_some_and(|e| e == "seg") =>
            {
                Err(std::io::Error::from_raw_os_error(5))
            }
            _ => Ok(()),
        }
    };
    let options = StoreOptions::default().storage(Arc::new(common::HookedStorage(Box::new(hook))));
    let hooked = Store::open(&*dir, options).unwrap();
    let view = hooked.inspect("s").unwrap();
    failing.store(true, Ordering::SeqCst);
    let error = view.messages().unwrap_err();
    assert_eq!(error.code(), "IO", "{error}");
    assert_eq!(view.messages().unwrap_err().code(), "IO", "{error}");
    failing.store(false, Ordering::SeqCst);
    drop(view);
    let view = hooked.inspect("s").unwrap();
    assert_eq!(view.messages().unwrap().len(), truth, "the log was sound");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Zeroes the last 4 non-zero bytes of a segment file: its last record is torn.
/// Tears the last record of `segment` as a crash during its write would, which leaves it
/// unindexed: an index is written only after the sync that makes its records durable
/// (IDX-5), and one listing the torn record would make it durable damage (RCV-13).
fn tear_last_record(segment: &std::path::Path) {
    let mut bytes = std::fs::read(segment).unwrap();
    let end = bytes.iter().rposition(|b| *b != 0).unwrap();
    bytes[end - 3..=end].fill(0);
    std::fs::write(segment, &bytes).unwrap();
    let _ = std::fs::remove_file(segment.with_extension("idx"));
}

/// Recomputes a checkpoint's file `crc` (CKP-1: every byte before it but the nodes) after
/// a change outside the nodes.
fn redo_checkpoint_crc(bytes: &mut [u8]) {
    let count = usize::try_from(u64::from_le_bytes(bytes[32..40].try_into().unwrap())).unwrap();
    let nodes_end = 48 + 8 * count;
    let len = bytes.len();
    let mut covered = bytes[..48].to_vec();
    covered.extend_from_slice(&bytes[nodes_end..len - 4]);
    let crc = crc32c::crc32c(&covered);
    bytes[len - 4..].copy_from_slice(&crc.to_le_bytes());
}

/// What a store's storage ([`common::HookedStorage`]) counts and does: its directory
/// listings, for tests of what open lists; and, while `cut_removals` is set, each tree
/// removal stopped part-way (a crash or an I/O error between two files): the checkpoint,
/// the pack and the last segment go, then `EIO`.
#[derive(Debug, Default)]
struct CountingStorage {
    lists: std::sync::atomic::AtomicU64,
    cut_removals: std::sync::atomic::AtomicBool,
}

impl CountingStorage {
    fn lists(&self) -> u64 {
        self.lists.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The hook of a storage that counts and cuts as `self` says.
    fn hook(self: &Arc<Self>) -> common::Hook {
        let counting = Arc::clone(self);
        Box::new(move |op| match op {
            common::Op::List(_) => {
                counting
                    .lists
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            }
            common::Op::RemoveAll(path)
                if counting
                    .cut_removals
                    .load(std::sync::atomic::Ordering::SeqCst) =>
            {
                cut_removal(path)
            }
            _ => Ok(()),
        })
    }
}

/// A removal of the trashed session directory `path` stopped part-way: its checkpoint,
/// its pack and its last segment removed, then `EIO`.
fn cut_removal(path: &std::path::Path) -> std::io::Result<()> {
    for name in ["checkpoint", "messages"] {
        let _ = std::fs::remove_file(path.join(name));
    }
    let mut segments: Vec<_> = std::fs::read_dir(path.join("log"))?
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segments.sort();
    if let Some(last) = segments.pop() {
        let _ = std::fs::remove_file(last.with_extension("idx"));
        std::fs::remove_file(&last)?;
    }
    Err(std::io::Error::from_raw_os_error(5))
}

/// STORE-24: a purge cut short part-way through its removal (a crash, an I/O error) never
/// leaves something a restore brings back as the session, shortened: the entry was renamed
/// out of a restore's reach first, and the next purge finishes removing it.
#[test]
fn store_24_a_purge_cut_short_leaves_nothing_a_restore_brings_back() {
    let (dir, store, storage) = counting_store_with("purge-cut", smaller_segments());
    let mut session = store.create("s", None, None).unwrap();
    workload(&mut session, 60);
    session.close().unwrap();
    assert!(segments_of_s(&dir).len() >= 2, "several segments");
    store.delete("s").unwrap();
    storage
        .cut_removals
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let error = store.purge().unwrap_err();
    assert_eq!(error.code(), "IO", "{error}");
    let error = store.restore("s").unwrap_err();
    assert_eq!(error.code(), "SESSION_NOT_FOUND", "{error}");
    storage
        .cut_removals
        .store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(store.purge().unwrap(), 1);
    assert_eq!(std::fs::read_dir(dir.join("trash")).unwrap().count(), 0);
}

/// [`temp_store`] whose logs are read through a [`CountingStorage`].
fn counting_store(name: &str) -> (common::ScratchPath, Store, Arc<CountingStorage>) {
    counting_store_with(name, store_options())
}

/// [`counting_store`] opened with `options`.
fn counting_store_with(
    name: &str,
    options: StoreOptions,
) -> (common::ScratchPath, Store, Arc<CountingStorage>) {
    let (dir, _) = temp_store(name);
    let counting = Arc::new(CountingStorage::default());
    let options = options.storage(Arc::new(common::HookedStorage(counting.hook())));
    let store = Store::open_or_create(&dir, options).unwrap();
    (dir, store, counting)
}

/// The state of session `id` from a fold of its whole log: opened with its checkpoint
/// removed (the open writes a new one).
fn folded_state(dir: &std::path::Path, store: &Store, id: &str) -> State {
    let _ = std::fs::remove_file(dir.join(format!("sessions/{id}/checkpoint")));
    let (session, opened) = store.open_session(id).unwrap();
    assert!(opened.checkpoint.is_err());
    assert!(!opened.log.from_known_chain);
    state(&session)
}

/// CKP-8, RCV-11: a session closed with a checkpoint reopens over the segment chain the
/// checkpoint records, without listing its log directory, to the same state as a fold of
/// the whole log; an open without the checkpoint lists it.
#[test]
fn ckp_8_a_checkpointed_open_takes_the_chain_from_the_checkpoint_and_lists_nothing() {
    let (dir, store, counting) = counting_store("known-chain");
    let mut session = store.create("s", None, None).unwrap();
    workload(&mut session, 200);
    session.close().unwrap();
    assert!(segments_of_s(&dir).len() >= 3, "several segments");
    for _ in 0..2 {
        let before = counting.lists();
        let (session, opened) = store.open_session("s").unwrap();
        assert!(opened.log.from_known_chain);
        assert!(opened.checkpoint.is_ok(), "{:?}", opened.checkpoint);
        assert_eq!(counting.lists(), before, "the log directory is not listed");
        let reopened = state(&session);
        session.close().unwrap();
        let before = counting.lists();
        assert_eq!(reopened, folded_state(&dir, &store, "s"));
        assert!(counting.lists() > before, "a fold lists the log directory");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// RCV-11: a recorded chain the log has grown past (segments created after the checkpoint
/// was written: here an older checkpoint put back), or whose last segment no longer ends
/// cleanly, is not taken: open lists the directory and finds the whole log, and repairs
/// it as §7 says.
#[test]
fn rcv_11_a_chain_the_log_has_outgrown_or_a_torn_tail_falls_back_to_a_listing() {
    use surfacelog::internals::event::EventSource;
    let (dir, store, counting) = counting_store("outgrown-chain");
    let mut session = store.create("s", None, None).unwrap();
    workload(&mut session, 20);
    session.flush().unwrap();
    let checkpoint = dir.join("sessions/s/checkpoint");
    let older = std::fs::read(&checkpoint).unwrap();
    let segments_at_checkpoint = segments_of_s(&dir).len();
    workload(&mut session, 200);
    let written = session.seq_next();
    session.close().unwrap();
    std::fs::write(&checkpoint, &older).unwrap();
    assert!(segments_of_s(&dir).len() > segments_at_checkpoint + 1);
    let before = counting.lists();
    let (session, opened) = store.open_session("s").unwrap();
    assert!(!opened.log.from_known_chain);
    assert!(counting.lists() > before, "the directory is listed");
    assert!(opened.checkpoint.is_ok(), "{:?}", opened.checkpoint);
    assert_eq!(session.seq_next(), written, "every segment is found");
    let reopened = state(&session);
    session.close().unwrap();
    // Close wrote a checkpoint with the whole chain: the next open takes it.
    let (session, opened) = store.open_session("s").unwrap();
    assert!(opened.log.from_known_chain);
    assert_eq!(state(&session), reopened);
    drop(session);
    assert_eq!(reopened, folded_state(&dir, &store, "s"));
    // A torn last record after the checkpoint (which still matches the log, CKP-3) under
    // a recorded chain: listed, repaired and reported.
    let (session, _) = store.open_session("s").unwrap();
    session.close().unwrap();
    let covering = std::fs::read(&checkpoint).unwrap();
    let (mut session, _) = store.open_session("s").unwrap();
    session.append_dynamic("plugin/x", "{}", None).unwrap();
    session.close().unwrap();
    std::fs::write(&checkpoint, &covering).unwrap();
    let written = written + 1;
    tear_last_record(&segments_of_s(&dir).pop().unwrap());
    let (session, opened) = store.open_session("s").unwrap();
    assert!(opened.checkpoint.is_ok(), "{:?}", opened.checkpoint);
    assert!(!opened.log.from_known_chain);
    assert!(opened.log.torn_tail.is_some());
    assert_eq!(session.seq_next(), written - 1);
    assert_eq!(
        session.log().event(written - 2).unwrap().unwrap().seq,
        written - 2
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// CKP-8: a recorded chain is taken only for the log directory it was recorded in (a
/// fork's child starts with its source's checkpoint), and a checkpoint found stale
/// (CKP-3) after an open over its chain has the log opened again from a listing.
#[test]
fn ckp_8_a_chain_is_taken_only_in_its_own_directory_and_never_from_a_stale_checkpoint() {
    use surfacelog::internals::session::Boundary;
    use surfacelog::internals::store::checkpoint::Unusable;
    let (dir, store, _) = counting_store("chain-identity");
    let mut source = store.create("src", None, None).unwrap();
    workload(&mut source, 120);
    let boundary = source.seq_next() - 1;
    source.close().unwrap();
    // The source goes on in its last segment, which the fork limits, and its checkpoint
    // is the one covering the boundary, so the child shares it (CKP-7).
    let path = dir.join("sessions/src/checkpoint");
    let covering = std::fs::read(&path).unwrap();
    let (mut source, _) = store.open_session("src").unwrap();
    for i in 0..5 {
        source
            .append_dynamic("plugin/x", &format!(r#"{{"i":{i}}}"#), None)
            .unwrap();
    }
    source.close().unwrap();
    std::fs::write(&path, &covering).unwrap();
    let child = store.fork("src", Boundary::Seq(boundary), "c").unwrap();
    assert!(
        dir.join("sessions/c/log")
            .read_dir()
            .unwrap()
            .any(|e| { e.unwrap().path().extension().is_some_and(|x| x == "lim") })
    );
    let forked = state(&child);
    drop(child);
    let (child, opened) = store.open_session("c").unwrap();
    assert!(opened.checkpoint.is_ok(), "the source's, shared (CKP-7)");
    assert!(
        !opened.log.from_known_chain,
        "recorded for the source's log"
    );
    assert_eq!(state(&child), forked);
    child.close().unwrap();
    let (child, opened) = store.open_session("c").unwrap();
    assert!(
        opened.log.from_known_chain,
        "its own checkpoint, limit included"
    );
    assert_eq!(state(&child), forked);
    drop(child);
    // A checkpoint whose record of the last event does not match the log (CRCs redone).
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[12] ^= 1;
    redo_checkpoint_crc(&mut bytes);
    std::fs::write(&path, &bytes).unwrap();
    let (source, opened) = store.open_session("src").unwrap();
    assert_eq!(opened.checkpoint, Err(Unusable::Stale));
    assert!(!opened.log.from_known_chain, "opened again from a listing");
    let reopened = state(&source);
    drop(source);
    assert_eq!(reopened, folded_state(&dir, &store, "src"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// LOG-2 under RCV-11: a missing sealed segment is not seen by an open over a recorded
/// chain (it does not list), but the first access into it is `CORRUPT` with its path, and
/// an open that lists refuses the log.
#[test]
fn log_2_a_missing_segment_is_corrupt_on_first_access_under_a_recorded_chain() {
    use surfacelog::internals::event::EventSource;
    let (dir, store) = temp_store("missing-segment");
    let mut session = store.create("s", None, None).unwrap();
    workload(&mut session, 200);
    session.close().unwrap();
    let segments = segments_of_s(&dir);
    assert!(segments.len() >= 3, "{segments:?}");
    let gone = &segments[1];
    let first: u64 = gone.file_stem().unwrap().to_str().unwrap().parse().unwrap();
    std::fs::remove_file(gone).unwrap();
    let (session, opened) = store.open_session("s").unwrap();
    assert!(opened.log.from_known_chain);
    let error = session.log().event(first).unwrap_err();
    assert_eq!(error.code(), "CORRUPT", "{error}");
    assert!(
        error.to_string().contains(gone.to_str().unwrap()),
        "{error}"
    );
    assert!(session.log().event(first - 1).unwrap().is_some());
    drop(session);
    std::fs::remove_file(dir.join("sessions/s/checkpoint")).unwrap();
    assert_eq!(store.open_session("s").unwrap_err().code(), "CORRUPT");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// CKP-8, RCV-11, LIM-4: a chain recorded for another log is not taken even when the log
/// directory's identity matches (inode numbers are reused; here the recorded identity is
/// set to this directory's, as a reuse would leave it). The case: a fork's fork starts
/// with a checkpoint recorded for its grandparent, whose last segment it shares limited,
/// and the grandparent went on writing there; taking that chain would show the
/// grandparent's records as this log's and append into the shared file.
#[test]
fn ckp_8_a_foreign_chain_with_a_matching_identity_is_not_taken_over_a_limited_segment() {
    use surfacelog::internals::event::EventSource;
    use surfacelog::internals::session::Boundary;
    use surfacelog::internals::store::checkpoint::dir_identity;
    let (dir, store) = temp_store("foreign-chain");
    let mut s = store.create("s", None, None).unwrap();
    workload(&mut s, 120);
    s.close().unwrap();
    let c = store.fork("s", Boundary::Last, "c").unwrap();
    let c_len = c.seq_next();
    drop(c);
    let (mut s, _) = store.open_session("s").unwrap();
    for i in 0..5 {
        s.append_dynamic("plugin/x", &format!(r#"{{"i":{i}}}"#), None)
            .unwrap();
    }
    s.close().unwrap();
    let g = store.fork("c", Boundary::Last, "g").unwrap();
    let forked = state(&g);
    drop(g);
    assert_eq!(forked.0[usize::try_from(c_len).unwrap() - 1], {
        let (c, _) = store.open_session("c").unwrap();
        c.log()
            .event(c_len - 1)
            .unwrap()
            .unwrap()
            .text()
            .into_owned()
    });
    // g's checkpoint is still the one recorded for s's log: give it g's identity.
    let path = dir.join("sessions/g/checkpoint");
    let mut bytes = std::fs::read(&path).unwrap();
    let word = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let nodes_end = 48 + 8 * usize::try_from(word(&bytes, 32)).unwrap();
    let mut at = nodes_end + 16 * usize::try_from(word(&bytes, 40)).unwrap();
    at += 4 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    assert!(u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) > 0);
    let s_identity = dir_identity(&dir.join("sessions/s/log")).unwrap();
    assert_eq!(
        word(&bytes, at + 12),
        s_identity.ino,
        "recorded for s's log"
    );
    let g_identity = dir_identity(&dir.join("sessions/g/log")).unwrap();
    for (offset, value) in [
        (4, g_identity.dev),
        (12, g_identity.ino),
        (20, g_identity.birth),
    ] {
        bytes[at + offset..at + offset + 8].copy_from_slice(&value.to_le_bytes());
    }
    redo_checkpoint_crc(&mut bytes);
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, &bytes).unwrap();
    let (g, opened) = store.open_session("g").unwrap();
    assert!(!opened.log.from_known_chain);
    assert_eq!(state(&g), forked, "g's own events, not s's");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The store directory of [`follow_child`], set only in the child process.
const FOLLOW_CHILD_DIR: &str = "SURFACELOG_FOLLOW_CHILD_DIR";
/// How many events [`follow_child`] appends, one every [`FOLLOW_CHILD_GAP`].
const FOLLOW_CHILD_EVENTS: u64 = 20;
const FOLLOW_CHILD_GAP: std::time::Duration = std::time::Duration::from_millis(20);

/// The child of [`a_follower_in_another_process_wakes_on_each_commit`]: opens session `s`
/// with Sync durability and appends an event every [`FOLLOW_CHILD_GAP`], printing
/// `APPEND <seq> <unix nanos when the append began>` after each. Without
/// [`FOLLOW_CHILD_DIR`] it does nothing: a test only in name.
#[test]
fn follow_child() {
    use std::io::Write;
    let Ok(dir) = std::env::var(FOLLOW_CHILD_DIR) else {
        return;
    };
    let store = Store::open_or_create(
        std::path::Path::new(&dir),
        common::store_options(Durability::Sync, 64 << 10),
    )
    .unwrap();
    let (mut session, _) = store.open_session("s").unwrap();
    let mut out = std::io::stdout().lock();
    for i in 0..FOLLOW_CHILD_EVENTS {
        std::thread::sleep(FOLLOW_CHILD_GAP);
        let began = unix_nanos();
        let seq = session
            .append_dynamic("plugin/x", &format!(r#"{{"i":{i}}}"#), None)
            .unwrap();
        writeln!(out, "APPEND {seq} {began}").unwrap();
        out.flush().unwrap();
    }
}

fn unix_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// STORE-11: a follower wakes on each commit of a writer in another process, well within
/// a second (the inotify wait; the poll fallback would pass too, the bench `follow`
/// compares them). Prints the median wake-up latency.
#[test]
fn a_follower_in_another_process_wakes_on_each_commit() {
    if std::env::var(FOLLOW_CHILD_DIR).is_ok() {
        return;
    }
    let (dir, store) = temp_store("follow-wake");
    drop(store.create("s", None, None).unwrap());
    let mut follower = store.follow("s").unwrap();
    let first = surfacelog::internals::event::EventSource::seq_next(follower.log());
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "follow_child", "--nocapture", "--test-threads=1"])
        .env(FOLLOW_CHILD_DIR, &*dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut woke = Vec::new();
    for seq in first..first + FOLLOW_CHILD_EVENTS {
        // The first wait also covers the child's start.
        let timeout = if seq == first { 20 } else { 1 };
        assert!(
            follower
                .wait_for(seq, std::time::Duration::from_secs(timeout))
                .unwrap(),
            "event {seq} not seen"
        );
        woke.push((seq, unix_nanos()));
    }
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{:?}", output.status);
    let began: std::collections::HashMap<u64, u128> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| {
            // The harness's `test follow_child ... ` may precede the first line.
            let at = line.find("APPEND ")?;
            let mut words = line[at + "APPEND ".len()..].split(' ');
            Some((
                words.next()?.parse().unwrap(),
                words.next()?.parse().unwrap(),
            ))
        })
        .collect();
    let mut latencies: Vec<u128> = woke
        .iter()
        .map(|(seq, woke)| woke.saturating_sub(began[seq]))
        .collect();
    latencies.sort_unstable();
    for latency in &latencies {
        assert!(*latency < 1_000_000_000, "a wake-up took {latency} ns");
    }
    println!(
        "follower wake-up after another process's Sync append: median {} µs, max {} µs",
        latencies[latencies.len() / 2] / 1000,
        latencies[latencies.len() - 1] / 1000
    );
}

#[test]
fn follower_events_yields_owned_events_and_ends_at_the_timeout() {
    let (_dir, store) = temp_store("follow-events");
    let mut session = store.create("s", None, None).unwrap();
    let first = session.seq_next();
    let mut follower = store.follow("s").unwrap();
    let writer = std::thread::spawn(move || {
        for i in 0..5 {
            std::thread::sleep(std::time::Duration::from_millis(5));
            session
                .append_dynamic("plugin/x", &format!(r#"{{"i":{i}}}"#), None)
                .unwrap();
            session.flush().unwrap();
        }
        session
    });
    let events: Vec<_> = follower
        .events(first, std::time::Duration::from_secs(2))
        .take(5)
        .collect::<Result<_, _>>()
        .unwrap();
    let session = writer.join().unwrap();
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event.seq(), first + i as u64);
        assert_eq!(event.as_ref().data(), format!(r#"{{"i":{i}}}"#));
    }
    // Nothing more: the iterator ends at the timeout, and stays ended.
    let mut rest = follower.events(first + 5, std::time::Duration::from_millis(30));
    assert!(rest.next().is_none());
    assert!(rest.next().is_none());
    assert_eq!(rest.next_seq(), first + 5);
    // The polling strategy sees the same log.
    assert!(
        follower
            .wait_for_polling(first + 4, std::time::Duration::ZERO)
            .unwrap()
    );
    assert!(
        !follower
            .wait_for_polling(first + 5, std::time::Duration::from_millis(5))
            .unwrap()
    );
    drop(session);
}

#[test]
fn a_refused_batch_leaves_checkpoint_nodes_read_in_place() {
    use surfacelog::internals::surface::NodeState;
    // A session opened from its checkpoint reads the surface's nodes in place (CKP-7). A
    // batch refused after an append (taken back by a cut), or after a replace reaching from
    // the checkpoint's first node to the batch's own append (taken back from a copy made
    // before it), leaves them so: the same handle, not a copy of them on the heap.
    for replace in [false, true] {
        let name = if replace {
            "undo-deferred-replace"
        } else {
            "undo-deferred"
        };
        let (_dir, store) = temp_store(name);
        let mut session = store.create("s", None, None).unwrap();
        workload(&mut session, 12);
        session.close().unwrap();
        let (mut session, opened) = store.open_session("s").unwrap();
        assert!(opened.checkpoint.is_ok());
        assert_eq!(session.surface().node_state(), NodeState::Unchecked);
        let before = session.surface().clone();
        let nodes = session.surface().nodes().to_vec();
        let appended = session.seq_next() + 1;
        let summary = user("summary");
        let mut batch = vec![
            ("turn/start", r#"{"turn":99}"#, None),
            (
                "user/message",
                summary.as_str(),
                Some(SurfaceIntent::append()),
            ),
        ];
        if replace {
            let mut sources = nodes.clone();
            sources.push(appended);
            let intent = SurfaceIntent::replace(nodes[0], appended, sources);
            batch.push(("user/message", summary.as_str(), Some(intent)));
        }
        batch.push(("user/message", "{", Some(SurfaceIntent::append())));
        let error = session.append_all(&batch).unwrap_err();
        assert_eq!(error.code(), "DATA_INVALID_JSON", "{error}");
        let last = session.seq_next() + batch.len() as u64 - 1;
        assert_eq!(
            error.seq(),
            Some(last),
            "every event before the bad one admitted"
        );
        assert_eq!(session.surface(), &before);
        assert_eq!(session.surface().node_state(), NodeState::Checked);
        let keys = std::mem::size_of_val(session.surface().replacement_keys());
        assert_eq!(
            session.surface().heap_bytes(),
            keys,
            "no copy of the nodes kept"
        );
    }
}

/// Contract §5: a seed may end inside an open turn and is kept as given (crash repair
/// applies only when a stored log is reopened), and the first live seq counts the seed's
/// events, not the end-seed marker; on disk as in memory.
#[test]
fn create_with_a_seed_keeps_an_open_turn_and_counts_the_seed() {
    let (dir, store) = temp_store("create-seed");
    let seeds: [&[&str]; 3] = [
        &[r#"{"type":"turn/start","seq":0,"time":5,"data":{"turn":1}}"#],
        &[r#"{"type":"host/x","seq":0,"time":5,"data":{}}"#],
        &[],
    ];
    for (i, seed) in seeds.into_iter().enumerate() {
        let id = format!("s{i}");
        let memory = Session::create(&id, None, Some(seed), common::session_options()).unwrap();
        let disk = store.create(&id, None, Some(seed)).unwrap();
        assert_eq!(disk.first_live_seq(), seed.len() as u64, "{id}");
        assert_eq!(state(&disk), state(&memory), "{id}");
        disk.close().unwrap();
        // Reopening is what repairs: the open turn gets its closer then.
        let (reopened, opened) = store.open_session(&id).unwrap();
        assert_eq!(opened.closers, u64::from(i == 0), "{id}");
        assert_eq!(reopened.first_live_seq(), memory.seq_next(), "{id}");
    }
    drop(dir);
}

/// A log that violates the invariants (written with them off): opened with them on, it is
/// refused as a reopen in memory refuses it (contract §5, import/reopen row), and a fork
/// of it is refused before anything is created (§9, "fork children included"). A reader
/// still reads it: it appends nothing.
#[test]
fn invariants_on_refuse_a_stored_log_that_violates_them_and_its_forks() {
    let (dir, store) = temp_store("invariants");
    let mut session = store.create("s", None, None).unwrap();
    session
        .append_dynamic("todo/write", r#"{"todos":[]}"#, None)
        .unwrap();
    session.close().unwrap();
    let strict = Store::open(&dir, store_options().invariants(true)).unwrap();
    let refused = strict.open_session("s").unwrap_err();
    assert_eq!(
        (refused.code(), refused.seq()),
        ("INV_OUTSIDE_TURN", Some(0))
    );
    let forked = strict
        .fork("s", surfacelog::Boundary::Last, "child")
        .unwrap_err();
    assert_eq!(forked.code(), "INV_OUTSIDE_TURN");
    assert!(
        strict
            .list()
            .unwrap()
            .headers
            .iter()
            .all(|h| h.id() != "child")
    );
    let read = strict.inspect("s").unwrap();
    assert_eq!(read.seq_next(), 1);
    // The same fork with invariants off succeeds: the refusal was theirs.
    store
        .fork("s", surfacelog::Boundary::Last, "child")
        .unwrap();
}

/// Contract §11: a fork's refusals carry the source session's id.
#[test]
fn fork_refusals_name_the_source() {
    let (_dir, store) = temp_store("fork-context");
    let mut session = store.create("src", None, None).unwrap();
    turn_start(&mut session, 1);
    session.flush().unwrap(); // a fork reads what is durable
    for (boundary, code) in [
        (surfacelog::Boundary::Seq(0), "OPEN_TURN"),
        (surfacelog::Boundary::Seq(9), "INVALID_BOUNDARY"),
    ] {
        let refused = store.fork("src", boundary, "k").unwrap_err();
        assert_eq!((refused.code(), refused.session()), (code, Some("src")));
    }
}

/// A fork copies stored events as they are: a `-0` that an import or reopen accepted
/// (contract §2.1) is kept by the fork in memory as by the one on disk, which links the
/// stored records (README, "Deviations").
#[test]
fn a_fork_keeps_a_negative_zero_its_source_was_admitted_with() {
    let (_dir, store) = temp_store("fork-negative-zero");
    let header = r#"{"version":0,"id":"s","createdAt":1}"#;
    let event = r#"{"type":"host/a","seq":0,"time":1,"data":{"x":-0}}"#;
    let mut import = store.import("s", header).unwrap();
    import.push(event).unwrap();
    import.finish().unwrap();
    let on_disk = store.fork("s", surfacelog::Boundary::Last, "k").unwrap();
    let (memory, _) = Session::reopen("s", header, &[event], common::session_options()).unwrap();
    let in_memory = memory.fork(surfacelog::Boundary::Last, "k").unwrap();
    let (texts, ..) = state(&on_disk);
    assert!(texts[0].contains(r#""x":-0"#), "{texts:?}");
    assert_eq!(state(&on_disk), state(&in_memory));
}

/// STORE-11: a follower of a session that is deleted, or deleted and created again (another
/// session under the same id), ends with `SESSION_NOT_FOUND` at its next wait's timeout,
/// never waiting for good on a log no one writes.
#[test]
fn store_11_a_follower_of_a_deleted_session_ends_with_session_not_found() {
    use std::time::Duration;
    let (_dir, store) = temp_store("follow-deleted");
    for recreate in [false, true] {
        let mut session = store.create("s", None, None).unwrap();
        workload(&mut session, 1);
        let committed = session.seq_next();
        session.close().unwrap();
        let mut follower = store.follow("s").unwrap();
        assert!(
            !follower
                .wait_for(committed, Duration::from_millis(5))
                .unwrap()
        );
        store.delete("s").unwrap();
        if recreate {
            store.create("s", None, None).unwrap().close().unwrap();
        }
        let error = follower
            .wait_for(committed, Duration::from_millis(5))
            .unwrap_err();
        assert_eq!(error.code(), "SESSION_NOT_FOUND", "{error}");
        if recreate {
            store.delete("s").unwrap();
        }
    }
}

/// STORE-11: a follower waiting without a timeout (`Duration::MAX`) also ends with
/// `SESSION_NOT_FOUND` once its session is deleted.
#[test]
fn store_11_a_follower_waiting_for_good_ends_when_its_session_is_deleted() {
    let (_dir, store) = temp_store("follow-deleted-forever");
    let mut session = store.create("s", None, None).unwrap();
    workload(&mut session, 1);
    let committed = session.seq_next();
    session.close().unwrap();
    let mut follower = store.follow("s").unwrap();
    let (done, waited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(follower.wait_for(committed, std::time::Duration::MAX));
    });
    std::thread::sleep(std::time::Duration::from_millis(100));
    store.delete("s").unwrap();
    let outcome = waited
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the wait ends once the session is deleted");
    let error = outcome.unwrap_err();
    assert_eq!(error.code(), "SESSION_NOT_FOUND", "{error}");
}
