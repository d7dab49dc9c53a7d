//! The pure fold's refusals and result (contract §4, steps 1-5), compared with an
//! independent model written from the contract text alone (`common/fold_model.rs`).
//!
//! Each case is a random log of 1 to 59 events built one at a time against the model's
//! state: log-only events, appends of every eligible type, replaces whose ranges come from
//! the current surface (nested compactions, prunes of tool results) and, one event in
//! twelve, a fault of a kind §4 names (a seq out of order, a marker where none may be, a
//! bad `surfaceOp` or `sourceEventSeqs`, a replace off the surface, reversed, missing a
//! source, or a prune that changes more than the output). The log is folded with
//! `Surface::fold_json`; the engine must refuse with the code of the model's first
//! refusal, or accept with the model's nodes and list of replaces. 3000 cases per run, and
//! a fixed-seed run of 3000 more checks that the generator reaches every refusal code.
//!
//! The model and the engine compare `seq`s as numbers (contract §2), so `7.0` is `7`.

// serde_json, which these tests build their events with, is a dependency of these features.
#![cfg(any(feature = "cli", feature = "serde"))]

#[path = "common/fold_model.rs"]
mod fold_model;

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use surfacelog::internals::event::Vocabulary;
use surfacelog::internals::surface::Surface;

use fold_model::{Model, build};

/// Every refusal code of §4 steps 1-5.
const CODES: [&str; 16] = [
    "SEQ_NOT_CONTIGUOUS",
    "SURFACE_OP_FORBIDDEN",
    "SOURCES_FORBIDDEN",
    "SURFACE_OP_REQUIRED",
    "SURFACE_OP_INVALID",
    "SOURCES_INVALID",
    "SOURCES_EMPTY",
    "SOURCES_DUPLICATE",
    "SOURCES_NOT_EARLIER",
    "REPLACE_START_NOT_ON_SURFACE",
    "REPLACE_END_NOT_ON_SURFACE",
    "REPLACE_REVERSED",
    "REPLACE_SOURCES_INCOMPLETE",
    "TOOL_REWRITE_NOT_SINGLE",
    "TOOL_REWRITE_TARGET",
    "TOOL_REWRITE_CHANGED",
];

/// Cases per run.
const CASES: u32 = 3000;

/// What the model made of one case: its first refusal, and how many replaces it applied.
struct Outcome {
    refusal: Option<&'static str>,
    replaces: usize,
}

fn actions() -> impl Strategy<Value = Vec<[u16; 6]>> {
    proptest::collection::vec(proptest::array::uniform6(any::<u16>()), 1..60)
}

/// Builds a log from `actions` (stopping at the model's first refusal), folds it with the
/// engine and compares.
fn check(actions: &[[u16; 6]]) -> Result<Outcome, TestCaseError> {
    let mut model = Model::default();
    let mut texts = Vec::new();
    let mut refusal = None;
    for action in actions {
        let event = build(&model, action);
        texts.push(serde_json::to_string(&event).expect("a JSON value serializes"));
        if let Err(code) = model.step(&event) {
            refusal = Some(code);
            break;
        }
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let got = Surface::fold_json(&refs, &Vocabulary::dsh_v0());
    match (refusal, got) {
        (None, Ok((surface, _))) => {
            prop_assert_eq!(surface.nodes(), &model.nodes[..], "log {:#?}", texts);
            let replaces: Vec<(u64, u64, u64, Vec<u64>)> = surface
                .replacements()
                .map(|r| (r.seq, r.start, r.end, r.shadowed.to_vec()))
                .collect();
            prop_assert_eq!(replaces, model.replacements.clone(), "log {:#?}", texts);
        }
        (Some(code), Err(error)) => {
            prop_assert_eq!(error.code(), code, "log {:#?}", texts);
        }
        (expected, got) => {
            return Err(TestCaseError::fail(format!(
                "model {expected:?}, engine {:?}\nlog {texts:#?}",
                got.map(|(surface, _)| surface.nodes().to_vec())
                    .map_err(|error| error.to_string()),
            )));
        }
    }
    Ok(Outcome {
        refusal,
        replaces: model.replacements.len(),
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]
    #[test]
    fn fold_matches_independent_model(actions in actions()) {
        check(&actions)?;
    }
}

/// The comparison is only as good as the logs: a fixed-seed run reaches every refusal
/// code, accepted logs, and logs with several replaces.
#[test]
fn generator_reaches_every_refusal() {
    let mut runner = TestRunner::deterministic();
    let mut refusals: BTreeMap<&str, usize> = BTreeMap::new();
    let mut accepted = 0;
    let mut many_replaces = 0;
    for _ in 0..CASES {
        let actions = actions()
            .new_tree(&mut runner)
            .expect("the strategy generates")
            .current();
        let outcome = check(&actions).unwrap_or_else(|error| panic!("{error}"));
        match outcome.refusal {
            Some(code) => *refusals.entry(code).or_default() += 1,
            None => accepted += 1,
        }
        if outcome.replaces >= 3 {
            many_replaces += 1;
        }
    }
    let missing: Vec<&str> = CODES
        .into_iter()
        .filter(|code| !refusals.contains_key(code))
        .collect();
    assert!(
        missing.is_empty(),
        "never refused with {missing:?}: {refusals:?}"
    );
    assert!(
        accepted > 0 && many_replaces > 0,
        "{accepted} accepted, {many_replaces} with 3+ replaces"
    );
}
