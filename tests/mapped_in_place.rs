//! A map is not a copy: bytes the engine checked once and keeps mapped may be read again
//! from the disk or the page cache at any later access, so a change in place after the
//! check (a page read again from failing media, a write that is not the engine's) must be
//! found by the next read that relies on them, never returned or written on.

use std::os::unix::fs::FileExt;
use std::path::Path;

mod common;

use common::messages_of;

use surfacelog::{Durability, Store};

/// A store in a scratch directory named `name` whose session `s` holds `turns` closed
/// turns, closed (its checkpoint written).
fn closed_session(name: &str, turns: u64) -> (common::Scratch, Store) {
    let dir = common::scratch("mapped_in_place", name);
    let store = Store::open_or_create(
        dir.as_ref(),
        common::store_options(Durability::Sync, 1 << 20),
    )
    .unwrap();
    let mut session = store.create("s", None, None).unwrap();
    for turn in 1..=turns {
        common::numbered_turn(&mut session, turn);
    }
    session.close().unwrap();
    (dir, store)
}

/// Writes `bytes` at `offset` of the file at `path`, in place (the same inode).
fn write_in_place(path: &Path, offset: u64, bytes: &[u8]) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(bytes, offset).unwrap();
}

/// CKP-2, CKP-7: a held session's checkpoint nodes, read in place from the map and checked
/// on their first read, changed in place afterwards (node 0, the first user message, given
/// seq 0, the turn's `turn/start`: still a surface by its invariants, one message fewer;
/// the CRC no longer matches) are checked again as the next read of the messages, of the surface and
/// the next checkpoint written begin: the nodes come from a fold of the log then, by a
/// writer and by a read-only inspection alike, and the changed nodes are never written
/// into a new checkpoint.
#[test]
fn ckp_2_checkpoint_nodes_changed_in_place_under_a_held_session_are_not_used() {
    let (dir, store) = closed_session("ckp-nodes", 6);
    let checkpoint = dir.join("sessions/s/checkpoint");
    let (mut writer, opened) = store.open_session("s").unwrap();
    assert!(opened.checkpoint.is_ok(), "{:?}", opened.checkpoint);
    let reader = store.inspect("s").unwrap();
    let truth = messages_of(&writer);
    let nodes = writer.surface().nodes().to_vec();
    assert!(nodes.len() >= 3, "{nodes:?}");
    assert_eq!(messages_of(&reader), truth);
    let saved = std::fs::read(&checkpoint).unwrap();
    // Node 0 (offset 48) set to seq 0: keys still increase, and event 0 has no message.
    assert_eq!(nodes[0], 1);
    write_in_place(&checkpoint, 48, &0_u64.to_le_bytes());
    for (what, messages, surface) in [
        (
            "writer",
            messages_of(&writer),
            writer.surface().nodes().to_vec(),
        ),
        {
            // The surface asked for first: that read checks the nodes again too.
            let surface = reader.surface().nodes().to_vec();
            ("inspection", messages_of(&reader), surface)
        },
    ] {
        assert_eq!(messages, truth, "{what}: the changed nodes are not used");
        assert_eq!(surface, nodes, "{what}");
    }
    // Put back, then changed again before the writer's next checkpoint.
    write_in_place(&checkpoint, 48, &saved[48..56]);
    assert_eq!(messages_of(&writer), truth, "nor after they are put back");
    write_in_place(&checkpoint, 48, &0_u64.to_le_bytes());
    // A log-only turn: the surface keeps its mapped nodes, and close writes a checkpoint.
    common::turn_start(&mut writer, 99);
    common::turn_end(&mut writer, 99);
    writer.close().unwrap();
    drop(reader);
    let (session, opened) = store.open_session("s").unwrap();
    assert!(opened.checkpoint.is_ok(), "{:?}", opened.checkpoint);
    assert_eq!(messages_of(&session), truth, "the new checkpoint's nodes");
    assert_eq!(session.surface().nodes(), nodes.as_slice());
}

/// CKP-2: a compaction on a held session whose mapped nodes changed in place since their
/// check finds its range in nodes checked again (a fold of the log), never in the changed
/// ones: the summary records the nodes it really shadows, and the surface after it is the
/// one a fold of the log gives.
#[test]
fn ckp_2_a_compaction_never_reads_checkpoint_nodes_changed_in_place() {
    let (dir, store) = closed_session("ckp-compact", 4);
    let checkpoint = dir.join("sessions/s/checkpoint");
    let (mut writer, opened) = store.open_session("s").unwrap();
    assert!(opened.checkpoint.is_ok(), "{:?}", opened.checkpoint);
    let nodes = writer.surface().nodes().to_vec();
    assert_eq!(nodes[0], 1);
    // Node 0 set to seq 0 after the check: the range 1..=nodes[2] is not on those nodes.
    write_in_place(&checkpoint, 48, &0_u64.to_le_bytes());
    let appended = writer.seq_next();
    common::compact(&mut writer, nodes[0], nodes[2], "sum");
    let expected = writer.surface().nodes().to_vec();
    assert!(expected[0] >= appended, "the summary: {expected:?}");
    assert_eq!(expected[1..], nodes[3..]);
    let history = writer.replacements().unwrap();
    let replaced = history.replacements().next().unwrap();
    assert_eq!(replaced.shadowed, &nodes[..3]);
    writer.close().unwrap();
    let (session, _) = store.open_session("s").unwrap();
    assert_eq!(session.surface().nodes(), expected.as_slice());
    let report = store.verify(None).unwrap();
    assert!(report.store.is_empty(), "{:?}", report.store);
    let problems = &report.sessions[0].problems;
    assert!(problems.is_empty(), "{problems:?}");
}

