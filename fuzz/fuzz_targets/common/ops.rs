#![allow(dead_code, reason = "each target uses part of it")]

//! Session operations read from fuzz bytes, and a naive model of the surface they build:
//! a `Vec` of node seqs with linear lookup and `splice`, and the message each node
//! projects to (the model of `tests/surface_model.rs`, compacted; a fuzz target cannot
//! import a test). Shared by the `checkpoint` and `session_model` targets.

use std::collections::{HashMap, HashSet};

use surfacelog::internals::session::{Compaction, Prune, Session, SessionLog, SurfaceIntent};

/// One operation, decoded from one or two input bytes.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    User,
    Assistant {
        calls: bool,
    },
    ToolResult {
        call: u8,
    },
    TurnStart,
    TurnEnd,
    StepStart,
    StepEnd,
    Compact {
        a: u8,
        b: u8,
    },
    Prune {
        pick: u8,
    },
    /// `Session::flush`: the stored session writes its checkpoint.
    Checkpoint,
    /// Close and open again through the store.
    Reopen,
    /// Fork at the last event and go on in the child.
    Fork,
}

/// The operations of `bytes`, at most `max`.
pub fn ops(bytes: &[u8], max: usize) -> Vec<Op> {
    let mut out = Vec::new();
    let mut it = bytes.iter().copied();
    while let Some(code) = it.next() {
        let arg = it.next().unwrap_or(0);
        out.push(match code % 12 {
            0 => Op::User,
            1 => Op::Assistant {
                calls: arg & 1 == 1,
            },
            2 => Op::ToolResult { call: arg },
            3 => Op::TurnStart,
            4 => Op::TurnEnd,
            5 => Op::StepStart,
            6 => Op::StepEnd,
            7 => Op::Compact {
                a: arg & 0xf,
                b: arg >> 4,
            },
            8 => Op::Prune { pick: arg },
            9 => Op::Checkpoint,
            10 => Op::Reopen,
            _ => Op::Fork,
        });
        if out.len() == max {
            break;
        }
    }
    out
}

/// The message of a user message `u{seq}`.
pub fn user(n: u64) -> String {
    format!(
        r#"{{"id":"u{n}","role":"user","source":{{"kind":"user"}},"content":[{{"type":"text","text":"u{n}"}}]}}"#
    )
}

