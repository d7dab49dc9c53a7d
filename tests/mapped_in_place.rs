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
