//! The corruption sweep (issues 11 and 13): on a small closed multi-segment session and its
//! fork, damage every segment, index, limit and checkpoint one way at a time (a bit
//! flipped, or the file cut short), and read the store through every path. Each read
//! returns the original data or an error: never different data, never fewer events or
//! messages, never a panic. A writer's open of the damaged store (on a copy, since it may
//! repair) keeps every durable event too. `STORE` and `header.json` are swept apart.
//!
//! By default it flips one bit (rotating) of every byte of the first 64 of each file and
//! of every 3rd byte after them, cuts each file at every one of those lengths with a
//! stride of 5, and opens a writer on every 9th damage; `SURFACELOG_SWEEP_STRIDE=1` flips
//! every bit of every byte, cuts at every length and opens a writer on each
//! (`cargo test --release --test sweep -- --nocapture`; `SURFACELOG_SWEEP_WRITER_EVERY=N`
//! opens a writer on every Nth damage only).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use surfacelog::internals::event::EventSource;
use surfacelog::internals::log::Durability;
use surfacelog::internals::session::{Boundary, Session, SessionLog};
use surfacelog::internals::store::{Store, StoreOptions};

mod common;

use common::{closed_turn, compact, prune_to_empty};

fn store_options() -> StoreOptions {
    common::store_options(Durability::Manual, 2 << 10)
}

/// Closed turns with a tool call and result; a prune and a compaction.
fn workload<L: SessionLog>(session: &mut Session<L>, turns: u64) {
    for turn in 1..=turns {
        let stored = closed_turn(session, turn, &format!("u{turn}"), &format!("out {turn}"));
        if turn == 2 {
            prune_to_empty(session, stored.result);
        }
        if turn == 4 {
            let nodes = session.surface().nodes().to_vec();
            compact(session, nodes[0], nodes[3], "summary");
        }
    }
}

/// What a session reads back: every event's text, the messages and the transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Contents {
    events: Vec<String>,
    messages: Vec<(u64, String)>,
    transcript: Vec<u64>,
}

fn contents<L: SessionLog>(session: &Session<L>) -> Contents {
    Contents {
        events: (0..session.seq_next())
            .map(|seq| session.event(seq).unwrap().unwrap().text().into_owned())
            .collect(),
        messages: session
            .messages()
            .unwrap()
            .iter()
            .map(|m| (m.seq, m.json.to_owned()))
            .collect(),
        transcript: session.transcript().unwrap(),
    }
}

/// Reads `session` through every view and checks each against `expected`: equal, or an
/// error. Returns how many views were refused.
fn check<L: SessionLog>(session: &Session<L>, expected: &Contents, what: &str) -> usize {
    assert_eq!(
        session.seq_next(),
        expected.events.len() as u64,
        "{what}: a log never reads shorter or longer"
    );
    let mut refused = 0;
    for (seq, text) in expected.events.iter().enumerate() {
        match session.event(seq as u64) {
            Ok(Some(event)) => assert_eq!(event.text(), text.as_str(), "{what}: seq {seq} differs"),
            Ok(None) => panic!("{what}: seq {seq} is missing"),
            Err(error) => {
                assert_error(&error, what);
                refused += 1;
            }
        }
    }
    match session.messages() {
        Ok(messages) => {
            let messages: Vec<(u64, String)> = messages
                .iter()
                .map(|m| (m.seq, m.json.to_owned()))
                .collect();
            assert_eq!(messages, expected.messages, "{what}: messages differ");
        }
        Err(error) => {
            assert_error(&error, what);
            refused += 1;
        }
    }
    match session.transcript() {
        Ok(transcript) => assert_eq!(transcript, expected.transcript, "{what}: transcript"),
        Err(error) => {
            assert_error(&error, what);
            refused += 1;
        }
    }
    refused
}

/// Reads a follower's log event by event: each equal to the original, or an error, and
/// never shorter. Returns how many reads were refused.
fn check_log(log: &impl EventSource, expected: &Contents, what: &str) -> usize {
    assert_eq!(
        log.seq_next(),
        expected.events.len() as u64,
        "{what}: a follower never reads a shorter or longer log"
    );
    let mut refused = 0;
    for (seq, text) in expected.events.iter().enumerate() {
        match log.event(seq as u64) {
            Ok(Some(event)) => assert_eq!(event.text(), text.as_str(), "{what}: seq {seq} differs"),
            Ok(None) => panic!("{what}: seq {seq} is missing"),
            Err(error) => {
                assert_error(&error, what);
                refused += 1;
            }
        }
    }
    refused
}

/// A refusal names what it refuses: a stable code, and a file for damage.
fn assert_error(error: &surfacelog::Error, what: &str) {
    assert!(
        matches!(error.code(), "CORRUPT" | "FORMAT_VERSION"),
        "{what}: {error}"
    );
}

