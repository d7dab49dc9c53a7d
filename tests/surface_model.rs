//! Model-based property tests of the surface fold (contract §4) and of the session entry
//! points that feed it (contract §5).
//!
//! Logs are generated as abstract actions (log-only events, appends of every message
//! type, nested compactions, tool-output prunes) and interpreted against a naive model of
//! the surface: a `Vec<u64>` of seqs with linear lookup and `splice`, plus the list of
//! replaces with the seqs each one shadowed. The model picks every replace range from its
//! *current* surface, so nested compactions, ranges whose `start` seq is numerically
//! greater than their `end` seq, and rewrites of rewrites all occur. The engine is
//! compared with the model after every event through three doors: the session's
//! `append` entry points, the pure fold of the texts (`Surface::fold_json`), and the
//! incremental fold (`Surface::fold` and `catch_up` over prefixes).
//!
//! The other properties: a refused append (one fault at a time, or several whose order
//! the contract fixes) returns the contract's code and leaves the whole session as it
//! was; `as_of(N)` equals folding the first N+1 events from scratch; and random bytes,
//! mutated events and random operation sequences never panic, keep the session's surface
//! equal to a fold of its log, and leave a log that can be reopened.

use std::collections::BTreeSet;
use std::fmt::{Display, Write as _};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use surfacelog::internals::clock::ManualClock;
use surfacelog::internals::event::{EventRef, EventSource, MemLog, SurfaceOp, Vocabulary};
use surfacelog::internals::session::{Options, Session, SurfaceIntent};
use surfacelog::internals::surface::{self, Message, Surface};

/// 2^53 − 1, the largest safe integer (contract §2).
const SAFE_MAX: i64 = 9_007_199_254_740_991;

/// The surface-eligible types of `dsh-v0` (contract §3).
const ELIGIBLE: [&str; 5] = [
    "user/message",
    "context/message",
    "steering/message",
    "assistant/message",
    "tool/result",
];

