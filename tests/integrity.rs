//! Issue 11: no read skips, shortens or invents data. Each test damages a stored session
//! the way the issue found it and checks that every read path (the library, and the
//! command line where it applies) reports the damage as an error naming the file and the
//! offset, instead of returning fewer messages, an empty list or a shorter log.

use std::path::{Path, PathBuf};
#[cfg(feature = "cli")]
use std::process::Output;

use surfacelog::internals::event::EventSource;
use surfacelog::internals::log::{Durability, LogReader};
use surfacelog::internals::session::{Prune, Session, SessionLog};
use surfacelog::internals::store::{Store, StoreOptions};

mod common;

use common::closed_turn;
#[cfg(feature = "cli")]
use common::surfacelog;
#[cfg(feature = "cli")]
use common::{turn_start, user_message};

fn store_options() -> StoreOptions {
    common::store_options(Durability::Sync, 64 << 10)
}

/// One closed turn: a user message naming `text`, a tool call and its result. Returns the
/// seq of the tool result.
fn turn<L: SessionLog>(session: &mut Session<L>, turn: u64, text: &str) -> u64 {
    closed_turn(session, turn, text, &format!("output of c{turn}")).result
}

/// A closed session `s` of three turns, the second naming "Add a test for json.rs", with
/// a prune (a replace) of the first turn's tool result. Returns the store's directory.
fn closed_session() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_or_create(dir.path(), store_options()).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    let first_result = turn(&mut session, 1, "first question");
    turn(&mut session, 2, "Add a test for json.rs");
    turn(&mut session, 3, "third question");
    session
        .prune(&Prune {
            seq: first_result,
            content: r#"[{"type":"text","text":"pruned output"}]"#,
            shadowed_token_count: 3,
        })
        .unwrap();
    turn(&mut session, 4, "fourth question");
    session.close().unwrap();
    (dir, store)
}

fn segment_of(store: &Path) -> PathBuf {
    store.join("sessions/s/log/00000000000000000000.seg")
}

/// A [`closed_session`] with one byte flipped inside `needle` in its segment; returns
/// the segment too.
fn flipped_session(needle: &[u8]) -> (tempfile::TempDir, Store, PathBuf) {
    let (dir, store) = closed_session();
    let segment = segment_of(dir.path());
    flip_inside(&segment, needle);
    (dir, store, segment)
}

/// Flips one byte inside the first occurrence of `needle` in `file`; returns its offset.
fn flip_inside(file: &Path, needle: &[u8]) -> usize {
    let mut bytes = std::fs::read(file).unwrap();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("the text is stored")
        + needle.len() / 2;
    bytes[at] ^= 0x20;
    std::fs::write(file, &bytes).unwrap();
    at
}

/// The arguments of `surfacelog export s` to DSH JSONL in `out`, from the store `store`.
#[cfg(feature = "cli")]
fn export_args<'a>(out: &'a Path, store: &'a str) -> Vec<&'a str> {
    vec![
        "export",
        "s",
        "--format",
        "dsh-jsonl",
        "--out",
        out.to_str().unwrap(),
        "--store",
        store,
    ]
}

/// The command failed with `error[CORRUPT]` naming `file` and an offset.
#[cfg(feature = "cli")]
fn assert_cli_corrupt(output: &Output, file: &Path) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "stderr: {stderr}");
    assert!(stderr.contains("error[CORRUPT]"), "{stderr}");
    assert!(stderr.contains(file.to_str().unwrap()), "{stderr}");
    assert!(stderr.contains("offset="), "{stderr}");
}

fn assert_corrupt(error: &surfacelog::Error, file: &Path) {
    assert_eq!(error.code(), "CORRUPT", "{error}");
    let text = error.to_string();
    assert!(text.contains(file.to_str().unwrap()), "{text}");
    assert!(text.contains("offset="), "{text}");
}

