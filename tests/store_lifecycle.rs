//! Store-level operations (create, delete, restore, purge, remove, fork, open of the store
//! itself) under refusals, races and a power loss at every I/O point.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{session_options, user};
use surfacelog::internals::log::{Durability, LogOptions};
use surfacelog::internals::session::{NoSurface, SurfaceIntent, kinds};
use surfacelog::internals::storage::Storage;
use surfacelog::internals::storage::sim::SimStorage;
use surfacelog::internals::store::{Store, StoreOptions};

/// STORE-2, STORE-19: `Store::open_or_create` of a directory whose `STORE` is not this
/// version's identity file is refused, and a refused open leaves no trace. Before the fix
/// it made `sessions/`, `trash/` and `tmp/` in the directory first and only then read
/// `STORE` and refused it (`FORMAT_VERSION`, `CORRUPT`), leaving the three directories in
/// a store of another version or in a directory that is no store at all.
#[test]
fn store_19_a_refused_open_or_create_makes_nothing() {
    for (identity, code) in [
        (
            "{\"format\":\"surfacelog-store\",\"version\":2}\n",
            "FORMAT_VERSION",
        ),
        ("not an identity file\n", "CORRUPT"),
    ] {
        let scratch = common::scratch("store_lifecycle", "refused-open");
        let dir = scratch.join("store");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("STORE"), identity).unwrap();
        let before = common::tree_snapshot(&scratch);
        let error = Store::open_or_create(&dir, StoreOptions::new()).unwrap_err();
        assert_eq!(error.code(), code, "{error}");
        assert_eq!(
            common::tree_snapshot(&scratch),
            before,
            "a refused open_or_create changed the directory ({code})"
        );
    }
}

/// A scratch directory in memory when there is one (the simulated disk syncs nothing).
fn memory_scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("surfacelog-store_lifecycle-{name}-"))
        .tempdir_in("/dev/shm")
        .or_else(|_| {
            tempfile::Builder::new()
                .prefix(&format!("surfacelog-store_lifecycle-{name}-"))
                .tempdir()
        })
        .expect("a scratch directory")
}

fn sim_options(storage: Arc<dyn Storage>) -> StoreOptions {
    StoreOptions::new()
        .session_options(session_options())
        .log_options(LogOptions {
            segment_bytes: 1024,
            durability: Durability::Sync,
            storage,
            chunk_records: true,
            compact_records: false,
        })
        .checkpoint_every(3)
}

/// What the workload had acknowledged for each id when the power went: `Some(n)` a
/// session of `n` events is there, `None` it is absent; ids in flight are left out.
type Acked = std::collections::BTreeMap<&'static str, Option<u64>>;

/// The store operations of [`store_operations_survive_a_crash_at_every_io_point`], each
/// recorded in `acked` once it returned (and the id marked in flight before).
fn lifecycle_workload(store: &Store, acked: &mut Acked) -> surfacelog::Result<()> {
    let events = |n| Some(n);
    acked.remove("a");
    let mut a = store.create("a", None, None)?;
    for turn in 1..=2 {
        closed_turn(&mut a, turn)?;
    }
    a.close()?;
    acked.insert("a", events(6));
    acked.remove("f");
    let f = store.fork("a", surfacelog::Boundary::Last, "f")?;
    let f_len = f.seq_next();
    f.close()?;
    acked.insert("f", events(f_len));
    acked.remove("a");
    store.delete("a")?;
    acked.insert("a", None);
    acked.remove("a");
    store.restore("a")?;
    acked.insert("a", events(6));
    // A fork inside the source's segments (a limit file), then both logs go on.
    acked.remove("g");
    let mut g = store.fork("a", surfacelog::Boundary::Seq(2), "g")?;
    closed_turn(&mut g, 5)?;
    let g_len = g.seq_next();
    g.close()?;
    acked.insert("g", events(g_len));
    acked.remove("a");
    let (mut a, _) = store.open_session("a")?;
    closed_turn(&mut a, 3)?;
    a.close()?;
    acked.insert("a", events(9));
    acked.remove("g");
    let (mut g, _) = store.open_session("g")?;
    closed_turn(&mut g, 6)?;
    g.close()?;
    acked.insert("g", events(g_len + 3));
    acked.remove("f");
    store.delete("f")?;
    acked.insert("f", None);
    store.purge()?;
    acked.remove("a");
    store.remove("a")?;
    acked.insert("a", None);
    acked.remove("f");
    store.restore("f").map_or_else(
        |e| {
            if e.code() == "SESSION_NOT_FOUND" {
                Ok(())
            } else {
                Err(e)
            }
        },
        |()| {
            Err(surfacelog::Error::io(
                "restore",
                "f",
                &std::io::Error::other("purged"),
            ))
        },
    )?;
    acked.insert("f", None);
    Ok(())
}