/// What [`lost_under`]'s storage does next.
const IDLE: u8 = 0;
/// At the next write: change node 0 of the checkpoint in place, then fail.
const ARMED: u8 = 1;
/// Every listing of the log directory fails: a fold of the log (CKP-2's refold) cannot
/// open it.
const FAILING: u8 = 2;

/// A store over a storage that, once `state` is [`ARMED`], changes node 0 of session `s`'s
/// checkpoint in place at the next write and from then on fails every listing of its log
/// directory: checkpoint nodes that then fail their check cannot be folded again from the
/// log (`NodeState::Lost`). The session holds six turns, closed, with its checkpoint.
fn lost_under(dir: &Path, state: &std::sync::Arc<std::sync::atomic::AtomicU8>) -> Store {
    use std::sync::atomic::Ordering;
    let checkpoint = dir.join("sessions/s/checkpoint");
    let log = dir.join("sessions/s/log");
    let hook_state = std::sync::Arc::clone(state);
    let hook: common::Hook = Box::new(move |op| {
        match (op, hook_state.load(Ordering::SeqCst)) {
            (common::Op::Write, ARMED) => {
                hook_state.store(FAILING, Ordering::SeqCst);
                write_in_place(&checkpoint, 48, &0_u64.to_le_bytes());
            }
            (common::Op::List(path), FAILING) if path == log => {
                return Err(std::io::Error::other("listing refused"));
            }
            _ => {}
        }
        Ok(())
    });
    let options = common::store_options(Durability::Sync, 1 << 20)
        .storage(std::sync::Arc::new(common::HookedStorage(hook)));
    let store = Store::open_or_create(dir, options).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    for turn in 1..=6 {
        common::numbered_turn(&mut session, turn);
    }
    session.close().unwrap();
    store
}

/// CKP-2: checkpoint nodes changed in place while an append is written (after its
/// admission checked them, before the surface copies them), which then cannot be folded
/// again from the log, are lost: every later read is refused and no checkpoint is
/// written from them, never a surface holding the appended node alone (every earlier
/// message dropped without an error, and that surface checkpointed for every later open).
#[test]
fn ckp_2_nodes_lost_as_the_surface_is_copied_are_never_taken_for_an_empty_surface() {
    use std::sync::atomic::Ordering;
    let dir = common::scratch("mapped_in_place", "lost-at-copy");
    let state = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(IDLE));
    let store = lost_under(dir.as_ref(), &state);
    let (mut writer, opened) = store.open_session("s").unwrap();
    assert!(opened.checkpoint.is_ok(), "{:?}", opened.checkpoint);
    let truth = messages_of(&writer);
    assert!(truth.len() >= 3, "{truth:?}");
    common::turn_start(&mut writer, 7);
    state.store(ARMED, Ordering::SeqCst);
    // Admitted against the nodes as they were; they change as its record is written.
    let appended = writer.append::<surfacelog::kinds::UserMessage>(
        &common::user("u7"),
        surfacelog::SurfaceIntent::append(),
    );
    assert_eq!(
        state.load(Ordering::SeqCst),
        FAILING,
        "changed during the append"
    );
    if let Ok(messages) = writer.messages() {
        let messages: Vec<(u64, String)> = messages
            .iter()
            .map(|m| (m.seq, m.json.to_owned()))
            .collect();
        assert_eq!(
            messages[..truth.len().min(messages.len())],
            truth[..truth.len().min(messages.len())],
            "appended: {appended:?}; the earlier messages are never dropped"
        );
        assert!(messages.len() > truth.len(), "{messages:?}");
    }
    // The log can be listed again: close writes no checkpoint from the lost nodes.
    state.store(IDLE, Ordering::SeqCst);
    writer.close().unwrap();
    let (session, _) = store.open_session("s").unwrap();
    let after = messages_of(&session);
    assert_eq!(after.len(), truth.len() + 1, "every later open: {after:?}");
    assert_eq!(after[..truth.len()], truth[..]);
}

/// CKP-2: a compaction or a prune on a held session whose mapped nodes changed in place
/// since their check and cannot be folded again from the log (lost) is refused as every
/// read deriving something from the nodes is, with the error the fold met (here `IO`:
/// the log's listing fails): never `REPLACE_START_NOT_ON_SURFACE`, which blames the
/// caller's range for damage.
#[test]
fn ckp_2_a_compaction_or_prune_on_lost_nodes_is_refused_with_the_fold_s_error() {
    use std::sync::atomic::Ordering;
    let dir = common::scratch("mapped_in_place", "lost-compact");
    let state = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(IDLE));
    let store = lost_under(dir.as_ref(), &state);
    let (mut writer, _) = store.open_session("s").unwrap();
    let nodes = writer.surface().nodes().to_vec();
    // Changed in place after the check; the log cannot be folded again.
    write_in_place(&dir.join("sessions/s/checkpoint"), 48, &0_u64.to_le_bytes());
    state.store(FAILING, Ordering::SeqCst);
    let message = common::user("sum");
    let compacted = writer.compact(&surfacelog::Compaction {
        compaction_id: "k",
        turn: None,
        start: nodes[0],
        end: nodes[2],
        summary: "[]",
        summary_extra: None,
        message: &message,
    });
    assert_eq!(compacted.unwrap_err().code(), "IO");
    let pruned = writer.prune(&surfacelog::Prune {
        seq: nodes[2],
        content: "[]",
        shadowed_token_count: 1,
    });
    assert_eq!(pruned.unwrap_err().code(), "IO");
    assert_eq!(writer.messages().unwrap_err().code(), "IO");
}