/// Log-only events: type and data.
const LOG_ONLY: [(&str, &str); 11] = [
    ("turn/start", r#"{"turn":1}"#),
    ("turn/end", r#"{"turn":1,"reason":{"kind":"done"}}"#),
    ("step/start", r#"{"turn":1,"step":1}"#),
    ("assistant/chunk", r#"{"turn":1,"step":1,"delta":"he"}"#),
    ("tool/call", r#"{"callId":"c1","name":"read"}"#),
    ("compaction/start", r#"{"compactionId":"k","turn":1}"#),
    ("plugin/acme.note", r#"[1,{"a":null},"\ud800"]"#),
    ("x", "null"),
    ("session/end-seed", "{}"),
    ("todo/write", r#""s""#),
    ("é/type", "0.5"),
];

/// Message texts, as JSON string contents.
const TEXTS: [&str; 5] = [
    "hello",
    r#"quote \" and \\ slash"#,
    r"\u00e9t\u00e9 ☃",
    r"lone \ud800",
    "",
];

/// Tool outputs (`message.content[0].content`), all arrays.
const OUTPUTS: [&str; 5] = [
    r#"[{"type":"text","text":"out"}]"#,
    "[]",
    r#"[{"type":"text","text":"[pruned]"}]"#,
    r#"[{"type":"image","data":"AAAA"},{"type":"text","text":"two"}]"#,
    r#"[1,2.5,null,true,"\u00e9"]"#,
];

fn options(time: i64) -> Options {
    Options {
        clock: Arc::new(ManualClock::new(time)),
        ..Options::default()
    }
}

fn to_u64(n: usize) -> u64 {
    u64::try_from(n).expect("lengths fit in u64")
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).expect("seqs in these tests fit in usize")
}

fn fail(what: &impl Display) -> TestCaseError {
    TestCaseError::fail(what.to_string())
}

/// A cheap deterministic mix, to shuffle source lists.
fn mix(x: u64) -> u64 {
    let x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^ (x >> 29)
}

/// The first `len` events of a log, as the incremental fold sees a log that grows.
struct Prefix<'a> {
    log: &'a MemLog,
    len: u64,
}

impl EventSource for Prefix<'_> {
    fn seq_next(&self) -> u64 {
        self.len.min(self.log.seq_next())
    }

    fn event(&self, seq: u64) -> surfacelog::Result<Option<EventRef<'_>>> {
        if seq < self.len {
            self.log.event(seq)
        } else {
            Ok(None)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Event data
// ---------------------------------------------------------------------------------------

/// A `tool/result`'s data, kept so that a prune can rebuild it with another output.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tool {
    turn: u64,
    step: u64,
    id: String,
    call_id: String,
    is_error: Option<bool>,
    output: &'static str,
    meta: bool,
    /// Spacing and key order only: never changes the value.
    layout: u8,
}

impl Tool {
    fn new(seq: u64, variant: u8) -> Self {
        Self {
            turn: u64::from(variant % 3),
            step: seq,
            id: format!("t{seq}"),
            call_id: format!("c{seq}"),
            is_error: [None, Some(false), Some(true)][usize::from(variant % 3)],
            output: OUTPUTS[usize::from(variant / 3) % OUTPUTS.len()],
            meta: variant & 0x10 != 0,
            layout: variant >> 5,
        }
    }

    /// The data text and the message text inside it.
    fn render(&self) -> (String, String) {
        let Self {
            turn,
            step,
            id,
            call_id: c,
            output,
            ..
        } = self;
        let sep = if self.layout & 1 == 0 { "" } else { " " };
        let is_error = self
            .is_error
            .map_or(String::new(), |e| format!(",\"isError\":{sep}{e}"));
        let block = format!(
            r#"{{"type":"tool-result","toolCallId":"{c}"{is_error},"content":{sep}{output}}}"#
        );
        let source = format!(r#"{{"kind":"tool","callId":"{c}"}}"#);
        let message = if self.layout & 2 == 0 {
            format!(r#"{{"id":"{id}","role":"user","source":{source},"content":[{block}]}}"#)
        } else {
            format!(r#"{{"content":[ {block} ],"source":{source},"role":"user","id":"{id}"}}"#)
        };
        let meta = if self.meta {
            r#","meta":{"ms":12,"tags":["a"]}"#
        } else {
            ""
        };
        let data = if self.layout & 4 == 0 {
            format!(r#"{{"turn":{turn},"step":{step},"message":{message}{meta}}}"#)
        } else {
            format!(r#"{{ "message" : {message} , "step" : {step} , "turn" : {turn}{meta} }}"#)
        };
        (data, message)
    }
}

/// A `user/message`-like data (the message is the whole data).
fn user_data(event_type: &str, seq: u64, variant: u8) -> String {
    let kind = match event_type {
        "context/message" => "context",
        "steering/message" => "steering",
        _ => "user",
    };
    let text = TEXTS[usize::from(variant) % TEXTS.len()];
    format!(
        r#"{{"id":"m{seq}","role":"user","source":{{"kind":"{kind}"}},"content":[{{"type":"text","text":"{text}"}}]}}"#
    )
}

/// An `assistant/message` data and its message, `None` when the content is empty.
fn assistant_data(seq: u64, variant: u8) -> (String, Option<String>) {
    let text = TEXTS[usize::from(variant / 5) % TEXTS.len()];
    let content = match variant % 5 {
        0 => "[]".to_owned(),
        1 => "[ ]".to_owned(),
        2 => format!(r#"[{{"type":"text","text":"{text}"}}]"#),
        3 => format!(r#"[{{"type":"tool-call","id":"c{seq}","name":"read","input":{{}}}}]"#),
        _ => format!(
            r#"[{{"type":"text","text":"{text}"}},{{"type":"tool-call","id":"c{seq}","name":"ls","input":{{"p":1}}}}]"#
        ),
    };
    let message = format!(
        r#"{{"id":"a{seq}","role":"assistant","source":{{"kind":"model","provider":"p","model":"m"}},"content":{content}}}"#
    );
    let data = format!(r#"{{"turn":1,"step":1,"message":{message},"usage":{{"input":3}}}}"#);
    (data, (variant % 5 >= 2).then_some(message))
}

/// A valid data for an eligible type, and its message.
fn message_data(event_type: &str, seq: u64, variant: u8) -> (String, Option<String>, Option<Tool>) {
    match event_type {
        "assistant/message" => {
            let (data, message) = assistant_data(seq, variant);
            (data, message, None)
        }
        "tool/result" => {
            let tool = Tool::new(seq, variant);
            let (data, message) = tool.render();
            (data, Some(message), Some(tool))
        }
        _ => {
            let data = user_data(event_type, seq, variant);
            (data.clone(), Some(data), None)
        }
    }
}

// ---------------------------------------------------------------------------------------
// The naive model
// ---------------------------------------------------------------------------------------

/// One event the generator planned: what to append and what the model expects of it.
#[derive(Debug, Clone)]
struct Planned {
    event_type: &'static str,
    data: String,
    /// The message the event projects to, as a slice of `data`.
    message: Option<String>,
    op: Option<SurfaceOp>,
    sources: Option<Vec<u64>>,
    tool: Option<Tool>,
    /// 0: `append_dynamic`; otherwise `append_json` with the surface fields spelled in
    /// one of several value-preserving ways.
    spelling: u8,
}

/// What the model remembers of one event.
#[derive(Debug, Clone)]
struct Known {
    event_type: &'static str,
    message: Option<String>,
    tool: Option<Tool>,
    appended: bool,
}

/// One replace: `(seq, start, end, shadowed)`.
type Replace = (u64, u64, u64, Vec<u64>);

/// The naive surface: seqs in surface order with linear lookup, and the replace list.
#[derive(Debug, Clone, Default)]
struct Model {
    nodes: Vec<u64>,
    replacements: Vec<Replace>,
    events: Vec<Known>,
}

impl Model {
    fn seq_next(&self) -> u64 {
        to_u64(self.events.len())
    }

    fn position(&self, seq: u64) -> Option<usize> {
        self.nodes.iter().position(|&node| node == seq)
    }

    fn apply(&mut self, planned: &Planned) {
        let seq = self.seq_next();
        match planned.op {
            None => {}
            Some(SurfaceOp::Append) => self.nodes.push(seq),
            Some(SurfaceOp::Replace { start, end }) => {
                let first = self.position(start).expect("planned on the surface");
                let last = self.position(end).expect("planned on the surface");
                let shadowed: Vec<u64> = self.nodes.splice(first..=last, [seq]).collect();
                self.replacements.push((seq, start, end, shadowed));
            }
        }
        self.events.push(Known {
            event_type: planned.event_type,
            message: planned.message.clone(),
            tool: planned.tool.clone(),
            appended: planned.op == Some(SurfaceOp::Append),
        });
    }

    fn push_log_only(&mut self, event_type: &'static str) {
        self.events.push(Known {
            event_type,
            message: None,
            tool: None,
            appended: false,
        });
    }

    fn messages(&self) -> Vec<(u64, String)> {
        let message = |seq: u64| self.events[to_usize(seq)].message.clone().map(|m| (seq, m));
        self.nodes.iter().filter_map(|&seq| message(seq)).collect()
    }

    fn transcript(&self) -> Vec<u64> {
        let appended = self
            .events
            .iter()
            .enumerate()
            .filter(|(_, known)| known.appended);
        appended.map(|(seq, _)| to_u64(seq)).collect()
    }

    /// Distinct seqs below `seq_next` picked by `picks`, in pick order.
    fn earlier(&self, picks: &[u16]) -> Vec<u64> {
        let mut out = Vec::new();
        if self.seq_next() == 0 {
            return out;
        }
        for pick in picks {
            let seq = u64::from(*pick) % self.seq_next();
            if !out.contains(&seq) {
                out.push(seq);
            }
        }
        out
    }

    /// Interprets a generated action against the current state.
    fn plan(&self, action: &Action, spelling: u8) -> Planned {
        let seq = self.seq_next();
        match action {
            Action::LogOnly { pick } => {
                let (event_type, data) = LOG_ONLY[usize::from(*pick) % LOG_ONLY.len()];
                let data = data.to_owned();
                Planned {
                    event_type,
                    data,
                    message: None,
                    op: None,
                    sources: None,
                    tool: None,
                    spelling,
                }
            }
            Action::Append {
                kind,
                variant,
                cite,
            } => {
                let event_type = ELIGIBLE[usize::from(*kind) % ELIGIBLE.len()];
                let (data, message, tool) = message_data(event_type, seq, *variant);
                let cited = self.earlier(cite);
                let sources = if !cited.is_empty() {
                    Some(cited)
                } else if event_type == "assistant/message" && variant & 0x80 != 0 {
                    Some(Vec::new())
                } else {
                    None
                };
                let op = Some(SurfaceOp::Append);
                Planned {
                    event_type,
                    data,
                    message,
                    op,
                    sources,
                    tool,
                    spelling,
                }
            }
            Action::Compact {
                a,
                b,
                extra,
                shuffle,
                replacer,
            } => self.plan_compaction([*a, *b], extra, *shuffle, *replacer, spelling),
            Action::Prune {
                pick,
                output,
                layout,
                cite,
            } => self.plan_prune(*pick, *output, *layout, cite, spelling),
        }
    }

    fn plan_compaction(
        &self,
        ends: [u16; 2],
        extra: &[u16],
        shuffle: u64,
        replacer: u8,
        spelling: u8,
    ) -> Planned {
        let seq = self.seq_next();
        if self.nodes.is_empty() {
            let action = Action::Append {
                kind: 0,
                variant: replacer,
                cite: extra.to_vec(),
            };
            return self.plan(&action, spelling);
        }
        let len = self.nodes.len();
        let (i, j) = (usize::from(ends[0]) % len, usize::from(ends[1]) % len);
        let (first, last) = (i.min(j), i.max(j));
        let mut sources = self.nodes[first..=last].to_vec();
        for seq in self.earlier(extra) {
            if !sources.contains(&seq) {
                sources.push(seq);
            }
        }
        sources.sort_by_key(|s| mix(shuffle ^ s));
        // Mostly a `user/message` summary; sometimes an `assistant/message`, silent or not.
        let (event_type, data, message) = match replacer % 8 {
            5 | 7 => {
                let variant = if replacer % 8 == 5 {
                    0
                } else {
                    2 + 5 * (replacer >> 5)
                };
                let (data, message) = assistant_data(seq, variant);
                ("assistant/message", data, message)
            }
            pick => {
                let event_type = if pick == 6 {
                    "context/message"
                } else {
                    "user/message"
                };
                let data = user_data(event_type, seq, replacer >> 3);
                (event_type, data.clone(), Some(data))
            }
        };
        let op = Some(SurfaceOp::Replace {
            start: self.nodes[first],
            end: self.nodes[last],
        });
        Planned {
            event_type,
            data,
            message,
            op,
            sources: Some(sources),
            tool: None,
            spelling,
        }
    }

    fn plan_prune(&self, pick: u16, output: u8, layout: u8, cite: &[u16], spelling: u8) -> Planned {
        let targets: Vec<u64> = (self.nodes.iter().copied())
            .filter(|&seq| self.events[to_usize(seq)].tool.is_some())
            .collect();
        if targets.is_empty() {
            let action = Action::Append {
                kind: 4,
                variant: output,
                cite: cite.to_vec(),
            };
            return self.plan(&action, spelling);
        }
        let target = targets[usize::from(pick) % targets.len()];
        let old = self.events[to_usize(target)]
            .tool
            .clone()
            .expect("filtered on tool");
        let tool = Tool {
            output: OUTPUTS[usize::from(output) % OUTPUTS.len()],
            layout,
            ..old
        };
        let (data, message) = tool.render();
        let mut sources = vec![target];
        sources.extend(self.earlier(cite).into_iter().filter(|&s| s != target));
        Planned {
            event_type: "tool/result",
            data,
            message: Some(message),
            op: Some(SurfaceOp::Replace {
                start: target,
                end: target,
            }),
            sources: Some(sources),
            tool: Some(tool),
            spelling,
        }
    }
}

impl Planned {
    /// The event text the engine must store: keys `type, seq, time, data,
    /// sourceEventSeqs, surfaceOp` (contract §2, "Key order"), numbers canonical.
    fn render(&self, seq: u64, time: i64) -> String {
        let mut text = format!(
            r#"{{"type":"{}","seq":{seq},"time":{time},"data":{}"#,
            self.event_type, self.data
        );
        if let Some(sources) = &self.sources {
            let list: Vec<String> = sources.iter().map(u64::to_string).collect();
            write!(text, r#","sourceEventSeqs":[{}]"#, list.join(",")).expect("infallible");
        }
        match self.op {
            None => {}
            Some(SurfaceOp::Append) => text.push_str(r#","surfaceOp":"append""#),
            Some(SurfaceOp::Replace { start, end }) => {
                let op = format!(r#"{{"op":"replace","start":{start},"end":{end}}}"#);
                write!(text, r#","surfaceOp":{op}"#).expect("infallible");
            }
        }
        text.push('}');
        text
    }
}

/// `surfaceOp` as JSON text, spelled in one of several ways of equal value.
fn op_json(op: SurfaceOp, spelling: u8) -> String {
    match (op, spelling % 3) {
        (SurfaceOp::Append, 0) => r#""append""#.to_owned(),
        (SurfaceOp::Append, 1) => r#""\u0061ppend""#.to_owned(),
        (SurfaceOp::Append, _) => " \"append\" ".to_owned(),
        (SurfaceOp::Replace { start, end }, 0) => {
            format!(r#"{{"op":"replace","start":{start},"end":{end}}}"#)
        }
        (SurfaceOp::Replace { start, end }, 1) => {
            format!(r#"{{ "end" : {end} , "start" : {start} , "op" : "repl\u0061ce" }}"#)
        }
        (SurfaceOp::Replace { start, end }, _) => {
            format!(r#"{{"op":"replace","start":{start}.0,"end":{end}e0}}"#)
        }
    }
}

/// `sourceEventSeqs` as JSON text, spelled in one of several ways of equal value.
fn sources_json(sources: &[u64], spelling: u8) -> String {
    let items: Vec<String> = match spelling % 3 {
        0 => sources.iter().map(u64::to_string).collect(),
        1 => sources.iter().map(|s| format!(" {s} ")).collect(),
        _ => sources.iter().map(|s| format!("{s}.000")).collect(),
    };
    format!("[{}]", items.join(","))
}

fn perform(session: &mut Session, planned: &Planned) -> surfacelog::Result<u64> {
    if planned.spelling == 0 {
        let intent = planned.op.map(|op| SurfaceIntent {
            op,
            sources: planned.sources.clone(),
        });
        session.append_dynamic(planned.event_type, &planned.data, intent)
    } else {
        let op = planned.op.map(|op| op_json(op, planned.spelling));
        let sources = planned
            .sources
            .as_ref()
            .map(|s| sources_json(s, planned.spelling));
        session.append_json(
            planned.event_type,
            &planned.data,
            op.as_deref(),
            sources.as_deref(),
        )
    }
}

// ---------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------

/// An abstract event, interpreted against the model's current state by [`Model::plan`].
#[derive(Debug, Clone)]
enum Action {
    LogOnly {
        pick: u8,
    },
    Append {
        kind: u8,
        variant: u8,
        cite: Vec<u16>,
    },
    Compact {
        a: u16,
        b: u16,
        extra: Vec<u16>,
        shuffle: u64,
        replacer: u8,
    },
    Prune {
        pick: u16,
        output: u8,
        layout: u8,
        cite: Vec<u16>,
    },
}

fn action() -> impl Strategy<Value = (Action, u8)> {
    let action = prop_oneof![
        3 => any::<u8>().prop_map(|pick| Action::LogOnly { pick }),
        6 => (any::<u8>(), any::<u8>(), vec(any::<u16>(), 0..4))
            .prop_map(|(kind, variant, cite)| Action::Append { kind, variant, cite }),
        3 => (any::<u16>(), any::<u16>(), vec(any::<u16>(), 0..24), any::<u64>(), any::<u8>())
            .prop_map(|(a, b, extra, shuffle, replacer)| Action::Compact {
                a,
                b,
                extra,
                shuffle,
                replacer,
            }),
        2 => (any::<u16>(), any::<u8>(), any::<u8>(), vec(any::<u16>(), 0..3))
            .prop_map(|(pick, output, layout, cite)| Action::Prune { pick, output, layout, cite }),
    ];
    (action, 0..4u8)
}

fn time() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0),
        Just(SAFE_MAX),
        Just(-SAFE_MAX),
        -SAFE_MAX..=SAFE_MAX
    ]
}

/// Builds a session by appending the actions, checking each append is accepted; returns
/// the model after each event too.
fn build(
    actions: &[(Action, u8)],
    options: Options,
) -> Result<(Session, Model, Vec<Model>), TestCaseError> {
    let mut session = Session::create("s", None, None, options).map_err(|e| fail(&e))?;
    let mut model = Model::default();
    let mut history = vec![model.clone()];
    for (action, spelling) in actions {
        let planned = model.plan(action, *spelling);
        let seq = perform(&mut session, &planned)
            .map_err(|e| fail(&format!("valid append {planned:?} refused: {e}")))?;
        prop_assert_eq!(seq, model.seq_next());
        model.apply(&planned);
        history.push(model.clone());
    }
    Ok((session, model, history))
}

// ---------------------------------------------------------------------------------------
// Comparisons
// ---------------------------------------------------------------------------------------

fn replacements_of(surface: &Surface) -> Vec<Replace> {
    let list = surface.replacements();
    list.map(|r| (r.seq, r.start, r.end, r.shadowed.to_vec()))
        .collect()
}

fn check_surface(surface: &Surface, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(surface.nodes(), &model.nodes[..]);
    prop_assert_eq!(
        surface.replace_generation(),
        to_u64(model.replacements.len())
    );
    if surface.records_history() {
        prop_assert_eq!(replacements_of(surface), model.replacements.clone());
    } else {
        prop_assert_eq!(surface.replacements().len(), 0);
    }
    prop_assert_eq!(surface.seq_next(), model.seq_next());
    for seq in (0..model.seq_next() + 2).chain([u64::MAX]) {
        prop_assert_eq!(
            surface.position(seq),
            model.position(seq),
            "position of {}",
            seq
        );
    }
    Ok(())
}

fn pairs(messages: &[Message<'_>]) -> Vec<(u64, String)> {
    messages
        .iter()
        .map(|m| (m.seq, m.json.to_owned()))
        .collect()
}

fn texts(log: &MemLog) -> Vec<String> {
    log.events().iter().map(|e| e.text().to_owned()).collect()
}

// ---------------------------------------------------------------------------------------
// 1. incremental fold == naive rebuild
// ---------------------------------------------------------------------------------------

/// How often the interesting shapes occurred, so that a generator that stops producing
/// them fails the test instead of passing vacuously.
#[derive(Debug, Default)]
struct Coverage {
    replaces: AtomicUsize,
    numerically_reversed: AtomicUsize,
    nested: AtomicUsize,
    prunes: AtomicUsize,
    silent_nodes: AtomicUsize,
    many_sources: AtomicUsize,
}

impl Coverage {
    fn record(&self, model: &Model, planned: &Planned) {
        let bump = |counter: &AtomicUsize| counter.fetch_add(1, Ordering::Relaxed);
        if planned.op.is_some() && planned.message.is_none() {
            bump(&self.silent_nodes);
        }
        if planned.sources.as_ref().is_some_and(|s| s.len() > 16) {
            bump(&self.many_sources);
        }
        let Some(SurfaceOp::Replace { start, end }) = planned.op else {
            return;
        };
        bump(&self.replaces);
        if start > end {
            bump(&self.numerically_reversed);
        }
        if planned.event_type == "tool/result" {
            bump(&self.prunes);
        }
        let (first, last) = (model.position(start), model.position(end));
        let shadowed = &model.nodes[first.unwrap_or(0)..=last.unwrap_or(0)];
        if shadowed
            .iter()
            .any(|s| model.replacements.iter().any(|r| r.0 == *s))
        {
            bump(&self.nested);
        }
    }
}

fn check_log(actions: &[(Action, u8)], time: i64, seen: &Coverage) -> Result<(), TestCaseError> {
    let vocabulary = Vocabulary::dsh_v0();
    let mut session = Session::create("s", None, None, options(time)).map_err(|e| fail(&e))?;
    let mut model = Model::default();
    let mut history = vec![model.clone()];
    let mut written: Vec<String> = Vec::new();
    let mut stepwise = Surface::recording();
    for (action, spelling) in actions {
        let planned = model.plan(action, *spelling);
        let seq = model.seq_next();
        let text = planned.render(seq, time);
        let got = perform(&mut session, &planned)
            .map_err(|e| fail(&format!("valid append {text} refused: {e}")))?;
        prop_assert_eq!(got, seq);
        seen.record(&model, &planned);
        model.apply(&planned);
        history.push(model.clone());
        written.push(text);
        // The session: stored bytes, surface, views.
        prop_assert_eq!(&texts(session.log()), &written);
        check_surface(session.surface(), &model)?;
        let recorded = session.replacements().map_err(|e| fail(&e))?;
        check_surface(&recorded, &model)?;
        prop_assert_eq!(pairs(&session.messages().unwrap()), model.messages());
        prop_assert_eq!(session.transcript().unwrap(), model.transcript());
        // The pure fold of the texts so far.
        let refs: Vec<&str> = written.iter().map(String::as_str).collect();
        let (folded, log) = Surface::fold_json(&refs, &vocabulary).map_err(|e| fail(&e))?;
        check_surface(&folded, &model)?;
        prop_assert_eq!(
            pairs(&surface::messages(&folded, &log).unwrap()),
            model.messages()
        );
        prop_assert_eq!(&texts(&log), &written);
        // The incremental fold, one event further.
        let grown = Prefix {
            log: session.log(),
            len: seq + 1,
        };
        stepwise
            .catch_up(&grown, &vocabulary)
            .map_err(|e| fail(&e))?;
        prop_assert_eq!(&stepwise, session.surface());
    }
    // From every split point: fold a prefix, check it, catch up in two more steps.
    let log = session.log();
    let whole = Surface::fold(log, &vocabulary).map_err(|e| fail(&e))?;
    prop_assert_eq!(&whole, session.surface());
    let len = log.seq_next();
    for k in 0..=len {
        let mut partial =
            Surface::fold(&Prefix { log, len: k }, &vocabulary).map_err(|e| fail(&e))?;
        check_surface(&partial, &history[to_usize(k)])?;
        let middle = Prefix {
            log,
            len: k + (len - k) / 2,
        };
        partial
            .catch_up(&middle, &vocabulary)
            .map_err(|e| fail(&e))?;
        partial.catch_up(log, &vocabulary).map_err(|e| fail(&e))?;
        prop_assert_eq!(&partial, &whole);
    }
    Ok(())
}

/// Runs `test` on 64 cases of `strategy` (failures persisted beside this file, replayed
/// first) and panics with proptest's report on the first failure.
fn run_cases<S: Strategy>(strategy: &S, test: impl Fn(S::Value) -> Result<(), TestCaseError>) {
    let config = Config {
        cases: 64,
        source_file: Some(file!()),
        ..Config::default()
    };
    if let Err(error) = TestRunner::new(config).run(strategy, test) {
        panic!("{error}");
    }
}

/// Fails unless every counter is above zero: a generator that stops producing a shape
/// fails its test instead of passing without it.
fn assert_covered(counters: &[(&str, &AtomicUsize)]) {
    for (what, counter) in counters {
        assert!(
            counter.load(Ordering::Relaxed) > 0,
            "the generator produced no {what}"
        );
    }
}

#[test]
fn incremental_fold_equals_naive_rebuild() {
    let seen = Coverage::default();
    let strategy = (vec(action(), 1..60), time());
    run_cases(&strategy, |(actions, time)| {
        check_log(&actions, time, &seen)
    });
    eprintln!("coverage: {seen:?}");
    assert_covered(&[
        ("replaces", &seen.replaces),
        ("numerically reversed ranges", &seen.numerically_reversed),
        ("nested replaces", &seen.nested),
        ("prunes", &seen.prunes),
        ("silent surface nodes", &seen.silent_nodes),
        ("source lists longer than 16", &seen.many_sources),
    ]);
}

// ---------------------------------------------------------------------------------------
// 1b. batches: each event against the state the ones before it leave; all or nothing
// ---------------------------------------------------------------------------------------

/// One batch: its actions, where an event that is refused goes into it (if one does), and
/// which entry point takes it (`append_all` or `append_all_json`).
type Batch = (Vec<(Action, u8)>, Option<u16>, bool);

/// How often a batch took each way through the engine, so that the test cannot pass
/// without exercising them.
#[derive(Debug, Default)]
struct BatchCoverage {
    committed_with_replace: AtomicUsize,
    refused_after_replace: AtomicUsize,
    refused_after_no_replace: AtomicUsize,
    refused_first: AtomicUsize,
}

/// What a session shows: its stored texts, surface, messages and transcript.
type Snapshot = (Vec<String>, Surface, Vec<(u64, String)>, Vec<u64>);

/// What a session shows, to compare before and after a refusal.
fn snapshot(session: &Session) -> Snapshot {
    (
        texts(session.log()),
        session.surface().clone(),
        pairs(&session.messages().unwrap()),
        session.transcript().unwrap(),
    )
}

fn check_batches(batches: &[Batch], time: i64, seen: &BatchCoverage) -> Result<(), TestCaseError> {
    let bump = |counter: &AtomicUsize| counter.fetch_add(1, Ordering::Relaxed);
    let mut session = Session::create("s", None, None, options(time)).map_err(|e| fail(&e))?;
    let mut model = Model::default();
    for (actions, refused_at, typed) in batches {
        // Planned against the model as the batch's events before each leave it, so that a
        // replace may take off nodes the same batch appended.
        let mut after = model.clone();
        let mut planned = Vec::new();
        for (action, spelling) in actions {
            let plan = after.plan(action, *spelling);
            after.apply(&plan);
            planned.push(plan);
        }
        let refused = refused_at.map(|at| usize::from(at) % (planned.len() + 1));
        let ops: Vec<Option<String>> = planned
            .iter()
            .map(|p| p.op.map(|op| op_json(op, p.spelling)))
            .collect();
        let sources: Vec<Option<String>> = planned
            .iter()
            .map(|p| p.sources.as_ref().map(|s| sources_json(s, p.spelling)))
            .collect();
        let mut json: Vec<(&str, &str, Option<&str>, Option<&str>)> = planned
            .iter()
            .zip(ops.iter().zip(&sources))
            .map(|(p, (op, s))| (p.event_type, p.data.as_str(), op.as_deref(), s.as_deref()))
            .collect();
        let mut intents: Vec<(&str, &str, Option<SurfaceIntent>)> = planned
            .iter()
            .map(|p| {
                let intent = p.op.map(|op| SurfaceIntent {
                    op,
                    sources: p.sources.clone(),
                });
                (p.event_type, p.data.as_str(), intent)
            })
            .collect();
        if let Some(at) = refused {
            json.insert(at, ("user/message", "{", Some(r#""append""#), None));
            intents.insert(at, ("user/message", "{", Some(SurfaceIntent::append())));
        }
        let before = snapshot(&session);
        let result = if *typed {
            session.append_all(&intents)
        } else {
            session.append_all_json(&json)
        };
        let replaces_before = |n: usize| {
            planned[..n]
                .iter()
                .any(|p| matches!(p.op, Some(SurfaceOp::Replace { .. })))
        };
        if let Some(at) = refused {
            let error = result
                .err()
                .ok_or_else(|| fail(&"a batch with a bad event was taken"))?;
            prop_assert_eq!(error.code(), "DATA_INVALID_JSON");
            prop_assert_eq!(error.seq(), Some(model.seq_next() + to_u64(at)));
            prop_assert_eq!(&snapshot(&session), &before, "a refused batch left a trace");
            if replaces_before(at) {
                bump(&seen.refused_after_replace);
            } else if at > 0 {
                bump(&seen.refused_after_no_replace);
            } else {
                bump(&seen.refused_first);
            }
        } else {
            let seqs = result.map_err(|e| fail(&format!("valid batch refused: {e}")))?;
            prop_assert_eq!(
                seqs,
                (model.seq_next()..after.seq_next()).collect::<Vec<_>>()
            );
            if replaces_before(planned.len()) {
                bump(&seen.committed_with_replace);
            }
            model = after;
        }
        check_surface(session.surface(), &model)?;
        prop_assert_eq!(pairs(&session.messages().unwrap()), model.messages());
        prop_assert_eq!(session.transcript().unwrap(), model.transcript());
    }
    // What the batches left is what a fold of the log gives.
    let folded = Surface::fold(session.log(), &Vocabulary::dsh_v0()).map_err(|e| fail(&e))?;
    prop_assert_eq!(&folded, session.surface());
    Ok(())
}

#[test]
fn batches_equal_their_events_one_by_one_or_leave_no_trace() {
    let seen = BatchCoverage::default();
    let batch = (
        vec(action(), 1..12),
        proptest::option::of(any::<u16>()),
        any::<bool>(),
    );
    let strategy = (vec(batch, 1..10), time());
    run_cases(&strategy, |(batches, time)| {
        check_batches(&batches, time, &seen)
    });
    eprintln!("coverage: {seen:?}");
    assert_covered(&[
        (
            "committed batches with a replace",
            &seen.committed_with_replace,
        ),
        ("refusals after a replace", &seen.refused_after_replace),
        (
            "refusals after events without a replace",
            &seen.refused_after_no_replace,
        ),
        ("refusals of a batch's first event", &seen.refused_first),
    ]);
}

// ---------------------------------------------------------------------------------------
// 2. a refused event leaves the session unchanged
// ---------------------------------------------------------------------------------------

/// One call of an append entry point.
#[derive(Debug, Clone)]
enum Call {
    Json {
        event_type: String,
        data: String,
        op: Option<String>,
        sources: Option<String>,
    },
    Typed {
        event_type: String,
        data: String,
        intent: Option<SurfaceIntent>,
    },
}

impl Call {
    fn json(event_type: &str, data: &str, op: Option<String>, sources: Option<String>) -> Self {
        Self::Json {
            event_type: event_type.to_owned(),
            data: data.to_owned(),
            op,
            sources,
        }
    }

    fn typed(event_type: &str, data: &str, intent: Option<SurfaceIntent>) -> Self {
        Self::Typed {
            event_type: event_type.to_owned(),
            data: data.to_owned(),
            intent,
        }
    }

    /// The same call through `append_json` or `append_dynamic`, as `typed` says.
    fn either(
        typed: bool,
        event_type: &str,
        data: &str,
        op: Option<SurfaceOp>,
        sources: Option<Vec<u64>>,
    ) -> Self {
        if typed {
            Self::typed(event_type, data, op.map(|op| SurfaceIntent { op, sources }))
        } else {
            let sources = sources.map(|s| sources_json(&s, 0));
            Self::json(event_type, data, op.map(|op| op_json(op, 0)), sources)
        }
    }

    fn perform(&self, session: &mut Session) -> surfacelog::Result<u64> {
        match self {
            Self::Json {
                event_type,
                data,
                op,
                sources,
            } => session.append_json(event_type, data, op.as_deref(), sources.as_deref()),
            Self::Typed {
                event_type,
                data,
                intent,
            } => session.append_dynamic(event_type, data, intent.clone()),
        }
    }
}

/// A generated refusal: `kind` picks the fault, the rest picks its details.
#[derive(Debug, Clone)]
struct Fault {
    kind: u8,
    a: u16,
    b: u16,
    c: u16,
    typed: bool,
}

fn fault() -> impl Strategy<Value = Fault> {
    (
        any::<u8>(),
        any::<u16>(),
        any::<u16>(),
        any::<u16>(),
        any::<bool>(),
    )
        .prop_map(|(kind, a, b, c, typed)| Fault {
            kind,
            a,
            b,
            c,
            typed,
        })
}

/// `surfaceOp` texts that are neither `"append"` nor a well-formed replace.
const BAD_OPS: [&str; 22] = [
    "null",
    "{}",
    r#""x""#,
    r#""Append""#,
    r#""replace""#,
    "[]",
    r#"["append"]"#,
    "0",
    "true",
    r#"{"op":"replace","start":0}"#,
    r#"{"op":"replace","end":0}"#,
    r#"{"start":0,"end":0}"#,
    r#"{"op":"replace","start":0,"end":0,"x":1}"#,
    r#"{"op":"append","start":0,"end":0}"#,
    r#"{"op":null,"start":0,"end":0}"#,
    r#"{"op":"replace","start":-1,"end":0}"#,
    r#"{"op":"replace","start":0,"end":0.5}"#,
    r#"{"op":"replace","start":9007199254740992,"end":0}"#,
    r#"{"op":"replace","start":"0","end":0}"#,
    r#"{"op":"replace","start":0,"end":null}"#,
    r#"{"op":"replace","start":1e400,"end":0}"#,
    r#"{"op":"replace","start":[0],"end":0}"#,
];

/// `sourceEventSeqs` texts that are not arrays of non-negative safe integers.
const BAD_SOURCES: [&str; 11] = [
    "null",
    "{}",
    "0",
    r#""[0]""#,
    "[0.5]",
    "[-1]",
    r#"["0"]"#,
    "[9007199254740992]",
    "[null]",
    "[[0]]",
    "[0,true]",
];

/// Texts that are not JSON.
const NOT_JSON: [&str; 16] = [
    "",
    " ",
    "{",
    "}",
    "[1,]",
    r#"{"a":}"#,
    "nul",
    "01",
    "1.",
    r#""\x""#,
    "{} {}",
    "[1 2]",
    "'a'",
    "\"\u{1}\"",
    "NaN",
    r#"{"a" 1}"#,
];

/// Texts holding a negative zero (contract §2.1).
const NEGATIVE_ZERO: [&str; 5] = [
    "-0",
    "[-0.0]",
    r#"{"n":-0e3}"#,
    r#"{"a":[1,{"b":-0E+2}]}"#,
    "-0.000",
];

impl Model {
    /// A seq that is not a node: shadowed, log-only, or not yet written.
    fn off_surface(&self, pick: u16) -> u64 {
        let mut seqs: Vec<u64> = (0..self.seq_next())
            .filter(|s| self.position(*s).is_none())
            .collect();
        let next = self.seq_next();
        seqs.extend([next, next + 1, next + 1000, SAFE_MAX.unsigned_abs()]);
        seqs[usize::from(pick) % seqs.len()]
    }

    fn node(&self, pick: u16) -> Option<u64> {
        (!self.nodes.is_empty()).then(|| self.nodes[usize::from(pick) % self.nodes.len()])
    }

    fn nodes_where(&self, tool: bool) -> Vec<u64> {
        let is_tool = |seq: &u64| self.events[to_usize(*seq)].tool.is_some();
        self.nodes
            .iter()
            .copied()
            .filter(|s| is_tool(s) == tool)
            .collect()
    }
}

/// A `tool/result` data of valid shape that differs from `old` outside the output.
fn changed_tool(old: &Tool, pick: u16) -> String {
    let output = OUTPUTS[usize::from(pick / 16) % OUTPUTS.len()];
    let base = Tool {
        output,
        ..old.clone()
    };
    let (data, _) = match pick % 8 {
        0 => Tool {
            turn: old.turn + 1,
            ..base
        },
        1 => Tool {
            step: old.step + 1,
            ..base
        },
        2 => Tool {
            id: format!("{}x", old.id),
            ..base
        },
        3 => Tool {
            call_id: format!("{}x", old.call_id),
            ..base
        },
        4 => Tool {
            is_error: old.is_error.map_or(Some(false), |e| (!e).then_some(true)),
            ..base
        },
        5 => Tool {
            meta: !old.meta,
            ..base
        },
        6 => {
            let (data, _) = base.render();
            return data.replacen(r#""role":"user""#, r#""role":"user","x":1"#, 1);
        }
        _ => {
            let (data, _) = base.render();
            return data.replacen(r#""tool-result""#, r#""tool-result","extra":null"#, 1);
        }
    }
    .render();
    data
}

/// Broken `user/message`-like data (also `context/message`, `steering/message`).
const USER_BROKEN: [&str; 17] = [
    "null",
    "[]",
    r#""x""#,
    "{}",
    r#"{"role":"user","source":{"kind":"user"},"content":[]}"#,
    r#"{"id":"","role":"user","source":{"kind":"user"},"content":[]}"#,
    r#"{"id":5,"role":"user","source":{"kind":"user"},"content":[]}"#,
    r#"{"id":"m","role":"assistant","source":{"kind":"user"},"content":[]}"#,
    r#"{"id":"m","source":{"kind":"user"},"content":[]}"#,
    r#"{"id":"m","role":null,"source":{"kind":"user"},"content":[]}"#,
    r#"{"id":"m","role":"user","content":[]}"#,
    r#"{"id":"m","role":"user","source":"user","content":[]}"#,
    r#"{"id":"m","role":"user","source":{},"content":[]}"#,
    r#"{"id":"m","role":"user","source":{"kind":""},"content":[]}"#,
    r#"{"id":"m","role":"user","source":{"kind":"user"}}"#,
    r#"{"id":"m","role":"user","source":{"kind":"user"},"content":{}}"#,
    r#"{"id":"m","role":"user","source":{"kind":"user"},"content":"x"}"#,
];

/// Broken `assistant/message` data.
const ASSISTANT_BROKEN: [&str; 10] = [
    "null",
    r#"{"turn":1}"#,
    r#"{"message":null}"#,
    r#"{"message":{"id":"a","role":"user","source":{"kind":"model","provider":"p","model":"m"},"content":[]}}"#,
    r#"{"message":{"id":"a","role":"assistant","source":{"kind":"user","provider":"p","model":"m"},"content":[]}}"#,
    r#"{"message":{"id":"a","role":"assistant","source":{"kind":"model","model":"m"},"content":[]}}"#,
    r#"{"message":{"id":"a","role":"assistant","source":{"kind":"model","provider":"","model":"m"},"content":[]}}"#,
    r#"{"message":{"id":"a","role":"assistant","source":{"kind":"model","provider":"p"},"content":[]}}"#,
    r#"{"message":{"id":"a","role":"assistant","source":{"kind":"model","provider":"p","model":"m"},"content":null}}"#,
    r#"{"message":{"role":"assistant","source":{"kind":"model","provider":"p","model":"m"},"content":[]}}"#,
];

/// Broken `tool/result` data.
const TOOL_BROKEN: [&str; 13] = [
    r#"{"turn":1}"#,
    r#"{"message":{"id":"t","role":"user","source":{"kind":"model","callId":"c"},"content":[{"type":"tool-result","toolCallId":"c","content":[]}]}}"#,
    r#"{"message":{"id":"t","role":"user","source":{"kind":"tool"},"content":[{"type":"tool-result","toolCallId":"c","content":[]}]}}"#,
    r#"{"message":{"id":"t","role":"user","source":{"kind":"tool","callId":""},"content":[{"type":"tool-result","toolCallId":"","content":[]}]}}"#,
    r#"{"message":{"id":"t","role":"user","source":{"kind":"tool","callId":"c"},"content":[]}}"#,
    r#"{"message":{"id":"t","role":"user","source":{"kind":"tool","callId":"c"},"content":[{"type":"tool-result","toolCallId":"c","content":[]},{"type":"tool-result","toolCallId":"c","content":[]}]}}"#,
    r#"{"message":{"id":"t","role":"user","source":{"kind":"tool","callId":"c"},"content":[{"type":"text","toolCallId":"c","content":[]}]}}"#,
    r#"{"message":{"id":"t","role":"user","source":{"kind":"tool","callId":"c"},"content":[{"type":"tool-result","toolCallId":"d","content":[]}]}}"#,
    r#"{"message":{"id":"t","role":"user","source":{"kind":"tool","callId":"c"},"content":[{"type":"tool-result","toolCallId":"c"}]}}"#,
    r#"{"message":{"id":"t","role":"user","source":{"kind":"tool","callId":"c"},"content":[{"type":"tool-result","toolCallId":"c","content":"x"}]}}"#,
    r#"{"message":{"id":"t","role":"user","source":{"kind":"tool","callId":"c"},"content":[{"type":"tool-result","content":[]}]}}"#,
    r#"{"message":{"id":"t","role":"assistant","source":{"kind":"tool","callId":"c"},"content":[{"type":"tool-result","toolCallId":"c","content":[]}]}}"#,
    r#"{"message":{"id":"t","role":"user","source":{"kind":"tool","callId":5},"content":[{"type":"tool-result","toolCallId":5,"content":[]}]}}"#,
];

/// Broken `request/header` data.
const HEADER_BROKEN: [&str; 9] = [
    "{}",
    r#"{"header":{}}"#,
    r#"{"header":{"config":{"provider":"p"}}}"#,
    r#"{"header":{"config":{"provider":"","model":"m"}}}"#,
    r#"{"header":{"config":{"provider":"p","model":"m","reasoningEffort":""}}}"#,
    r#"{"header":{"config":{"provider":"p","model":"m","reasoningEffort":5}}}"#,
    r#"{"header":{"config":{"provider":"p","model":"m"},"adapterDefaults":[]}}"#,
    r#"{"header":{"config":{"provider":"p","model":"m"},"adapterDefaults":{"maxTokens":true}}}"#,
    r#"{"header":{"config":{"provider":"p","model":"m","reasoningEffort":"low"},"adapterDefaults":{"reasoningEffort":false}}}"#,
];

/// Data that break the message shape of `event_type` (contract §3).
fn broken_data(event_type: &str, pick: u16) -> &'static str {
    let list: &[&str] = match event_type {
        "assistant/message" => &ASSISTANT_BROKEN,
        "tool/result" => &TOOL_BROKEN,
        _ => &USER_BROKEN,
    };
    list[usize::from(pick) % list.len()]
}

/// A `surfaceOp` text that parses, valid or not: the shape check comes first.
fn any_op_text(model: &Model, pick: u16) -> Option<String> {
    let node = model.node(pick).unwrap_or(0);
    match pick % 5 {
        0 => None,
        1 => Some(r#""append""#.to_owned()),
        2 => Some(BAD_OPS[usize::from(pick / 5) % BAD_OPS.len()].to_owned()),
        3 => Some(op_json(
            SurfaceOp::Replace {
                start: node,
                end: model.off_surface(pick),
            },
            0,
        )),
        _ => Some(op_json(
            SurfaceOp::Replace {
                start: node,
                end: node,
            },
            0,
        )),
    }
}

/// What a fault planner works from: the state, the generated details, and valid parts
/// to combine with the one fault.
struct Ctx<'m> {
    model: &'m Model,
    seq: u64,
    a: u16,
    b: u16,
    c: u16,
    typed: bool,
    /// An eligible type and a valid data for it.
    eligible: &'static str,
    data: String,
    /// A log-only type and a data for it.
    log_only: &'static str,
    log_data: &'static str,
}

/// A refused call and the code the contract gives it.
type Refusal = (Call, &'static str);

impl Ctx<'_> {
    fn new<'m>(model: &'m Model, fault: &Fault) -> Ctx<'m> {
        let Fault { a, b, c, typed, .. } = *fault;
        let seq = model.seq_next();
        let eligible = ELIGIBLE[usize::from(a) % ELIGIBLE.len()];
        let (data, ..) = message_data(eligible, seq, 2);
        let (log_only, log_data) = LOG_ONLY[usize::from(a) % LOG_ONLY.len()];
        Ctx {
            model,
            seq,
            a,
            b,
            c,
            typed,
            eligible,
            data,
            log_only,
            log_data,
        }
    }

    /// `[s]` for an earlier seq, when there is one.
    fn valid_sources(&self) -> Option<String> {
        (self.seq > 0).then(|| format!("[{}]", u64::from(self.c) % self.seq))
    }

    /// `sourceEventSeqs` that may be wrong: checked after the fault at hand.
    fn any_sources(&self) -> Option<String> {
        [None, Some("null"), Some("[]"), Some("[0,0]")][usize::from(self.c) % 4].map(str::to_owned)
    }

    /// A type that may be eligible or log-only, and an `"append"` exactly when eligible.
    fn any_type(&self) -> (&'static str, Option<String>) {
        if self.b.is_multiple_of(2) {
            (self.eligible, Some(op_json(SurfaceOp::Append, 0)))
        } else {
            (self.log_only, None)
        }
    }

    /// One of the replacing types, with a valid data.
    fn replacer(&self) -> (&'static str, String) {
        let replacer = [
            "user/message",
            "context/message",
            "assistant/message",
            "tool/result",
        ][usize::from(self.a) % 4];
        (replacer, message_data(replacer, self.seq, 2).0)
    }

    fn replace(
        &self,
        event_type: &str,
        data: &str,
        ends: (u64, u64),
        sources: Option<Vec<u64>>,
    ) -> Call {
        let op = SurfaceOp::Replace {
            start: ends.0,
            end: ends.1,
        };
        Call::either(self.typed, event_type, data, Some(op), sources)
    }
}

/// The planners, one per fault; [`plan_fault`] picks one.
const FAULTS: [fn(&Ctx<'_>) -> Refusal; 26] = [
    bad_op,
    op_required,
    op_forbidden,
    sources_forbidden,
    sources_invalid,
    sources_empty,
    sources_duplicate,
    sources_not_earlier,
    surface_not_json,
    surface_negative_zero,
    start_off_surface,
    end_off_surface,
    reversed,
    sources_incomplete,
    rewrite_not_single,
    rewrite_target,
    rewrite_changed,
    shape,
    shape,
    data_not_json,
    data_duplicate_key,
    data_negative_zero,
    bad_type,
    legacy,
    request_header_shape,
    too_large,
];

/// A refused call and the code contract §4/§5 gives it. Faults whose precondition the
/// state does not meet fall back to an invalid `surfaceOp`.
fn plan_fault(model: &Model, fault: &Fault) -> Refusal {
    FAULTS[usize::from(fault.kind) % FAULTS.len()](&Ctx::new(model, fault))
}

// Contract §4 step 2: the marker.

fn bad_op(x: &Ctx<'_>) -> Refusal {
    let op = BAD_OPS[usize::from(x.b) % BAD_OPS.len()].to_owned();
    (
        Call::json(x.eligible, &x.data, Some(op), x.valid_sources()),
        "SURFACE_OP_INVALID",
    )
}

fn op_required(x: &Ctx<'_>) -> Refusal {
    let call = if x.typed {
        Call::typed(x.eligible, &x.data, None)
    } else {
        Call::json(x.eligible, &x.data, None, x.valid_sources())
    };
    (call, "SURFACE_OP_REQUIRED")
}

fn op_forbidden(x: &Ctx<'_>) -> Refusal {
    let call = if x.typed {
        let op = if x.b.is_multiple_of(2) {
            SurfaceOp::Append
        } else {
            SurfaceOp::Replace { start: 0, end: 0 }
        };
        Call::typed(
            x.log_only,
            x.log_data,
            Some(SurfaceIntent { op, sources: None }),
        )
    } else {
        let op = [
            r#""append""#,
            "null",
            "{}",
            r#"{"op":"replace","start":0,"end":0}"#,
        ][usize::from(x.b) % 4];
        let sources = x.c.is_multiple_of(2).then(|| "[]".to_owned());
        Call::json(x.log_only, x.log_data, Some(op.to_owned()), sources)
    };
    (call, "SURFACE_OP_FORBIDDEN")
}

fn sources_forbidden(x: &Ctx<'_>) -> Refusal {
    let sources = ["[]", "null", "[0]", "{}", "[-1]"][usize::from(x.b) % 5].to_owned();
    (
        Call::json(x.log_only, x.log_data, None, Some(sources)),
        "SOURCES_FORBIDDEN",
    )
}

// Contract §4 step 3: provenance, checked before the replace range of step 5.

fn sources_invalid(x: &Ctx<'_>) -> Refusal {
    let op = if x.b.is_multiple_of(2) {
        SurfaceOp::Append
    } else {
        let start = x.model.off_surface(x.c);
        SurfaceOp::Replace { start, end: start }
    };
    let sources = BAD_SOURCES[usize::from(x.c) % BAD_SOURCES.len()].to_owned();
    (
        Call::json(x.eligible, &x.data, Some(op_json(op, 0)), Some(sources)),
        "SOURCES_INVALID",
    )
}

fn sources_empty(x: &Ctx<'_>) -> Refusal {
    let event_type = [
        "user/message",
        "context/message",
        "steering/message",
        "tool/result",
    ][usize::from(x.a) % 4];
    let (data, ..) = message_data(event_type, x.seq, 2);
    let op = if x.b.is_multiple_of(2) {
        SurfaceOp::Append
    } else {
        SurfaceOp::Replace { start: 0, end: 0 }
    };
    (
        Call::either(x.typed, event_type, &data, Some(op), Some(Vec::new())),
        "SOURCES_EMPTY",
    )
}

/// Every earlier seq (so lists pass 16 entries), or a few.
fn some_earlier(x: &Ctx<'_>) -> Vec<u64> {
    if x.c.is_multiple_of(2) {
        (0..x.seq).collect()
    } else {
        x.model.earlier(&[x.b, x.c])
    }
}

fn sources_duplicate(x: &Ctx<'_>) -> Refusal {
    let twice = u64::from(x.b) % (x.seq + 3);
    let mut sources: Vec<u64> = some_earlier(x)
        .into_iter()
        .filter(|s| *s != twice)
        .collect();
    sources.insert(usize::from(x.a) % (sources.len() + 1), twice);
    sources.push(twice);
    let op = Some(SurfaceOp::Append);
    (
        Call::either(x.typed, x.eligible, &x.data, op, Some(sources)),
        "SOURCES_DUPLICATE",
    )
}

fn sources_not_earlier(x: &Ctx<'_>) -> Refusal {
    let mut sources = some_earlier(x);
    sources.insert(
        usize::from(x.a) % (sources.len() + 1),
        x.seq + u64::from(x.c % 3),
    );
    let op = Some(SurfaceOp::Append);
    (
        Call::either(x.typed, x.eligible, &x.data, op, Some(sources)),
        "SOURCES_NOT_EARLIER",
    )
}

// Contract §2.1 for the surface fields given as JSON texts.

fn surface_not_json(x: &Ctx<'_>) -> Refusal {
    let texts = [
        "{",
        "",
        "append",
        "[1,]",
        r#"{"op":"replace","op":"replace","start":0,"end":0}"#,
    ];
    let text = texts[usize::from(x.b) % texts.len()].to_owned();
    let code = if x.b % 5 == 4 {
        "DATA_DUPLICATE_KEY"
    } else {
        "DATA_INVALID_JSON"
    };
    let call = if x.c.is_multiple_of(2) {
        Call::json(x.eligible, &x.data, Some(text), None)
    } else {
        Call::json(
            x.eligible,
            &x.data,
            Some(op_json(SurfaceOp::Append, 0)),
            Some(text),
        )
    };
    (call, code)
}

fn surface_negative_zero(x: &Ctx<'_>) -> Refusal {
    let zero = NEGATIVE_ZERO[usize::from(x.b) % NEGATIVE_ZERO.len()];
    // Even on a log-only type: the JSON rules come first.
    let event_type = if x.c.is_multiple_of(2) {
        x.eligible
    } else {
        x.log_only
    };
    let call = if x.a.is_multiple_of(2) {
        let op = format!(r#"{{"op":"replace","start":{zero},"end":0}}"#);
        Call::json(event_type, &x.data, Some(op), None)
    } else {
        let sources = format!("[1,{zero}]");
        Call::json(
            event_type,
            &x.data,
            Some(r#""append""#.to_owned()),
            Some(sources),
        )
    };
    (call, "DATA_NOT_LOSSLESS")
}

// Contract §4 step 5: the range, then the tool-output rewrite rule.

fn start_off_surface(x: &Ctx<'_>) -> Refusal {
    let (replacer, data) = x.replacer();
    let start = x.model.off_surface(x.b);
    let end = if x.c.is_multiple_of(2) {
        x.model.off_surface(x.c)
    } else {
        x.model.node(x.c).unwrap_or(start)
    };
    let sources =
        Some(x.model.earlier(&[x.a, x.b])).filter(|s| x.c.is_multiple_of(3) && !s.is_empty());
    let call = x.replace(replacer, &data, (start, end), sources);
    (call, "REPLACE_START_NOT_ON_SURFACE")
}

fn end_off_surface(x: &Ctx<'_>) -> Refusal {
    let Some(start) = x.model.node(x.b) else {
        return bad_op(x);
    };
    let (replacer, data) = x.replacer();
    let call = x.replace(replacer, &data, (start, x.model.off_surface(x.c)), None);
    (call, "REPLACE_END_NOT_ON_SURFACE")
}

fn reversed(x: &Ctx<'_>) -> Refusal {
    let nodes = &x.model.nodes;
    if nodes.len() < 2 {
        return bad_op(x);
    }
    let (i, j) = (
        usize::from(x.b) % nodes.len(),
        usize::from(x.c) % nodes.len(),
    );
    let (first, last) = if i == j {
        (0, nodes.len() - 1)
    } else {
        (i.min(j), i.max(j))
    };
    let (replacer, data) = x.replacer();
    let sources = Some(nodes[first..=last].to_vec());
    let call = x.replace(replacer, &data, (nodes[last], nodes[first]), sources);
    (call, "REPLACE_REVERSED")
}

fn sources_incomplete(x: &Ctx<'_>) -> Refusal {
    let nodes = &x.model.nodes;
    if nodes.is_empty() {
        return bad_op(x);
    }
    let (i, j) = (
        usize::from(x.b) % nodes.len(),
        usize::from(x.c) % nodes.len(),
    );
    let shadowed = &nodes[i.min(j)..=i.max(j)];
    let dropped = shadowed[usize::from(x.a / 4) % shadowed.len()];
    let mut sources: Vec<u64> = some_earlier(x)
        .into_iter()
        .filter(|s| *s != dropped)
        .collect();
    sources.retain(|s| !mix(u64::from(x.b) ^ s).is_multiple_of(3) || !shadowed.contains(s));
    let (replacer, data) = x.replacer();
    let sources = match (sources.is_empty(), replacer) {
        (false, _) => Some(sources),
        (true, "assistant/message") => Some(Vec::new()),
        (true, _) => None,
    };
    let ends = (shadowed[0], shadowed[shadowed.len() - 1]);
    (
        x.replace(replacer, &data, ends, sources),
        "REPLACE_SOURCES_INCOMPLETE",
    )
}

fn rewrite_not_single(x: &Ctx<'_>) -> Refusal {
    let nodes = &x.model.nodes;
    if nodes.len() < 2 {
        return bad_op(x);
    }
    let first = usize::from(x.b) % (nodes.len() - 1);
    let last = first + 1 + usize::from(x.c) % (nodes.len() - 1 - first);
    let (data, ..) = message_data("tool/result", x.seq, 2);
    let sources = Some(nodes[first..=last].to_vec());
    let call = x.replace("tool/result", &data, (nodes[first], nodes[last]), sources);
    (call, "TOOL_REWRITE_NOT_SINGLE")
}

fn rewrite_target(x: &Ctx<'_>) -> Refusal {
    let others = x.model.nodes_where(false);
    let Some(&target) = others.get(usize::from(x.b) % others.len().max(1)) else {
        return bad_op(x);
    };
    let (data, ..) = message_data("tool/result", x.seq, 2);
    let call = x.replace("tool/result", &data, (target, target), Some(vec![target]));
    (call, "TOOL_REWRITE_TARGET")
}

fn rewrite_changed(x: &Ctx<'_>) -> Refusal {
    let tools = x.model.nodes_where(true);
    let Some(&target) = tools.get(usize::from(x.b) % tools.len().max(1)) else {
        return bad_op(x);
    };
    let old = x.model.events[to_usize(target)]
        .tool
        .clone()
        .expect("a tool node");
    let data = changed_tool(&old, x.c);
    let call = x.replace("tool/result", &data, (target, target), Some(vec![target]));
    (call, "TOOL_REWRITE_CHANGED")
}

// Contract §5: checks before the surface, some combined with a later fault.

fn shape(x: &Ctx<'_>) -> Refusal {
    let broken = broken_data(x.eligible, x.b);
    let call = Call::json(
        x.eligible,
        broken,
        any_op_text(x.model, x.c),
        x.any_sources(),
    );
    (call, "MESSAGE_SHAPE")
}

fn data_not_json(x: &Ctx<'_>) -> Refusal {
    let (event_type, op) = x.any_type();
    let broken = NOT_JSON[usize::from(x.c) % NOT_JSON.len()];
    let call = Call::either(x.typed, event_type, broken, None, None).with_op(op);
    (call, "DATA_INVALID_JSON")
}

fn data_duplicate_key(x: &Ctx<'_>) -> Refusal {
    let (event_type, op) = x.any_type();
    let duplicated = [
        r#"{"a":1,"a":2}"#,
        r#"{"x":[{"k":1,"k":1}]}"#,
        r#"{"a":1,"\u0061":2}"#,
        r#"{"id":"m","role":"user","source":{"kind":"user"},"content":[],"id":"n"}"#,
    ][usize::from(x.c) % 4];
    let call = Call::either(x.typed, event_type, duplicated, None, None).with_op(op);
    (call, "DATA_DUPLICATE_KEY")
}

fn data_negative_zero(x: &Ctx<'_>) -> Refusal {
    let zero = NEGATIVE_ZERO[usize::from(x.c) % NEGATIVE_ZERO.len()];
    // A shape fault and an invalid surfaceOp would only come later.
    let data = if x.b.is_multiple_of(2) {
        x.data.replacen('{', &format!(r#"{{"n":{zero},"#), 1)
    } else {
        format!(r#"{{"n":{zero}}}"#)
    };
    let call = Call::json(
        x.eligible,
        &data,
        any_op_text(x.model, x.a),
        x.any_sources(),
    );
    (call, "DATA_NOT_LOSSLESS")
}

fn bad_type(x: &Ctx<'_>) -> Refusal {
    let event_type = ["", &"t".repeat(257), &"é".repeat(129)][usize::from(x.c) % 3].to_owned();
    // With a fault of the data too: the JSON rules (§2.1) come before the envelope
    // (contract §5, "Order of checks"), on `append` as on the seed path.
    let pick = usize::from(x.a);
    let (data, code) = match x.b % 8 {
        0..=3 => (x.data.clone(), "ENVELOPE_INVALID"),
        4 => (
            NOT_JSON[pick % NOT_JSON.len()].to_owned(),
            "DATA_INVALID_JSON",
        ),
        5 => (r#"{"a":1,"a":1}"#.to_owned(), "DATA_DUPLICATE_KEY"),
        6 => (
            NEGATIVE_ZERO[pick % NEGATIVE_ZERO.len()].to_owned(),
            "DATA_NOT_LOSSLESS",
        ),
        _ => (
            format!("\"{}\"", "a".repeat(MAX_EVENT_BYTES)),
            "EVENT_TOO_LARGE",
        ),
    };
    let op = x.b.is_multiple_of(2).then(|| op_json(SurfaceOp::Append, 0));
    (Call::json(&event_type, &data, op, x.any_sources()), code)
}

fn legacy(x: &Ctx<'_>) -> Refusal {
    let (event_type, data) = match x.c % 3 {
        0 => ("request/header-delta", x.data.as_str()),
        1 => (
            "request/header",
            r#"{"reason":"fallback","header":{"config":{"provider":"p","model":"m"}}}"#,
        ),
        _ => ("request/header", r#"{"reason":"fallback","header":{}}"#),
    };
    let op = x.b.is_multiple_of(2).then(|| op_json(SurfaceOp::Append, 0));
    (Call::json(event_type, data, op, None), "LEGACY_EVENT")
}

fn request_header_shape(x: &Ctx<'_>) -> Refusal {
    let broken = HEADER_BROKEN[usize::from(x.c) % HEADER_BROKEN.len()];
    let op = x.b.is_multiple_of(2).then(|| op_json(SurfaceOp::Append, 0));
    (
        Call::json("request/header", broken, op, None),
        "REQUEST_HEADER_SHAPE",
    )
}

fn too_large(x: &Ctx<'_>) -> Refusal {
    let (event_type, op) = x.any_type();
    let text = "a".repeat(MAX_EVENT_BYTES + 1 + usize::from(x.c % 64));
    let data = if x.b % 4 < 2 {
        x.data
            .replacen("\"id\"", &format!(r#""pad":"{text}","id""#), 1)
    } else {
        format!(r#"{{"pad":"{text}"}}"#)
    };
    let op = op.map(|_| SurfaceOp::Append);
    (
        Call::either(x.typed, event_type, &data, op, None),
        "EVENT_TOO_LARGE",
    )
}

impl Call {
    /// Replaces the `surfaceOp` of a JSON call; a typed call gets the matching intent.
    fn with_op(self, op: Option<String>) -> Self {
        match self {
            Self::Json {
                event_type,
                data,
                sources,
                ..
            } => Self::Json {
                event_type,
                data,
                op,
                sources,
            },
            Self::Typed {
                event_type, data, ..
            } => {
                let intent = op.map(|_| SurfaceIntent::append());
                Self::Typed {
                    event_type,
                    data,
                    intent,
                }
            }
        }
    }
}

/// The bound of the sessions in the refusal test, so that `EVENT_TOO_LARGE` is cheap.
const MAX_EVENT_BYTES: usize = 16 * 1024;

/// Everything observable about a session.
#[derive(Debug, PartialEq)]
struct State {
    texts: Vec<String>,
    seq_next: u64,
    first_live_seq: u64,
    surface: Surface,
    nodes: Vec<u64>,
    replace_generation: u64,
    replacements: Vec<Replace>,
    messages: Vec<(u64, String)>,
    transcript: Vec<u64>,
}

fn state(session: &Session) -> State {
    State {
        texts: texts(session.log()),
        seq_next: session.seq_next(),
        first_live_seq: session.first_live_seq(),
        surface: session.surface().clone(),
        nodes: session.surface().nodes().to_vec(),
        replace_generation: session.surface().replace_generation(),
        replacements: replacements_of(session.surface()),
        messages: pairs(&session.messages().unwrap()),
        transcript: session.transcript().unwrap(),
    }
}

/// A session built from `base` by appends, or (with `reseed`) seeded with those events.
fn base_session(
    base: &[(Action, u8)],
    time: i64,
    reseed: bool,
) -> Result<(Session, Model), TestCaseError> {
    let options = || Options {
        max_event_bytes: MAX_EVENT_BYTES,
        ..options(time)
    };
    let (session, mut model, _) = build(base, options())?;
    if !reseed {
        return Ok((session, model));
    }
    let texts = texts(session.log());
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let seeded = Session::create("s", None, Some(&refs), options()).map_err(|e| fail(&e))?;
    if model
        .events
        .last()
        .is_none_or(|k| k.event_type != "session/end-seed")
    {
        model.push_log_only("session/end-seed");
    }
    prop_assert_eq!(seeded.first_live_seq(), to_u64(refs.len()));
    prop_assert_eq!(&texts[..], &self::texts(seeded.log())[..refs.len()]);
    check_surface(seeded.surface(), &model)?;
    Ok((seeded, model))
}

fn check_refusals(
    base: &[(Action, u8)],
    steps: &[(Fault, (Action, u8))],
    time: i64,
    reseed: bool,
    seen: &Mutex<BTreeSet<&'static str>>,
) -> Result<(), TestCaseError> {
    let (mut session, mut model) = base_session(base, time, reseed)?;
    for (fault, (action, spelling)) in steps {
        let (call, code) = plan_fault(&model, fault);
        seen.lock().map_err(|e| fail(&e))?.insert(code);
        let before = state(&session);
        let mut control = session.clone();
        match call.perform(&mut session) {
            Ok(seq) => {
                return Err(fail(&format!(
                    "{call:?} accepted at {seq}, expected {code}"
                )));
            }
            Err(error) => prop_assert_eq!(error.code(), code, "{:?}: {}", call, error),
        }
        prop_assert_eq!(state(&session), before, "{:?} left a trace", call);
        let planned = model.plan(action, *spelling);
        let seq = perform(&mut session, &planned).map_err(|e| fail(&e))?;
        let control_seq = perform(&mut control, &planned).map_err(|e| fail(&e))?;
        prop_assert_eq!(seq, model.seq_next());
        prop_assert_eq!(control_seq, seq);
        model.apply(&planned);
        prop_assert_eq!(state(&session), state(&control));
        check_surface(session.surface(), &model)?;
        let recorded = session.replacements().map_err(|e| fail(&e))?;
        check_surface(&recorded, &model)?;
    }
    Ok(())
}

#[test]
fn refused_event_leaves_session_unchanged() {
    let seen = Mutex::new(BTreeSet::new());
    let strategy = (
        vec(action(), 0..40),
        vec((fault(), action()), 1..30),
        time(),
        any::<bool>(),
    );
    run_cases(&strategy, |(base, steps, time, reseed)| {
        check_refusals(&base, &steps, time, reseed, &seen)
    });
    let seen = seen.into_inner().expect("no test case panicked");
    let expected = [
        "SURFACE_OP_INVALID",
        "SURFACE_OP_REQUIRED",
        "SURFACE_OP_FORBIDDEN",
        "SOURCES_FORBIDDEN",
        "SOURCES_INVALID",
        "SOURCES_EMPTY",
        "SOURCES_DUPLICATE",
        "SOURCES_NOT_EARLIER",
        "DATA_INVALID_JSON",
        "DATA_DUPLICATE_KEY",
        "DATA_NOT_LOSSLESS",
        "REPLACE_START_NOT_ON_SURFACE",
        "REPLACE_END_NOT_ON_SURFACE",
        "REPLACE_REVERSED",
        "REPLACE_SOURCES_INCOMPLETE",
        "TOOL_REWRITE_NOT_SINGLE",
        "TOOL_REWRITE_TARGET",
        "TOOL_REWRITE_CHANGED",
        "MESSAGE_SHAPE",
        "ENVELOPE_INVALID",
        "LEGACY_EVENT",
        "REQUEST_HEADER_SHAPE",
        "EVENT_TOO_LARGE",
    ];
    for code in expected {
        assert!(seen.contains(code), "no refusal with {code} was generated");
    }
}

// ---------------------------------------------------------------------------------------
// 3. as_of(N) == folding the first N+1 events
// ---------------------------------------------------------------------------------------

/// Compares `as_of(N)` for every N with three independent answers: the pure fold of the
/// first N+1 texts, a fresh fold of the log's prefix, and the model after event N.
fn check_time_travel(session: &Session, history: &[Model]) -> Result<(), TestCaseError> {
    let vocabulary = Vocabulary::dsh_v0();
    let written = texts(session.log());
    let refs: Vec<&str> = written.iter().map(String::as_str).collect();
    let len = session.seq_next();
    prop_assert_eq!(to_u64(history.len()), len + 1);
    for seq in 0..len {
        let snapshot = session.as_of(seq).map_err(|e| fail(&e))?;
        let model = &history[to_usize(seq) + 1];
        let prefix = &refs[..=to_usize(seq)];
        let (folded, log) = Surface::fold_json(prefix, &vocabulary).map_err(|e| fail(&e))?;
        let fresh = Prefix {
            log: session.log(),
            len: seq + 1,
        };
        let fresh = Surface::fold(&fresh, &vocabulary).map_err(|e| fail(&e))?;
        prop_assert_eq!(&snapshot.surface, &folded, "as_of({})", seq);
        prop_assert_eq!(&snapshot.surface, &fresh, "as_of({})", seq);
        check_surface(&snapshot.surface, model)?;
        let messages = pairs(&snapshot.messages);
        prop_assert_eq!(
            &messages,
            &pairs(&surface::messages(&folded, &log).unwrap())
        );
        prop_assert_eq!(&messages, &model.messages());
        let transcript: Vec<u64> = surface::transcript(&log, u64::MAX)
            .collect::<surfacelog::Result<_>>()
            .unwrap();
        prop_assert_eq!(&snapshot.transcript, &transcript);
        prop_assert_eq!(&snapshot.transcript, &model.transcript());
    }
    if let Some(last) = len.checked_sub(1) {
        let snapshot = session.as_of(last).map_err(|e| fail(&e))?;
        prop_assert_eq!(&snapshot.surface, session.surface());
        prop_assert_eq!(
            pairs(&snapshot.messages),
            pairs(&session.messages().unwrap())
        );
        prop_assert_eq!(snapshot.transcript, session.transcript().unwrap());
    }
    for beyond in [len, len + 1, u64::MAX] {
        let refused = session.as_of(beyond).map(|s| s.surface);
        prop_assert_eq!(refused.map_err(|e| e.code()), Err("INVALID_BOUNDARY"));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn as_of_equals_folding_the_prefix(actions in vec(action(), 0..60), time in time()) {
        let (session, _, mut history) = build(&actions, options(time))?;
        check_time_travel(&session, &history)?;
        // The same events as a seed: kept byte for byte, then the end-seed marker.
        let written = texts(session.log());
        let refs: Vec<&str> = written.iter().map(String::as_str).collect();
        let seeded = Session::create("c", None, Some(&refs), options(time)).map_err(|e| fail(&e))?;
        let mut model = history.last().cloned().unwrap_or_default();
        if model.events.last().is_none_or(|k| k.event_type != "session/end-seed") {
            model.push_log_only("session/end-seed");
            history.push(model);
        }
        prop_assert_eq!(&texts(seeded.log())[..refs.len()], &written[..]);
        check_time_travel(&seeded, &history)?;
    }
}

// ---------------------------------------------------------------------------------------
// 4. random bytes and operations never panic
// ---------------------------------------------------------------------------------------

/// Fragments of event JSON, glued at random.
const TOKENS: [&str; 46] = [
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    " ",
    "\"type\"",
    "\"seq\"",
    "\"time\"",
    "\"data\"",
    "\"surfaceOp\"",
    "\"sourceEventSeqs\"",
    "\"ignorable\"",
    "\"user/message\"",
    "\"tool/result\"",
    "\"assistant/message\"",
    "\"turn/start\"",
    "\"append\"",
    r#"{"op":"replace","start":0,"end":1}"#,
    "0",
    "1",
    "2",
    "-0",
    "1.5",
    "1e999",
    "-1",
    "9007199254740992",
    "null",
    "true",
    "false",
    r#""\ud800""#,
    r#""\u0000""#,
    "\"message\"",
    "\"content\"",
    "\"id\"",
    "\"role\"",
    "\"source\"",
    "\"kind\"",
    "\"x\"",
    "\\",
    "\"",
    "é",
    "\u{0}",
    "\u{7f}",
    "\"__proto__\"",
];

/// A valid header for the reopen paths.
const HEADER: &str = r#"{"version":0,"id":"s","createdAt":0}"#;

fn soup() -> impl Strategy<Value = String> {
    vec(0..TOKENS.len(), 0..48).prop_map(|picks| picks.into_iter().map(|i| TOKENS[i]).collect())
}

/// Deeply nested texts, balanced or not, bare or as an event's data.
fn nested(depth: usize, shape: u8) -> String {
    let arrays = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    match shape % 5 {
        0 => arrays,
        1 => format!("{}0{}", r#"{"a":"#.repeat(depth), "}".repeat(depth)),
        2 => "[".repeat(depth),
        3 => format!(r#"{{"type":"x","seq":0,"time":0,"data":{arrays}}}"#),
        _ => format!(
            r#"{{"type":"user/message","seq":0,"time":0,"data":{{"id":"m","role":"user","source":{{"kind":"user"}},"content":{arrays}}},"surfaceOp":"append"}}"#
        ),
    }
}

fn arb_text() -> impl Strategy<Value = String> {
    prop_oneof![
        vec(any::<u8>(), 0..64).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        "\\PC{0,32}",
        soup(),
        (1..4000usize, any::<u8>()).prop_map(|(depth, shape)| nested(depth, shape)),
    ]
}

/// An edit of a valid event text.
#[derive(Debug, Clone)]
struct Mutation {
    at: u16,
    edit: u8,
    token: u8,
}

fn mutate(text: &str, mutation: &Mutation) -> String {
    let mut out = text.to_owned();
    let floor = |s: &str, mut at: usize| {
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        at
    };
    let at = floor(&out, usize::from(mutation.at) % (out.len() + 1));
    let token = TOKENS[usize::from(mutation.token) % TOKENS.len()];
    let end = floor(
        &out,
        (at + 1 + usize::from(mutation.token % 8)).min(out.len()),
    );
    match mutation.edit % 4 {
        0 => out.insert_str(at, token),
        1 => out.truncate(at),
        2 => out.replace_range(at..end.max(at), ""),
        _ => out.replace_range(at..end.max(at), token),
    }
    out
}

/// What follows a valid prefix in a random seed.
#[derive(Debug, Clone)]
enum Piece {
    Mutated((Action, u8), Mutation),
    Raw(String),
}

fn piece() -> impl Strategy<Value = Piece> {
    let mutation = (any::<u16>(), any::<u8>(), any::<u8>())
        .prop_map(|(at, edit, token)| Mutation { at, edit, token });
    prop_oneof![
        3 => (action(), mutation).prop_map(|(action, mutation)| Piece::Mutated(action, mutation)),
        1 => arb_text().prop_map(Piece::Raw),
    ]
}

/// Valid events, then mutated or random ones.
fn seed_texts(prefix: &[(Action, u8)], pieces: &[Piece], time: i64) -> Vec<String> {
    let mut model = Model::default();
    let mut out = Vec::new();
    for (action, spelling) in prefix {
        let planned = model.plan(action, *spelling);
        out.push(planned.render(model.seq_next(), time));
        model.apply(&planned);
    }
    for piece in pieces {
        match piece {
            Piece::Mutated((action, spelling), mutation) => {
                let planned = model.plan(action, *spelling);
                out.push(mutate(&planned.render(model.seq_next(), time), mutation));
            }
            Piece::Raw(text) => out.push(text.clone()),
        }
    }
    out
}

/// What every session must satisfy, however it was made: its surface is the fold of its
/// log, time travel works for every seq, and its log can be reopened (and, when it was
/// written under the strict rules, seeded) again.
fn check_consistent(session: &Session, strict: bool) -> Result<(), TestCaseError> {
    let vocabulary = session.options().vocabulary.clone();
    let fold = Surface::fold(session.log(), &vocabulary).map_err(|e| fail(&e))?;
    prop_assert_eq!(&fold, session.surface());
    for seq in 0..session.seq_next() {
        let snapshot = session.as_of(seq).map_err(|e| fail(&e))?;
        prop_assert_eq!(snapshot.surface.seq_next(), seq + 1);
    }
    let written = texts(session.log());
    let refs: Vec<&str> = written.iter().map(String::as_str).collect();
    let header = session.header().text().to_owned();
    let options = session.options().clone();
    let reopened = Session::reopen(session.id(), &header, &refs, options.clone()).map_err(|e| {
        fail(&format!(
            "reopening an accepted log failed: {e}\nlog: {written:#?}"
        ))
    })?;
    prop_assert_eq!(reopened.1.stored, to_u64(refs.len()));
    prop_assert_eq!(&texts(reopened.0.log())[..refs.len()], &written[..]);
    if strict {
        let seeded = Session::create(session.id(), None, Some(&refs), options).map_err(|e| {
            fail(&format!(
                "seeding an accepted log failed: {e}\nlog: {written:#?}"
            ))
        })?;
        prop_assert_eq!(&texts(seeded.log())[..refs.len()], &written[..]);
    }
    Ok(())
}

/// Feeds `texts` to every entry point that takes event JSON.
fn feed_texts(written: &[String], header: &str, time: i64) -> Result<(), TestCaseError> {
    let vocabulary = Vocabulary::dsh_v0();
    let refs: Vec<&str> = written.iter().map(String::as_str).collect();
    if let Ok((surface, log)) = Surface::fold_json(&refs, &vocabulary) {
        prop_assert_eq!(
            &surface,
            &Surface::fold(&log, &vocabulary).map_err(|e| fail(&e))?
        );
        // An event is stored as the exact text of its JSON object: whitespace around the
        // object (which a mutation may add) is not part of it.
        let objects: Vec<String> = written
            .iter()
            .map(|t| t.trim_matches([' ', '\t', '\n', '\r']).to_owned())
            .collect();
        prop_assert_eq!(texts(&log), objects);
        let nodes = surface::messages(&surface, &log)?.len();
        prop_assert!(nodes <= surface.nodes().len());
    }
    if let Ok(session) = Session::create("s", None, Some(&refs), options(time)) {
        check_consistent(&session, true)?;
    }
    for resume in [false, true] {
        let open = if resume {
            Session::resume
        } else {
            Session::reopen
        };
        if let Ok((session, report)) = open("s", HEADER, &refs, options(time)) {
            prop_assert_eq!(report.stored, to_u64(refs.len()));
            check_consistent(&session, false)?;
        }
        let _ = open("s", header, &refs, options(time));
    }
    let _ = Session::create("s", Some(header), Some(&refs), options(time));
    let _ = Session::create("s", Some(header), None, options(time));
    // The same texts as data and as surface fields of appends.
    let mut session = Session::create("s", None, None, options(time)).map_err(|e| fail(&e))?;
    for (i, text) in refs.iter().enumerate() {
        let event_type = RANDOM_TYPES[i % RANDOM_TYPES.len()];
        let valid = user_data("user/message", to_u64(i), 0);
        let append = Some(r#""append""#);
        let calls: [(&str, &str, Option<&str>, Option<&str>); 4] = [
            (
                event_type,
                text,
                (i % 2 == 0).then_some(r#""append""#),
                None,
            ),
            ("user/message", &valid, Some(text), None),
            ("user/message", &valid, append, Some(text)),
            ("x", text, None, None),
        ];
        for (event_type, data, op, sources) in calls {
            let before = session.seq_next();
            let accepted = session.append_json(event_type, data, op, sources).is_ok();
            prop_assert_eq!(session.seq_next(), before + u64::from(accepted));
        }
    }
    check_consistent(&session, true)
}

/// Event types for random appends: eligible, log-only, legacy, out of rule.
const RANDOM_TYPES: [&str; 16] = [
    "user/message",
    "assistant/message",
    "tool/result",
    "context/message",
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
    "tool/call",
    "assistant/chunk",
    "request/header",
    "request/header-delta",
    "session/end-seed",
    "",
    "x",
    "compaction/prune",
];

/// The types of a turn's structure, for appends that are usually accepted.
const FITTING_TYPES: [&str; 8] = [
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
    "assistant/message",
    "tool/call",
    "tool/result",
    "user/message",
];

/// Call ids for random tool calls and results.
const CALL_IDS: [&str; 6] = ["c1", "c2", "", r"\ud800", r#"q\"uote"#, "é"];

/// Data for a random append: usually one that fits `event_type`, sometimes anything.
fn random_data(event_type: &str, pick: u8, a: u16, seq: u64) -> String {
    let call_id = CALL_IDS[usize::from(a) % CALL_IDS.len()];
    let turn = a % 3;
    let kind = if pick.is_multiple_of(2) {
        event_type
    } else {
        RANDOM_TYPES[usize::from(pick / 2) % 16]
    };
    match (kind, pick / 32) {
        ("user/message" | "context/message", _) => user_data(kind, seq, pick / 2),
        ("assistant/message", 0..=3) => format!(
            r#"{{"turn":{turn},"step":1,"message":{{"id":"a","role":"assistant","source":{{"kind":"model","provider":"p","model":"m"}},"content":[{{"type":"tool-call","id":"{call_id}"}}]}}}}"#
        ),
        ("assistant/message", _) => assistant_data(seq, pick).0,
        ("tool/result", _) => format!(
            r#"{{"turn":{turn},"step":1,"message":{{"id":"t","role":"user","source":{{"kind":"tool","callId":"{call_id}"}},"content":[{{"type":"tool-result","toolCallId":"{call_id}","content":[]}}]}}}}"#
        ),
        ("turn/start" | "turn/end", _) => format!(r#"{{"turn":{turn}}}"#),
        ("step/start" | "step/end", _) => format!(r#"{{"turn":{turn},"step":{}}}"#, a % 2),
        ("tool/call", _) => format!(r#"{{"callId":"{call_id}"}}"#),
        ("request/header", _) => r#"{"header":{"config":{"provider":"p","model":"m"}}}"#.to_owned(),
        (_, 0) => nested(usize::from(a), pick),
        (_, 1) => r#"{"turn":-0}"#.to_owned(),
        (_, 2) => "null".to_owned(),
        _ => "{}".to_owned(),
    }
}

/// One random operation on a session.
#[derive(Debug, Clone)]
enum RandomOp {
    /// An event of a turn-structure type with data that fits it.
    Fitting {
        event_type: u8,
        a: u16,
    },
    Json {
        event_type: u8,
        data: u8,
        op: u8,
        sources: u8,
        a: u16,
        b: u16,
    },
    Typed {
        event_type: u8,
        data: u8,
        replace: Option<(u16, u16)>,
        sources: Option<Vec<u16>>,
    },
    Raw {
        event_type: u8,
        text: String,
        slot: u8,
    },
    AsOf(u16),
    Check,
}

fn random_op() -> impl Strategy<Value = RandomOp> {
    prop_oneof![
        6 => (any::<u8>(), any::<u16>())
            .prop_map(|(event_type, a)| RandomOp::Fitting { event_type, a }),
        4 => (any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>(), any::<u16>(), any::<u16>())
            .prop_map(|(event_type, data, op, sources, a, b)| RandomOp::Json {
                event_type,
                data,
                op,
                sources,
                a,
                b,
            }),
        3 => (
            any::<u8>(),
            any::<u8>(),
            proptest::option::of((any::<u16>(), any::<u16>())),
            proptest::option::of(vec(any::<u16>(), 0..4)),
        )
            .prop_map(|(event_type, data, replace, sources)| RandomOp::Typed {
                event_type,
                data,
                replace,
                sources,
            }),
        2 => (any::<u8>(), arb_text(), any::<u8>())
            .prop_map(|(event_type, text, slot)| RandomOp::Raw { event_type, text, slot }),
        1 => any::<u16>().prop_map(RandomOp::AsOf),
        2 => Just(RandomOp::Check),
    ]
}

/// The surface fields of a random JSON append: valid, off, or malformed.
fn random_fields(session: &Session, op: u8, sources: u8, a: u16, b: u16) -> [Option<String>; 2] {
    let nodes = session.surface().nodes();
    let seq = session.seq_next();
    let (i, j) = if nodes.is_empty() {
        (0, 0)
    } else {
        let (i, j) = (usize::from(a) % nodes.len(), usize::from(b) % nodes.len());
        (i.min(j), i.max(j))
    };
    let node = |at: usize| nodes.get(at).copied().unwrap_or(u64::from(a));
    let op = match op % 6 {
        0 => None,
        1 => Some(r#""append""#.to_owned()),
        2 => Some(op_json(
            SurfaceOp::Replace {
                start: node(i),
                end: node(j),
            },
            0,
        )),
        3 => Some(op_json(
            SurfaceOp::Replace {
                start: u64::from(a),
                end: node(j),
            },
            0,
        )),
        4 => Some(BAD_OPS[usize::from(a) % BAD_OPS.len()].to_owned()),
        _ => Some("{".to_owned()),
    };
    let covered = nodes.get(i..=j).unwrap_or_default();
    let sources = match sources % 6 {
        0 => None,
        1 => Some(format!("[{}]", u64::from(b) % (seq + 1))),
        2 => Some("[]".to_owned()),
        3 | 4 if !covered.is_empty() => Some(sources_json(covered, 0)),
        3 | 4 => Some("null".to_owned()),
        _ => Some("[-0]".to_owned()),
    };
    [op, sources]
}

fn run_random_op(session: &mut Session, op: &RandomOp) -> Result<(), TestCaseError> {
    let seq = session.seq_next();
    let pick_type = |pick: u8| RANDOM_TYPES[usize::from(pick) % RANDOM_TYPES.len()];
    let result = match op {
        RandomOp::Fitting { event_type, a } => {
            let event_type = FITTING_TYPES[usize::from(*event_type) % FITTING_TYPES.len()];
            let data = random_data(event_type, 0, *a, seq);
            let op = ELIGIBLE.contains(&event_type).then_some(r#""append""#);
            session.append_json(event_type, &data, op, None)
        }
        RandomOp::Json {
            event_type,
            data,
            op,
            sources,
            a,
            b,
        } => {
            let event_type = pick_type(*event_type);
            let data = random_data(event_type, *data, *a, seq);
            let [op, sources] = random_fields(session, *op, *sources, *a, *b);
            session.append_json(event_type, &data, op.as_deref(), sources.as_deref())
        }
        RandomOp::Typed {
            event_type,
            data,
            replace,
            sources,
        } => {
            let event_type = pick_type(*event_type);
            let data = random_data(event_type, *data, 0, seq);
            let nodes = session.surface().nodes();
            let node = |pick: u16| nodes.get(usize::from(pick) % nodes.len().max(1)).copied();
            let op = match replace {
                None => SurfaceOp::Append,
                Some((a, b)) => {
                    let (start, end) = (node(*a).unwrap_or(0), node(*b).unwrap_or(u64::from(*b)));
                    SurfaceOp::Replace { start, end }
                }
            };
            let sources = sources
                .as_ref()
                .map(|s| s.iter().map(|x| u64::from(*x) % (seq + 2)).collect());
            let intent = (event_type.len() % 2 == 0).then_some(SurfaceIntent { op, sources });
            session.append_dynamic(event_type, &data, intent)
        }
        RandomOp::Raw {
            event_type,
            text,
            slot,
        } => {
            let event_type = pick_type(*event_type);
            let (data, op, sources) = match slot % 3 {
                0 => (text.as_str(), None, None),
                1 => (
                    r#"{"id":"m","role":"user","source":{"kind":"user"},"content":[]}"#,
                    Some(text.as_str()),
                    None,
                ),
                _ => ("{}", None, Some(text.as_str())),
            };
            session.append_json(event_type, data, op, sources)
        }
        RandomOp::AsOf(pick) => {
            let at = u64::from(*pick) % (seq + 2);
            let snapshot = session.as_of(at).map(|s| s.surface);
            prop_assert_eq!(snapshot.is_ok(), at < seq);
            return Ok(());
        }
        RandomOp::Check => return check_consistent(session, true),
    };
    let accepted = result.as_ref().map_or(seq, |got| *got + 1);
    prop_assert_eq!(session.seq_next(), accepted, "{:?}", op);
    let fold = Surface::fold(session.log(), &session.options().vocabulary).map_err(|e| fail(&e))?;
    prop_assert_eq!(&fold, session.surface());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_bytes_and_ops_never_panic(
        prefix in vec(action(), 0..16),
        pieces in vec(piece(), 0..6),
        header in prop_oneof![Just(HEADER.to_owned()), arb_text()],
        ops in vec(random_op(), 0..40),
        time in time(),
    ) {
        feed_texts(&seed_texts(&prefix, &pieces, time), &header, time)?;
        let mut session = Session::create("s", None, None, options(time)).map_err(|e| fail(&e))?;
        for op in &ops {
            run_random_op(&mut session, op)?;
        }
        check_consistent(&session, true)?;
    }
}