#[test]
fn issue_11_a_damaged_surface_message_is_an_error_never_a_shorter_list() {
    let (dir, store) = closed_session();
    let (session, _) = store.open_session("s").unwrap();
    let before: Vec<(u64, String)> = session
        .messages()
        .unwrap()
        .iter()
        .map(|m| (m.seq, m.json.to_owned()))
        .collect();
    let transcript = session.transcript().unwrap();
    drop(session);
    let segment = segment_of(dir.path());
    flip_inside(&segment, b"Add a test for json.rs");

    // A writer's open (the index and the checkpoint vouch for the record, so it is read
    // lazily), and a read-only inspection: every view over the record is an error.
    let (mut session, _) = store.open_session("s").unwrap();
    assert_corrupt(&session.messages().unwrap_err(), &segment);
    assert_corrupt(&session.transcript().unwrap_err(), &segment);
    let last = session.seq_next() - 1;
    assert_corrupt(&session.as_of(last).unwrap_err(), &segment);
    // A prune of a node whose record is damaged is refused, never a panic.
    let damaged = before
        .iter()
        .find(|(_, json)| json.contains("Add a test for json.rs"))
        .unwrap()
        .0;
    let error = session
        .prune(&Prune {
            seq: damaged,
            content: "[]",
            shadowed_token_count: 1,
        })
        .unwrap_err();
    assert_corrupt(&error, &segment);
    assert_corrupt(&session.event(damaged).unwrap_err(), &segment);
    assert!(
        session.event(session.seq_next()).unwrap().is_none(),
        "past the end is None"
    );
    drop(session);
    let inspected = store.inspect("s").unwrap();
    assert_corrupt(&inspected.messages().unwrap_err(), &segment);
    assert!(transcript.contains(&damaged));
    assert_corrupt(&inspected.transcript().unwrap_err(), &segment);
    drop(inspected);

    // The CLI reads the same way (the `cli` feature).
    #[cfg(feature = "cli")]
    {
        let out = dir.path().join("out.jsonl");
        let store_arg = dir.path().to_str().unwrap();
        for args in [
            vec!["show", "s", "--json", "--store", store_arg],
            vec!["show", "s", "--store", store_arg],
            export_args(&out, store_arg),
        ] {
            assert_cli_corrupt(&surfacelog(&args), &segment);
        }
        assert!(!out.exists(), "a refused export writes nothing");
    }
}

#[test]
fn issue_11_a_damaged_replace_is_an_error_never_an_empty_history() {
    // The directory is removed when `_dir` drops, at the end.
    let (_dir, store, segment) = flipped_session(b"pruned output");
    let inspected = store.inspect("s").unwrap();
    assert_corrupt(&inspected.replacements().unwrap_err(), &segment);
    drop(inspected);
    // The CLI reads the same way (the `cli` feature).
    #[cfg(feature = "cli")]
    {
        let output = surfacelog(&[
            "show",
            "s",
            "--json",
            "--store",
            store.dir().to_str().unwrap(),
        ]);
        assert_cli_corrupt(&output, &segment);
    }
}