/// The message of the assistant message of `n`, calling tool `c{n}` when `calls`.
pub fn assistant(n: u64, calls: bool) -> String {
    let content = if calls {
        format!(
            r#"{{"type":"text","text":"a{n}"}},{{"type":"tool-call","id":"c{n}","name":"read","input":{{}}}}"#
        )
    } else {
        format!(r#"{{"type":"text","text":"a{n}"}}"#)
    };
    format!(
        r#"{{"id":"a{n}","role":"assistant","source":{{"kind":"model","provider":"p","model":"m"}},"content":[{content}]}}"#
    )
}

/// The message of a tool result `r{n}` for the call `c{call}` whose output is `output`.
pub fn tool(n: u64, call: u64, output: &str) -> String {
    format!(
        r#"{{"id":"r{n}","role":"user","source":{{"kind":"tool","callId":"c{call}"}},"content":[{{"type":"tool-result","toolCallId":"c{call}","content":{output}}}]}}"#
    )
}

/// A tool result message whose output (`content[0].content`, its last member) is
/// `output`, every other byte as it was.
pub fn pruned(message: &str, output: &str) -> String {
    let at = message
        .rfind(r#""content":"#)
        .expect("a tool result has an output")
        + 10;
    assert!(message.ends_with("}]}"), "{message}");
    format!("{}{output}}}]}}", &message[..at])
}

/// The naive surface.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// Node seqs in surface order.
    pub nodes: Vec<u64>,
    /// The message each node projects to.
    pub messages: HashMap<u64, String>,
    /// The tool result nodes.
    pub tools: HashSet<u64>,
    /// A counter that makes every id distinct.
    pub next: u64,
}

impl Model {
    /// The messages the surface projects, in order.
    pub fn expected(&self) -> Vec<(u64, String)> {
        self.nodes
            .iter()
            .map(|s| (*s, self.messages[s].clone()))
            .collect()
    }

    fn push(&mut self, seq: u64, message: String) {
        self.nodes.push(seq);
        self.messages.insert(seq, message);
    }
}

/// Applies one surface or log operation to `session` and, when the session accepts it,
/// to `model`; returns whether it did. Store-only operations (checkpoint, reopen, fork)
/// are the caller's: they return `false` here.
pub fn apply<L: SessionLog>(session: &mut Session<L>, model: &mut Model, op: Op) -> bool {
    model.next += 1;
    let n = model.next;
    let turn = r#"{"turn":1}"#;
    let step = r#"{"turn":1,"step":1}"#;
    match op {
        Op::User => {
            let m = user(n);
            let r = session.append_dynamic("user/message", &m, Some(SurfaceIntent::append()));
            r.map(|seq| model.push(seq, m)).is_ok()
        }
        Op::Assistant { calls } => {
            let m = assistant(n, calls);
            let data = format!(r#"{{"turn":1,"step":1,"message":{m}}}"#);
            let r =
                session.append_dynamic("assistant/message", &data, Some(SurfaceIntent::append()));
            r.map(|seq| model.push(seq, m)).is_ok()
        }
        Op::ToolResult { call } => {
            // Calls to earlier numbers: some exist, some do not.
            let call = n.saturating_sub(u64::from(call % 8));
            let m = tool(n, call, r#"[{"type":"text","text":"out"}]"#);
            let data = format!(r#"{{"turn":1,"step":1,"message":{m}}}"#);
            let r = session.append_dynamic("tool/result", &data, Some(SurfaceIntent::append()));
            r.map(|seq| {
                model.push(seq, m);
                model.tools.insert(seq);
            })
            .is_ok()
        }
        Op::TurnStart => session.append_dynamic("turn/start", turn, None).is_ok(),
        Op::TurnEnd => session
            .append_dynamic(
                "turn/end",
                r#"{"turn":1,"reason":{"kind":"completed"}}"#,
                None,
            )
            .is_ok(),
        Op::StepStart => session.append_dynamic("step/start", step, None).is_ok(),
        Op::StepEnd => session.append_dynamic("step/end", step, None).is_ok(),
        Op::Compact { a, b } => {
            if model.nodes.is_empty() {
                return false;
            }
            let len = model.nodes.len();
            let (a, b) = (usize::from(a) % len, usize::from(b) % len);
            let (first, last) = (a.min(b), a.max(b));
            let m = user(n);
            let compaction = Compaction {
                compaction_id: "k",
                turn: None,
                start: model.nodes[first],
                end: model.nodes[last],
                summary: "[]",
                summary_extra: None,
                message: &m,
            };
            let Ok(done) = session.compact(&compaction) else {
                return false;
            };
            for seq in model.nodes.splice(first..=last, [done.message]) {
                model.messages.remove(&seq);
                model.tools.remove(&seq);
            }
            model.messages.insert(done.message, m);
            true
        }
        Op::Prune { pick } => {
            if model.nodes.is_empty() {
                return false;
            }
            let at = usize::from(pick) % model.nodes.len();
            let seq = model.nodes[at];
            let r = session.prune(&Prune {
                seq,
                content: "[]",
                shadowed_token_count: 1,
            });
            match (r, model.tools.contains(&seq)) {
                (Ok(new), true) => {
                    model.nodes[at] = new;
                    let old = model.messages.remove(&seq).unwrap();
                    model.tools.remove(&seq);
                    model.messages.insert(new, pruned(&old, "[]"));
                    model.tools.insert(new);
                    true
                }
                (Ok(_), false) => panic!("pruned {seq}, which is no tool result"),
                (Err(_), _) => false,
            }
        }
        Op::Checkpoint | Op::Reopen | Op::Fork => false,
    }
}

/// Compares the session's messages with the model's.
pub fn check<L: SessionLog>(session: &Session<L>, model: &Model, after: &str) {
    let messages = session.messages().expect("the messages read back");
    let got: Vec<(u64, String)> = messages
        .iter()
        .map(|m| (m.seq, m.json.to_owned()))
        .collect();
    assert_eq!(
        got,
        model.expected(),
        "messages differ from the model after {after}"
    );
    assert_eq!(
        session.surface().nodes(),
        model.nodes.as_slice(),
        "nodes after {after}"
    );
}
