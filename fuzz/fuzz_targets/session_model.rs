//! Random session operations on a stored session, checked against a naive model of the
//! surface (`common/ops.rs`, after `tests/surface_model.rs`): appends of every message
//! kind, turn and step boundaries, compactions, prunes, checkpoints, reopenings and forks.
//! After each operation the session's messages and nodes equal the model's, a refused
//! operation changes neither, and a reopened (or forked) session reads the same surface.
#![no_main]

#[path = "common/ops.rs"]
mod ops;
#[path = "common/scratch.rs"]
mod scratch;

use libfuzzer_sys::fuzz_target;
use surfacelog::internals::log::Durability;
use surfacelog::internals::session::Boundary;
use surfacelog::internals::store::{Store, StoreOptions};

/// Crash repair at open (contract §8) appends the closers of an interrupted turn: the
/// messages among them (interrupted tool results) join the model's surface.
fn repaired<L: surfacelog::internals::session::SessionLog>(
    session: &surfacelog::internals::session::Session<L>,
    model: &mut ops::Model,
    before: u64,
) {
    for message in session.messages().expect("the messages read back") {
        if message.seq >= before {
            assert!(!model.messages.contains_key(&message.seq));
            model.nodes.push(message.seq);
            model.messages.insert(message.seq, message.json.to_owned());
            if message.json.contains(r#""kind":"tool""#) {
                model.tools.insert(message.seq);
            }
        }
    }
}

fuzz_target!(|bytes: &[u8]| {
    let dir = scratch::base("session").join("store");
    let _ = std::fs::remove_dir_all(&dir);
    let options = StoreOptions::new()
        .segment_bytes(16 << 10)
        .durability(Durability::Manual)
        // Small, so that appends write checkpoints too.
        .checkpoint_every(7);
    let store = Store::open_or_create(&dir, options).unwrap();
    let mut id = String::from("s0");
    let mut session = store.create(&id, None, None).unwrap();
    let mut model = ops::Model::default();
    let mut forks = 0;
    for op in ops::ops(bytes, 200) {
        let before = session.seq_next();
        match op {
            ops::Op::Checkpoint => session.flush().expect("a flush"),
            ops::Op::Reopen => {
                session.close().expect("a close");
                session = store.open_session(&id).expect("a reopen").0;
                repaired(&session, &mut model, before);
            }
            ops::Op::Fork => {
                forks += 1;
                let child = format!("s{forks}");
                session.flush().expect("a flush");
                match store.fork(&id, Boundary::Last, &child) {
                    Ok(forked) => {
                        // The source is unchanged; the child holds its surface.
                        ops::check(&forked, &model, "a fork");
                        session.close().expect("a close");
                        let (source, _) = store.open_session(&id).expect("the source reopens");
                        ops::check(&source, &model, "a fork (source)");
                        drop(source);
                        session = forked;
                        id = child;
                    }
                    // A fork inside an open turn is refused (contract §7).
                    Err(e) => assert_eq!(e.code(), "OPEN_TURN", "{e}"),
                }
            }
            op => {
                if !ops::apply(&mut session, &mut model, op) {
                    assert_eq!(session.seq_next(), before, "a refused {op:?} appended");
                }
            }
        }
        ops::check(&session, &model, &format!("{op:?}"));
    }
    let seq_next = session.seq_next();
    session.close().expect("a close");
    let (again, _) = store.open_session(&id).expect("a final reopen");
    repaired(&again, &mut model, seq_next);
    ops::check(&again, &model, "the final reopen");
});
