//! Fork (contract §7) on disk, compared with an independent model written from the
//! contract text: the child's events are the source's prefix `0..=boundary` plus the
//! end-seed marker (unless the prefix ends with one), its surface and replace generation
//! those of the fold of those events (the model of §4 in `common/fold_model.rs`), its
//! messages the surface's nodes that project one, its first live seq the prefix length
//! and its header's `seedLength` the same; a boundary past the log is `INVALID_BOUNDARY`
//! and one inside an open turn `OPEN_TURN`; the source is unchanged.
//!
//! Each case builds a valid source log of up to 39 events with the fold model's generator
//! (faults off, with turn brackets), stores it in a temporary store (checkpoints every 1
//! to 5 events), and forks it at 1 to 4 random boundaries; each child is checked as
//! returned and again after reopening. 120 cases per run.

// serde_json, which these tests build their events with, is a dependency of these features.
#![cfg(any(feature = "cli", feature = "serde"))]

#[path = "common/fold_model.rs"]
mod fold_model;

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use surfacelog::internals::clock::ManualClock;
use surfacelog::{Boundary, Store, StoreOptions, StoredSession};

use fold_model::{Model, build, same};

/// A seq as an index.
fn index(seq: u64) -> usize {
    usize::try_from(seq).expect("a seq fits in usize")
}

/// A length as a seq.
fn seq_of(len: usize) -> u64 {
    u64::try_from(len).expect("a length fits in u64")
}

/// A valid source log from the fold generator (faults off), with turn brackets where
/// `action[0] % 16 == 0`; events the model refuses are left out.
fn source_log(actions: &[[u16; 6]]) -> Vec<String> {
    let mut model = Model::default();
    let mut texts = Vec::new();
    let mut open = false;
    for action in actions {
        let mut action = *action;
        if action[5] % 12 == 0 {
            action[5] += 1; // no faults
        }
        let bracket = action[0] % 16 == 0;
        let mut event = if bracket {
            let ty = if open { "turn/end" } else { "turn/start" };
            open = !open;
            json!({"type": ty, "seq": model.events_len(), "time": 7, "data": {"turn": 1}})
        } else {
            build(&model, &action)
        };
        // only the brackets above open turns
        if event["type"] == json!("turn/start") && !bracket {
            event = json!({"type": "plugin/y", "seq": event["seq"], "time": 7, "data": {}});
        }
        if model.clone().step(&event).is_err() {
            continue;
        }
        model.step(&event).expect("accepted on a copy");
        texts.push(serde_json::to_string(&event).expect("a JSON value serializes"));
    }
    texts
}

/// Every event of `session`, as stored.
fn stored_texts(session: &StoredSession) -> Vec<String> {
    (0..session.seq_next())
        .map(|seq| {
            session
                .event(seq)
                .expect("a stored event reads")
                .expect("a seq below seq_next has an event")
                .text()
                .into_owned()
        })
        .collect()
}

/// The seqs of the surface's nodes that project a message: all but assistant messages
/// with empty content.
fn message_seqs(model: &Model, events: &[Value]) -> Vec<u64> {
    model
        .nodes
        .iter()
        .copied()
        .filter(|&seq| {
            let event = &events[index(seq)];
            !(event["type"] == json!("assistant/message")
                && event["data"]["message"]["content"] == json!([]))
        })
        .collect()
}