/// Appends turn `turn`: its start, a user message and its end.
fn closed_turn(session: &mut surfacelog::StoredSession, turn: u64) -> surfacelog::Result<()> {
    session.append::<kinds::TurnStart>(&format!(r#"{{"turn":{turn}}}"#), NoSurface)?;
    session.append::<kinds::UserMessage>(&user(&format!("m{turn}")), SurfaceIntent::append())?;
    session.append::<kinds::TurnEnd>(
        &format!(r#"{{"turn":{turn},"reason":{{"kind":"completed"}}}}"#),
        NoSurface,
    )?;
    Ok(())
}

/// One run of the workload, the power going at I/O point `crash`; `Err` says what broke.
fn lifecycle_run(crash: Option<u64>) -> Result<u64, String> {
    let scratch = memory_scratch("sim");
    let sim = Arc::new(SimStorage::new(scratch.path(), 7).map_err(|e| e.to_string())?);
    if let Some(k) = crash {
        sim.crash_at(k);
    }
    let dir = scratch.path().join("store");
    let mut acked = Acked::new();
    {
        let storage: Arc<dyn Storage> = sim.clone();
        if let Ok(store) = Store::open_or_create(&dir, sim_options(storage)) {
            let outcome = lifecycle_workload(&store, &mut acked);
            if crash.is_none() {
                outcome.map_err(|e| format!("workload without a crash: {e}"))?;
            }
        }
    }
    let points = sim.points();
    sim.crash().map_err(|e| format!("crash: {e}"))?;
    if !dir.join("STORE").exists() {
        return if acked.values().any(Option::is_some) {
            Err("the store is gone".to_owned())
        } else {
            Ok(points)
        };
    }
    check_after_crash(&dir, &acked)?;
    Ok(points)
}

/// Every session of the store opens whole; each acknowledged id is there with its events
/// or absent as acknowledged; the trash restores only whole sessions.
fn check_after_crash(dir: &Path, acked: &Acked) -> Result<(), String> {
    let fresh = SimStorage::new(dir.parent().unwrap_or(dir), 0).map_err(|e| e.to_string())?;
    let store = Store::open_or_create(dir, sim_options(Arc::new(fresh)))
        .map_err(|e| format!("reopen the store: {e}"))?;
    let listing = store.list().map_err(|e| format!("list: {e}"))?;
    if let Some(error) = listing.damaged.first() {
        return Err(format!("a damaged session: {error}"));
    }
    let whole = |id: &str| -> Result<Option<u64>, String> {
        match store.open_session(id) {
            Ok((session, opened)) => {
                let kept = session.seq_next() - opened.closers;
                for seq in 0..kept {
                    session
                        .event(seq)
                        .map_err(|e| format!("{id}: event {seq}: {e}"))?
                        .ok_or_else(|| format!("{id}: event {seq} missing"))?;
                }
                Ok(Some(kept))
            }
            Err(e) if e.code() == "SESSION_NOT_FOUND" => Ok(None),
            Err(e) => Err(format!("{id}: open: {e}")),
        }
    };
    for id in ["a", "f", "g"] {
        let found = whole(id)?;
        if let Some(&want) = acked.get(id)
            && found != want
        {
            return Err(format!("{id}: acknowledged {want:?}, found {found:?}"));
        }
        // Whatever the trash holds of it comes back whole.
        if found.is_none() {
            match store.restore(id) {
                Ok(()) => {
                    let back = whole(id)?;
                    if back.is_none() || back < Some(6) && id == "a" {
                        return Err(format!("{id}: restored as {back:?}"));
                    }
                }
                Err(e) if e.code() == "SESSION_NOT_FOUND" => {}
                Err(e) => return Err(format!("{id}: restore: {e}")),
            }
        }
    }
    Ok(())
}

/// STORE-9, STORE-13, STORE-24: create, fork, delete, restore, purge and remove, the
/// power going at every I/O point of the workload: the store opens, every session in it
/// opens whole, and what each returned call acknowledged holds.
#[test]
fn store_operations_survive_a_crash_at_every_io_point() {
    let total = lifecycle_run(None).unwrap_or_else(|e| panic!("no crash: {e}"));
    assert!(total > 50, "the workload ran {total} I/O points only");
    let mut failures = Vec::new();
    for k in 1..=total {
        if let Err(error) = lifecycle_run(Some(k)) {
            failures.push(format!("point {k}: {error}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {total}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// STORE-8, STORE-25: a session deleted and purged by another handle while `ls`
/// (`Store::list_summaries`) reads it is not listed, and is not damage. Before the fix the
/// listing, which reads each session through a handle of its directory (the handle
/// follows the directory into the trash), reported the session as `CORRUPT` ("the session
/// has no header.json") once the purge had removed its files.
#[test]
fn store_25_a_session_deleted_and_purged_while_listed_is_not_damage() {
    use surfacelog::internals::store::Step;
    let scratch = common::scratch("store_lifecycle", "summaries");
    let other = Store::open_or_create(&*scratch, StoreOptions::new()).unwrap();
    for id in ["a", "b"] {
        other.create(id, None, None).unwrap().close().unwrap();
    }
    let raced = Arc::new(std::sync::Mutex::new(None));
    let slot = Arc::clone(&raced);
    let store = Store::open_read_only(&*scratch, StoreOptions::new())
        .unwrap()
        .with_hook(move |step| {
            if step == Step::Summarizing("a") {
                let mut slot = slot.lock().unwrap();
                if slot.is_none() {
                    *slot = Some(other.delete("a").and_then(|()| other.purge()));
                }
            }
        });
    let listing = store.list_summaries().unwrap();
    let purged = raced.lock().unwrap().take().expect("the race ran");
    assert_eq!(purged.map_err(|e| e.to_string()), Ok(1));
    let damaged: Vec<String> = listing.damaged.iter().map(ToString::to_string).collect();
    assert!(damaged.is_empty(), "{damaged:?}");
    let ids: Vec<&str> = listing.sessions.iter().map(|s| s.header.id()).collect();
    assert_eq!(ids, ["b"]);
}

/// A store whose storage runs `race` once, just before the first open of a path ending
/// in `suffix` (a session's `LOCK`, before its lock is taken).
fn store_racing_at(
    dir: &Path,
    suffix: &'static str,
    race: impl Fn() + Send + Sync + 'static,
) -> Store {
    let done = std::sync::atomic::AtomicBool::new(false);
    let hooked = common::HookedStorage(Box::new(move |op| {
        if let common::Op::Open(path) = op
            && path.ends_with(suffix)
            && !done.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            race();
        }
        Ok(())
    }));
    Store::open_or_create(dir, StoreOptions::new().storage(Arc::new(hooked))).unwrap()
}

/// STORE-9, contract: a delete that loses a race with another handle's delete of the same
/// session finds it gone: `SESSION_NOT_FOUND`, as a delete after it would. Before the fix
/// it failed `IO` ("create .../LOCK: No such file or directory"): its lock's file had moved
/// into the trash with the session.
#[test]
fn store_9_a_delete_racing_a_delete_is_not_found_not_io() {
    let scratch = common::scratch("store_lifecycle", "delete-delete");
    let other = Store::open_or_create(&*scratch, StoreOptions::new()).unwrap();
    other.create("a", None, None).unwrap().close().unwrap();
    let raced = Arc::new(std::sync::Mutex::new(None));
    let slot = Arc::clone(&raced);
    let store = store_racing_at(&scratch, "sessions/a/log/LOCK", move || {
        *slot.lock().unwrap() = Some(other.delete("a"));
    });
    let outcome = store.delete("a");
    let first = raced.lock().unwrap().take().expect("the race ran");
    assert_eq!(first.map_err(|e| e.to_string()), Ok(()));
    assert_eq!(
        outcome
            .map_err(|e| (e.code(), e.to_string()))
            .map_err(|e| e.0),
        Err("SESSION_NOT_FOUND")
    );
}

/// STORE-24: a restore whose copy a purge removes meanwhile finds no copy:
/// `SESSION_NOT_FOUND`, and a restore whose copy another restore brought back first finds
/// the session there: `SESSION_EXISTS`. Before the fix both failed `IO` ("create
/// .../LOCK: No such file or directory"): the copy had moved before its lock was taken.
#[test]
fn store_24_a_restore_racing_a_purge_or_a_restore_says_what_happened() {
    for (race, code) in [
        ("purge", "SESSION_NOT_FOUND"),
        ("restore", "SESSION_EXISTS"),
    ] {
        let scratch = common::scratch("store_lifecycle", "restore-race");
        let other = Store::open_or_create(&*scratch, StoreOptions::new()).unwrap();
        other.create("a", None, None).unwrap().close().unwrap();
        other.delete("a").unwrap();
        let raced = Arc::new(std::sync::Mutex::new(None));
        let slot = Arc::clone(&raced);
        let store = store_racing_at(&scratch, "log/LOCK", move || {
            let outcome = if race == "purge" {
                other.purge().map(|_| ())
            } else {
                other.restore("a")
            };
            *slot.lock().unwrap() = Some(outcome);
        });
        let outcome = store.restore("a");
        let first = raced.lock().unwrap().take().expect("the race ran");
        assert_eq!(first.map_err(|e| e.to_string()), Ok(()), "{race}");
        assert_eq!(outcome.map_err(|e| e.code()), Err(code), "racing a {race}");
    }
}

/// STORE-24: a file put in `trash/` (no trashed session: those are directories) is left
/// there by a purge, which removes the trashed sessions around it. Before, the purge
/// renamed it and then failed `IO` removing it as a directory, and so did every later
/// purge, the sessions after it never removed.
#[test]
fn store_24_a_purge_leaves_a_file_in_the_trash_and_removes_the_sessions() {
    let scratch = tempfile::tempdir().unwrap();
    let store = Store::open_or_create(scratch.path(), StoreOptions::new()).unwrap();
    let junk = scratch.path().join("trash").join("notes.txt");
    std::fs::write(&junk, b"not a session").unwrap();
    for id in ["a", "b"] {
        store.create(id, None, None).unwrap().close().unwrap();
        store.delete(id).unwrap();
    }
    assert_eq!(store.purge().unwrap(), 2);
    assert_eq!(store.purge().unwrap(), 0);
    assert_eq!(std::fs::read(&junk).unwrap(), b"not a session");
    let left: Vec<_> = std::fs::read_dir(scratch.path().join("trash"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["notes.txt"]);
}

/// STORE-10, STORE-9: a fork whose source another handle deletes while the child is being
/// written (after the source's log was read, before its segments are linked) finds the
/// source gone: `SESSION_NOT_FOUND`, as a fork after the delete would, and no child.
/// Before, it failed `IO` naming a segment it could not link.
#[test]
fn store_10_a_fork_whose_source_is_deleted_meanwhile_is_not_found() {
    let scratch = common::scratch("store_lifecycle", "fork-delete");
    let other = Store::open_or_create(&*scratch, StoreOptions::new()).unwrap();
    let mut source = other.create("a", None, None).unwrap();
    closed_turn(&mut source, 1).unwrap();
    source.close().unwrap();
    let raced = Arc::new(std::sync::Mutex::new(None));
    let slot = Arc::clone(&raced);
    let done = std::sync::atomic::AtomicBool::new(false);
    let hooked = common::HookedStorage(Box::new(move |op| {
        if let common::Op::Create(path) = op
            && path.ends_with("header.json")
            && path.to_string_lossy().contains("/tmp/")
            && !done.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            *slot.lock().unwrap() = Some(other.delete("a"));
        }
        Ok(())
    }));
    let store =
        Store::open_or_create(&*scratch, StoreOptions::new().storage(Arc::new(hooked))).unwrap();
    let outcome = store.fork("a", surfacelog::Boundary::Last, "b");
    let deleted = raced.lock().unwrap().take().expect("the race ran");
    assert_eq!(deleted.map_err(|e| e.to_string()), Ok(()));
    assert_eq!(
        outcome.map(|_| ()).map_err(|e| e.code()),
        Err("SESSION_NOT_FOUND")
    );
    assert_eq!(
        store.open_session("b").map(|_| ()).unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
}
