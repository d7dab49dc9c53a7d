//! A stored session shared by threads (`SharedSession`, `log-format.md` DUR-11): durable
//! appends from many threads share syncs (group commit), every acknowledged event is on
//! disk, and a failed sync reaches every append that waited for it.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use common::{HookedStorage, Op};
use surfacelog::internals::storage::faulty::FaultyStorage;
use surfacelog::{Durability, NoSurface, Outcome, SharedSession, Store, StoreOptions, kinds};

const THREADS: usize = 8;
const PER_THREAD: usize = 40;

fn chunk(thread: usize, i: usize) -> String {
    format!(
        r#"{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":{i},"text":"t{thread}"}}}}"#
    )
}

/// Appends `PER_THREAD` chunks from each of `THREADS` threads at once; returns every
/// acknowledged (seq, data).
fn append_from_threads(shared: &SharedSession) -> Vec<(u64, String)> {
    let barrier = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let shared = shared.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                (0..PER_THREAD)
                    .map(|i| {
                        let data = chunk(t, i);
                        let seq = shared
                            .append::<kinds::AssistantChunk>(&data, NoSurface)
                            .expect("a durable append");
                        (seq, data)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    threads
        .into_iter()
        .flat_map(|t| t.join().expect("an appending thread"))
        .collect()
}

/// A shared session `s` in a new store of durability `durability`, over a storage that
/// counts syncs (and fails one when told); the scratch directory goes with the first
/// item.
fn shared_over_faults(
    durability: Durability,
) -> (
    tempfile::TempDir,
    Arc<surfacelog::internals::storage::faulty::Faults>,
    SharedSession,
) {
    let dir = tempfile::tempdir().unwrap();
    let storage = FaultyStorage::default();
    let faults = Arc::clone(&storage.faults);
    let options = StoreOptions::new()
        .durability(durability)
        .storage(Arc::new(storage));
    let store = Store::open_or_create(dir.path(), options).unwrap();
    let shared = SharedSession::new(store.create("s", None, None).unwrap());
    (dir, faults, shared)
}

#[test]
fn durable_appends_from_many_threads_share_syncs_and_all_survive() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FaultyStorage::default();
    let faults = Arc::clone(&storage.faults);
    let options = StoreOptions::new()
        .durability(Durability::Sync)
        .storage(Arc::new(storage));
    let store = Store::open_or_create(dir.path(), options.clone()).unwrap();
    let shared = SharedSession::new(store.create("s", None, None).unwrap());
    let before = faults.syncs();
    let acknowledged = append_from_threads(&shared);
    let syncs = faults.syncs() - before;
    let appends = (THREADS * PER_THREAD) as u64;
    // Without the deferred wait each append would sync under the session's lock: one
    // sync per append. Shared, a sync covers the appends queued behind it.
    assert!(
        syncs < appends * 3 / 4,
        "{syncs} syncs for {appends} concurrent Sync appends: no group commit"
    );
    eprintln!("{appends} durable appends from {THREADS} threads: {syncs} syncs");
    let mut seqs: Vec<u64> = acknowledged.iter().map(|(seq, _)| *seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..appends).collect::<Vec<_>>(), "every seq once");

    // Every acknowledged event is on disk, byte for byte, after a crash (the session
    // dropped without close: nothing flushed it since).
    drop(shared);
    drop(store);
    let store = Store::open(dir.path(), options).unwrap();
    let reader = store.inspect("s").unwrap();
    for (seq, data) in &acknowledged {
        assert_eq!(reader.event(*seq).unwrap().unwrap().data(), data.as_str());
    }
}

#[test]
fn a_failed_shared_sync_reaches_its_waiters_and_poisons_the_session() {
    let (_dir, faults, shared) = shared_over_faults(Durability::Sync);
    shared
        .append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)
        .unwrap();
    faults.fail_sync(1);
    let error = shared
        .append::<kinds::AssistantChunk>(&chunk(0, 0), NoSurface)
        .unwrap_err();
    assert_eq!(error.outcome(), Outcome::FateUnknown, "{error}");
    let after = shared
        .append::<kinds::AssistantChunk>(&chunk(0, 1), NoSurface)
        .unwrap_err();
    assert_eq!(after.code(), "POISONED");
    assert_eq!(after.outcome(), Outcome::Poisoned);
}

#[test]
fn in_other_modes_a_shared_append_waits_for_no_sync() {
    let (_dir, faults, shared) = shared_over_faults(Durability::Manual);
    let before = faults.syncs();
    append_from_threads(&shared);
    assert_eq!(faults.syncs(), before, "Manual: durable at flush only");
    let session = shared.into_inner().expect("the last handle");
    assert_eq!(session.seq_next(), (THREADS * PER_THREAD) as u64);
    session.close().unwrap();
    assert!(faults.syncs() > before);
}

