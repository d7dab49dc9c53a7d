//! A fork reads its source as a follower does, with the source's checkpoint as a durable
//! mark (RCV-14): a source whose log lost events under its checkpoint is `CORRUPT`, never
//! copied whole into a child as if it ended there.

use crate::common;

use surfacelog::{Boundary, Durability, Store};

/// Tears the last turn's records of the only segment by zeroing from the start of the
/// record holding seq 21 (found by walking the records in the segment's format) to the end.
#[test]
fn a_fork_refuses_a_source_shorter_than_its_checkpoint() {
    let dir = common::scratch("rev", "fork-rcv14");
    let options = common::store_options(Durability::Sync, 1 << 20);
    let store = Store::open_or_create(dir.as_ref(), options).unwrap();
    let mut s = store.create("s", None, None).unwrap();
    for turn in 1..=4 {
        common::numbered_turn(&mut s, turn);
    }
    s.close().unwrap(); // checkpoint covers all 28 events
    let log = dir.join("sessions/s/log");
    let seg = common::files_ending(&log, ".seg").remove(0);
    // Remove the index and cut the last turn's records (zero them): as a lost tail.
    for entry in std::fs::read_dir(&log).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "idx") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let cut = common::record_of_seq(&seg, 21);
    let mut bytes = std::fs::read(&seg).unwrap();
    let end = bytes.iter().rposition(|b| *b != 0).unwrap() + 1;
    bytes[cut.at.start..end].fill(0);
    std::fs::write(&seg, &bytes).unwrap();
    let lost = cut.seqs.start;
    // Every read-only path refuses it: the checkpoint vouches for 28 events.
    let inspected = store.inspect("s").map(|s| s.seq_next());
    let inspect_err = inspected.expect_err("inspect refuses: RCV-14");
    assert_eq!(inspect_err.code(), "CORRUPT", "{inspect_err}");
    assert_eq!(store.follow("s").unwrap_err().code(), "CORRUPT");
    // A fork of its last event is a read of the source: it must not take the cut log for
    // the whole one.
    let forked = store.fork("s", Boundary::Last, "child");
    match forked {
        Ok(child) => panic!(
            "fork accepted a source that lost events {lost}..28 vouched by its checkpoint: child holds {} events",
            child.seq_next()
        ),
        Err(e) => assert_eq!(e.code(), "CORRUPT", "{e}"),
    }
}
