//! An agent host's session loop on surfacelog, using only the public API: turns with a
//! user message, streamed assistant chunks, a tool call and its result; a compaction when
//! the surface grows past a budget; resume after a crash; a fork for a subagent; and the
//! next model request built from `messages()`.
//!
//! `cargo run --example agent_host [DIR]`: the store is DIR (its sessions `main` and
//! `main-sub` are replaced), or a scratch directory removed at the end.
//!
//! Event data is JSON text, stored exactly as given. This example writes it with
//! `format!` and plain texts; a host would use a JSON library, or the `serde` feature's
//! `Session::append_serialize`.

use std::path::Path;

use surfacelog::{
    Boundary, Compaction, NoSurface, Store, StoreOptions, StoredSession, SurfaceIntent, kinds,
};

type Result<T, E = surfacelog::Error> = std::result::Result<T, E>;

/// Past this many bytes of message JSON on the surface, the host compacts before calling
/// the model (a real host counts tokens).
const SURFACE_BUDGET_BYTES: usize = 1_500;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = std::env::args_os().nth(1) {
        run(Path::new(&dir))?;
    } else {
        let scratch = tempfile::tempdir()?; // removed with its contents when dropped
        run(scratch.path())?;
    }
    Ok(())
}

fn run(dir: &Path) -> Result<()> {
    // Invariants on: every event is checked against contract §9 (turns, steps, tool
    // pairing) before it is committed. The default durability, `Sync`, makes each append
    // durable before it returns.
    let options = StoreOptions::new().invariants(true);
    let store = Store::open_or_create(dir, options)?;
    for id in ["main", "main-sub"] {
        match store.remove(id) {
            Err(e) if e.code() != "SESSION_NOT_FOUND" => return Err(e),
            _ => {}
        }
    }
    let mut session = store.create("main", None, None)?;
    for (turn, question) in [(1, "Where is the JSON parser?"), (2, "Does it recurse?")] {
        run_turn(&mut session, turn, question)?;
    }

    // A crash inside turn 3: the model asked for a tool, the process died before the tool
    // answered. Dropping the session without `close` leaves exactly that log.
    session.append::<kinds::TurnStart>(r#"{"turn":3}"#, NoSurface)?;
    let user = user_message(3, "Add a test for deep nesting.");
    session.append::<kinds::UserMessage>(&user, SurfaceIntent::append())?;
    model_step(&mut session, 3, 1, Some("call3"))?;
    drop(session);

    // Resume: `open` recovers the log and appends, durably and once, the closers of the
    // interrupted turn (contract §8): a tool result for the open call, the step's and the
    // turn's ends.
    let (mut session, opened) = store.open_session("main")?;
    println!(
        "reopened: torn tail {:?}, {} closers:",
        opened.log.torn_tail, opened.closers
    );
    for seq in session.seq_next() - opened.closers..session.seq_next() {
        let event = session.event(seq)?.expect("a closer just appended");
        println!("  seq {seq} {} {}", event.event_type, event.data());
    }
    run_turn(&mut session, 4, "Try again, please.")?;

    // A subagent starts from the conversation so far: a fork at a turn boundary shares the
    // parent's log up to there (hard links, no copy) and continues on its own.
    let mut sub = store.fork("main", Boundary::Last, "main-sub")?;
    println!("fork header: {}", sub.header().text());
    run_turn(&mut sub, 5, "Subagent: review the new test.")?;

    // The next model request: the surface's messages, verbatim slices of the stored JSON.
    for s in [&session, &sub] {
        let messages = s.messages()?;
        let texts: Vec<&str> = messages.iter().map(|m| m.json).collect();
        let request = format!(r#"{{"model":"m","messages":[{}]}}"#, texts.join(","));
        println!(
            "{}: next request, {} messages, {} bytes",
            s.id(),
            texts.len(),
            request.len()
        );
    }
    sub.close()?;
    session.close()
}

/// One turn: the user's message (compacting first when the surface is over budget), a
/// model step that streams and calls a tool, the tool's result, and a final answer.
fn run_turn(session: &mut StoredSession, turn: u64, question: &str) -> Result<()> {
    session.append::<kinds::TurnStart>(&format!(r#"{{"turn":{turn}}}"#), NoSurface)?;
    let user = user_message(turn, question);
    let user = session.append::<kinds::UserMessage>(&user, SurfaceIntent::append())?;
    compact_if_over_budget(session, turn, user)?;
    let call_id = format!("call{turn}");
    let tool_call = model_step(session, turn, 1, Some(&call_id))?;
    let result = format!(
        r#"{{"turn":{turn},"step":1,"message":{{"id":"r{turn}","role":"user","source":{{"kind":"tool","callId":"{call_id}"}},"content":[{{"type":"tool-result","toolCallId":"{call_id}","isError":false,"content":[{{"type":"text","text":"src/json/parse.rs: 812 lines"}}]}}]}}}}"#
    );
    session.append::<kinds::ToolResult>(&result, SurfaceIntent::append_citing(vec![tool_call]))?;
    step_end(session, turn, 1)?;
    model_step(session, turn, 2, None)?;
    step_end(session, turn, 2)?;
    let end = format!(r#"{{"turn":{turn},"reason":{{"kind":"completed"}}}}"#);
    session.append::<kinds::TurnEnd>(&end, NoSurface)?;
    println!(
        "{}: turn {turn} done, {} events",
        session.id(),
        session.seq_next()
    );
    Ok(())
}

/// A model step: streamed chunks (log-only: the transcript keeps them, the model never
/// sees them), then the whole assistant message citing them, and, when the model calls a
/// tool, the `tool/call` event. Returns the seq of the last event appended.
fn model_step(
    session: &mut StoredSession,
    turn: u64,
    step: u64,
    call: Option<&str>,
) -> Result<u64> {
    session
        .append::<kinds::StepStart>(&format!(r#"{{"turn":{turn},"step":{step}}}"#), NoSurface)?;
    let mut chunks = Vec::new();
    for (index, delta) in ["Looking ", "at it."].iter().enumerate() {
        let chunk = format!(
            r#"{{"turn":{turn},"step":{step},"chunk":{{"type":"text-delta","index":{index},"text":"{delta}"}}}}"#
        );
        chunks.push(session.append::<kinds::AssistantChunk>(&chunk, NoSurface)?);
    }
    let tool_block = call.map_or_else(String::new, |id| {
        format!(r#",{{"type":"tool-call","id":"{id}","name":"grep","arguments":"{{}}"}}"#)
    });
    let message = format!(
        r#"{{"turn":{turn},"step":{step},"message":{{"id":"a{turn}.{step}","role":"assistant","source":{{"kind":"model","provider":"p","model":"m"}},"content":[{{"type":"text","text":"Looking at it."}}{tool_block}]}}}}"#
    );
    let seq = session
        .append::<kinds::AssistantMessage>(&message, SurfaceIntent::append_citing(chunks))?;
    let Some(id) = call else { return Ok(seq) };
    let call = format!(r#"{{"turn":{turn},"step":{step},"callId":"{id}","name":"grep"}}"#);
    session.append::<kinds::ToolCall>(&call, NoSurface)
}

fn step_end(session: &mut StoredSession, turn: u64, step: u64) -> Result<u64> {
    session.append::<kinds::StepEnd>(&format!(r#"{{"turn":{turn},"step":{step}}}"#), NoSurface)
}

/// When the messages exceed the budget, replaces every surface node before the turn's
/// user message (`keep`) by one summary message (contract §10). Nothing is deleted: the
/// compacted events stay in the log, and `as_of` still shows them.
fn compact_if_over_budget(session: &mut StoredSession, turn: u64, keep: u64) -> Result<()> {
    let bytes: usize = session.messages()?.iter().map(|m| m.json.len()).sum();
    let nodes = session.surface().nodes();
    let Some(kept) = nodes.iter().position(|&seq| seq == keep).filter(|&p| p > 0) else {
        return Ok(());
    };
    if bytes <= SURFACE_BUDGET_BYTES {
        return Ok(());
    }
    let (start, end) = (nodes[0], nodes[kept - 1]);
    let summary = r#"[{"type":"text","text":"Earlier: the parser is src/json/parse.rs."}]"#;
    let message = format!(
        r#"{{"id":"sum{turn}","role":"user","source":{{"kind":"plugin","plugin":"compaction"}},"content":{summary}}}"#
    );
    let done = session.compact(&Compaction {
        compaction_id: &format!("cmp{turn}"),
        turn: Some(turn),
        start,
        end,
        summary,
        summary_extra: None,
        message: &message,
    })?;
    println!(
        "compacted {bytes} bytes of messages: seqs {start}..={end} -> {}",
        done.message
    );
    Ok(())
}

fn user_message(turn: u64, text: &str) -> String {
    format!(
        r#"{{"id":"u{turn}","role":"user","source":{{"kind":"user"}},"content":[{{"type":"text","text":"{text}"}}]}}"#
    )
}
