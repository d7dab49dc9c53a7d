//! Surface benchmarks: the fold, the messages view and the surface's memory.
//!
//! The workload is a synthetic session log of 1M events, generated once outside the timed
//! loops (deterministic, seeded) and kept as a [`MemLog`]:
//!
//! - ~70% log-only events (`assistant/chunk`, `step/start`, `turn/start`);
//! - ~25% surface appends (`user/message`, `assistant/message` citing its chunks and the
//!   user message as sources, `tool/result`);
//! - ~5% replaces: ~4% compactions (a `user/message` replacing a range of the current
//!   surface, citing every shadowed seq; half of them over the oldest part of the surface,
//!   so about half nest over earlier compactions) and ~1% tool-output prunes (a `tool/result`
//!   replacing one earlier `tool/result`, only `data.message.content[0].content` changed).
//!
//! The compaction ranges are sized so that the surface grows to about 10k nodes and then
//! stays there. Before timing, a smaller log from the same generator is checked against
//! [`Surface::fold_json`], so the byte spans it computes are the ones the engine computes.
//!
//! Measured, with the targets of the issue:
//!
//! 1. `fold`: [`Surface::fold`] of the whole log from scratch, reported in events/s.
//!    Target: ≥ 2M events/s.
//! 2. `messages`: [`surface::messages`] of the folded ~10k-node surface over the 1M-event
//!    log. Target: ≤ 1 ms.
//! 3. Memory (printed once, not timed): [`Surface::heap_bytes`] per surface node after the
//!    fold, next to the floor of the nodes alone (`nodes().len() * 8`). Target: ≤ 16 bytes
//!    per node plus event data. The fold keeps no replace history (it grows with every
//!    replace; [`Surface::recording`] keeps it when asked).
//!
//! Run with `cargo bench --bench surface`.

use std::fmt::{self, Write as _};
use std::hint::black_box;
use std::time::Duration;

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use surfacelog::internals::event::{Event, EventFields, MemLog, SurfaceOp, Vocabulary};
use surfacelog::internals::surface::{self, Surface};

/// One benchmark run: the size and mix of the generated log. `Display` labels the run.
#[derive(Debug, Clone, Copy)]
struct Workload {
    /// Events in the log.
    events: u64,
    /// The surface size the compactions steer towards.
    surface_nodes: usize,
    /// Per 100 events: surface appends.
    append_pct: u64,
    /// Per 100 events: tool-output prunes.
    prune_pct: u64,
    /// Per 100 events: compactions. The rest are log-only.
    compaction_pct: u64,
    /// PRNG seed.
    seed: u64,
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let log_only = 100 - self.append_pct - self.prune_pct - self.compaction_pct;
        write!(
            f,
            "{}ev/{}nodes/mix{}-{}-{}-{}",
            self.events,
            self.surface_nodes,
            log_only,
            self.append_pct,
            self.prune_pct,
            self.compaction_pct
        )
    }
}

const WORKLOAD: Workload = Workload {
    events: 1_000_000,
    surface_nodes: 10_000,
    append_pct: 25,
    prune_pct: 1,
    compaction_pct: 4,
    seed: 0x5eed_5eed,
};

/// Compactions over the oldest part start within this many positions of the front.
const FRONT_WINDOW: usize = 64;

/// `SplitMix64`: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `low..=high`.
    fn range(&mut self, low: usize, high: usize) -> usize {
        let span = u64::try_from(high - low + 1).expect("usize fits u64");
        low + usize::try_from(self.next() % span).expect("below a usize")
    }
}

/// What a surface node is, as far as the generator needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeKind {
    Message,
    /// A tool result answering call `call`; `pruned` once its output was pruned.
    Tool {
        call: u64,
        pruned: bool,
    },
    Summary,
}

/// Counts of what the generator produced.
#[derive(Debug, Default)]
struct Stats {
    log_only: u64,
    appends: u64,
    prunes: u64,
    compactions: u64,
    /// Compactions whose range holds an earlier compaction's node.
    nested: u64,
    shadowed: u64,
}

