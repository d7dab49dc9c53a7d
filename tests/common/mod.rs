//! Shared by the integration tests: scratch directories that clean up after themselves,
//! store and log options, the messages and closed turns the session tests store, sorted
//! file listings, and a runner for the built `surfacelog` binary.
//!
//! Each integration test is its own crate and declares `mod common;`; the byte layout a
//! test damages depends on what it stores, so these builders take every text a test
//! chooses as a parameter and write exactly the bytes the copies they replace wrote.

#![allow(
    dead_code,
    reason = "each integration test uses a part of the shared helpers"
)]

use std::ops::Range;
use std::path::{Path, PathBuf};
#[cfg(feature = "cli")]
use std::process::{Command, Output};
use std::sync::Arc;

use surfacelog::internals::clock::ManualClock;
use surfacelog::internals::event::{Event, EventFields};
use surfacelog::internals::log::{Durability, LogOptions, LogWriter};
use surfacelog::internals::session::{
    Compaction, NoSurface, Options, Prune, Session, SessionLog, SurfaceIntent, kinds,
};
use surfacelog::internals::storage::faulty::{Faults, FaultyStorage};
use surfacelog::internals::storage::{FsStorage, Storage};
use surfacelog::internals::store::StoreOptions;

/// A fresh private directory (mode 0700) under the system's temporary directory, removed
/// with everything in it when dropped, so a test run leaves nothing behind (even when
/// the test fails). It reads as a `Path`.
#[derive(Debug)]
pub struct Scratch(tempfile::TempDir);

impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

/// A [`Scratch`] directory named after the test file and `name`, for readable paths in
/// failure messages.
pub fn scratch(file: &str, name: &str) -> Scratch {
    let dir = tempfile::Builder::new()
        .prefix(&format!("surfacelog-{file}-{name}-"))
        .tempdir()
        .expect("a scratch directory");
    Scratch(dir)
}

/// Log options with the given durability and segment size, the rest the defaults.
pub fn log_options(durability: Durability, segment_bytes: u64) -> LogOptions {
    LogOptions {
        segment_bytes,
        durability,
        ..LogOptions::default()
    }
}

/// [`log_options`] writing version 1 records (`log-format.md` §4, with chunk records,
/// §4.1) rather than the default compact records (§4.2): for a test of their bytes.
pub fn v1_log_options(durability: Durability, segment_bytes: u64) -> LogOptions {
    LogOptions {
        compact_records: false,
        ..log_options(durability, segment_bytes)
    }
}

/// Session options for deterministic sessions: a manual clock at 1,000 (every event's
/// `time` the same), the rest the defaults.
pub fn session_options() -> Options {
    Options {
        clock: Arc::new(ManualClock::new(1_000)),
        ..Options::default()
    }
}

/// Store options for deterministic sessions: [`session_options`], [`log_options`] with
/// `durability` and `segment_bytes`, and a checkpoint every 100 events.
pub fn store_options(durability: Durability, segment_bytes: u64) -> StoreOptions {
    StoreOptions::new()
        .session_options(session_options())
        .log_options(log_options(durability, segment_bytes))
        .checkpoint_every(100)
}

/// [`store_options`] writing version 1 records (`log-format.md` §4, with chunk records,
/// §4.1) rather than the default compact records (§4.2): for a test of their bytes.
pub fn v1_store_options(durability: Durability, segment_bytes: u64) -> StoreOptions {
    store_options(durability, segment_bytes).compact_records(false)
}

/// A record of a segment file: where it lies in the file, and the seqs of the events it
/// holds (one, or a run's members, §4.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentRecord {
    /// Its bytes in the file: frame and padding.
    pub at: Range<usize>,
    /// The seqs of its events.
    pub seqs: Range<u64>,
}

/// The records of the segment file `bytes` (a plain one, not compressed), in order: walked
/// from its header by the decoder of the records its header says it holds (SEG-9: version
/// 1 records, or compact records), up to the first that does not decode (its end, SEG-5,
/// or damage). Locates a record in either format, for a test that damages one.
pub fn segment_records(bytes: &[u8]) -> Vec<SegmentRecord> {
    use surfacelog::internals::log::segment::{COMPACT_RECORDS, SEGMENT_HEADER_LEN, SegmentHeader};
    use surfacelog::internals::record::{Format, decode_as};
    let header = SegmentHeader::decode(bytes).expect("a segment header");
    let format = if header.incompat_features & COMPACT_RECORDS != 0 {
        Format::Compact
    } else {
        Format::V1
    };
    let mut at = SEGMENT_HEADER_LEN;
    let mut found = Vec::new();
    while let Ok((record, len)) = decode_as(format, &bytes[at..]) {
        found.push(SegmentRecord {
            at: at..at + len,
            seqs: record.first_seq()..record.seq_end(),
        });
        at += len;
    }
    found
}