/// The files a flip targets: every file of the sessions' directories but `header.json`
/// (which has no checksum) and `LOCK`, each once (the fork shares files by hard links).
fn targets(store: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    let mut dirs = vec![store.join("sessions")];
    while let Some(dir) = dirs.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let name = path.file_name().unwrap().to_str().unwrap();
            if meta.is_dir() {
                dirs.push(path);
            } else if name != "header.json" && name != "LOCK" && seen.insert(meta.ino()) {
                out.push(path);
            }
        }
    }
    out
}

/// The offsets flipped in `bytes`: every one of the first 64 (a segment's header, the
/// fixed fields of the other files), every `stride`-th after that up to the last non-zero
/// byte, then every 61st (the sparse zeros of a segment's unused room). A stride prime to
/// 8 reaches every field position of the 8-aligned records across the file.
fn offsets(bytes: &[u8], stride: usize) -> Vec<usize> {
    let end = bytes.iter().rposition(|b| *b != 0).map_or(0, |p| p + 1);
    let head = end.min(64);
    (0..head)
        .chain((head..end).step_by(stride))
        .chain((end..bytes.len()).step_by(61))
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// One damage of one file: a bit flipped, or the file cut to a length.
#[derive(Debug, Clone, Copy)]
enum Damage {
    Flip { offset: usize, bit: u8 },
    Cut { len: usize },
}

impl Damage {
    fn apply(self, pristine: &[u8]) -> Vec<u8> {
        match self {
            Self::Flip { offset, bit } => {
                let mut bytes = pristine.to_vec();
                bytes[offset] ^= 1 << bit;
                bytes
            }
            Self::Cut { len } => pristine[..len].to_vec(),
        }
    }
}

/// The damages of a file of `bytes`: with `every` (`SURFACELOG_SWEEP_STRIDE=1`), every bit
/// of every byte flipped and a cut at every length; otherwise the [`offsets`] with
/// `stride`, each flipping one bit (rotating through the 8), and cuts at the offsets with
/// `stride + 2`.
fn damages(bytes: &[u8], stride: usize, every: bool) -> Vec<Damage> {
    let flips: Vec<Damage> = if every {
        (0..bytes.len())
            .flat_map(|offset| (0..8).map(move |bit| Damage::Flip { offset, bit }))
            .collect()
    } else {
        offsets(bytes, stride)
            .into_iter()
            .map(|offset| Damage::Flip {
                offset,
                bit: u8::try_from(offset % 8).unwrap(),
            })
            .collect()
    };
    let cuts = if every {
        (0..bytes.len()).collect()
    } else {
        offsets(bytes, stride + 2)
    };
    flips
        .into_iter()
        .chain(cuts.into_iter().map(|len| Damage::Cut { len }))
        .collect()
}

/// What a sweep counted.
#[derive(Debug, Default)]
struct Tally {
    damages: usize,
    refused: usize,
    writer_opens: usize,
}

/// Issues 11 and 13: on a small closed multi-segment session and its fork, every file of
/// the sessions (segments, indexes, limit, checkpoint) damaged one way at a time: a bit
/// flipped, or the file cut short. Every read path returns the original data or an error
/// naming the damage (`CORRUPT`, `FORMAT_VERSION`): never different data, never fewer
/// events, never a panic or a signal; and a writer's open (on a copy) keeps every event,
/// since everything of a closed session is durable (no torn tail to drop), or refuses.
#[test]
fn every_flipped_bit_and_cut_reads_back_as_the_original_or_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    let store = Store::open_or_create(&store_dir, store_options()).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    workload(&mut session, 6);
    session.close().unwrap();
    // The fork's boundary, the end of turn 3, falls inside a segment: a limit file.
    let inspected = store.inspect("s").unwrap();
    let boundary = (0..inspected.seq_next())
        .filter(|&seq| inspected.event(seq).unwrap().unwrap().event_type == "turn/end")
        .nth(2)
        .unwrap();
    drop(inspected);
    let child = store.fork("s", Boundary::Seq(boundary), "c").unwrap();
    child.close().unwrap();
    let ids = ["s", "c"];
    let expected: BTreeMap<&str, Contents> = ids
        .iter()
        .map(|&id| (id, contents(&store.inspect(id).unwrap())))
        .collect();
    let files = targets(&store_dir);
    let has = |ext: &str| {
        files
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == ext))
            .count()
    };
    assert!(
        has("lim") == 1 && has("seg") >= 4 && has("idx") >= 1,
        "{files:?}"
    );

    let stride: Option<usize> = std::env::var("SURFACELOG_SWEEP_STRIDE")
        .ok()
        .and_then(|s| s.parse().ok());
    let every = stride == Some(1);
    let (read_stride, mut writer_every) = stride.map_or((3, 9), |s| (s.max(1), s.max(1)));
    // A long campaign may open writers less often than it damages.
    if let Some(every) = std::env::var("SURFACELOG_SWEEP_WRITER_EVERY")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
    {
        writer_every = every.max(1);
    }
    let mut tally = Tally::default();
    let mut bytes_swept = 0;
    for file in &files {
        let pristine = std::fs::read(file).unwrap();
        bytes_swept += pristine.len();
        for (n, damage) in damages(&pristine, read_stride, every)
            .into_iter()
            .enumerate()
        {
            let bytes = damage.apply(&pristine);
            std::fs::write(file, &bytes).unwrap();
            let what = format!("{} {damage:?}", file.display());
            tally.damages += 1;
            read_only_paths(&store, &ids, &expected, &what, &mut tally);
            assert_eq!(
                std::fs::read(file).unwrap(),
                bytes,
                "{what}: a read changed it"
            );
            if n % writer_every == 0 {
                writer_open_on_a_copy(dir.path(), &store_dir, &ids, &expected, &what, &mut tally);
            }
        }
        std::fs::write(file, &pristine).unwrap();
    }
    assert!(tally.refused > 0, "the sweep found damage");
    eprintln!(
        "sweep: {} files, {bytes_swept} bytes, {} damages (flips and cuts), {} writer opens on \
         copies, {} refused reads",
        files.len(),
        tally.damages,
        tally.writer_opens,
        tally.refused
    );
}