/// Builds the log event by event, mirroring the surface to pick valid replace ranges.
struct Generator {
    rng: Rng,
    log: MemLog,
    /// The surface as the generator expects the fold to leave it.
    mirror: Vec<(u64, NodeKind)>,
    turn: u64,
    step: u64,
    last_user: Option<u64>,
    chunks: Vec<u64>,
    stats: Stats,
}

impl Generator {
    fn run(workload: Workload) -> (MemLog, Stats) {
        let mut generator = Self {
            rng: Rng(workload.seed),
            log: MemLog::new(),
            mirror: Vec::new(),
            turn: 0,
            step: 0,
            last_user: None,
            chunks: Vec::new(),
            stats: Stats::default(),
        };
        for seq in 0..workload.events {
            generator.event(seq, workload);
        }
        (generator.log, generator.stats)
    }

    fn event(&mut self, seq: u64, workload: Workload) {
        let roll = self.rng.next() % 100;
        let log_only = 100 - workload.append_pct - workload.prune_pct - workload.compaction_pct;
        if roll < log_only {
            self.log_only(seq);
        } else if roll < log_only + workload.append_pct {
            self.append(seq);
        } else if roll < log_only + workload.append_pct + workload.prune_pct {
            if !self.prune(seq) {
                self.append(seq);
            }
        } else if !self.compaction(seq, workload.surface_nodes) {
            self.append(seq);
        }
    }

