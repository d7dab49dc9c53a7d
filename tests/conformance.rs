//! Runs every family of the conformance vectors (`tests/data/conformance/`, see its
//! README) against the public API and compares outcomes and state as specified there.
//!
//! Values are compared as JSON values with the crate's own comparison (numbers by
//! value, `-0 == 0`, member order ignored); repair closers and packed lines, which the
//! vectors pin byte for byte, are compared as bytes. Where surfacelog deliberately
//! differs from the vectors (README, "How surfacelog maps these vectors"), the affected
//! cases are listed by name below and surfacelog's own outcome is asserted instead.
//! Rejected cases whose label names the fault also have their error code checked.

use std::sync::Arc;

#[cfg(feature = "dsh")]
use surfacelog::internals::adapters::rows;
use surfacelog::internals::clock::ManualClock;
use surfacelog::internals::event::{SurfaceOp, Vocabulary};
use surfacelog::internals::json::{Json, Kind, Value, equal};
use surfacelog::internals::session::{Boundary, MemStore, Options, Session, SessionLog};
use surfacelog::internals::surface::Surface;
use surfacelog::{Store, StoreOptions, StoredSession};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/conformance");

/// Where surfacelog deliberately differs from the vectors, the README ("How surfacelog
/// maps these vectors") names the affected cases by what their names contain, so that
/// vector sets beyond the vendored ones map the same way. Each deviation is asserted
/// (surfacelog's own outcome, with its code), never skipped.
///
/// Append cases with an op that the vectors accept and surfacelog refuses with
/// `MESSAGE_SHAPE` (contract §5: append checks message shapes).
const APPEND_SHAPE_DEVIATIONS: [&str; 2] = ["append-user-no-id", "append-tool-result-two-blocks"];

/// Append cases in which an op may name `step: null` while no step is open: the
/// reference takes `null` for "no open step" and accepts it, surfacelog's invariants
/// refuse it (`INV_OUTSIDE_STEP`, contract §9: with no open step, nothing names it).
/// Cases with invariants on and such an op are mapped the same way whatever their name.
const NULL_STEP_DEVIATION: &str = "append-tool-not-started-result";

/// Fold cases whose tool-result rewrite surfacelog refuses (contract §4).
const FOLD_REWRITE_DEVIATION: &str = "quirk-tool-result-rewrite";

/// Unpack cases whose member seq leaves the safe range; surfacelog refuses the batch.
#[cfg(feature = "dsh")]
const UNPACK_SEQ_DEVIATION: &str = "quirk-member-seq-overflow";

struct Family {
    name: &'static str,
    passed: usize,
    failures: Vec<String>,
}

impl Family {
    fn run(
        name: &'static str,
        check: impl Fn(&str, Value<'_, '_>, Value<'_, '_>) -> Result<(), String>,
    ) -> Self {
        let text =
            std::fs::read_to_string(format!("{DIR}/{name}.jsonl")).expect("vectors are vendored");
        let mut family = Self {
            name,
            passed: 0,
            failures: Vec::new(),
        };
        for line in text.lines() {
            let json = Json::parse(line).expect("vector lines are JSON");
            let root = json.root();
            let case_name = root
                .get("name")
                .and_then(|n| n.as_str())
                .unwrap()
                .into_owned();
            match check(
                &case_name,
                root.get("case").unwrap(),
                root.get("expected").unwrap(),
            ) {
                Ok(()) => family.passed += 1,
                Err(why) => family.failures.push(format!("{case_name}: {why}")),
            }
        }
        family
    }

    /// Every case passed, and there are as many as the manifest says (so a family that
    /// stopped reading its file early fails).
    fn assert_all_pass(self) {
        let manifest = std::fs::read_to_string(format!("{DIR}/manifest.json")).unwrap();
        let manifest = Json::parse(&manifest).unwrap();
        let expected_cases = manifest
            .root()
            .get("families")
            .and_then(|f| f.get(self.name))
            .and_then(|f| f.get("cases"))
            .and_then(|c| c.as_safe_u64())
            .expect("the manifest counts every family");
        eprintln!(
            "conformance {}: {} of {} cases pass",
            self.name,
            self.passed,
            self.passed + self.failures.len()
        );
        assert!(
            self.failures.is_empty(),
            "{} failures:\n{}",
            self.failures.len(),
            self.failures.join("\n")
        );
        assert_eq!(
            self.passed as u64, expected_cases,
            "case count of {}",
            self.name
        );
    }
}

