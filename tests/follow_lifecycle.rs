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

/// STORE-11: a session deleted and created again while a follower of it is being made
/// (after its log's first segment was opened): `SESSION_NOT_FOUND`, from `follow` or at
/// the follower's first wait, never `CORRUPT` for what it met in the new session's
/// directory, nor a follower that takes that directory for its session's.
#[test]
fn store_11_a_session_replaced_while_its_follower_is_made_ends_not_found() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use common::{HookedStorage, Op};

    let dir = scratch("follow_lifecycle", "replaced-during-follow");
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
                let mut again = plain.create("s", None, None).unwrap();
                fill(&mut again, 4 * committed + 40);
                again.close().unwrap();
            }
            Ok(())
        }
    };
    let options =
        store_options(Durability::Sync, 4096).storage(Arc::new(HookedStorage(Box::new(hook))));
    let hooked = Store::open(&dir, options).unwrap();
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
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use common::{HookedStorage, Op};

    let dir = scratch("follow_lifecycle", "replaced-during-inspect");
    let plain =
        Arc::new(Store::open_or_create(&dir, store_options(Durability::Sync, 4096)).unwrap());
    let mut session = plain.create("s", None, None).unwrap();
    fill(&mut session, 10);
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
                let mut again = plain.create("s", None, None).unwrap();
                fill(&mut again, 3);
                again.close().unwrap();
            }
            Ok(())
        }
    };
    let options =
        store_options(Durability::Sync, 4096).storage(Arc::new(HookedStorage(Box::new(hook))));
    let hooked = Store::open(&dir, options).unwrap();
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