    fn log_only(&mut self, seq: u64) {
        self.stats.log_only += 1;
        let (event_type, data) = match self.rng.next() % 20 {
            0 => {
                self.turn += 1;
                self.step = 0;
                ("turn/start", format!(r#"{{"turn":{}}}"#, self.turn))
            }
            1..=3 => {
                self.step += 1;
                (
                    "step/start",
                    format!(r#"{{"turn":{},"step":{}}}"#, self.turn, self.step),
                )
            }
            _ => {
                self.chunks.push(seq);
                let data = format!(
                    r#"{{"turn":{},"step":{},"delta":{{"type":"text","text":"streamed token run {seq}"}}}}"#,
                    self.turn, self.step
                );
                ("assistant/chunk", data)
            }
        };
        self.push(seq, event_type, "", &data, None, None);
    }

    fn append(&mut self, seq: u64) {
        self.stats.appends += 1;
        match self.rng.next() % 5 {
            0 => {
                let message = format!(
                    r#"{{"id":"u{seq}","role":"user","content":[{{"type":"text","text":"Please look at item {seq} and fix the failing test."}}],"source":{{"kind":"user"}}}}"#
                );
                self.push(
                    seq,
                    "user/message",
                    "",
                    &message,
                    Some(SurfaceOp::Append),
                    None,
                );
                self.last_user = Some(seq);
                self.mirror.push((seq, NodeKind::Message));
            }
            1 | 2 => {
                let message = format!(
                    r#"{{"id":"a{seq}","role":"assistant","content":[{{"type":"text","text":"Reading the file named in step {seq}."}},{{"type":"tool-call","id":"c{seq}","name":"read_file","arguments":"{{}}"}}],"source":{{"kind":"model","provider":"deepseek","model":"deepseek-chat"}}}}"#
                );
                let mut sources: Vec<u64> = self.last_user.into_iter().collect();
                let recent = self.chunks.len().saturating_sub(3);
                sources.extend_from_slice(&self.chunks[recent..]);
                self.chunks.clear();
                let prefix = format!(r#"{{"turn":{},"step":{},"message":"#, self.turn, self.step);
                let op = Some(SurfaceOp::Append);
                self.push(
                    seq,
                    "assistant/message",
                    &prefix,
                    &message,
                    op,
                    Some(sources),
                );
                self.mirror.push((seq, NodeKind::Message));
            }
            _ => {
                let output = format!(
                    r#"[{{"type":"text","text":"line 1 of output {seq}\nline 2 of output {seq}\nline 3"}}]"#
                );
                let message = tool_message(seq, &output);
                let prefix = format!(r#"{{"turn":{},"step":{},"message":"#, self.turn, self.step);
                self.push(
                    seq,
                    "tool/result",
                    &prefix,
                    &message,
                    Some(SurfaceOp::Append),
                    None,
                );
                self.mirror.push((
                    seq,
                    NodeKind::Tool {
                        call: seq,
                        pruned: false,
                    },
                ));
            }
        }
    }

    /// A `tool/result` replacing an unpruned tool result; `false` when none was found.
    fn prune(&mut self, seq: u64) -> bool {
        let Some(at) = (0..8).find_map(|_| {
            let at = self.rng.range(0, self.mirror.len().checked_sub(1)?);
            matches!(self.mirror[at].1, NodeKind::Tool { pruned: false, .. }).then_some(at)
        }) else {
            return false;
        };
        let (target, NodeKind::Tool { call, .. }) = self.mirror[at] else {
            unreachable!("found a tool node");
        };
        self.stats.prunes += 1;
        // The target's data with only `message.content[0].content` changed.
        let target_event = &self.log.events()[usize::try_from(target).expect("seq fits usize")];
        let old = target_event.text();
        let prefix_end = old
            .find(r#""message":"#)
            .expect("tool results have a message")
            + 10;
        let prefix = &old[old.find(r#""data":"#).expect("events have data") + 7..prefix_end];
        let prefix = prefix.to_owned();
        let message = tool_message(call, r#"[{"type":"text","text":"[output pruned]"}]"#);
        let op = Some(SurfaceOp::Replace {
            start: target,
            end: target,
        });
        self.push(
            seq,
            "tool/result",
            &prefix,
            &message,
            op,
            Some(vec![target]),
        );
        self.mirror[at] = (seq, NodeKind::Tool { call, pruned: true });
        true
    }

    /// A `user/message` replacing a range of the surface; `false` when it is too short.
    fn compaction(&mut self, seq: u64, target_nodes: usize) -> bool {
        let len = if self.mirror.len() > target_nodes {
            self.rng.range(8, 16)
        } else {
            self.rng.range(2, 6)
        };
        let Some(last_start) = self.mirror.len().checked_sub(len + 1) else {
            return false;
        };
        let first = if self.rng.next().is_multiple_of(2) {
            self.rng.range(0, last_start.min(FRONT_WINDOW))
        } else {
            self.rng.range(0, last_start)
        };
        let range = first..first + len;
        self.stats.compactions += 1;
        self.stats.shadowed += u64::try_from(len).expect("usize fits u64");
        if self.mirror[range.clone()]
            .iter()
            .any(|(_, kind)| *kind == NodeKind::Summary)
        {
            self.stats.nested += 1;
        }
        let sources: Vec<u64> = self.mirror[range.clone()].iter().map(|(s, _)| *s).collect();
        let op = SurfaceOp::Replace {
            start: sources[0],
            end: sources[len - 1],
        };
        let message = format!(
            r#"{{"id":"s{seq}","role":"user","content":[{{"type":"text","text":"Summary of {len} earlier messages: the tests were run and two failures were fixed."}}],"source":{{"kind":"compaction"}}}}"#
        );
        self.push(seq, "user/message", "", &message, Some(op), Some(sources));
        self.mirror.splice(range, [(seq, NodeKind::Summary)]);
        true
    }

    /// Appends one event: `data` is `prefix + message + "}"` when `prefix` is non-empty (the
    /// message is a member), or `message` itself (the whole data is the message or, for
    /// log-only events, no message).
    fn push(
        &mut self,
        seq: u64,
        event_type: &str,
        prefix: &str,
        message: &str,
        surface_op: Option<SurfaceOp>,
        sources: Option<Vec<u64>>,
    ) {
        let time = 1_760_000_000_000 + i64::try_from(seq).expect("seq fits i64") * 7;
        let mut text = format!(r#"{{"type":"{event_type}","seq":{seq},"time":{time},"data":"#);
        let data_start = text.len();
        text.push_str(prefix);
        let message_start = text.len();
        text.push_str(message);
        let message_span = message_start..text.len();
        if !prefix.is_empty() {
            text.push('}');
        }
        let data = data_start..text.len();
        if let Some(sources) = &sources {
            let list: Vec<String> = sources.iter().map(u64::to_string).collect();
            write!(text, r#","sourceEventSeqs":[{}]"#, list.join(",")).expect("writes to a String");
        }
        match surface_op {
            None => {}
            Some(SurfaceOp::Append) => text.push_str(r#","surfaceOp":"append""#),
            Some(SurfaceOp::Replace { start, end }) => {
                let op = format_args!(r#"{{"op":"replace","start":{start},"end":{end}}}"#);
                write!(text, r#","surfaceOp":{op}"#).expect("writes to a String");
            }
        }
        text.push('}');
        let message = surface_op.is_some().then_some(message_span);
        let fields = EventFields {
            event_type: surfacelog::internals::event::type_name(event_type),
            seq,
            time,
            surface_op,
            sources,
            ignorable: false,
        };
        self.log.push(Event::new(text, data, message, fields));
    }
}

/// A `tool/result` message answering call `c{call}` with `output` as the block's content.
fn tool_message(call: u64, output: &str) -> String {
    format!(
        r#"{{"id":"t{call}","role":"user","content":[{{"type":"tool-result","toolCallId":"c{call}","content":{output},"isError":false}}],"source":{{"kind":"tool","callId":"c{call}"}}}}"#
    )
}

/// Checks the generator against the engine on a smaller log of the same mix: the events
/// (text, spans, fields) equal what [`Surface::fold_json`] builds from their texts, and the
/// surface equals [`Surface::fold`] of the generated log.
fn check_generator(vocabulary: &Vocabulary) {
    let small = Workload {
        events: 30_000,
        surface_nodes: 500,
        ..WORKLOAD
    };
    let (log, stats) = Generator::run(small);
    assert!(
        stats.nested > 0 && stats.prunes > 0,
        "the check covers every shape: {stats:?}"
    );
    let texts: Vec<&str> = log.events().iter().map(Event::text).collect();
    let (surface, parsed) = Surface::fold_json(&texts, vocabulary).expect("generated JSON folds");
    assert!(
        parsed.events() == log.events(),
        "generated spans differ from the engine's"
    );
    let folded = Surface::fold(&log, vocabulary).expect("generated log folds");
    assert_eq!(folded, surface);
}

fn benches(c: &mut Criterion) {
    let vocabulary = Vocabulary::dsh_v0();
    check_generator(&vocabulary);
    let (log, stats) = Generator::run(WORKLOAD);
    let surface = Surface::fold(&log, &vocabulary).expect("generated log folds");
    report_memory(&surface, &stats);

    let mut group = c.benchmark_group("fold");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8))
        .throughput(Throughput::Elements(WORKLOAD.events));
    group.bench_with_input(BenchmarkId::from_parameter(WORKLOAD), &log, |b, log| {
        b.iter(|| Surface::fold(black_box(log), &vocabulary).expect("generated log folds"));
    });
    group.finish();

    let nodes = u64::try_from(surface.nodes().len()).expect("usize fits u64");
    let mut group = c.benchmark_group("messages");
    group.throughput(Throughput::Elements(nodes));
    group.bench_with_input(
        BenchmarkId::from_parameter(WORKLOAD),
        &surface,
        |b, surface| {
            b.iter(|| surface::messages(black_box(surface), &log));
        },
    );
    group.finish();
}

/// Prints the surface's memory once: the nodes alone, and everything the surface holds
/// (nodes with their spare capacity, plus the keys of the replacement nodes on it). The
/// fold keeps no replace history (only a `Surface::recording` one does), so this is all.
fn report_memory(surface: &Surface, stats: &Stats) {
    assert!(
        !surface.records_history(),
        "the benchmarked fold keeps no history"
    );
    let nodes = surface.nodes().len();
    let total = surface.heap_bytes();
    let floor = size_of_val(surface.nodes());
    let per_node = |bytes: usize| format!("{:.1}", ratio(bytes, nodes));
    eprintln!("surface after {WORKLOAD}: {stats:?}");
    eprintln!(
        "surface memory: {nodes} nodes; nodes alone {floor} B ({} B/node); \
         heap_bytes {total} B ({} B/node)",
        per_node(floor),
        per_node(total),
    );
}

#[expect(clippy::cast_precision_loss, reason = "a ratio printed to one decimal")]
fn ratio(numerator: usize, denominator: usize) -> f64 {
    numerator as f64 / denominator.max(1) as f64
}

criterion_group!(surface_benches, benches);
criterion_main!(surface_benches);