fn expected_ok(expected: Value<'_, '_>) -> bool {
    expected.get("ok").is_some_and(|ok| ok.is_true())
}

fn compare(what: &str, actual: &str, expected: Option<Value<'_, '_>>) -> Result<(), String> {
    let expected = expected.ok_or_else(|| format!("{what}: missing in expected"))?;
    let parsed = Json::parse(actual).map_err(|e| format!("{what}: actual is not JSON: {e:?}"))?;
    if equal(parsed.root(), expected) {
        Ok(())
    } else {
        Err(format!(
            "{what} differs\n  actual:   {}\n  expected: {}",
            clip(actual),
            clip(expected.raw())
        ))
    }
}

fn clip(text: &str) -> String {
    text.chars().take(600).collect()
}

fn texts<'a>(array: Option<Value<'_, 'a>>) -> Vec<&'a str> {
    array
        .map(|a| a.elements().map(|e| e.raw()).collect())
        .unwrap_or_default()
}

fn seq_list(seqs: impl IntoIterator<Item = u64>) -> String {
    let items: Vec<String> = seqs.into_iter().map(|s| s.to_string()).collect();
    format!("[{}]", items.join(","))
}

/// The error code the label of a rejected case implies, when it names one.
fn label_code(name: &str) -> Option<&'static str> {
    const TABLE: [(&str, &str); 30] = [
        ("negative-zero", "DATA_NOT_LOSSLESS"),
        ("missing-marker", "SURFACE_OP_REQUIRED"),
        ("marker-on-ineligible", "SURFACE_OP_FORBIDDEN"),
        ("sources-on-ineligible", "SOURCES_FORBIDDEN"),
        ("sources-not-array", "SOURCES_INVALID"),
        ("sources-bad-element", "SOURCES_INVALID"),
        ("sources-not-earlier", "SOURCES_NOT_EARLIER"),
        ("duplicate-sources", "SOURCES_DUPLICATE"),
        ("empty-sources-non-assistant", "SOURCES_EMPTY"),
        ("start-off-surface", "REPLACE_START_NOT_ON_SURFACE"),
        ("end-off-surface", "REPLACE_END_NOT_ON_SURFACE"),
        ("reversed-range", "REPLACE_REVERSED"),
        ("incomplete-sources", "REPLACE_SOURCES_INCOMPLETE"),
        ("bad-replace-shape", "SURFACE_OP_INVALID"),
        ("bad-surfaceop-value", "SURFACE_OP_INVALID"),
        ("non-contiguous-seq", "SEQ_NOT_CONTIGUOUS"),
        ("tool-result-rewrite-two-nodes", "TOOL_REWRITE_NOT_SINGLE"),
        ("tool-result-rewrite-wrong-target", "TOOL_REWRITE_TARGET"),
        ("tool-result-rewrite-changes", "TOOL_REWRITE_CHANGED"),
        ("envelope-", "ENVELOPE_INVALID"),
        ("msg-", "MESSAGE_SHAPE"),
        ("assistant-bad-source", "MESSAGE_SHAPE"),
        ("tool-result-bad-source", "MESSAGE_SHAPE"),
        ("tool-result-two-blocks", "MESSAGE_SHAPE"),
        ("tool-result-bad-block", "MESSAGE_SHAPE"),
        ("tool-result-mismatched-ids", "MESSAGE_SHAPE"),
        ("request-header-fallback", "LEGACY_EVENT"),
        ("legacy-header-delta", "LEGACY_EVENT"),
        ("request-header-", "REQUEST_HEADER_SHAPE"),
        ("header-version", "FORMAT_VERSION"),
    ];
    let label = name.splitn(3, '-').nth(2)?;
    let fault = label.strip_prefix("invalid-")?;
    if let Some((_, code)) = TABLE.iter().find(|(part, _)| fault.starts_with(part)) {
        return Some(code);
    }
    fault.starts_with("header-").then_some("HEADER_INVALID")
}