/// Damage in the middle of the last segment, past any index (the index is removed, as a
/// crash before close leaves it): a reader does not take it for the end of the log.
#[test]
fn issue_11_mid_log_damage_is_corrupt_for_every_reader_not_the_end() {
    let (dir, store) = closed_session();
    let log = dir.path().join("sessions/s/log");
    std::fs::remove_file(log.join("00000000000000000000.idx")).unwrap();
    std::fs::remove_file(dir.path().join("sessions/s/checkpoint")).unwrap();
    let segment = segment_of(dir.path());
    let pristine = std::fs::read(&segment).unwrap();
    flip_inside(&segment, b"Add a test for json.rs");

    assert_corrupt(&LogReader::open(&log).unwrap_err(), &segment);
    assert_corrupt(&store.inspect("s").unwrap_err(), &segment);
    assert_corrupt(&store.follow("s").unwrap_err(), &segment);
    // The CLI reads the same way (the `cli` feature).
    #[cfg(feature = "cli")]
    {
        let out = dir.path().join("out.jsonl");
        let store_arg = dir.path().to_str().unwrap();
        for args in [
            vec!["show", "s", "--json", "--store", store_arg],
            export_args(&out, store_arg),
            vec!["wait", "s", "0", "--store", store_arg],
        ] {
            assert_cli_corrupt(&surfacelog(&args), &segment);
        }
        assert!(!out.exists(), "a refused export writes nothing");
    }
    let mut now = std::fs::read(&segment).unwrap();
    let at = flip_inside_bytes(&mut now, b"Add a test for json.rs");
    now[at] ^= 0x20;
    assert_eq!(now, pristine, "no read path changed the segment");
    // Only a writer recovers, and with no durable mark left (no index, no checkpoint) the
    // damage is past the last point known durable: the tail is moved into quarantine,
    // byte for byte, never deleted (log-format.md RCV-4, RCV-12).
    let damaged = std::fs::read(&segment).unwrap();
    let (session, opened) = store.open_session("s").unwrap();
    let torn = opened
        .log
        .torn_tail
        .expect("the tail is set aside and reported");
    let start = usize::try_from(torn.offset).unwrap();
    let len = usize::try_from(torn.bytes).unwrap();
    assert_eq!(
        std::fs::read(&torn.quarantine).unwrap(),
        damaged[start..start + len],
        "the quarantine holds the bytes set aside"
    );
    assert_eq!(
        session.seq_next(),
        session.first_live_seq() + opened.closers
    );
}

fn flip_inside_bytes(bytes: &mut [u8], needle: &[u8]) -> usize {
    let mut flipped = needle.to_vec();
    flipped[needle.len() / 2] ^= 0x20;
    bytes
        .windows(needle.len())
        .position(|w| w == flipped.as_slice())
        .expect("the flipped text is there")
        + needle.len() / 2
}

/// Read-only paths never repair: an interrupted turn is exported exactly as stored, and
/// a session whose writer is live is refused unless its committed prefix is asked for.
#[cfg(feature = "cli")]
#[test]
fn issue_11_export_writes_exactly_the_stored_events_and_refuses_a_live_writer() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_or_create(dir.path(), store_options()).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    turn(&mut session, 1, "closed turn");
    turn_start(&mut session, 2);
    user_message(&mut session, "interrupted");
    let stored = session.seq_next();
    session.flush().unwrap();
    let store_arg = dir.path().to_str().unwrap();
    let out = dir.path().join("live.jsonl");
    let export = |out: &Path, extra: &[&str]| {
        let mut args = vec!["export", "s", "--format", "dsh-jsonl", "--no-pack"];
        args.extend(["--out", out.to_str().unwrap(), "--store", store_arg]);
        args.extend(extra);
        surfacelog(&args)
    };
    // The writer is live (this process holds the lock).
    let refused = export(&out, &[]);
    assert_eq!(refused.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("error[LOCKED]"));
    assert!(!out.exists());
    let prefix = export(&out, &["--committed-prefix"]);
    assert!(
        prefix.status.success(),
        "{}",
        String::from_utf8_lossy(&prefix.stderr)
    );
    let lines = std::fs::read_to_string(&out).unwrap().lines().count() as u64;
    assert_eq!(
        lines,
        1 + stored,
        "the header, then exactly the stored events"
    );
    // Dropped without close: the turn stays open on disk. Export still invents nothing.
    drop(session);
    let closed = dir.path().join("closed.jsonl");
    let output = export(&closed, &[]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&closed).unwrap();
    assert_eq!(text.lines().count() as u64, 1 + stored);
    assert!(
        !text.contains(r#""reason":{"kind":"interrupted"}"#),
        "no closer is invented: {text}"
    );
    let mut inspected = store.inspect("s").unwrap();
    assert_eq!(inspected.seq_next(), stored, "inspect invents nothing");
    // Asked explicitly, an inspected session repairs in memory only (contract §8).
    assert_eq!(inspected.repair().unwrap(), 1, "the open turn's turn/end");
    assert_eq!(inspected.seq_next(), stored + 1);
    drop(inspected);
    let reread = store.inspect("s").unwrap();
    assert_eq!(reread.seq_next(), stored, "nothing was written");
    drop(reread);
    // Only a writer holding the lock repairs.
    let (_, opened) = store.open_session("s").unwrap();
    assert_eq!(opened.closers, 1);
}