/// The record holding `seq` in the segment file `path` ([`segment_records`]).
pub fn record_of_seq(path: &Path, seq: u64) -> SegmentRecord {
    segment_records(&std::fs::read(path).unwrap())
        .into_iter()
        .find(|r| r.seqs.contains(&seq))
        .unwrap_or_else(|| panic!("no record of seq {seq} in {}", path.display()))
}

/// The surface's messages of `session` as `(seq, text)`.
pub fn messages_of<L: SessionLog>(session: &Session<L>) -> Vec<(u64, String)> {
    session
        .messages()
        .unwrap()
        .iter()
        .map(|m| (m.seq, m.json.to_owned()))
        .collect()
}

/// The data of a `user/message` whose id and only text block are both `text`.
pub fn user(text: &str) -> String {
    format!(
        r#"{{"id":"{text}","role":"user","source":{{"kind":"user"}},"content":[{{"type":"text","text":"{text}"}}]}}"#
    )
}

/// The data of turn `turn`'s `assistant/message` (step 1, id `a{turn}`) with the content
/// blocks `blocks` (a JSON array's items).
pub fn assistant(turn: u64, blocks: &str) -> String {
    format!(
        r#"{{"turn":{turn},"step":1,"message":{{"id":"a{turn}","role":"assistant","source":{{"kind":"model","provider":"p","model":"m"}},"content":[{blocks}]}}}}"#
    )
}

