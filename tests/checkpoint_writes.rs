//! When a writer writes its checkpoint (`checkpoint.md` CKP-5): on flush and close after
//! an append, and after an open that did not find one covering the whole log; never for
//! a session opened, read and closed, whose checkpoint on disk already covers every event.
//! Checked against a model over random sequences of appends, flushes, reopens, and a
//! checkpoint removed or set back to an older one; the last reopen finds a checkpoint
//! that covers the whole log, so none that was needed was skipped.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use surfacelog::{Durability, StoreOptions};

/// What the test does between two looks at the checkpoint writes.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Appends a closed turn.
    Append,
    /// Flushes.
    Flush,
    /// Closes and opens again.
    Reopen,
    /// Closes, removes the checkpoint, opens again.
    RemoveCheckpoint,
    /// Keeps a copy of the checkpoint on disk now (after a close).
    SaveCheckpoint,
    /// Closes, puts the saved copy back (a checkpoint behind the log), opens again.
    RestoreCheckpoint,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::Append),
        2 => Just(Step::Flush),
        2 => Just(Step::Reopen),
        1 => Just(Step::RemoveCheckpoint),
        1 => Just(Step::SaveCheckpoint),
        1 => Just(Step::RestoreCheckpoint),
    ]
}

/// Store options whose storage counts the checkpoints written (each one's temporary file
/// created, CKP-5), no checkpoint every N events, and no message pack.
fn counting_options(writes: &Arc<AtomicU64>) -> StoreOptions {
    let counted = Arc::clone(writes);
    let hook: common::Hook = Box::new(move |op| {
        if let common::Op::Create(path) = op
            && path
                .file_name()
                .is_some_and(|name| name == "checkpoint.tmp")
        {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    });
    common::store_options(Durability::Manual, 4096)
        .checkpoint_every(u64::MAX)
        .message_pack(0)
        .storage(Arc::new(common::HookedStorage(hook)))
}

/// Opens session `s`, checking that the model's view of the checkpoint matches what the
/// open reports: whether the checkpoint covered the whole log. Returns the session and
/// whether the checkpoint on disk now covers every event (the open writes one when it did
/// not use any).
fn reopen(
    store: &surfacelog::Store,
    writes: &AtomicU64,
    events: u64,
) -> (surfacelog::StoredSession, bool) {
    let before = writes.load(Ordering::SeqCst);
    let (session, opened) = store.open_session("s").unwrap();
    assert_eq!(session.seq_next(), events, "nothing lost");
    let written = writes.load(Ordering::SeqCst) - before;
    match opened.checkpoint {
        Ok(seq) if seq == events => {
            assert_eq!(
                written, 0,
                "a checkpoint covering the log is not written again"
            );
            // It opened the log over the chain it records (CKP-8), so flush and close keep
            // it; an empty log has no chain to open over, and gets it written again.
            assert_eq!(opened.log.from_known_chain, events > 0);
            (session, events > 0)
        }
        Ok(_) => {
            // Behind the log: used, and written again on the next flush or close.
            assert_eq!(written, 0);
            (session, false)
        }
        Err(_) => {
            assert_eq!(written, 1, "an open that used no checkpoint writes one");
            (session, true)
        }
    }
}

fn checkpoint_file(dir: &Path) -> std::path::PathBuf {
    dir.join("sessions/s/checkpoint")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn ckp_5_a_checkpoint_is_written_exactly_when_the_one_on_disk_does_not_cover_the_log(
        steps in proptest::collection::vec(step(), 1..16),
    ) {
        let scratch = common::scratch("ckpwrites", "store");
        let dir = scratch.join("store");
        let writes = Arc::new(AtomicU64::new(0));
        let store = surfacelog::Store::open_or_create(&dir, counting_options(&writes)).unwrap();
        let mut session = store.create("s", None, None).unwrap();
        // The model: whether the checkpoint on disk covers every event (and is kept: the
        // empty log's, written at creation, is written again).
        let mut covers = false;
        let mut events = 0;
        let mut turn = 0;
        let mut saved: Option<Vec<u8>> = None;
        let flush_or_close = |close: bool, session: surfacelog::StoredSession, covers: &mut bool| {
            let before = writes.load(Ordering::SeqCst);
            let session = if close {
                session.close().unwrap();
                None
            } else {
                let mut session = session;
                session.flush().unwrap();
                Some(session)
            };
            let written = writes.load(Ordering::SeqCst) - before;
            assert_eq!(written, u64::from(!*covers), "checkpoints written");
            *covers = true;
            session
        };
        for step in steps {
            match step {
                Step::Append => {
                    turn += 1;
                    common::numbered_turn(&mut session, turn);
                    events = session.seq_next();
                    covers = false;
                }
                Step::Flush => {
                    session = flush_or_close(false, session, &mut covers).unwrap();
                }
                Step::Reopen | Step::RemoveCheckpoint | Step::SaveCheckpoint | Step::RestoreCheckpoint => {
                    let none = flush_or_close(true, session, &mut covers);
                    assert!(none.is_none());
                    match step {
                        Step::RemoveCheckpoint => std::fs::remove_file(checkpoint_file(&dir)).unwrap(),
                        Step::SaveCheckpoint => saved = Some(std::fs::read(checkpoint_file(&dir)).unwrap()),
                        Step::RestoreCheckpoint => {
                            if let Some(bytes) = &saved {
                                std::fs::write(checkpoint_file(&dir), bytes).unwrap();
                            }
                        }
                        _ => {}
                    }
                    (session, covers) = reopen(&store, &writes, events);
                }
            }
        }
        flush_or_close(true, session, &mut covers);
        // Whatever was skipped, the checkpoint on disk covers the whole log.
        let (session, opened) = store.open_session("s").unwrap();
        prop_assert_eq!(opened.checkpoint.ok(), Some(events));
        drop(session);
    }
}

/// CKP-2, CKP-5: a checkpoint whose nodes fail their check on first read is written again
/// at the next flush, once: the surface's nodes then come from a fold, and the checkpoint
/// written from them covers every event with sound nodes, so later flushes and the close
/// write none until an append.
#[test]
fn ckp_5_a_checkpoint_with_damaged_nodes_is_written_again_once() {
    let scratch = common::scratch("ckpwrites", "refolded");
    let dir = scratch.join("store");
    let writes = Arc::new(AtomicU64::new(0));
    let store = surfacelog::Store::open_or_create(&dir, counting_options(&writes)).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    for turn in 1..=3 {
        common::numbered_turn(&mut session, turn);
    }
    session.close().unwrap();
    let truth = common::messages_of(&store.open_session("s").unwrap().0);
    assert!(!truth.is_empty());
    // The first node's bytes (CKP-1: the nodes start at byte 48), changed: the nodes' CRC
    // fails at their first read (CKP-2).
    let path = checkpoint_file(&dir);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[48] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let before = writes.load(Ordering::SeqCst);
    let (mut session, opened) = store.open_session("s").unwrap();
    assert_eq!(opened.checkpoint.ok(), Some(session.seq_next()));
    assert_eq!(
        common::messages_of(&session),
        truth,
        "the nodes refolded from the log"
    );
    for _ in 0..3 {
        session.flush().unwrap();
    }
    session.close().unwrap();
    assert_eq!(
        writes.load(Ordering::SeqCst) - before,
        1,
        "written again once, not at every flush"
    );
    let (session, opened) = store.open_session("s").unwrap();
    assert_eq!(opened.checkpoint.ok(), Some(session.seq_next()));
    assert_eq!(
        session.surface().node_state(),
        surfacelog::internals::surface::NodeState::Unchecked
    );
    assert_eq!(common::messages_of(&session), truth);
    assert_eq!(
        session.surface().node_state(),
        surfacelog::internals::surface::NodeState::Checked,
        "the checkpoint written again has sound nodes"
    );
}