/// Past the end and damaged are different outcomes for every source.
#[test]
fn issue_11_past_the_end_is_none_and_damage_is_an_error() {
    let (_dir, store, segment) = flipped_session(b"third question");
    let follower = store.follow("s").unwrap();
    let reader = follower.log();
    let seq_next = reader.seq_next();
    assert!(reader.event(seq_next).unwrap().is_none());
    let read: Vec<_> = reader.iter_from(0).collect();
    assert_eq!(
        read.len() as u64,
        seq_next,
        "an iteration does not stop at damage"
    );
    let errors: Vec<_> = read.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(errors.len(), 1);
    assert_corrupt(errors[0], &segment);
}

/// RCV-14 (found by the corruption sweep): a last segment cut to nothing reads like one
/// whose creation a crash cut short (RCV-7), so a follower took the log before it for the
/// whole log (43 of 48 events). The checkpoint is a durable mark for followers as for
/// `inspect` and `open`: all three refuse with `CORRUPT`, and the session is unchanged.
#[test]
fn issue_13_a_last_segment_cut_to_nothing_is_corrupt_for_a_follower_too() {
    let dir = tempfile::tempdir().unwrap();
    // Small segments: the session spans several, and its last one holds a few events.
    let options = common::store_options(Durability::Sync, 1 << 10);
    let store = Store::open_or_create(dir.path(), options.clone()).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    for n in 1..=4 {
        turn(&mut session, n, &format!("question {n}"));
    }
    session.close().unwrap();
    let log = dir.path().join("sessions/s/log");
    let mut segments = common::files_ending(&log, ".seg");
    segments.sort();
    assert!(segments.len() > 1, "{segments:?}");
    let last = segments.last().unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(last)
        .unwrap()
        .set_len(0)
        .unwrap();
    let before = std::fs::read_dir(&log).unwrap().count();
    for (what, outcome) in [
        ("follow", store.follow("s").map(drop)),
        ("inspect", store.inspect("s").map(drop)),
        ("open", store.open_session("s").map(drop)),
    ] {
        let error = outcome.expect_err(what);
        assert_eq!(error.code(), "CORRUPT", "{what}: {error}");
    }
    assert_eq!(
        std::fs::read_dir(&log).unwrap().count(),
        before,
        "nothing changed"
    );
    assert_eq!(std::fs::metadata(last).unwrap().len(), 0);
}