fn check_refusal(name: &str, error: &surfacelog::Error) -> Result<(), String> {
    match label_code(name) {
        Some(code) if error.code() != code => Err(format!(
            "refused with {} ({error}), label implies {code}",
            error.code()
        )),
        _ => Ok(()),
    }
}

fn options(now: i64, invariants: bool) -> (Options, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(now));
    let options = Options {
        invariants,
        clock: clock.clone(),
        ..Options::default()
    };
    (options, clock)
}

fn now_of(case: Value<'_, '_>) -> i64 {
    case.get("now").and_then(|n| n.as_safe_int()).unwrap_or(0)
}

/// The session state object of the README, field by field.
fn compare_state<L: SessionLog>(
    session: &Session<L>,
    expected: Value<'_, '_>,
) -> Result<(), String> {
    let log = session.log();
    let events: Vec<String> = (0..log.seq_next())
        .map(|s| log.event(s).unwrap().unwrap().text().into_owned())
        .collect();
    compare(
        "events",
        &format!("[{}]", events.join(",")),
        expected.get("events"),
    )?;
    compare("seq", &session.seq_next().to_string(), expected.get("seq"))?;
    compare(
        "firstLiveSeq",
        &session.first_live_seq().to_string(),
        expected.get("firstLiveSeq"),
    )?;
    compare("header", session.header().text(), expected.get("header"))?;
    let surface = session.surface();
    let surface_json = format!(
        "{{\"nodes\":{},\"replaceGeneration\":{}}}",
        seq_list(surface.nodes().iter().copied()),
        surface.replace_generation()
    );
    compare("surface", &surface_json, expected.get("surface"))?;
    let ops: Vec<(u64, Option<SurfaceOp>)> = (0..log.seq_next())
        .map(|s| (s, log.event(s).unwrap().unwrap().surface_op))
        .collect();
    let appended = ops
        .iter()
        .filter(|(_, op)| *op == Some(SurfaceOp::Append))
        .map(|(s, _)| *s);
    compare(
        "appendOriginSeqs",
        &seq_list(appended),
        expected.get("appendOriginSeqs"),
    )?;
    compare(
        "appendOriginSeqs (transcript)",
        &seq_list(session.transcript().unwrap()),
        expected.get("appendOriginSeqs"),
    )?;
    let replaced = ops
        .iter()
        .filter(|(_, op)| matches!(op, Some(SurfaceOp::Replace { .. })))
        .map(|(s, _)| *s);
    compare(
        "replacementSeqs",
        &seq_list(replaced),
        expected.get("replacementSeqs"),
    )?;
    let messages = session.messages().unwrap();
    let texts: Vec<&str> = messages.iter().map(|m| m.json).collect();
    compare(
        "messages",
        &format!("[{}]", texts.join(",")),
        expected.get("messages"),
    )?;
    compare(
        "messageSeqs",
        &seq_list(messages.iter().map(|m| m.seq)),
        expected.get("messageSeqs"),
    )
}

#[test]
fn fold_family() {
    let vocabulary = Vocabulary::dsh_v0();
    Family::run("fold", |name, case, expected| {
        let events = texts(case.get("events"));
        let outcome = Surface::fold_json(&events, &vocabulary);
        if name.contains(FOLD_REWRITE_DEVIATION) {
            return match outcome {
                Err(e) if e.code() == "TOOL_REWRITE_CHANGED" => Ok(()),
                other => Err(format!(
                    "deviation case: expected TOOL_REWRITE_CHANGED, got {:?}",
                    other.map(|_| ())
                )),
            };
        }
        match (outcome, expected_ok(expected)) {
            (Ok((surface, _)), true) => {
                compare(
                    "nodes",
                    &seq_list(surface.nodes().iter().copied()),
                    expected.get("nodes"),
                )?;
                let replacements: Vec<String> = surface
                    .replacements()
                    .map(|r| {
                        format!(
                            "{{\"seq\":{},\"start\":{},\"end\":{},\"shadowedSeqs\":{}}}",
                            r.seq,
                            r.start,
                            r.end,
                            seq_list(r.shadowed.iter().copied())
                        )
                    })
                    .collect();
                compare(
                    "replacements",
                    &format!("[{}]", replacements.join(",")),
                    expected.get("replacements"),
                )
            }
            (Err(e), false) => check_refusal(name, &e),
            (Ok(_), false) => Err("accepted, expected a refusal".into()),
            (Err(e), true) => Err(format!("refused: {e:?}")),
        }
    })
    .assert_all_pass();
}

