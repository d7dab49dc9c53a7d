//! Writes the seed corpora of the fuzz targets into `fuzz/corpus/<target>/` (run from the
//! repository's root: `cargo run --example fuzz_seeds`): real segments, indexes and
//! checkpoints and the message pack of a small stored session, the specification's vector
//! records, and
//! operation programs that reach every operation of the `session_model` target. The seeds
//! are committed; libFuzzer grows its own corpus elsewhere (`.ci/run`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use surfacelog::internals::clock::ManualClock;

use surfacelog::internals::log::segment::SEGMENT_HEADER_LEN;
use surfacelog::internals::session::{Compaction, NoSurface, Prune, SurfaceIntent, kinds};
use surfacelog::internals::store::{Store, StoreOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = Path::new("fuzz/corpus");
    let scratch = tempfile::tempdir()?;
    // A fixed clock: the events' times, so the seeds, are the same at each run (but for
    // the log's random identity). Version 1 records and so a plain pack (MSP-1): the
    // `record` and `pack` targets decode those (`record_compact`'s seeds are encoded below).
    let options = StoreOptions::new()
        .clock(Arc::new(ManualClock::new(1_000)))
        .message_pack(1)
        .compact_records(false);
    let store = Store::open_or_create(scratch.path(), options)?;
    let mut session = store.create("seed", None, None)?;
    for turn in 1..=3u64 {
        turn_of(&mut session, turn)?;
    }
    let tool = session.seq_next() - 3;
    session.prune(&Prune {
        seq: tool,
        content: "[]",
        shadowed_token_count: 1,
    })?;
    let message = r#"{"id":"k","role":"user","source":{"kind":"user"},"content":[]}"#;
    let nodes = session.surface().nodes().to_vec();
    session.compact(&Compaction {
        compaction_id: "k",
        turn: None,
        start: nodes[0],
        end: nodes[2],
        summary: "[]",
        summary_extra: None,
        message,
    })?;
    // An open turn: the reopening repairs it.
    session.append::<kinds::TurnStart>(r#"{"turn":4}"#, NoSurface)?;
    compact_seeds(out, &session)?;
    let texts: Vec<String> = (0..session.seq_next())
        .map(|seq| session.event(seq).map(|e| e.map(|e| e.text().into_owned())))
        .collect::<Result<Option<_>, _>>()?
        .unwrap_or_default();
    session.flush()?;
    session.close()?;

    let session_dir = find(scratch.path(), "checkpoint")?;
    let checkpoint = std::fs::read(&session_dir)?;
    // pack: the session's message pack (MSP-1), whole and cut after its fixed fields.
    let pack = std::fs::read(find(scratch.path(), "messages")?)?;
    write(out, "pack", "whole", &pack)?;
    write(out, "pack", "fixed", pack.get(..48).unwrap_or(&pack))?;
    let log_dir = find(scratch.path(), "log")?;
    let segment = records_of(&std::fs::read(
        log_dir.join(surfacelog::internals::log::segment::segment_name(0)),
    )?);
    let index =
        std::fs::read(log_dir.join(surfacelog::internals::log::segment::index_name(0))).ok();

    recovery_seeds(out, &segment)?;
    compact_recovery_seeds(out)?;
    compressed_seeds(out, &segment)?;

    // index: the real index, and fields.
    if let Some(index) = &index {
        write(out, "index", "real", index)?;
    }
    let mut fields = vec![0u8; 20];
    fields[8..12].copy_from_slice(&624u32.to_le_bytes());
    fields.extend(64u32.to_le_bytes().iter().chain(&216u32.to_le_bytes()));
    write(out, "index", "fields", &fields)?;

    // limit: a pick of the record, then changes.
    for pick in 0..3u8 {
        write(
            out,
            "limit",
            &format!("pick-{pick}"),
            &[pick, 5, 1, 60, 0x80],
        )?;
    }

    // checkpoint and session_model: programs of every operation (two bytes each).
    let programs: [&[u8]; 4] = [
        &[
            3, 0, 0, 0, 5, 0, 1, 1, 2, 0, 6, 0, 4, 0, 8, 3, 7, 0x20, 9, 0,
        ],
        &[0, 0, 1, 0, 0, 0, 7, 0x10, 10, 0, 0, 0, 11, 0, 0, 0],
        &[3, 0, 1, 1, 10, 0, 2, 1, 8, 2, 9, 0, 4, 0, 11, 0],
        &[0, 0, 0, 0, 0, 0, 0, 0, 7, 0x31, 7, 0x01, 8, 0, 10, 0],
    ];
    for (n, program) in programs.iter().enumerate() {
        write(out, "session_model", &format!("program-{n}"), program)?;
        let mut seed = vec![u8::try_from(program.len() / 2)?];
        seed.extend_from_slice(program);
        seed.extend_from_slice(&checkpoint);
        write(out, "checkpoint", &format!("program-{n}"), &seed)?;
    }

    // record: the vector records; session, json, rows: the stored events.
    let vector = std::fs::read("format-spec/vectors/segment-v1.seg")?;
    let vector = records_of(&vector);
    write(out, "record", "vector", &vector[SEGMENT_HEADER_LEN..])?;
    write(out, "record", "stored", &segment[SEGMENT_HEADER_LEN..])?;
    let lines = texts.join("\n");
    write(out, "session", "stored", lines.as_bytes())?;
    write(out, "rows", "stored", lines.as_bytes())?;
    for (n, text) in texts.iter().enumerate().step_by(3) {
        write(out, "json", &format!("event-{n}"), text.as_bytes())?;
    }
    println!("seeds written to {}", out.display());
    Ok(())
}

/// Appends a closed turn with a user message, an assistant message calling a tool, and
/// its result.
fn turn_of(
    session: &mut surfacelog::internals::store::StoredSession,
    turn: u64,
) -> surfacelog::Result<()> {
    let step = format!(r#"{{"turn":{turn},"step":1}}"#);
    session.append::<kinds::TurnStart>(&format!(r#"{{"turn":{turn}}}"#), NoSurface)?;
    session.append::<kinds::UserMessage>(
        &format!(
            r#"{{"id":"u{turn}","role":"user","source":{{"kind":"user"}},"content":[{{"type":"text","text":"hi {turn}"}}]}}"#
        ),
        SurfaceIntent::append(),
    )?;
    session.append::<kinds::StepStart>(&step, NoSurface)?;
    // Streamed chunks: stored as chunk records (log-format.md §4.1).
    for chunk in [
        format!(r#"{{"type":"text-delta","index":0,"text":"hi \"{turn}\""}}"#),
        format!(
            r#"{{"type":"tool-call-delta","index":1,"id":"c{turn}","name":"read","argumentsDelta":"{{}}"}}"#
        ),
    ] {
        session.append::<kinds::AssistantChunk>(
            &format!(r#"{{"turn":{turn},"step":1,"chunk":{chunk}}}"#),
            NoSurface,
        )?;
    }
    session.append::<kinds::AssistantMessage>(
        &format!(
            r#"{{"turn":{turn},"step":1,"message":{{"id":"a{turn}","role":"assistant","source":{{"kind":"model","provider":"p","model":"m"}},"content":[{{"type":"tool-call","id":"c{turn}","name":"read","input":{{}}}}]}}}}"#
        ),
        SurfaceIntent::append(),
    )?;
    session.append::<kinds::ToolResult>(
        &format!(
            r#"{{"turn":{turn},"step":1,"message":{{"id":"r{turn}","role":"user","source":{{"kind":"tool","callId":"c{turn}"}},"content":[{{"type":"tool-result","toolCallId":"c{turn}","content":[{{"type":"text","text":"out"}}]}}]}}}}"#
        ),
        SurfaceIntent::append(),
    )?;
    session.append::<kinds::StepEnd>(&step, NoSurface)?;
    session.append::<kinds::TurnEnd>(
        &format!(r#"{{"turn":{turn},"reason":{{"kind":"completed"}}}}"#),
        NoSurface,
    )?;
    Ok(())
}

/// `record_compact`: each stored event as a compact record (log-format.md §4.2), one seed
/// per record kind, and a chunk run of several members.
fn compact_seeds(
    out: &Path,
    session: &surfacelog::internals::store::StoredSession,
) -> Result<(), Box<dyn std::error::Error>> {
    use surfacelog::internals::event::chunk::{ChunkKind, ChunkRef};
    use surfacelog::internals::record::compact::{ChunkMember, ChunkRunBuilder, encode};
    let mut kinds: [Vec<u8>; 4] = Default::default();
    for seq in 0..session.seq_next() {
        let event = session.event(seq)?.ok_or("a stored event")?;
        let mut record = Vec::new();
        encode(&event, &mut record)
            .map_err(surfacelog::internals::record::compact::Refusal::reason)?;
        // The body's kind: after `len` (1 or 2 bytes here) and the 4-byte `crc`.
        let at = record.iter().position(|b| b & 0x80 == 0).unwrap_or(0) + 5;
        let kind = usize::from(record[at]).min(3);
        kinds[kind].extend_from_slice(&record);
    }
    for (kind, records) in kinds.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
        write(out, "record_compact", &format!("kind-{kind}"), records)?;
    }
    let mut run = ChunkRunBuilder::default();
    for (k, payload) in (0_i32..).zip(["Hel", r#"lo \"w\""#, r"\u00e9!"]) {
        let chunk = ChunkRef {
            kind: ChunkKind::ToolCall,
            turn: 3,
            step: 1,
            index: 0,
            id: "call_1",
            name: Some("read"),
            payload,
        };
        let seq = 1000 + u64::try_from(k)?;
        let member = ChunkMember {
            seq,
            time: 5 + 2 * i64::from(k),
            chunk,
        };
        run.push(member).map_err(|(_, why)| why.reason())?;
    }
    let mut record = Vec::new();
    run.encode(&mut record);
    write(out, "record_compact", "run", &record)?;
    Ok(())
}

/// compressed: a pick byte, then the segment's records (the target compresses them as a
/// logical segment's, CZ-5); and the segment compressed whole (CZ-3).
fn compressed_seeds(out: &Path, segment: &[u8]) -> Result<(), Box<dyn std::error::Error>> {
    use surfacelog::internals::log::segment::{compress, logical_segment};
    let mut seed = vec![3u8];
    seed.extend_from_slice(&segment[SEGMENT_HEADER_LEN..]);
    write(out, "compressed", "records", &seed)?;
    let logical = logical_segment(segment).ok_or("the seed segment's header")?;
    if let Some(packed) = compress(&logical, 4096, 3)? {
        write(out, "compressed", "whole", &packed)?;
    }
    Ok(())
}

/// A segment's header and records, without the zeros after them.
fn records_of(segment: &[u8]) -> Vec<u8> {
    use surfacelog::internals::log::segment::SegmentHeader;
    let Ok(header) = SegmentHeader::decode(segment) else {
        return segment.to_vec();
    };
    let mut at = SEGMENT_HEADER_LEN;
    while let Some(Ok((_, len))) = segment
        .get(at..)
        .map(|bytes| surfacelog::internals::record::decode_as(header.format(), bytes))
    {
        at += len;
    }
    segment[..at.min(segment.len())].to_vec()
}

/// recovery: a flags byte, then the segment after its header (or whole, flag 1).
fn recovery_seeds(out: &Path, segment: &[u8]) -> std::io::Result<()> {
    for flags in [0u8, 2, 8, 0x32, 0x54] {
        let mut seed = vec![flags];
        seed.extend_from_slice(&segment[SEGMENT_HEADER_LEN..]);
        write(out, "recovery", &format!("records-{flags:02x}"), &seed)?;
    }
    let mut whole = vec![1u8];
    whole.extend_from_slice(segment);
    write(out, "recovery", "whole", &whole)?;
    let half = segment.len() / 2 + 3;
    write(out, "recovery", "torn", &whole[..half])
}

/// recovery: the segment of a session in compact records (log-format.md §4.2), turns as
/// above and a run of five text deltas (`Manual` durability: they join one record), its
/// records after the made header that sets `COMPACT_RECORDS` (flag 128) with the flags of
/// the version 1 seeds, and whole.
fn compact_recovery_seeds(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let scratch = tempfile::tempdir()?;
    let options = StoreOptions::new()
        .clock(Arc::new(ManualClock::new(1_000)))
        .durability(surfacelog::Durability::Manual)
        .compact_records(true);
    let store = Store::open_or_create(scratch.path(), options)?;
    let mut session = store.create("seed", None, None)?;
    for turn in 1..=2u64 {
        turn_of(&mut session, turn)?;
    }
    session.append::<kinds::TurnStart>(r#"{"turn":3}"#, NoSurface)?;
    session.append::<kinds::StepStart>(r#"{"turn":3,"step":1}"#, NoSurface)?;
    for part in 0..5 {
        session.append::<kinds::AssistantChunk>(
            &format!(
                r#"{{"turn":3,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"part {part}"}}}}"#
            ),
            NoSurface,
        )?;
    }
    session.close()?;
    let segment = records_of(&std::fs::read(
        find(scratch.path(), "log")?.join(surfacelog::internals::log::segment::segment_name(0)),
    )?);
    for flags in [0x80u8, 0x82, 0x88, 0xb2, 0xd4, 0xf6] {
        let mut seed = vec![flags];
        seed.extend_from_slice(&segment[SEGMENT_HEADER_LEN..]);
        write(
            out,
            "recovery",
            &format!("compact-records-{flags:02x}"),
            &seed,
        )?;
    }
    let mut whole = vec![1u8];
    whole.extend_from_slice(&segment);
    write(out, "recovery", "compact-whole", &whole)?;
    Ok(())
}

/// The first path under `root` named `name`.
fn find(root: &Path, name: &str) -> std::io::Result<PathBuf> {
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.file_name().is_some_and(|n| n == name) {
                return Ok(path);
            }
            if path.is_dir() {
                pending.push(path);
            }
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        name.to_owned(),
    ))
}

fn write(out: &Path, target: &str, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let dir = out.join(target);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(name), bytes)
}