/// RCV-14: a checkpoint that is there but cannot be opened (`EACCES`, `EIO`, here an
/// injected `EACCES` on each open for reading in turn) is an `IO` error, never taken for a missing one:
/// with the log's last segment gone, a writer's open would otherwise append closers at the
/// seqs of the lost events, and a reader would return a shorter log. Every open of each
/// path is failed in turn: each result is `CORRUPT` (the loss found through the checkpoint)
/// or `IO`, never a session.
#[test]
fn an_unreadable_checkpoint_is_an_error_never_a_missing_one() {
    use std::sync::Arc;
    use surfacelog::internals::log::LogOptions;
    use surfacelog::internals::storage::faulty::FaultyStorage;
    let (dir, _store, _) = several_segments();
    let log = dir.path().join("sessions/s/log");
    let last = common::files_ending(&log, ".seg").pop().unwrap();
    assert_ne!(
        last,
        segment_of(dir.path()),
        "a session of several segments"
    );
    std::fs::remove_file(&last).unwrap();
    let storage = FaultyStorage::default();
    let faults = Arc::clone(&storage.faults);
    let faulty = Store::open_or_create(
        dir.path(),
        store_options().segment_bytes(4096).log_options(LogOptions {
            storage: Arc::new(storage),
            ..common::log_options(Durability::Sync, 4096)
        }),
    )
    .unwrap();
    let listing = snapshot(dir.path());
    let (mut io, mut corrupt) = (0, 0);
    for n in 1..=8 {
        let mut tally = |what: &str, result: surfacelog::Result<u64>| match result {
            Ok(seq_next) => panic!("{what} with open {n} failed: a session of {seq_next} events"),
            Err(error) if error.code() == "IO" => io += 1,
            Err(error) => {
                assert_eq!(error.code(), "CORRUPT", "{what}, open {n}: {error}");
                corrupt += 1;
            }
        };
        faults.fail_open_read(n);
        tally("inspect", faulty.inspect("s").map(|s| s.seq_next()));
        faults.fail_open_read(n);
        tally("follow", faulty.follow("s").map(|f| f.log().seq_next()));
        assert_eq!(
            snapshot(dir.path()),
            listing,
            "read-only paths changed nothing"
        );
        faults.fail_open_read(n);
        tally("open", faulty.open_session("s").map(|(s, _)| s.seq_next()));
    }
    assert!(io > 0 && corrupt > 0, "{io} IO, {corrupt} CORRUPT");
}

/// Every file under `dir` with its bytes, sorted: what a read-only path must leave alone.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                files.push((path, bytes));
            }
        }
    }
    files.sort();
    files
}

/// RCV-7, SEG-6, RCV-13: a last segment whose header does not check out is taken for one
/// whose creation a crash cut short only when nothing says it held records. With the
/// checkpoint and the pack gone (no durable mark above the log), a last segment cut to 63
/// bytes (a length no creation leaves) or zeroed whole while its index lists its records
/// is damage: every reader and a writer's open refuse it with `CORRUPT` naming it, and the
/// writer removes nothing. One zeroed at its creation length with no index is still the
/// torn creation RCV-7 removes.
#[test]
fn a_damaged_last_segment_is_never_taken_for_an_unborn_one() {
    let (dir, store, stored) = several_segments();
    let session_dir = dir.path().join("sessions/s");
    for cache in ["checkpoint", "messages"] {
        let _ = std::fs::remove_file(session_dir.join(cache));
    }
    let log = session_dir.join("log");
    let last = common::files_ending(&log, ".seg").pop().unwrap();
    let index = last.with_extension("idx");
    assert!(index.exists(), "closing wrote the last segment's index");
    let original = std::fs::read(&last).unwrap();
    let damages: [(&str, Vec<u8>); 2] = [
        ("cut to 63 bytes", original[..63].to_vec()),
        (
            "zeroed, its index listing its records",
            vec![0; original.len()],
        ),
    ];
    for (what, bytes) in damages {
        std::fs::write(&last, &bytes).unwrap();
        let before = snapshot(dir.path());
        let named = |error: surfacelog::Error, path: &str| {
            assert_eq!(error.code(), "CORRUPT", "{what}, {path}: {error}");
            assert!(
                error.to_string().contains(&last.display().to_string()),
                "{what}, {path}: {error}"
            );
        };
        named(LogReader::open(&log).map(|_| ()).unwrap_err(), "LogReader");
        named(store.inspect("s").map(|_| ()).unwrap_err(), "inspect");
        named(store.follow("s").map(|_| ()).unwrap_err(), "follow");
        named(store.open_session("s").map(|_| ()).unwrap_err(), "open");
        assert_eq!(
            snapshot(dir.path()),
            before,
            "{what}: nothing removed or written"
        );
    }
    // A torn creation: the file as long as its creation made it, zeros, and no index.
    std::fs::remove_file(&index).unwrap();
    std::fs::write(&last, vec![0; original.len()]).unwrap();
    let first = last
        .file_stem()
        .and_then(|stem| stem.to_str())
        .and_then(|stem| stem.parse::<u64>().ok())
        .unwrap();
    let reader = LogReader::open(&log).unwrap();
    assert_eq!(reader.seq_next(), first, "read up to the torn creation");
    drop(reader);
    let (session, report) = store.open_session("s").unwrap();
    assert_eq!(report.log.removed_segment.as_deref(), Some(last.as_path()));
    assert!(session.seq_next() >= first && first < stored);
}