/// The content block of turn `turn`'s tool call, id `c{turn}`.
pub fn tool_call(turn: u64) -> String {
    format!(r#"{{"type":"tool-call","id":"c{turn}"}}"#)
}

/// The data of turn `turn`'s `tool/result` (step 1, id `r{turn}`) for the call `call`,
/// whose output is the one text block `output`.
pub fn tool_result(turn: u64, call: &str, output: &str) -> String {
    format!(
        r#"{{"turn":{turn},"step":1,"message":{{"id":"r{turn}","role":"user","source":{{"kind":"tool","callId":"{call}"}},"content":[{{"type":"tool-result","toolCallId":"{call}","content":[{{"type":"text","text":"{output}"}}]}}]}}}}"#
    )
}

/// The seqs [`closed_turn`] stored its messages at.
#[derive(Debug, Clone, Copy)]
pub struct Turn {
    /// The `user/message`.
    pub user: u64,
    /// The `tool/result`.
    pub result: u64,
}

/// Appends `turn/start` of turn `turn`.
pub fn turn_start<L: SessionLog>(session: &mut Session<L>, turn: u64) {
    session
        .append::<kinds::TurnStart>(&format!(r#"{{"turn":{turn}}}"#), NoSurface)
        .unwrap();
}

/// Appends a [`user`] message of `text` to the surface; returns its seq.
pub fn user_message<L: SessionLog>(session: &mut Session<L>, text: &str) -> u64 {
    session
        .append::<kinds::UserMessage>(&user(text), SurfaceIntent::append())
        .unwrap()
}

/// Appends `turn/end` of turn `turn`, completed.
pub fn turn_end<L: SessionLog>(session: &mut Session<L>, turn: u64) {
    session
        .append::<kinds::TurnEnd>(
            &format!(r#"{{"turn":{turn},"reason":{{"kind":"completed"}}}}"#),
            NoSurface,
        )
        .unwrap();
}

/// Appends one closed turn numbered `turn`: [`turn_start`], a [`user_message`] of `text`,
/// `step/start`, an [`assistant`] message with the [`tool_call`] `c{turn}`, its
/// [`tool_result`] with the output `output`, `step/end`, and [`turn_end`].
pub fn closed_turn<L: SessionLog>(
    session: &mut Session<L>,
    turn: u64,
    text: &str,
    output: &str,
) -> Turn {
    turn_start(session, turn);
    let user = user_message(session, text);
    let step = format!(r#"{{"turn":{turn},"step":1}}"#);
    session
        .append::<kinds::StepStart>(&step, NoSurface)
        .unwrap();
    session
        .append::<kinds::AssistantMessage>(
            &assistant(turn, &tool_call(turn)),
            SurfaceIntent::append(),
        )
        .unwrap();
    let result = session
        .append::<kinds::ToolResult>(
            &tool_result(turn, &format!("c{turn}"), output),
            SurfaceIntent::append(),
        )
        .unwrap();
    session.append::<kinds::StepEnd>(&step, NoSurface).unwrap();
    turn_end(session, turn);
    Turn { user, result }
}

/// Opens turn `turn` with the user message `user` and step 1, then streams `chunks` (each
/// a chunk object's JSON) as `assistant/chunk` events of that step. Returns the step's
/// data, for the `step/end` the caller appends after what else the step holds.
pub fn streamed_step<L: SessionLog>(
    session: &mut Session<L>,
    turn: u64,
    user: &str,
    chunks: impl IntoIterator<Item = String>,
) -> String {
    let step = format!(r#"{{"turn":{turn},"step":1}}"#);
    turn_start(session, turn);
    user_message(session, user);
    session
        .append::<kinds::StepStart>(&step, NoSurface)
        .unwrap();
    for chunk in chunks {
        session
            .append::<kinds::AssistantChunk>(
                &format!(r#"{{"turn":{turn},"step":1,"chunk":{chunk}}}"#),
                NoSurface,
            )
            .unwrap();
    }
    step
}

/// A [`closed_turn`] numbered `turn` whose user text is `u{turn}` and whose tool output
/// is `output of c{turn}`.
pub fn numbered_turn<L: SessionLog>(session: &mut Session<L>, turn: u64) -> Turn {
    closed_turn(
        session,
        turn,
        &format!("u{turn}"),
        &format!("output of c{turn}"),
    )
}

/// Prunes the node `seq` to the empty content `[]`, shadowing one token.
pub fn prune_to_empty<L: SessionLog>(session: &mut Session<L>, seq: u64) {
    session
        .prune(&Prune {
            seq,
            content: "[]",
            shadowed_token_count: 1,
        })
        .unwrap();
}

/// Compacts the surface nodes `start..=end` into a summary: compaction id `k`, no turn,
/// the summary `[]` and a [`user`] message of `summary`.
pub fn compact<L: SessionLog>(session: &mut Session<L>, start: u64, end: u64, summary: &str) {
    let message = user(summary);
    session
        .compact(&Compaction {
            compaction_id: "k",
            turn: None,
            start,
            end,
            summary: "[]",
            summary_extra: None,
            message: &message,
        })
        .unwrap();
}

/// A log-only event (time 0, no surface operation, no sources, not ignorable) of type
/// `event_type` and `seq`, stored as `text`, whose data is `text[data]`.
pub fn log_only_event(
    event_type: &'static str,
    seq: u64,
    text: String,
    data: Range<usize>,
) -> Event {
    let fields = EventFields {
        event_type: event_type.into(),
        seq,
        time: 0,
        surface_op: None,
        sources: None,
        ignorable: false,
    };
    Event::new(text, data, None, fields)
}

/// A [`log_only_event`] `plugin/t` of `seq` whose data is `{"pad":"ppp…"}` with `pad`
/// bytes of padding.
pub fn padded_event(seq: u64, pad: usize) -> Event {
    let pad = "p".repeat(pad);
    let text = format!(r#"{{"type":"plugin/t","seq":{seq},"time":0,"data":{{"pad":"{pad}"}}}}"#);
    let data = text.find("{\"pad\"").unwrap()..text.len() - 1;
    log_only_event("plugin/t", seq, text, data)
}

/// A writer of the log in `dir` ([`log_options`] with `durability` and `segment_bytes`)
/// on a fault-injecting storage, and the fault plan to steer it.
pub fn faulty_writer(
    dir: &Path,
    durability: Durability,
    segment_bytes: u64,
) -> (LogWriter, Arc<Faults>) {
    let storage = FaultyStorage::default();
    let faults = Arc::clone(&storage.faults);
    let options = LogOptions {
        storage: Arc::new(storage),
        ..log_options(durability, segment_bytes)
    };
    (LogWriter::open(dir, options).unwrap().0, faults)
}

/// The files in `dir` whose names end with `suffix`, sorted by path.
pub fn files_ending(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    found.sort();
    found
}

/// Runs the built `surfacelog` binary with `args` and collects what it printed (the binary
/// is built with the `cli` feature).
#[cfg(feature = "cli")]
pub fn surfacelog(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_surfacelog"))
        .args(args)
        .env_remove("SURFACELOG_STORE")
        .output()
        .expect("the binary runs")
}

/// A path inside a fresh [`Scratch`] directory that does not exist yet (for a test that
/// lets the engine create it); the scratch directory, and so everything the test made
/// there, is removed when this is dropped. It reads as a `Path`.
#[derive(Debug)]
pub struct ScratchPath {
    _scratch: Scratch,
    path: PathBuf,
}

impl std::ops::Deref for ScratchPath {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for ScratchPath {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// A [`ScratchPath`] named `name` in a scratch directory of the test file `file`.
pub fn scratch_path(file: &str, name: &str) -> ScratchPath {
    let scratch = scratch(file, name);
    let path = scratch.join(name);
    ScratchPath {
        _scratch: scratch,
        path,
    }
}

/// A storage call a [`HookedStorage`] runs its hook before.
#[derive(Debug, Clone, Copy)]
pub enum Op<'a> {
    /// A directory's creation (with its parents).
    CreateDir(&'a Path),
    /// A file's creation.
    Create(&'a Path),
    /// A write.
    Write,
    /// A sync of a file's data.
    Sync,
    /// A directory's listing.
    List(&'a Path),
    /// A file's opening.
    Open(&'a Path),
    /// A file just opened (run after the call, when it succeeded).
    Opened(&'a Path),
    /// A file's opening for reading alone (an index, a checkpoint, a pack).
    OpenRead(&'a Path),
    /// A directory tree's removal.
    RemoveAll(&'a Path),
}

/// What a [`HookedStorage`] runs before each call of [`Op`]: where a test pauses the
/// engine, lets another writer make progress, counts calls, or makes the call fail (its
/// `Err` is the call's, which is then not made).
pub type Hook = Box<dyn Fn(Op<'_>) -> std::io::Result<()> + Send + Sync>;

/// The file system's storage, with a hook run before each directory and file creation,
/// write, listing, opening and tree removal.
pub struct HookedStorage(pub Hook);

impl std::fmt::Debug for HookedStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookedStorage")
    }
}

impl Storage for HookedStorage {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        (self.0)(Op::CreateDir(dir))?;
        FsStorage.create_dir_all(dir)
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        (self.0)(Op::List(dir))?;
        FsStorage.list_dir(dir)
    }
    fn create_file(&self, path: &Path, len: u64) -> std::io::Result<std::fs::File> {
        (self.0)(Op::Create(path))?;
        FsStorage.create_file(path, len)
    }
    fn open_file(&self, path: &Path, write: bool) -> std::io::Result<std::fs::File> {
        (self.0)(Op::Open(path))?;
        let file = FsStorage.open_file(path, write)?;
        (self.0)(Op::Opened(path))?;
        Ok(file)
    }
    fn write_at(&self, file: &std::fs::File, offset: u64, bytes: &[u8]) -> std::io::Result<()> {
        (self.0)(Op::Write)?;
        FsStorage.write_at(file, offset, bytes)
    }
    fn set_len(&self, file: &std::fs::File, len: u64) -> std::io::Result<()> {
        FsStorage.set_len(file, len)
    }
    fn sync_data(&self, file: &std::fs::File) -> std::io::Result<()> {
        (self.0)(Op::Sync)?;
        FsStorage.sync_data(file)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        FsStorage.sync_dir(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        FsStorage.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        FsStorage.remove_file(path)
    }
    fn remove_dir_all(&self, path: &Path) -> std::io::Result<()> {
        (self.0)(Op::RemoveAll(path))?;
        FsStorage.remove_dir_all(path)
    }
    fn open_read(&self, path: &Path) -> std::io::Result<std::fs::File> {
        (self.0)(Op::OpenRead(path))?;
        FsStorage.open_read(path)
    }
}

/// Every directory and file under `dir`, sorted, each file with its bytes (a directory
/// with none): what a test takes before and after a call to show that it changed nothing.
pub fn tree_snapshot(dir: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut entries = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(listed) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in listed {
            let path = entry.unwrap().path();
            if path.is_dir() {
                entries.push((path.clone(), None));
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                entries.push((path, Some(bytes)));
            }
        }
    }
    entries.sort();
    entries
}

/// A copy of the directory tree `from` at `to` (files and directories; no links kept).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// Every event text of session `id` of the store in `dir`, read by a writer's open (with
/// `options`; its repair, if any, included), or the refusal's text: what a test of a store
/// left by a crash compares.
pub fn opened_texts(dir: &Path, id: &str, options: StoreOptions) -> Result<Vec<String>, String> {
    let store = surfacelog::Store::open(dir, options).map_err(|e| e.to_string())?;
    let (session, _) = store.open_session(id).map_err(|e| e.to_string())?;
    let texts = (0..session.seq_next())
        .map(|seq| session.event(seq).map(|e| e.unwrap().text().into_owned()))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    session.close().map_err(|e| e.to_string())?;
    Ok(texts)
}