fn seed_like(family: &'static str, backend: Backend) {
    Family::run(family, |name, case, expected| {
        let id = case.get("id").and_then(|i| i.as_str()).unwrap();
        let (options, clock) = options(now_of(case), false);
        let header = case.get("header").map(|h| h.raw());
        let events = texts(case.get("events"));
        let outcome = match backend {
            Backend::Memory if family == "seed" => {
                Session::create(&id, header, Some(&events), options).map(Child::Memory)
            }
            Backend::Memory => Session::resume(&id, header.unwrap(), &events, options)
                .map(|(s, _)| Child::Memory(s)),
            Backend::Disk => {
                let dir = tempfile::tempdir().unwrap();
                let store = Store::open_or_create(dir.path(), store_options(&clock, false))
                    .map_err(|e| format!("store: {e:?}"))?;
                let session = if family == "seed" {
                    store.create(&id, header, Some(&events))
                } else {
                    restore_on_disk(&store, &id, header.unwrap(), &events)
                };
                session.map(Child::Disk)
            }
        };
        match (outcome, expected_ok(expected)) {
            (Ok(session), true) => session.compare_state(expected),
            (Err(e), false) => check_refusal(name, &e),
            (Ok(_), false) => Err("accepted, expected a refusal".into()),
            (Err(e), true) => Err(format!("refused: {e:?}")),
        }
    })
    .assert_all_pass();
}

/// The restore family on disk: the stored log imported (contract §5, import row), then
/// resumed.
fn restore_on_disk(
    store: &Store,
    id: &str,
    header: &str,
    events: &[&str],
) -> Result<StoredSession, surfacelog::Error> {
    let mut import = store.import(id, header)?;
    for event in events {
        import.push(event)?;
    }
    import.finish()?;
    store.resume(id).map(|(session, _)| session)
}

#[test]
fn seed_family() {
    seed_like("seed", Backend::Memory);
}

#[test]
fn seed_family_on_disk() {
    seed_like("seed", Backend::Disk);
}

#[test]
fn restore_family() {
    seed_like("restore", Backend::Memory);
}

#[test]
fn restore_family_on_disk() {
    seed_like("restore", Backend::Disk);
}

/// Per op: the committed seq and time, or the refusal.
type OpResults = Vec<Result<(u64, i64), surfacelog::Error>>;

/// Where a case runs: the in-memory sessions of the pure API, or a store on disk (the
/// facade, in a temporary directory). Both must give every result and state the vectors
/// give (contract §5 to §9 hold for both).
#[derive(Clone, Copy)]
enum Backend {
    Memory,
    Disk,
}

/// A case's source session and its store, in one backend. On disk the source stays open
/// (its first live seq is its own, not a reopen's), and a fork reads it meanwhile.
#[expect(
    clippy::large_enum_variant,
    reason = "one per case, on the stack for a moment"
)]
enum Ran {
    Memory(MemStore),
    Disk {
        _dir: tempfile::TempDir,
        store: Store,
        source: StoredSession,
    },
}

impl Ran {
    /// Compares the source session `id`'s state with `expected`.
    fn compare_source(&self, id: &str, expected: Value<'_, '_>) -> Result<(), String> {
        match self {
            Self::Memory(store) => compare_state(store.get(id).unwrap(), expected),
            Self::Disk { source, .. } => compare_state(source, expected),
        }
    }

    /// The source's event texts and header text.
    fn source_texts(&self, id: &str) -> (Vec<String>, String) {
        fn texts_of<L: SessionLog>(session: &Session<L>) -> (Vec<String>, String) {
            let events = (0..session.seq_next())
                .map(|s| session.event(s).unwrap().unwrap().text().into_owned())
                .collect();
            (events, session.header().text().to_owned())
        }
        match self {
            Self::Memory(store) => texts_of(store.get(id).unwrap()),
            Self::Disk { source, .. } => texts_of(source),
        }
    }

