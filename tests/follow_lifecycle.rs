//! A follower (`store.md` STORE-11) while its session is deleted, replaced, or appended
//! to across segment rolls.

mod common;

use std::time::Duration;

use surfacelog::internals::log::Durability;
use surfacelog::internals::store::Store;

use common::{closed_turn, scratch, store_options};

/// Closed turns appended to `session` until its log holds at least `events` events.
fn fill<L: surfacelog::internals::session::SessionLog>(
    session: &mut surfacelog::internals::session::Session<L>,
    events: u64,
) {
    let mut turn = session.seq_next() + 1;
    while session.seq_next() < events {
        closed_turn(session, turn, &format!("message {turn}"), "output");
        turn += 1;
    }
}

/// STORE-11: a follower of a session deleted and created again follows the session it was
/// made for: at its wait's timeout it ends with `SESSION_NOT_FOUND`, even when the new
/// session's log has segments past the followed one's last. The path it reads by now names
/// another log: never `CORRUPT` for a log no one damaged.
#[test]
fn store_11_a_follower_of_a_replaced_session_with_more_segments_ends_not_found() {
    let dir = scratch("follow_lifecycle", "replaced");
    let store = Store::open_or_create(&dir, store_options(Durability::Sync, 4096)).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    fill(&mut session, 10);
    let committed = session.seq_next();
    session.close().unwrap();
    let mut follower = store.follow("s").unwrap();
    assert!(
        !follower
            .wait_for(committed, Duration::from_millis(5))
            .unwrap()
    );
    store.delete("s").unwrap();
    let mut again = store.create("s", None, None).unwrap();
    fill(&mut again, 4 * committed + 40);
    again.close().unwrap();
    let segments = common::files_ending(&dir.join("sessions").join("s").join("log"), "");
    assert!(segments.len() > 3, "the new log rolled: {segments:?}");
    let error = follower
        .wait_for(committed, Duration::from_millis(5))
        .unwrap_err();
    assert_eq!(error.code(), "SESSION_NOT_FOUND", "{error}");
}

/// STORE-11: the same for a follower of an empty session, whose segment 0 the new
/// session's replaces under the same name.
#[test]
fn store_11_a_follower_of_a_replaced_empty_session_ends_not_found() {
    let dir = scratch("follow_lifecycle", "replaced-empty");
    let store = Store::open_or_create(&dir, store_options(Durability::Sync, 4096)).unwrap();
    store.create("s", None, None).unwrap().close().unwrap();
    let mut follower = store.follow("s").unwrap();
    assert!(!follower.wait_for(0, Duration::from_millis(5)).unwrap());
    store.delete("s").unwrap();
    let mut again = store.create("s", None, None).unwrap();
    fill(&mut again, 3);
    again.close().unwrap();
    let error = follower.wait_for(0, Duration::from_millis(5)).unwrap_err();
    assert_eq!(error.code(), "SESSION_NOT_FOUND", "{error}");
}

/// A store whose session `s` holds at least 10 events, closed (`plain`), and a second
/// handle of it (`hooked`) whose storage, once `armed` is set, deletes `s` and creates it
/// again with at least `again(committed)` events (through `plain`) just after it opens a
/// segment of the log: a session replaced while a reader of it is being made. Bind `_dir`
/// while the store is used: the scratch directory goes with it.
struct Replacing {
    _dir: common::Scratch,
    plain: std::sync::Arc<Store>,
    hooked: Store,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    committed: u64,
}

fn replacing(name: &str, again: fn(u64) -> u64) -> Replacing {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use common::{HookedStorage, Op};

    let dir = scratch("follow_lifecycle", name);
    let plain =
        Arc::new(Store::open_or_create(&dir, store_options(Durability::Sync, 4096)).unwrap());
    let mut session = plain.create("s", None, None).unwrap();
    fill(&mut session, 10);
    let committed = session.seq_next();
    session.close().unwrap();
    let armed = Arc::new(AtomicBool::new(false));
    let hook = {
        let armed = Arc::clone(&armed);
        let plain = Arc::clone(&plain);
        move |op: Op<'_>| {
            if let Op::Opened(path) = op
                && path.extension().is_some_and(|e| e == "seg")
                && armed.swap(false, Ordering::SeqCst)
            {
                plain.delete("s").unwrap();
                let mut session = plain.create("s", None, None).unwrap();
                fill(&mut session, again(committed));
                session.close().unwrap();
            }
            Ok(())
        }
    };
    let options =
        store_options(Durability::Sync, 4096).storage(Arc::new(HookedStorage(Box::new(hook))));
    let hooked = Store::open(&dir, options).unwrap();
    Replacing {
        _dir: dir,
        plain,
        hooked,
        armed,
        committed,
    }
}

/// STORE-11: a session deleted and created again while a follower of it is being made
/// (after its log's first segment was opened): `SESSION_NOT_FOUND`, from `follow` or at
/// the follower's first wait, never `CORRUPT` for what it met in the new session's
/// directory, nor a follower that takes that directory for its session's.
#[test]
fn store_11_a_session_replaced_while_its_follower_is_made_ends_not_found() {
    use std::sync::atomic::Ordering;

    let Replacing {
        _dir,
        hooked,
        armed,
        committed,
        ..
    } = replacing("replaced-during-follow", |committed| 4 * committed + 40);
    armed.store(true, Ordering::SeqCst);
    let followed = hooked.follow("s");
    assert!(
        !armed.load(Ordering::SeqCst),
        "replaced while the follower was made"
    );
    // Refused, or made over the log it opened and ended at its first wait's timeout.
    let error = match followed {
        Ok(mut follower) => follower
            .wait_for(committed, Duration::from_millis(5))
            .unwrap_err(),
        Err(error) => error,
    };
    assert_eq!(error.code(), "SESSION_NOT_FOUND", "{error}");
}

