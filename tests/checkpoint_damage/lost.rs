//! A checkpoint whose nodes fail their check over a log damaged under it (CKP-2 `Lost`):
//! `messages()` is `CORRUPT`, as a fresh open without the checkpoint is, never `Ok` with
//! no message at all.

use crate::common;

use surfacelog::{Durability, Store};

#[test]
fn lost_checkpoint_nodes_never_read_as_a_session_without_messages() {
    let dir = common::scratch("rev", "lost");
    let options = common::store_options(Durability::Manual, 64 << 10);
    let store = Store::open_or_create(dir.as_ref(), options).unwrap();
    let mut s = store.create("s", None, None).unwrap();
    for turn in 1..=200 {
        common::numbered_turn(&mut s, turn);
    }
    s.close().unwrap();
    let segments = common::files_ending(&dir.join("sessions/s/log"), ".seg");
    assert!(segments.len() >= 2, "{segments:?}");
    // Damage a sealed segment's record (a bad disk), and one node of the checkpoint.
    let mut bytes = std::fs::read(&segments[0]).unwrap();
    bytes[300] ^= 0x01;
    std::fs::write(&segments[0], &bytes).unwrap();
    let checkpoint = dir.join("sessions/s/checkpoint");
    let mut ckp = std::fs::read(&checkpoint).unwrap();
    ckp[48] ^= 0x01;

    // Without the checkpoint: the session is refused, CORRUPT.
    std::fs::remove_file(&checkpoint).unwrap();
    let fresh = store.open_session("s").map(|_| ());
    assert_eq!(fresh.unwrap_err().code(), "CORRUPT");
    let fresh = store.inspect("s").map(|_| ());
    assert_eq!(fresh.unwrap_err().code(), "CORRUPT");

    // With the damaged checkpoint: opening succeeds (acceptable: CKP-2 defers the check),
    // but the messages must not come back as an empty conversation.
    std::fs::write(&checkpoint, &ckp).unwrap();
    let inspected = store.inspect("s").unwrap();
    let messages = inspected.messages().map(|m| m.len());
    assert!(
        messages.is_err(),
        "inspect: messages() = {messages:?} over a surface whose nodes were lost"
    );
    drop(inspected);
    let (session, _) = store.open_session("s").unwrap();
    let messages = session.messages().map(|m| m.len());
    assert!(
        messages.is_err(),
        "open: messages() = {messages:?} over a surface whose nodes were lost"
    );
}