/// The read-only paths, in place (they change no file): a follower and an inspection of
/// each session.
fn read_only_paths(
    store: &Store,
    ids: &[&str],
    expected: &BTreeMap<&str, Contents>,
    what: &str,
    tally: &mut Tally,
) {
    for &id in ids {
        match store.follow(id) {
            Ok(follower) => tally.refused += check_log(follower.log(), &expected[id], what),
            Err(error) => {
                assert_error(&error, what);
                tally.refused += 1;
            }
        }
        match store.inspect(id) {
            Ok(session) => tally.refused += check(&session, &expected[id], what),
            Err(error) => {
                assert_error(&error, what);
                tally.refused += 1;
            }
        }
    }
}

/// A writer's open of each session, on a copy of the damaged store (it may repair).
fn writer_open_on_a_copy(
    scratch: &Path,
    store_dir: &Path,
    ids: &[&str],
    expected: &BTreeMap<&str, Contents>,
    what: &str,
    tally: &mut Tally,
) {
    tally.writer_opens += 1;
    let copy = scratch.join("copy");
    copy_dir(store_dir, &copy);
    let copied = Store::open_or_create(&copy, store_options()).unwrap();
    for &id in ids {
        match copied.open_session(id) {
            Ok((session, _)) => tally.refused += check(&session, &expected[id], what),
            Err(error) => {
                assert_error(&error, what);
                tally.refused += 1;
            }
        }
    }
    drop(copied);
    std::fs::remove_dir_all(&copy).unwrap();
}

/// Issue 13: the store's identity file `STORE` and a session's `header.json`, flipped and
/// cut. `header.json` carries no checksum (STORE-4), so a flip inside one of its values
/// can go unseen: what is checked is that nothing panics, every refusal carries its code,
/// and the log's events read back unchanged whenever the session opens.
#[test]
fn a_damaged_store_identity_or_header_is_refused_or_harmless() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    let store = Store::open_or_create(&store_dir, store_options()).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    workload(&mut session, 2);
    session.close().unwrap();
    let expected = contents(&store.inspect("s").unwrap());
    drop(store);
    let every = std::env::var("SURFACELOG_SWEEP_STRIDE").is_ok_and(|s| s == "1");
    let mut refusals = BTreeMap::<String, usize>::new();
    let mut damages_done = 0;
    for file in [
        store_dir.join("STORE"),
        store_dir.join("sessions/s/header.json"),
    ] {
        let pristine = std::fs::read(&file).unwrap();
        for damage in damages(&pristine, 1, every) {
            std::fs::write(&file, damage.apply(&pristine)).unwrap();
            damages_done += 1;
            let what = format!("{} {damage:?}", file.display());
            let outcome = Store::open_or_create(&store_dir, store_options()).and_then(|store| {
                let inspected = store.inspect("s")?;
                assert_eq!(
                    contents(&inspected),
                    expected,
                    "{what}: the log reads the same"
                );
                drop(inspected);
                let (opened, _) = store.open_session("s")?;
                assert_eq!(opened.seq_next(), expected.events.len() as u64, "{what}");
                Ok(())
            });
            if let Err(error) = outcome {
                let code = error.code().to_owned();
                assert!(
                    matches!(
                        code.as_str(),
                        "CORRUPT" | "FORMAT_VERSION" | "HEADER_INVALID" | "SESSION_NOT_FOUND"
                    ),
                    "{what}: {error}"
                );
                *refusals.entry(code).or_default() += 1;
            }
        }
        std::fs::write(&file, &pristine).unwrap();
    }
    assert!(!refusals.is_empty(), "damage was refused somewhere");
    eprintln!("identity and header sweep: {damages_done} damages, refusals {refusals:?}");
}