/// A `SharedSession` of a new session holding one event, in a store in `dir` whose
/// storage panics at its next call of the kind `at` picks once the returned flag is set (a
/// storage of the host's, or anything that unwinds through the engine's call).
fn panicking_session(dir: &Path, at: fn(&Op<'_>) -> bool) -> (SharedSession, Arc<AtomicBool>) {
    let armed = Arc::new(AtomicBool::new(false));
    let hook = {
        let armed = Arc::clone(&armed);
        move |op: Op<'_>| {
            assert!(
                !(at(&op) && armed.swap(false, Ordering::SeqCst)),
                "the storage panics at {op:?}"
            );
            Ok(())
        }
    };
    let options = StoreOptions::new()
        .durability(Durability::Sync)
        .storage(Arc::new(HookedStorage(Box::new(hook))));
    let store = Store::open_or_create(dir, options).unwrap();
    let shared = SharedSession::new(store.create("s", None, None).unwrap());
    shared
        .append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)
        .unwrap();
    (shared, armed)
}

/// DUR-1, DUR-5, DUR-11: a group-commit leader whose sync unwinds (a panic in the host's
/// storage) leaves the durability of what it was syncing unknown: the other appenders,
/// and the panicking thread's own drop of the session, must end (`POISONED`, fate unknown),
/// never wait for good on a sync no one runs any more.
#[test]
fn a_sync_leader_that_panics_leaves_no_waiter_waiting_for_good() {
    let dir = tempfile::tempdir().unwrap();
    let (shared, armed) = panicking_session(dir.path(), |op| matches!(op, Op::Sync));
    armed.store(true, Ordering::SeqCst);
    let (done, ended) = std::sync::mpsc::channel();
    let leader = shared.clone();
    let done_leader = done.clone();
    std::thread::spawn(move || {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            leader.append::<kinds::AssistantChunk>(&chunk(0, 0), NoSurface)
        }));
        let _ = done_leader.send(("leader", outcome.map(|r| r.map_err(|e| e.code()))));
    });
    let (who, outcome) = ended
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the panicking append ends");
    assert_eq!(who, "leader");
    assert!(outcome.is_err(), "the sync panicked: {outcome:?}");
    // Another appender, then the last handle's drop (a flush), each end.
    let other = shared.clone();
    let done_other = done.clone();
    std::thread::spawn(move || {
        let outcome = other
            .append::<kinds::AssistantChunk>(&chunk(1, 0), NoSurface)
            .map_err(|e| (e.code(), e.outcome()));
        let _ = done_other.send((
            "other",
            Ok(outcome.map_err(|(code, fate)| {
                assert_eq!(
                    fate,
                    Outcome::Poisoned,
                    "written after a sync of unknown fate"
                );
                code
            })),
        ));
        drop(other);
    });
    let (who, outcome) = ended
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("an append after the panicked sync ends, never waits for good");
    assert_eq!(who, "other");
    let code = outcome.unwrap().unwrap_err();
    assert_eq!(
        code, "POISONED",
        "nothing acknowledged after a sync of unknown fate"
    );
    std::thread::spawn(move || {
        drop(shared);
        let _ = done.send(("drop", Ok(Ok(0))));
    });
    let (who, _) = ended
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the session's drop ends");
    assert_eq!(who, "drop");
}

/// DUR-5, DUR-10: an append whose write unwinds (a panic in the host's storage) left its
/// record's fate unknown, as a failed write does: the shared session is poisoned. Never
/// recovered as if nothing happened: later appends refused as "nothing written" and a flush
/// that writes the panicked append's record and returns `Ok`.
#[test]
fn an_append_whose_write_panics_poisons_the_shared_session() {
    let dir = tempfile::tempdir().unwrap();
    let (shared, armed) = panicking_session(dir.path(), |op| matches!(op, Op::Write));
    armed.store(true, Ordering::SeqCst);
    let panicking = shared.clone();
    let panicked = std::thread::spawn(move || {
        panicking.append::<kinds::AssistantChunk>(&chunk(0, 0), NoSurface)
    })
    .join();
    assert!(panicked.is_err(), "the write panicked");
    let after = shared
        .append::<kinds::AssistantChunk>(&chunk(0, 1), NoSurface)
        .unwrap_err();
    assert_eq!(after.code(), "POISONED", "{after}");
    assert_eq!(after.outcome(), Outcome::Poisoned);
    let flushed = shared.with(surfacelog::StoredSession::flush).unwrap_err();
    assert_eq!(flushed.code(), "POISONED", "{flushed}");
}