    /// Forks the source into `child` and compares the child's state with `expected`.
    fn fork(
        &mut self,
        id: &str,
        boundary: Boundary,
        child: &str,
    ) -> Result<Child, surfacelog::Error> {
        match self {
            Self::Memory(store) => {
                store.fork(id, boundary, child)?;
                Ok(Child::Memory(store.get(child).unwrap().clone()))
            }
            Self::Disk { store, .. } => store.fork(id, boundary, child).map(Child::Disk),
        }
    }
}

/// A fork's child, in the backend of its source.
#[expect(
    clippy::large_enum_variant,
    reason = "one per case, on the stack for a moment"
)]
enum Child {
    Memory(Session),
    Disk(StoredSession),
}

impl Child {
    fn compare_state(&self, expected: Value<'_, '_>) -> Result<(), String> {
        match self {
            Self::Memory(session) => compare_state(session, expected),
            Self::Disk(session) => compare_state(session, expected),
        }
    }
}

/// Builds the source session of an append or fork case in `backend` and runs its ops.
/// Returns the store, and per op the outcome; `Err` when creation itself failed.
fn run_ops(
    case: Value<'_, '_>,
    backend: Backend,
) -> Result<(Ran, Arc<ManualClock>, OpResults), surfacelog::Error> {
    let id = case.get("id").and_then(|i| i.as_str()).unwrap();
    let invariants = case.get("invariants").is_some_and(|i| i.is_true());
    let (options, clock) = options(now_of(case), invariants);
    let header = case.get("header").map(|h| h.raw());
    let seed = case.get("seed").map(|s| texts(Some(s)));
    let results;
    let ran = match backend {
        Backend::Memory => {
            let mut store = MemStore::new(options);
            let session = store.create(&id, header, seed.as_deref())?;
            results = apply_ops(session, case, &clock);
            Ran::Memory(store)
        }
        Backend::Disk => {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open_or_create(dir.path(), store_options(&clock, invariants))?;
            let mut source = store.create(&id, header, seed.as_deref())?;
            results = apply_ops(&mut source, case, &clock);
            Ran::Disk {
                _dir: dir,
                store,
                source,
            }
        }
    };
    // Everything after the ops (the fork) runs at the case's `now`.
    clock.set(now_of(case));
    Ok((ran, clock, results))
}

fn store_options(clock: &Arc<ManualClock>, invariants: bool) -> StoreOptions {
    StoreOptions::new()
        .clock(clock.clone())
        .invariants(invariants)
}

/// Appends a case's ops, each at its time: per op the committed seq and time, or the
/// refusal.
fn apply_ops<L: SessionLog>(
    session: &mut Session<L>,
    case: Value<'_, '_>,
    clock: &ManualClock,
) -> OpResults {
    let mut results = Vec::new();
    for op in case.get("ops").unwrap().elements() {
        let time = op.get("time").and_then(|t| t.as_safe_int()).unwrap();
        clock.set(time);
        let event_type = op.get("type").and_then(|t| t.as_str()).unwrap();
        let data = op.get("data").unwrap().raw();
        let outcome = session.append_json(
            &event_type,
            data,
            op.get("surfaceOp").map(|v| v.raw()),
            op.get("sourceEventSeqs").map(|v| v.raw()),
        );
        results.push(outcome.map(|seq| (seq, session.event(seq).unwrap().unwrap().time)));
    }
    results
}