/// STORE-11, STORE-15: a session deleted and created again while an inspection of it is
/// being made (after its log's first segment was opened): `SESSION_NOT_FOUND`, never a
/// read-only session made of the old session's header and the new one's log.
#[test]
fn store_15_a_session_replaced_while_it_is_inspected_is_not_found() {
    use std::sync::atomic::Ordering;

    let Replacing {
        _dir,
        plain,
        hooked,
        armed,
        ..
    } = replacing("replaced-during-inspect", |_| 3);
    armed.store(true, Ordering::SeqCst);
    let inspected = hooked.inspect("s");
    assert!(
        !armed.load(Ordering::SeqCst),
        "replaced while the inspection was made"
    );
    match inspected {
        Ok(session) => panic!(
            "an inspection of a replaced session, holding {} events",
            session.seq_next()
        ),
        Err(error) => assert_eq!(error.code(), "SESSION_NOT_FOUND", "{error}"),
    }
    // The new session inspects as itself.
    let new = plain.inspect("s").unwrap().seq_next();
    assert_eq!(hooked.inspect("s").unwrap().seq_next(), new);
}

/// STORE-11, STORE-15: a session removed for good (`Store::remove`: its directory gone,
/// its inode number free) and created again while an inspection or a follower of it is
/// being made, at a moment nothing of the old directory is held open (before the
/// inspection opens its checkpoint; before the follower lists its log). The new directory
/// may then get the old one's inode number (ext4 gives a freed number to the next file
/// made in the group): device and inode alone do not tell the two directories apart, the
/// birth time does (as CKP-8's identity). `SESSION_NOT_FOUND`, never an inspection of the
/// old session's header over the new session's log, nor `CORRUPT` for the old checkpoint
/// over the new log.
#[test]
fn store_11_a_session_removed_and_created_again_while_read_is_not_found() {
    use std::os::unix::fs::MetadataExt;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use common::{HookedStorage, Op};

    let header = |at: u64| format!(r#"{{"version":0,"id":"s","createdAt":{at}}}"#);
    let dir = scratch("follow_lifecycle", "removed-while-read");
    let plain =
        Arc::new(Store::open_or_create(&dir, store_options(Durability::Sync, 4096)).unwrap());
    let session_dir = dir.join("sessions").join("s");
    let ino = {
        let session_dir = session_dir.clone();
        move || std::fs::metadata(&session_dir).unwrap().ino()
    };
    let created = Arc::new(AtomicU64::new(1));
    let make = {
        let plain = Arc::clone(&plain);
        let created = Arc::clone(&created);
        move |events: u64| {
            let at = created.fetch_add(1, Ordering::SeqCst);
            let mut session = plain.create("s", Some(&header(at)), None).unwrap();
            fill(&mut session, events);
            session.close().unwrap();
        }
    };
    // Made and removed once first: the session's directory then takes the lowest free
    // inode number, which its removal frees for the next directory made.
    make(3);
    plain.remove("s").unwrap();
    // Where the hook replaces the session (a file name ending the path), and with how many
    // events; whether the new directory got the old one's inode number.
    let at: Arc<Mutex<Option<(&'static str, u64)>>> = Arc::new(Mutex::new(None));
    let reused = Arc::new(AtomicBool::new(false));
    let hook = {
        let at = Arc::clone(&at);
        let reused = Arc::clone(&reused);
        let plain = Arc::clone(&plain);
        let make = make.clone();
        let ino = ino.clone();
        move |op: Op<'_>| {
            let (Op::List(path) | Op::OpenRead(path)) = op else {
                return Ok(());
            };
            let mut armed = at.lock().unwrap();
            if let Some((name, events)) = *armed
                && path.ends_with(name)
            {
                *armed = None;
                let before = ino();
                plain.remove("s").unwrap();
                make(events);
                reused.store(ino() == before, Ordering::SeqCst);
            }
            Ok(())
        }
    };
    let options =
        store_options(Durability::Sync, 4096).storage(Arc::new(HookedStorage(Box::new(hook))));
    let hooked = Store::open(&dir, options).unwrap();

    // Each case is tried until the new directory gets the old one's inode number (other
    // tests making files meanwhile can take it first); nothing is shown where it never does.
    let tries = 20;
    // An inspection: the old header read, then the new session's checkpoint and log.
    make(12);
    for _ in 0..tries {
        *at.lock().unwrap() = Some(("checkpoint", 40));
        let inspected = hooked.inspect("s");
        assert!(at.lock().unwrap().is_none(), "replaced while inspected");
        if !reused.load(Ordering::SeqCst) {
            continue;
        }
        match inspected {
            Ok(session) => assert_eq!(
                session.header().text(),
                header(created.load(Ordering::SeqCst) - 1),
                "an inspection of one session's header over another's log ({} events)",
                session.seq_next()
            ),
            Err(error) => assert_eq!(error.code(), "SESSION_NOT_FOUND", "{error}"),
        }
        break;
    }
    // A follower: the old checkpoint (past 40 events) read, then the new log, of 12.
    for _ in 0..tries {
        plain.remove("s").unwrap();
        make(40);
        *at.lock().unwrap() = Some(("log", 12));
        let followed = hooked.follow("s");
        assert!(at.lock().unwrap().is_none(), "replaced while followed");
        if !reused.load(Ordering::SeqCst) {
            continue;
        }
        if let Err(error) = followed {
            assert_eq!(error.code(), "SESSION_NOT_FOUND", "{error}");
        }
        break;
    }
}