/// Compares `child`, forked at `boundary`, with the events `want` and their fold.
fn check_child(
    child: &StoredSession,
    boundary: u64,
    want: &[Value],
    reopened: bool,
) -> Result<(), TestCaseError> {
    let mut model = Model::default();
    for event in want {
        model.step(event).expect("a fork's child folds");
    }
    let events: Vec<Value> = stored_texts(child)
        .iter()
        .map(|text| serde_json::from_str(text).expect("a stored event is JSON"))
        .collect();
    prop_assert!(
        events.len() == want.len() && events.iter().zip(want).all(|(got, w)| same(got, w)),
        "events differ at boundary {}: {:#?}",
        boundary,
        events
    );
    prop_assert_eq!(
        child.surface().nodes(),
        &model.nodes[..],
        "boundary {} reopened {}",
        boundary,
        reopened
    );
    prop_assert_eq!(
        child.surface().replace_generation(),
        seq_of(model.replacements.len())
    );
    let first_live = if reopened {
        seq_of(want.len())
    } else {
        boundary + 1
    };
    prop_assert_eq!(child.first_live_seq(), first_live);
    let seed_length = format!("\"seedLength\":{}", boundary + 1);
    prop_assert!(
        child.header().text().contains(&seed_length),
        "{}",
        child.header().text()
    );
    let messages: Vec<u64> = child
        .messages()
        .expect("the child's messages read")
        .iter()
        .map(|message| message.seq)
        .collect();
    prop_assert_eq!(messages, message_seqs(&model, want));
    Ok(())
}

/// Forks the source `stored` in `store` at `cut` (modulo the log's length + 1) as
/// `child` and checks the outcome.
fn check_fork(
    store: &Store,
    stored: &[String],
    cut: u16,
    child: &str,
) -> Result<(), TestCaseError> {
    let boundary = u64::from(cut) % (seq_of(stored.len()) + 1);
    let got = store.fork("src", Boundary::Seq(boundary), child);
    if boundary >= seq_of(stored.len()) {
        prop_assert_eq!(
            got.err().map(|error| error.code()),
            Some("INVALID_BOUNDARY")
        );
        return Ok(());
    }
    let prefix: Vec<Value> = stored[..=index(boundary)]
        .iter()
        .map(|text| serde_json::from_str(text).expect("a stored event is JSON"))
        .collect();
    let last_bracket = prefix
        .iter()
        .rev()
        .find(|event| event["type"] == json!("turn/start") || event["type"] == json!("turn/end"));
    if last_bracket.is_some_and(|event| event["type"] == json!("turn/start")) {
        prop_assert_eq!(got.err().map(|error| error.code()), Some("OPEN_TURN"));
        return Ok(());
    }
    let forked = got.map_err(|error| TestCaseError::fail(error.to_string()))?;
    let mut want = prefix;
    if want.last().map(|event| &event["type"]) != Some(&json!("session/end-seed")) {
        want.push(json!({"type": "session/end-seed", "seq": boundary + 1, "time": 99, "data": {}}));
    }
    check_child(&forked, boundary, &want, false)?;
    forked.close().expect("the child closes");
    let (reopened, _) = store.open_session(child).expect("the child reopens");
    check_child(&reopened, boundary, &want, true)?;
    reopened.close().expect("the child closes");
    Ok(())
}

fn check(actions: &[[u16; 6]], cuts: &[u16], every: u64) -> Result<(), TestCaseError> {
    let texts = source_log(actions);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let options = StoreOptions::new()
        .checkpoint_every(every)
        .message_pack(1)
        .clock(Arc::new(ManualClock::new(99)));
    let store = Store::open_or_create(dir.path(), options).expect("the store opens");
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    store
        .create("src", None, Some(&refs))
        .expect("the source is created")
        .close()
        .expect("the source closes");
    // the events as stored (the end-seed marker included)
    let (source, _) = store.open_session("src").expect("the source opens");
    let stored = stored_texts(&source);
    source.close().expect("the source closes");
    for (k, cut) in cuts.iter().enumerate() {
        check_fork(&store, &stored, *cut, &format!("c{k}"))?;
    }
    let (source, _) = store.open_session("src").expect("the source opens");
    prop_assert_eq!(stored_texts(&source), stored, "the source changed");
    source.close().expect("the source closes");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 120, ..ProptestConfig::default() })]
    #[test]
    fn fork_matches_model(
        actions in proptest::collection::vec(proptest::array::uniform6(any::<u16>()), 0..40),
        cuts in proptest::collection::vec(any::<u16>(), 1..5),
        every in 1u64..6,
    ) {
        check(&actions, &cuts, every)?;
    }
}