fn compare_results(
    results: &[Result<(u64, i64), surfacelog::Error>],
    expected: Value<'_, '_>,
    upto: usize,
) -> Result<(), String> {
    let expected: Vec<_> = expected.get("results").unwrap().elements().collect();
    if expected.len() != results.len() {
        return Err(format!(
            "{} results, expected {}",
            results.len(),
            expected.len()
        ));
    }
    for (i, (actual, want)) in results.iter().zip(&expected).take(upto).enumerate() {
        match (actual, expected_ok(*want)) {
            (Ok((seq, time)), true) => compare(
                &format!("result {i}"),
                &format!("{{\"ok\":true,\"seq\":{seq},\"time\":{time}}}"),
                Some(*want),
            )?,
            (Err(e), false) => {
                let code = want
                    .get("error")
                    .and_then(|e| e.get("code"))
                    .and_then(|c| c.as_str());
                if code.as_deref() == Some("INVARIANT") && !e.code().starts_with("INV_") {
                    return Err(format!(
                        "op {i}: refused with {}, expected an INV_* code",
                        e.code()
                    ));
                }
            }
            (Ok(_), false) => return Err(format!("op {i} accepted, expected a refusal")),
            (Err(e), true) => return Err(format!("op {i} refused: {e:?}")),
        }
    }
    Ok(())
}

/// The code surfacelog refuses an op with that the vectors accept, when the README maps
/// the case as such a deviation.
fn op_deviation(name: &str, case: Value<'_, '_>) -> Option<&'static str> {
    if APPEND_SHAPE_DEVIATIONS
        .iter()
        .any(|part| name.contains(part))
    {
        return Some("MESSAGE_SHAPE");
    }
    let invariants = case.get("invariants").is_some_and(|i| i.is_true());
    let null_step = case.get("ops").is_some_and(|ops| {
        ops.elements().any(|op| {
            op.get("data")
                .and_then(|d| d.get("step"))
                .is_some_and(|s| s.kind() == Kind::Null)
        })
    });
    (name.contains(NULL_STEP_DEVIATION) || (invariants && null_step)).then_some("INV_OUTSIDE_STEP")
}

/// Checks an op deviation (README): the first op that the vectors accept and surfacelog
/// refuses must be refused with the mapped code, and every result before it must agree.
/// `Ok(true)` when the case deviated there: nothing after that op is comparable, the
/// seqs shift. `Ok(false)` when the case is compared as usual: it is not mapped, or it
/// is a null-step case whose every op agrees (the name alone does not imply a `null`).
fn check_op_deviation(
    name: &str,
    case: Value<'_, '_>,
    results: &[Result<(u64, i64), surfacelog::Error>],
    expected: Value<'_, '_>,
) -> Result<bool, String> {
    let Some(code) = op_deviation(name, case) else {
        return Ok(false);
    };
    let wanted: Vec<bool> = expected
        .get("results")
        .unwrap()
        .elements()
        .map(expected_ok)
        .collect();
    let deviating = results
        .iter()
        .zip(&wanted)
        .position(|(r, ok)| *ok && r.is_err());
    let Some(at) = deviating else {
        return if code == "MESSAGE_SHAPE" {
            Err("deviation case: no op refused".into())
        } else {
            Ok(false)
        };
    };
    compare_results(results, expected, at)?;
    let refused = results[at].as_ref().unwrap_err().code();
    if refused == code {
        Ok(true)
    } else {
        Err(format!("op {at}: {refused}, expected {code}"))
    }
}

fn check_append(
    backend: Backend,
) -> impl Fn(&str, Value<'_, '_>, Value<'_, '_>) -> Result<(), String> {
    move |name, case, expected| {
        let id = case.get("id").and_then(|i| i.as_str()).unwrap();
        let (ran, _clock, results) = match run_ops(case, backend) {
            Ok(ran) => ran,
            Err(e)
                if !expected_ok(expected)
                    && expected.get("stage").is_some_and(|s| s.is_str("create")) =>
            {
                return if e.code().starts_with("INV_") {
                    Ok(())
                } else {
                    Err(format!("creation refused with {e:?}, expected INV_*"))
                };
            }
            Err(e) => return Err(format!("creation refused: {e:?}")),
        };
        if check_op_deviation(name, case, &results, expected)? {
            return Ok(());
        }
        compare_results(&results, expected, results.len())?;
        ran.compare_source(&id, expected)
    }
}

#[test]
fn append_family() {
    Family::run("append", check_append(Backend::Memory)).assert_all_pass();
}

#[test]
fn append_family_on_disk() {
    Family::run("append", check_append(Backend::Disk)).assert_all_pass();
}

