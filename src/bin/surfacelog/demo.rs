//! `surfacelog demo`: one session in the store, start to finish, printed for a person:
//! appends, a prune, nested compactions, views, time travel, reopen, fork and crash repair.

use std::io::Write;
use std::sync::Arc;

use surfacelog::Error;
use surfacelog::internals::clock::ManualClock;
use surfacelog::internals::event::SurfaceOp;
use surfacelog::internals::json::Json;
use surfacelog::internals::log::Durability;
use surfacelog::internals::session::{
    Boundary, Compaction, NoSurface, Prune, Session, SessionLog, SurfaceIntent, kinds,
};
use surfacelog::internals::store::{Store, StoreOptions};
use surfacelog::internals::surface::Message;

/// The width a message's JSON is cut to when printed.
const MESSAGE_COLUMNS: usize = 96;

#[expect(
    clippy::too_many_lines,
    reason = "the demo is one script, read top to bottom"
)]
pub fn run(store_dir: &std::path::Path, out: &mut impl Write) -> Result<(), Error> {
    let clock = Arc::new(ManualClock::new(1_760_000_000_000));
    let options = StoreOptions::new()
        .clock(clock.clone())
        .durability(Durability::Manual);
    let store = Store::open_or_create(store_dir, options)?;
    // The demo's own sessions of an earlier run are removed; nothing else of the store
    // (its other sessions, its trash) is touched.
    for id in ["demo", "demo-fork", "demo-crash"] {
        match store.remove(id) {
            Ok(()) => {}
            Err(e) if e.code() == "SESSION_NOT_FOUND" => {}
            Err(e) => return Err(e),
        }
    }
    writeln!(out, "store: {}", store_dir.display()).map_err(io_error)?;
    let mut session = store.create("demo", None, None)?;
    let mut say = |text: &str| writeln!(out, "{text}").map_err(io_error);

    say("== 1. A conversation is appended: two turns, one tool call ==")?;
    let turn1 = conversation_turn(&mut session, &clock, 1, "List the files in src/.", true)?;
    conversation_turn(&mut session, &clock, 2, "Which module parses JSON?", false)?;
    print_events(&session, 0, out)?;

    writeln!(
        out,
        "\n== 2. The tool output at seq {} is pruned (compaction/prune + tool/result replace) ==",
        turn1.tool_result
    )
    .map_err(io_error)?;
    let pruned = session.prune(&Prune {
        seq: turn1.tool_result,
        content: r#"[{"type":"text","text":"[output pruned: 3 lines]"}]"#,
        shadowed_token_count: 42,
    })?;
    let before_compaction = session.seq_next() - 1;
    print_events(&session, pruned - 1, out)?;

    writeln!(
        out,
        "\n== 3. Turn 1 is compacted into a summary (replace {}..={}) ==",
        turn1.user, turn1.answer
    )
    .map_err(io_error)?;
    let first = session.compact(&Compaction {
        compaction_id: "cmp1",
        turn: None,
        start: turn1.user,
        end: turn1.answer,
        summary: r#"[{"type":"text","text":"The user listed src/; it holds lib.rs and json.rs."}]"#,
        summary_extra: None,
        message: &summary_message("sum1", "Summary of turn 1: src/ holds lib.rs and json.rs."),
    })?;
    print_events(&session, first.start, out)?;

    let nested_end = session
        .surface()
        .nodes()
        .last()
        .copied()
        .unwrap_or(first.message);
    writeln!(out, "\n== 4. Nested compaction: the summary and turn 2 become one, then turn 3 (replace {}..={}) ==", first.message, nested_end).map_err(io_error)?;
    let second = session.compact(&Compaction {
        compaction_id: "cmp2",
        turn: None,
        start: first.message,
        end: nested_end,
        summary: r#"[{"type":"text","text":"Both turns explored src/; json.rs parses JSON."}]"#,
        summary_extra: Some(r#"{"shadowedTokenCount":120}"#),
        message: &summary_message(
            "sum2",
            "Summary so far: src/ holds lib.rs and json.rs; json.rs parses JSON.",
        ),
    })?;
    conversation_turn(&mut session, &clock, 3, "Add a test for json.rs.", false)?;
    print_events(&session, second.start, out)?;

    writeln!(
        out,
        "\n== 5. What the model sees now: the surface and its messages =="
    )
    .map_err(io_error)?;
    print_surface(&session, out)?;
    writeln!(
        out,
        "\n== 6. What the person saw: the transcript (events appended with surfaceOp \"append\") =="
    )
    .map_err(io_error)?;
    writeln!(out, "{:?}", session.transcript()?).map_err(io_error)?;

    writeln!(
        out,
        "\n== 7. Replace history (provenance: what each replacement shadowed) =="
    )
    .map_err(io_error)?;
    for r in session.replacements()?.replacements() {
        writeln!(
            out,
            "seq {:>2} replaced {}..={} shadowing {:?}",
            r.seq, r.start, r.end, r.shadowed
        )
        .map_err(io_error)?;
    }

    writeln!(
        out,
        "\n== 8. Time travel: the messages as of seq {before_compaction}, before any compaction =="
    )
    .map_err(io_error)?;
    let then = session.as_of(before_compaction)?;
    writeln!(out, "surface {:?}", then.surface.nodes()).map_err(io_error)?;
    print_messages(&then.messages, out)?;
    writeln!(
        out,
        "\nNothing was deleted: {} events in the log, {} on the surface, replace generation {}.",
        session.seq_next(),
        session.surface().nodes().len(),
        session.surface().replace_generation()
    )
    .map_err(io_error)?;
    session.flush()?;
    let fork_at = turn1.answer + 2;
    drop(session);
    stored_stages(&store, &clock, fork_at, out)
}

/// Stages 9 to 11: what the store adds to the session above.
fn stored_stages(
    store: &Store,
    clock: &ManualClock,
    fork_at: u64,
    out: &mut impl Write,
) -> Result<(), Error> {
    writeln!(
        out,
        "\n== 9. Reopened from disk: the same surface, folded from the log =="
    )
    .map_err(io_error)?;
    let (session, opened) = store.open_session("demo")?;
    writeln!(
        out,
        "{} events, surface {:?}, torn tail: {}, repair closers: {}",
        session.seq_next(),
        session.surface().nodes(),
        opened.log.torn_tail.is_some(),
        opened.closers
    )
    .map_err(io_error)?;
    drop(session);

    writeln!(
        out,
        "\n== 10. Fork at seq {fork_at} (after turn 1): sealed segments are shared, not copied =="
    )
    .map_err(io_error)?;
    let child = store.fork("demo", Boundary::Seq(fork_at), "demo-fork")?;
    writeln!(out, "header {}", child.header().text()).map_err(io_error)?;
    writeln!(
        out,
        "{} events (seed of {} + end-seed marker), surface {:?}",
        child.seq_next(),
        fork_at + 1,
        child.surface().nodes()
    )
    .map_err(io_error)?;
    drop(child);

    writeln!(
        out,
        "\n== 11. Crash repair: a turn interrupted inside a tool call, then reopened =="
    )
    .map_err(io_error)?;
    let mut crashed = store.create("demo-crash", None, None)?;
    crashed.append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)?;
    crashed.append::<kinds::StepStart>(r#"{"turn":1,"step":1}"#, NoSurface)?;
    let call = r#"{"type":"tool-call","id":"call9","name":"bash","arguments":"{}"}"#;
    crashed.append::<kinds::AssistantMessage>(
        &assistant_message(1, 1, "a9", call),
        SurfaceIntent::append(),
    )?;
    clock.set(clock_now(clock) + 100);
    crashed.append::<kinds::ToolCall>(
        r#"{"turn":1,"step":1,"callId":"call9","name":"bash"}"#,
        NoSurface,
    )?;
    crashed.flush()?;
    drop(crashed); // the process dies here
    let (repaired, opened) = store.open_session("demo-crash")?;
    writeln!(out, "reopen appended {} closers:", opened.closers).map_err(io_error)?;
    print_events(&repaired, repaired.seq_next() - opened.closers, out)?;
    let (_, again) = {
        drop(repaired);
        store.open_session("demo-crash")?
    };
    writeln!(
        out,
        "reopened again: {} closers (repair is persisted exactly once)",
        again.closers
    )
    .map_err(io_error)?;
    let ids: Vec<String> = store.list()?.iter().map(|h| h.id().to_owned()).collect();
    writeln!(out, "\nsessions in the store: {ids:?}").map_err(io_error)?;
    Ok(())
}

/// The seqs of one turn's notable events.
struct Turn {
    user: u64,
    tool_result: u64,
    answer: u64,
}

fn conversation_turn<L: SessionLog>(
    session: &mut Session<L>,
    clock: &ManualClock,
    turn: u64,
    question: &str,
    use_tool: bool,
) -> Result<Turn, Error> {
    let tick = || clock.set(clock_now(clock) + 700);
    tick();
    session.append::<kinds::TurnStart>(&format!(r#"{{"turn":{turn}}}"#), NoSurface)?;
    let user = session.append::<kinds::UserMessage>(
        &user_message(&format!("u{turn}"), question),
        SurfaceIntent::append(),
    )?;
    let mut step = 1;
    let mut tool_result = user;
    if use_tool {
        tick();
        session.append::<kinds::StepStart>(
            &format!(r#"{{"turn":{turn},"step":{step}}}"#),
            NoSurface,
        )?;
        let chunk = session.append::<kinds::AssistantChunk>(&format!(r#"{{"turn":{turn},"step":{step},"chunk":{{"type":"text-delta","index":0,"text":"Let me look."}}}}"#), NoSurface)?;
        let call = format!(
            r#"{{"type":"tool-call","id":"call{turn}","name":"bash","arguments":"{{\"cmd\":\"ls src\"}}"}}"#
        );
        session.append::<kinds::AssistantMessage>(
            &assistant_message(turn, step, &format!("a{turn}.{step}"), &call),
            SurfaceIntent::append_citing(vec![chunk]),
        )?;
        let tool_call = session.append::<kinds::ToolCall>(
            &format!(r#"{{"turn":{turn},"step":{step},"callId":"call{turn}","name":"bash"}}"#),
            NoSurface,
        )?;
        tick();
        tool_result = session.append::<kinds::ToolResult>(
            &tool_result_data(turn, step, &format!("call{turn}")),
            SurfaceIntent::append_citing(vec![tool_call]),
        )?;
        session
            .append::<kinds::StepEnd>(&format!(r#"{{"turn":{turn},"step":{step}}}"#), NoSurface)?;
        step += 1;
    }
    tick();
    session
        .append::<kinds::StepStart>(&format!(r#"{{"turn":{turn},"step":{step}}}"#), NoSurface)?;
    let text = format!(r#"{{"type":"text","text":"Answer to turn {turn}."}}"#);
    let answer = session.append::<kinds::AssistantMessage>(
        &assistant_message(turn, step, &format!("a{turn}.{step}"), &text),
        SurfaceIntent::append_citing(vec![]),
    )?;
    session.append::<kinds::StepEnd>(&format!(r#"{{"turn":{turn},"step":{step}}}"#), NoSurface)?;
    session.append::<kinds::TurnEnd>(
        &format!(r#"{{"turn":{turn},"reason":{{"kind":"completed"}}}}"#),
        NoSurface,
    )?;
    Ok(Turn {
        user,
        tool_result,
        answer,
    })
}

fn clock_now(clock: &ManualClock) -> i64 {
    use surfacelog::internals::clock::Clock;
    clock.now_ms()
}

fn user_message(id: &str, text: &str) -> String {
    format!(
        r#"{{"id":"{id}","role":"user","source":{{"kind":"user"}},"content":[{{"type":"text","text":"{text}"}}]}}"#
    )
}

fn summary_message(id: &str, text: &str) -> String {
    format!(
        r#"{{"id":"{id}","role":"user","source":{{"kind":"plugin","plugin":"compaction"}},"content":[{{"type":"text","text":"{text}"}}]}}"#
    )
}

fn assistant_message(turn: u64, step: u64, id: &str, block: &str) -> String {
    format!(
        r#"{{"turn":{turn},"step":{step},"message":{{"id":"{id}","role":"assistant","source":{{"kind":"model","provider":"openai","model":"gpt-4.1"}},"content":[{block}]}}}}"#
    )
}

fn tool_result_data(turn: u64, step: u64, call: &str) -> String {
    format!(
        r#"{{"turn":{turn},"step":{step},"message":{{"id":"r-{call}","role":"user","source":{{"kind":"tool","callId":"{call}"}},"content":[{{"type":"tool-result","toolCallId":"{call}","isError":false,"content":[{{"type":"text","text":"lib.rs\njson.rs\nmain.rs"}}]}}]}}}}"#
    )
}

fn print_events<L: SessionLog>(
    session: &Session<L>,
    from: u64,
    out: &mut impl Write,
) -> Result<(), Error> {
    for seq in from..session.seq_next() {
        let Some(event) = session.event(seq)? else {
            break;
        };
        let op = match event.surface_op {
            None => String::from("-"),
            Some(SurfaceOp::Append) => String::from("append"),
            Some(SurfaceOp::Replace { start, end }) => format!("replace {start}..={end}"),
        };
        let sources = event.sources.map(|s| format!("{s:?}")).unwrap_or_default();
        writeln!(
            out,
            "  seq {seq:>2}  {:<20} {op:<16} {sources}",
            event.event_type
        )
        .map_err(io_error)?;
    }
    Ok(())
}

fn print_surface<L: SessionLog>(session: &Session<L>, out: &mut impl Write) -> Result<(), Error> {
    writeln!(out, "surface {:?}", session.surface().nodes()).map_err(io_error)?;
    print_messages(&session.messages()?, out)
}

/// One line per message: its seq and the text of its first content block.
fn print_messages(messages: &[Message<'_>], out: &mut impl Write) -> Result<(), Error> {
    for message in messages {
        let text = Json::parse(message.json).ok().and_then(|j| {
            let block = j.root().get("content")?.elements().next()?;
            block
                .get("text")
                .and_then(|t| t.as_str())
                .map(std::borrow::Cow::into_owned)
                .or_else(|| Some(clip(block.raw())))
        });
        writeln!(
            out,
            "  seq {:>2}  {}",
            message.seq,
            text.unwrap_or_default().replace('\n', " ")
        )
        .map_err(io_error)?;
    }
    Ok(())
}

fn clip(text: &str) -> String {
    if text.chars().count() <= MESSAGE_COLUMNS {
        return text.to_owned();
    }
    let cut: String = text.chars().take(MESSAGE_COLUMNS - 1).collect();
    format!("{cut}…")
}

#[expect(clippy::needless_pass_by_value, reason = "used as map_err(io_error)")]
fn io_error(error: std::io::Error) -> Error {
    Error::io("write", "<stdout>", &error)
}