/// RD-8: a read that fails while a sealed segment's records are found (its index gone,
/// so it is scanned) is `IO`, and a later read of the same reader tries again: the
/// failure is never kept as damage. Every open of the reader's first access is failed in
/// turn.
#[test]
fn a_failed_scan_is_io_and_the_next_read_tries_again() {
    use std::sync::Arc;
    use surfacelog::internals::storage::faulty::FaultyStorage;
    let (dir, _store, _) = several_segments();
    let log = dir.path().join("sessions/s/log");
    let segments = common::files_ending(&log, ".seg");
    let second = &segments[1];
    std::fs::remove_file(second.with_extension("idx")).unwrap();
    let first_seq: u64 = second
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let expected = LogReader::open(&log)
        .unwrap()
        .event(first_seq + 1)
        .unwrap()
        .unwrap()
        .text()
        .into_owned();
    let mut failed = 0;
    for n in 1..=6 {
        let storage = FaultyStorage::default();
        let faults = Arc::clone(&storage.faults);
        let reader = LogReader::open_with(&log, Arc::new(storage)).unwrap();
        faults.fail_open(n);
        match reader.event(first_seq + 1) {
            Ok(event) => assert_eq!(event.unwrap().text(), expected, "open {n}"),
            Err(error) => {
                assert_eq!(error.code(), "IO", "open {n}: {error}");
                failed += 1;
            }
        }
        let again = reader
            .event(first_seq + 1)
            .unwrap_or_else(|e| panic!("open {n}, again: {e}"));
        assert_eq!(again.unwrap().text(), expected, "open {n}, again");
    }
    assert!(failed > 0, "a failure was met");
}

/// SLV-2a: salvage mends a segment file of a length SEG-6 does not allow, which every open
/// refuses for the last segment (SEG-8): extended by a zero byte, the last segment or a sealed one keeps every
/// event and is rewritten at an allowed length; cut inside its records, the last one keeps
/// the records before the cut. Afterwards the session opens and takes appends.
#[test]
fn slv_2a_salvage_mends_a_segment_of_a_length_no_writer_gives() {
    let build = || {
        let (dir, store, stored) = several_segments();
        let segments = common::files_ending(&dir.path().join("sessions/s/log"), ".seg");
        (dir, store, stored, segments)
    };
    for (what, pick_last, cut) in [
        ("the last segment extended", true, false),
        ("a sealed segment extended", false, false),
        ("the last segment cut inside its records", true, true),
    ] {
        // A sealed segment's length is not checked by reads (its records are); the last
        // one's is, at every open.
        let refused = pick_last;
        let (_dir, store, stored, segments) = build();
        let path = if pick_last {
            segments.last().unwrap()
        } else {
            &segments[1]
        };
        let mut bytes = std::fs::read(path).unwrap();
        if cut {
            bytes.truncate(200);
        } else {
            bytes.push(0);
        }
        std::fs::write(path, &bytes).unwrap();
        // Refused by every open, or by the first read into a sealed segment.
        let read_all = |store: &Store| -> surfacelog::Result<()> {
            let (session, _) = store.open_session("s")?;
            for seq in 0..session.seq_next() {
                session.log().event(seq)?;
            }
            Ok(())
        };
        if refused {
            let error = read_all(&store)
                .err()
                .unwrap_or_else(|| panic!("{what}: read whole"));
            assert_eq!(error.code(), "CORRUPT", "{what}: {error}");
        }
        let report = store.salvage("s").unwrap();
        assert_eq!(report.log.resized.is_empty(), cut, "{what}: {report:?}");
        let (mut session, _) = store
            .open_session("s")
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        if cut {
            assert!(session.seq_next() < stored, "{what}");
            assert!(report.log.first_lost_seq.is_some(), "{what}");
        } else {
            assert_eq!(session.seq_next(), stored, "{what}: every event kept");
            assert!(report.log.set_aside.is_empty(), "{what}");
        }
        common::turn_start(&mut session, 99);
        session.close().unwrap();
        read_all(&store).unwrap_or_else(|e| panic!("{what}: {e}"));
        let again = store.salvage("s").unwrap();
        assert!(
            again.log.resized.is_empty() && again.log.set_aside.is_empty(),
            "{what}"
        );
    }
}