/// The null-step deviation has no public case (README), so these are made here, in the
/// vectors' shape: a `tool/call` naming `step: null` after its step ended, which the
/// reference accepts.
fn null_step_case(name: &str, invariants: bool, second_time: i64, extra: &str) -> String {
    let call = r#"{"turn":1,"step":null,"callId":"c1","name":"bash","arguments":"{}"}"#;
    format!(
        r#"{{"name":"{name}","case":{{"mode":"append","id":"s","now":100,"invariants":{invariants},"ops":[{{"type":"turn/start","data":{{"turn":1}},"time":10}},{{"type":"step/start","data":{{"turn":1,"step":1}},"time":11}},{{"type":"step/end","data":{{"turn":1,"step":1}},"time":12}},{{"type":"tool/call","data":{call}{extra},"time":13}}]}},"expected":{{"ok":true,"results":[{{"ok":true,"seq":0,"time":10}},{{"ok":true,"seq":1,"time":{second_time}}},{{"ok":true,"seq":2,"time":12}},{{"ok":true,"seq":3,"time":13}}]}}}}"#
    )
}

fn check_line(line: &str) -> Result<(), String> {
    let json = Json::parse(line).unwrap();
    let root = json.root();
    let name = root.get("name").and_then(|n| n.as_str()).unwrap();
    check_append(Backend::Memory)(
        &name,
        root.get("case").unwrap(),
        root.get("expected").unwrap(),
    )
}

#[test]
fn a_null_step_the_vectors_accept_is_refused_and_the_rest_compared() {
    // Mapped by the op alone, and by the name alone.
    check_line(&null_step_case("append-900-valid-invariants", true, 11, "")).unwrap();
    let named = "append-901-valid-invariants-append-tool-not-started-result";
    check_line(&null_step_case(named, true, 11, "")).unwrap();
    // The results before the refused op are still compared.
    let wrong_time = check_line(&null_step_case(named, true, 99, "")).unwrap_err();
    assert!(wrong_time.contains("result 1"), "{wrong_time}");
    // Another refusal at that op is not the deviation.
    let marked = r#","surfaceOp":"append""#;
    let other = check_line(&null_step_case(named, true, 11, marked)).unwrap_err();
    assert!(other.contains("expected INV_OUTSIDE_STEP"), "{other}");
    // Without invariants nothing is mapped: every result agrees with the vector, and the
    // comparison goes on to the state (which these made cases do not give).
    let plain = null_step_case("append-902-valid-plain", false, 11, "");
    assert_eq!(
        check_line(&plain),
        Err("events: missing in expected".into())
    );
}

#[test]
fn repair_family() {
    Family::run("repair", |_name, case, expected| {
        let events = texts(case.get("events"));
        let header = r#"{"version":0,"id":"repair","createdAt":0}"#;
        let (session, report) = Session::reopen("repair", header, &events, Options::default())
            .map_err(|e| format!("reopen refused: {e:?}"))?;
        let closers: Vec<String> = (report.stored..session.seq_next())
            .map(|s| session.event(s).unwrap().unwrap().text().into_owned())
            .collect();
        let wanted = texts(expected.get("closers"));
        if closers != wanted {
            return Err(format!(
                "closers differ\n  actual:   {closers:?}\n  expected: {wanted:?}"
            ));
        }
        // The closers are also exactly what the pure function computes over the log as
        // stored (folded as is: no end-seed marker shifts its seqs).
        let (_, stored) = Surface::fold_json(&events, &Vocabulary::dsh_v0())
            .map_err(|e| format!("fold refused: {e:?}"))?;
        let pure = surfacelog::internals::session::repair::closers(&stored).unwrap();
        if pure.iter().map(String::as_str).eq(wanted.iter().copied()) {
            Ok(())
        } else {
            Err("pure closers differ from the reopened ones".into())
        }
    })
    .assert_all_pass();
}

fn check_fork(
    backend: Backend,
) -> impl Fn(&str, Value<'_, '_>, Value<'_, '_>) -> Result<(), String> {
    move |name, case, expected| {
        let id = case.get("id").and_then(|i| i.as_str()).unwrap();
        let (mut ran, _clock, results) =
            run_ops(case, backend).map_err(|e| format!("creation refused: {e:?}"))?;
        if check_op_deviation(name, case, &results, expected)? {
            return Ok(());
        }
        compare_results(&results, expected, results.len())?;
        let (before, _) = ran.source_texts(&id);
        let boundary = match case.get("boundary") {
            None => Ok(Boundary::Last),
            Some(raw) => Boundary::from_json(raw.raw()),
        };
        let child_id = case.get("childId").and_then(|c| c.as_str()).unwrap();
        let outcome = boundary.and_then(|b| ran.fork(&id, b, &child_id));
        let (after, header) = ran.source_texts(&id);
        if before != after {
            return Err("fork changed the source".into());
        }
        let source_expected = expected.get("source").unwrap();
        compare(
            "source.events",
            &format!("[{}]", after.join(",")),
            source_expected.get("events"),
        )?;
        compare("source.header", &header, source_expected.get("header"))?;
        match (outcome, expected_ok(expected)) {
            (Ok(child), true) => child.compare_state(expected.get("child").unwrap()),
            (Err(e), false) => {
                let code = expected
                    .get("error")
                    .and_then(|e| e.get("code"))
                    .and_then(|c| c.as_str())
                    .unwrap();
                let code = if code == "SESSION_ALREADY_EXISTS" {
                    "SESSION_EXISTS".into()
                } else {
                    code
                };
                if e.code() == code {
                    Ok(())
                } else {
                    Err(format!("refused with {}, expected {code}", e.code()))
                }
            }
            (Ok(_), false) => Err("fork accepted, expected a refusal".into()),
            (Err(e), true) => Err(format!("fork refused: {e:?}")),
        }
    }
}

#[test]
fn fork_family() {
    Family::run("fork", check_fork(Backend::Memory)).assert_all_pass();
}

#[test]
fn fork_family_on_disk() {
    Family::run("fork", check_fork(Backend::Disk)).assert_all_pass();
}

#[cfg(feature = "dsh")]
#[test]
fn pack_family() {
    Family::run("pack", |_name, case, expected| {
        let events = texts(case.get("events"));
        let records = rows::pack(&events).map_err(|e| format!("pack refused: {e:?}"))?;
        let lines: Vec<String> = expected
            .get("lines")
            .unwrap()
            .elements()
            .map(|l| l.as_str().unwrap().into_owned())
            .collect();
        if records != lines {
            return Err(format!(
                "lines differ\n  actual:   {records:?}\n  expected: {lines:?}"
            ));
        }
        compare(
            "records",
            &format!("[{}]", records.join(",")),
            expected.get("records"),
        )
    })
    .assert_all_pass();
}

#[cfg(feature = "dsh")]
#[test]
fn unpack_family() {
    Family::run("unpack", |name, case, expected| {
        let records = texts(case.get("records"));
        let outcome = rows::unpack(&records);
        if name.contains(UNPACK_SEQ_DEVIATION) {
            return if outcome.is_err() {
                Ok(())
            } else {
                Err("deviation case: decoded, expected a refusal".into())
            };
        }
        match (outcome, expected_ok(expected)) {
            (Ok(events), true) => compare(
                "events",
                &format!("[{}]", events.join(",")),
                expected.get("events"),
            ),
            (Err(_), false) => Ok(()),
            (Ok(_), false) => Err("decoded, expected a refusal".into()),
            (Err(e), true) => Err(format!("refused: {e:?}")),
        }
    })
    .assert_all_pass();
}

#[test]
fn vector_counts_match_the_manifest() {
    let manifest = std::fs::read_to_string(format!("{DIR}/manifest.json")).unwrap();
    let json = Json::parse(&manifest).unwrap();
    let families = json.root().get("families").unwrap();
    assert_eq!(families.kind(), Kind::Object);
    for (family, counts) in families.members() {
        let name = family.as_str().unwrap();
        let lines = std::fs::read_to_string(format!("{DIR}/{name}.jsonl"))
            .unwrap()
            .lines()
            .count();
        assert_eq!(
            counts.get("cases").and_then(|c| c.as_safe_u64()),
            Some(lines as u64),
            "{name}"
        );
    }
}