/// RCV-7, SEG-6: a zeroed last segment longer than any creation leaves (more than 64 KiB,
/// and not the capacity an earlier build would have created it at) is damage even with
/// no index: its records were being written, so its header had been.
#[test]
fn a_zeroed_grown_last_segment_is_damage_without_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let options = common::store_options(Durability::Manual, 256 << 10);
    let store = Store::open_or_create(dir.path(), options).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    let log = dir.path().join("sessions/s/log");
    let mut n = 0;
    while common::files_ending(&log, ".seg").len() < 2
        || std::fs::metadata(common::files_ending(&log, ".seg").pop().unwrap())
            .unwrap()
            .len()
            <= 64 << 10
    {
        n += 1;
        turn(
            &mut session,
            n,
            &format!("question {n} {}", "x".repeat(1000)),
        );
    }
    session.close().unwrap();
    for cache in ["checkpoint", "messages"] {
        let _ = std::fs::remove_file(dir.path().join("sessions/s").join(cache));
    }
    let last = common::files_ending(&log, ".seg").pop().unwrap();
    std::fs::remove_file(last.with_extension("idx")).unwrap();
    let len = std::fs::metadata(&last).unwrap().len();
    assert!(len > 64 << 10 && len < 256 << 10, "{len}");
    std::fs::write(&last, vec![0; usize::try_from(len).unwrap()]).unwrap();
    let before = snapshot(dir.path());
    for error in [
        LogReader::open(&log).map(|_| ()).unwrap_err(),
        store.open_session("s").map(|_| ()).unwrap_err(),
    ] {
        assert_eq!(error.code(), "CORRUPT", "{error}");
        assert!(
            error.to_string().contains(&last.display().to_string()),
            "{error}"
        );
    }
    assert_eq!(snapshot(dir.path()), before, "nothing removed");
}

/// A closed session `s` of 12 turns in segments of 4 KiB (several of them), and how many
/// events it holds.
fn several_segments() -> (tempfile::TempDir, Store, u64) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_or_create(dir.path(), store_options().segment_bytes(4096)).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    for n in 1..=12 {
        turn(
            &mut session,
            n,
            &format!("question {n} {}", "x".repeat(200)),
        );
    }
    let stored = session.seq_next();
    session.close().unwrap();
    (dir, store, stored)
}

/// Turns of [`many_windows`]: 3 nodes each, so 4,500 nodes, more than the four windows of
/// 1,024 nodes that a read of every message reads ahead first (RD-9).
const MANY_TURNS: u64 = 1_500;

/// [`MANY_TURNS`] numbered turns; after every third, the tool result of the turn ten
/// turns before is pruned: each prune's node takes the place of the result it replaces,
/// so the surface lists later seqs before earlier ones.
fn many_windows<L: SessionLog>(session: &mut Session<L>) {
    let mut results = Vec::new();
    for turn in 1..=MANY_TURNS {
        results.push(common::numbered_turn(session, turn).result);
        if turn % 3 == 0
            && let Some(&earlier) = results.len().checked_sub(11).and_then(|i| results.get(i))
        {
            common::prune_to_empty(session, earlier);
        }
    }
}

/// A closed session `s` of [`many_windows`] over segments of 64 KiB, without a message
/// pack (every message is read from its record), and the same session kept in memory.
fn many_windows_session() -> (
    tempfile::TempDir,
    Store,
    Session<surfacelog::internals::event::MemLog>,
) {
    let dir = tempfile::tempdir().unwrap();
    let options = common::store_options(Durability::Manual, 64 << 10)
        .message_pack(0)
        .checkpoint_every(1 << 20);
    let store = Store::open_or_create(dir.path(), options.clone()).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    many_windows(&mut session);
    session.close().unwrap();
    let mut memory = Session::in_memory("s", &options).unwrap();
    many_windows(&mut memory);
    (dir, store, memory)
}

/// RD-9: the messages read ahead window by window, from records over many segments, are
/// the ones the same session kept in memory derives, in the same (surface) order, also
/// where a replace puts a later seq first; `each_message` visits them in that order.
#[test]
fn rd_9_messages_read_ahead_keep_surface_order_across_windows_and_segments() {
    let (dir, store, memory) = many_windows_session();
    let segments = common::files_ending(&dir.path().join("sessions/s/log"), ".seg");
    assert!(segments.len() > 10, "{} segments", segments.len());
    let expected = common::messages_of(&memory);
    assert!(expected.len() > 4 * 1024, "{} messages", expected.len());
    assert!(
        !expected.is_sorted_by_key(|(seq, _)| *seq),
        "replaces put later seqs first"
    );
    let (session, _) = store.open_session("s").unwrap();
    assert_eq!(common::messages_of(&session), expected);
    let mut visited = Vec::new();
    session
        .each_message(|m| visited.push((m.seq, m.json.to_owned())))
        .unwrap();
    assert_eq!(visited, expected);
    drop(session);
    let inspected = store.inspect("s").unwrap();
    let read: Vec<(u64, String)> = inspected
        .messages()
        .unwrap()
        .iter()
        .map(|m| (m.seq, m.json.to_owned()))
        .collect();
    assert_eq!(read, expected);
}

/// RD-9, RD-7: a damaged message record in a window read ahead late in the read (past the
/// first windows, in a later segment) is `CORRUPT` naming its segment and offset, and
/// `each_message` has visited exactly the messages before it in surface order.
#[test]
fn rd_9_a_damaged_record_read_ahead_is_an_error_after_the_messages_before_it() {
    let (dir, store, memory) = many_windows_session();
    let expected = common::messages_of(&memory);
    let needle = br#""u1400""#;
    let damaged = expected
        .iter()
        .position(|(_, json)| json.contains(r#""u1400""#))
        .unwrap();
    assert!(
        damaged > 4 * 1024,
        "past the first windows read ahead: {damaged}"
    );
    let segment = common::files_ending(&dir.path().join("sessions/s/log"), ".seg")
        .into_iter()
        .find(|path| {
            let bytes = std::fs::read(path).unwrap();
            bytes.windows(needle.len()).any(|w| w == needle)
        })
        .unwrap();
    flip_inside(&segment, needle);
    let (session, _) = store.open_session("s").unwrap();
    assert_corrupt(&session.messages().unwrap_err(), &segment);
    let mut visited = Vec::new();
    let error = session
        .each_message(|m| visited.push((m.seq, m.json.to_owned())))
        .unwrap_err();
    assert_corrupt(&error, &segment);
    assert_eq!(visited, expected[..damaged]);
    drop(session);
    assert_corrupt(
        &store.inspect("s").unwrap().messages().unwrap_err(),
        &segment,
    );
}
