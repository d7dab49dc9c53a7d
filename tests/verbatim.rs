//! The verbatim store (`format-spec/verbatim-store.md`): events stored exactly as given
//! and read back unjudged, refusals that leave no trace, revisions, torn tails reported by
//! reads and dropped only by a repair, damage refused rather than shortened.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use surfacelog::VerbatimStore;
use surfacelog::internals::log::LogOptions;

fn small_segments(root: &Path) -> VerbatimStore {
    let options = LogOptions {
        segment_bytes: 2048,
        ..LogOptions::default()
    };
    VerbatimStore::with_options(root, options)
}

/// An event text as a DSH host might hand it over: any type, any data, key orders and
/// number spellings of its own. Where the payload becomes a key, it is prefixed so that
/// it never repeats one of the object's fixed keys (`"s"`, `"big"`): the store would
/// rightly refuse that text (`DATA_DUPLICATE_KEY`).
fn event(seq: u64, kind: u8, payload: &str) -> String {
    let key = quote(&format!("k{payload}"));
    let payload = quote(payload);
    match kind % 5 {
        0 => format!(
            r#"{{"type":"user/message","seq":{seq},"time":17,"data":{{"content":{payload}}}}}"#
        ),
        1 => format!(
            r#"{{"seq":{seq},"type":"future/kind","time":-3,"data":[1e+21,-0,0.1],"extra":{payload}}}"#
        ),
        2 => format!(
            r#"{{"type":"assistant/chunk","seq":{seq},"time":1700000000000,"data":{{"turn":1,"step":2,"chunk":{{"type":"text-delta","index":0,"text":{payload}}}}}}}"#
        ),
        3 => format!(r#"{{"type":"x","seq":{seq},"time":0,"ignorable":true}}"#),
        _ => format!(
            r#"{{"type":"tool/result","seq":{seq},"time":9007199254740991,"data":{{"big":123456789012345678901234567890,"s":"\ud800",{key}:null}}}}"#
        ),
    }
}

/// `text` as a JSON string.
fn quote(text: &str) -> String {
    use std::fmt::Write;
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn batch(first: u64, kinds: &[(u8, String)]) -> Vec<String> {
    kinds
        .iter()
        .enumerate()
        .map(|(i, (kind, payload))| event(first + i as u64, *kind, payload))
        .collect()
}

fn refs(texts: &[String]) -> Vec<&str> {
    texts.iter().map(String::as_str).collect()
}

fn array(texts: &[String]) -> String {
    format!("[{}]", texts.join(","))
}

/// Every file under `dir` with its bytes, to show that a read or a refusal changed nothing.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                files.push((path, bytes));
            }
        }
    }
    files.sort();
    files
}

mod common;

/// The last segment file of session `id`'s log.
fn last_segment(store: &VerbatimStore, id: &str) -> PathBuf {
    common::files_ending(&store.locate(id).join("log"), ".seg")
        .pop()
        .unwrap()
}

/// Writes a frame that was never completed after the last record: a torn tail.
fn tear(segment: &Path) -> usize {
    use std::os::unix::fs::FileExt;
    let bytes = std::fs::read(segment).unwrap();
    let end = bytes.iter().rposition(|b| *b != 0).map_or(64, |at| at + 1);
    let at = end.next_multiple_of(8);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(segment)
        .unwrap();
    file.write_all_at(&[200, 0, 0, 0, 0xAB, 0xCD, 0xEF, 0x01, 7, 7, 7], at as u64)
        .unwrap();
    file.sync_all().unwrap();
    at
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Whatever is appended, in whatever batches, reads back as exactly those texts; a
    /// suffix read is the suffix; the revision changes with every append and with nothing
    /// else; the logs span several segments.
    #[test]
    fn events_read_back_exactly_as_appended(
        batches in prop::collection::vec(
            prop::collection::vec((any::<u8>(), "\\PC{0,40}"), 1..12), 1..6),
        from in 0u64..80,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = small_segments(dir.path());
        let header = r#"{"version":99,"id":"s","cwd":"rel","unknown":[1,2]}"#;
        let mut all = batch(0, &batches[0]);
        store.create("s", header, &refs(&all)).unwrap();
        let mut revisions = vec![store.revision("s").unwrap().unwrap()];
        for kinds in &batches[1..] {
            let next = batch(all.len() as u64, kinds);
            store.append("s", all.len() as u64, &refs(&next)).unwrap();
            all.extend(next);
            let revision = store.revision("s").unwrap().unwrap();
            prop_assert!(!revisions.contains(&revision), "{revision} seen before");
            revisions.push(revision);
        }
        let read = store.load("s", 0).unwrap().unwrap();
        prop_assert_eq!(&read.header, header);
        prop_assert_eq!(&read.events, &array(&all));
        prop_assert_eq!(read.seq_next, all.len() as u64);
        prop_assert_eq!(&read.revision, revisions.last().unwrap());
        prop_assert_eq!(read.torn, None);
        let suffix = store.load("s", from).unwrap().unwrap();
        let skip = usize::try_from(from).unwrap().min(all.len());
        prop_assert_eq!(&suffix.events, &array(&all[skip..]));
        prop_assert_eq!(suffix.count, (all.len() - skip) as u64);
        prop_assert_eq!(&store.revision("s").unwrap().unwrap(), revisions.last().unwrap());
        let listed = store.list().unwrap();
        prop_assert_eq!(listed, vec![(header.to_owned(), revisions.last().unwrap().clone())]);
    }
}

/// VBT-3, VBT-4: the hooks store whatever event DSH's coordinator passes (DSH persistence
/// §3.3): a `type` that is missing, empty, not a string, not Unicode or longer than 256
/// bytes, and a `time` that is missing or not a safe integer are stored with the rest of
/// the text and read back byte for byte, and the events after them too (a live session's
/// durability never stalls, §1.7).
#[test]
fn vbt_4_an_envelope_only_the_reader_judges_is_stored_as_given() {
    let dir = tempfile::tempdir().unwrap();
    let store = VerbatimStore::new(dir.path());
    let long = format!(r#"{{"type":"ext/{}","seq":1,"time":1}}"#, "y".repeat(300));
    let events = [
        r#"{"type":"a","seq":0,"time":1}"#,
        &long,
        r#"{"type":"ext/\ud800","seq":2,"time":1}"#,
        r#"{"type":"","seq":3,"time":1}"#,
        r#"{"type":7,"seq":4,"time":1}"#,
        r#"{"seq":5,"time":1}"#,
        r#"{"type":"a","seq":6,"time":1.5}"#,
        r#"{"type":"a","seq":7,"time":9007199254740992}"#,
        r#"{"type":"a","seq":8}"#,
        r#"{"type":"turn/end","seq":9,"time":2,"data":{"turn":1}}"#,
    ];
    store.create("s", r#"{"id":"s"}"#, &events[..1]).unwrap();
    store.append("s", 1, &events[1..]).unwrap();
    let read = store.load("s", 0).unwrap().expect("stored");
    assert_eq!((read.count, read.seq_next), (10, 10));
    assert_eq!(read.events, format!("[{}]", events.join(",")));
}

/// VBT-4: a batch holding one event the store cannot hold is refused whole, with a code,
/// and leaves every file as it was.
#[test]
fn vbt_4_refused_batches_leave_no_trace() {
    let dir = tempfile::tempdir().unwrap();
    let store = VerbatimStore::new(dir.path());
    store
        .create("s", r#"{"id":"s"}"#, &[r#"{"type":"a","seq":0,"time":1}"#])
        .unwrap();
    let before = snapshot(dir.path());
    let good = r#"{"type":"a","seq":1,"time":1}"#;
    let cases: [(&str, &str); 5] = [
        (r#"{"type":"a","seq":2,"time":1"#, "DATA_INVALID_JSON"),
        (
            r#"{"type":"a","seq":2,"time":1,"time":2}"#,
            "DATA_DUPLICATE_KEY",
        ),
        (r"[1,2]", "ENVELOPE_INVALID"),
        (r#"{"type":"a","seq":3,"time":1}"#, "SEQ_NOT_CONTIGUOUS"),
        (r#"{"type":"a","time":1}"#, "SEQ_NOT_CONTIGUOUS"),
    ];
    for (bad, code) in cases {
        let error = store.append("s", 1, &[good, bad]).unwrap_err();
        assert_eq!(error.code(), code, "{bad}: {error}");
        assert_eq!(snapshot(dir.path()), before, "{bad}");
    }
    // A batch that does not start at the stored next seq names both.
    let error = store
        .append("s", 0, &[r#"{"type":"a","seq":0,"time":1}"#])
        .unwrap_err();
    assert_eq!(error.code(), "SEQ_NOT_CONTIGUOUS");
    assert!(
        error.to_string().contains("stored next seq is 1"),
        "{error}"
    );
    assert_eq!(snapshot(dir.path()), before);
    // Headers: a JSON object text, nothing else; a refused create leaves nothing.
    for header in [r"[1]", r#"{"id":"t""#, "{\"id\":\n\"t\"}"] {
        let error = store.create("t", header, &[good]).unwrap_err();
        assert_eq!(error.code(), "HEADER_INVALID", "{header}: {error}");
    }
    let error = store.create("t", r#"{"id":"t"}"#, &[good]).unwrap_err();
    assert_eq!(error.code(), "SEQ_NOT_CONTIGUOUS", "{error}");
    assert_eq!(store.load("t", 0).unwrap(), None);
    assert_eq!(
        std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
        0
    );
    assert_eq!(store.list().unwrap().len(), 1);
}

/// VBT-5: a session is created once; creating it again is refused and changes nothing.
#[test]
fn vbt_5_create_never_replaces_a_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = VerbatimStore::new(dir.path());
    let first = [r#"{"type":"a","seq":0,"time":1}"#];
    store.create("s", r#"{"id":"s","n":1}"#, &first).unwrap();
    let before = snapshot(dir.path());
    let error = store
        .create("s", r#"{"id":"s","n":2}"#, &first)
        .unwrap_err();
    assert_eq!(error.code(), "SESSION_EXISTS");
    assert_eq!(snapshot(dir.path()), before);
    assert_eq!(
        store.load("s", 0).unwrap().unwrap().header,
        r#"{"id":"s","n":1}"#
    );
    // Absent sessions are absent, never errors; appends to them are refused.
    assert_eq!(store.revision("nope").unwrap(), None);
    let error = store.append("nope", 0, &first).unwrap_err();
    assert_eq!(error.code(), "SESSION_NOT_FOUND");
    assert_eq!(
        store.create("", "{}", &first).unwrap_err().code(),
        "INVALID_ID"
    );
}

/// VBT-7, VBT-9: a torn tail is reported by reads, which change no byte; its revision says
/// so; a repair drops it (a truncate-only repair changes the revision too) and appends the
/// closers after the stored events.
#[test]
fn vbt_9_a_torn_tail_waits_for_a_repair() {
    let dir = tempfile::tempdir().unwrap();
    let store = VerbatimStore::new(dir.path());
    let events = [
        r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#,
        r#"{"type":"user/message","seq":1,"time":1,"data":{}}"#,
    ];
    store.create("s", r#"{"id":"s"}"#, &events).unwrap();
    let clean = store.revision("s").unwrap().unwrap();
    let at = tear(&last_segment(&store, "s"));
    let before = snapshot(dir.path());
    let read = store.load("s", 0).unwrap().unwrap();
    assert_eq!(read.count, 2);
    let (path, range) = read.torn.clone().expect("a torn tail");
    assert_eq!((path, range.start), (last_segment(&store, "s"), at));
    assert_eq!(read.revision, format!("{clean}:torn"));
    assert_eq!(store.revision("s").unwrap().unwrap(), read.revision);
    assert_eq!(store.list().unwrap()[0].1, read.revision);
    assert_eq!(snapshot(dir.path()), before, "reads changed a file");
    // Truncate-only repair.
    store.repair("s", &[]).unwrap();
    let repaired = store.load("s", 0).unwrap().unwrap();
    assert_eq!((repaired.torn, repaired.count), (None, 2));
    assert_eq!(repaired.revision, clean);
    assert_ne!(repaired.revision, read.revision);
    // Torn again, then repaired with closers.
    tear(&last_segment(&store, "s"));
    let closer =
        r#"{"type":"turn/end","seq":2,"time":2,"data":{"turn":1,"reason":{"kind":"interrupted"}}}"#;
    store.repair("s", &[closer]).unwrap();
    let closed = store.load("s", 0).unwrap().unwrap();
    assert_eq!(closed.torn, None);
    assert_eq!(
        closed.events,
        format!("[{},{},{closer}]", events[0], events[1])
    );
    assert_ne!(closed.revision, clean);
    // Closers must continue the stored events.
    let error = store.repair("s", &[closer]).unwrap_err();
    assert_eq!(error.code(), "SEQ_NOT_CONTIGUOUS");
}

/// Damage inside the stored events is refused with the file and offset, never read as a
/// shorter log; a damaged header too.
#[test]
fn damage_is_refused_not_shortened() {
    let dir = tempfile::tempdir().unwrap();
    let store = VerbatimStore::new(dir.path());
    let texts = batch(
        0,
        &[
            (0, "hello".to_owned()),
            (1, "world".to_owned()),
            (3, String::new()),
        ],
    );
    store.create("s", r#"{"id":"s"}"#, &refs(&texts)).unwrap();
    let segment = last_segment(&store, "s");
    let mut bytes = std::fs::read(&segment).unwrap();
    let at = bytes.windows(5).position(|w| w == b"hello").unwrap();
    bytes[at] ^= 0x20;
    std::fs::write(&segment, &bytes).unwrap();
    let error = store.load("s", 0).unwrap_err();
    assert_eq!(error.code(), "CORRUPT", "{error}");
    assert!(error.to_string().contains(".seg"), "{error}");
    // A listing reads headers and revisions, not events (VBT-10): lazy, not silent.
    assert_eq!(store.list().unwrap().len(), 1);
    let header = store.locate("s").join("dsh-header.json");
    std::fs::write(&header, "{\"id\":\"s\"").unwrap();
    let error = store.revision("s").unwrap_err();
    assert_eq!(error.code(), "CORRUPT", "{error}");
    assert!(error.to_string().contains("dsh-header.json"), "{error}");
    assert_eq!(store.list().unwrap_err().code(), "CORRUPT");
    std::fs::remove_file(&header).unwrap();
    assert_eq!(store.load("s", 0).unwrap_err().code(), "CORRUPT");
}

/// VBT-10: damage in one session's log, even in its last event (which its revision reads),
/// neither refuses a listing nor shortens it: that session is listed with a revision that
/// says so, the same at each listing, and its reads report the damage.
#[test]
fn vbt_10_a_listing_lists_a_session_whose_log_is_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let store = VerbatimStore::new(dir.path());
    for id in ["a", "b"] {
        let texts = batch(0, &[(0, "first".to_owned()), (1, format!("last of {id}"))]);
        store
            .create(id, &format!(r#"{{"id":"{id}"}}"#), &refs(&texts))
            .unwrap();
    }
    let clean = store.list().unwrap();
    let segment = last_segment(&store, "b");
    let mut bytes = std::fs::read(&segment).unwrap();
    let at = bytes.windows(9).position(|w| w == b"last of b").unwrap();
    bytes[at] ^= 0x20;
    std::fs::write(&segment, &bytes).unwrap();
    let listed = store.list().unwrap();
    assert_eq!(listed.len(), 2);
    let revision = |id: &str| {
        let header = format!(r#"{{"id":"{id}"}}"#);
        listed.iter().find(|(h, _)| *h == header).unwrap().1.clone()
    };
    assert_eq!(
        revision("a"),
        clean.iter().find(|(h, _)| h.contains("\"a\"")).unwrap().1
    );
    assert!(
        revision("b").starts_with("surfacelog:unreadable:"),
        "{}",
        revision("b")
    );
    assert_eq!(store.list().unwrap(), listed, "the same at each listing");
    assert_eq!(store.load("b", 0).unwrap_err().code(), "CORRUPT");
    assert_eq!(store.revision("b").unwrap_err().code(), "CORRUPT");
}

/// One writer at a time, across processes: an append while another writer holds the log
/// is `LOCKED` and writes nothing.
#[test]
fn one_writer_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = VerbatimStore::new(dir.path());
    store
        .create("s", r#"{"id":"s"}"#, &[r#"{"type":"a","seq":0,"time":1}"#])
        .unwrap();
    let log = store.locate("s").join("log");
    let (writer, _) =
        surfacelog::internals::log::LogWriter::open(&log, LogOptions::default()).unwrap();
    let error = store
        .append("s", 1, &[r#"{"type":"a","seq":1,"time":1}"#])
        .unwrap_err();
    assert_eq!(error.code(), "LOCKED");
    writer.close().unwrap();
    store
        .append("s", 1, &[r#"{"type":"a","seq":1,"time":1}"#])
        .unwrap();
    assert_eq!(store.load("s", 0).unwrap().unwrap().seq_next, 2);
}

/// VBT-6: a store closes the writers idle for a given time, releasing their locks, and
/// counts those that stay open; a store with a lock wait continues a session once another
/// store's writer lets go, and one without is refused `LOCKED` at once.
#[test]
fn vbt_6_idle_writers_are_closed_and_a_waiting_store_takes_over() {
    let dir = tempfile::tempdir().unwrap();
    let event = |seq: u64| format!(r#"{{"type":"a","seq":{seq},"time":1}}"#);
    let first = VerbatimStore::new(dir.path());
    for id in ["s", "t"] {
        first
            .create(id, &format!(r#"{{"id":"{id}"}}"#), &[&event(0)])
            .unwrap();
        first.append(id, 1, &[&event(1)]).unwrap();
    }
    assert_eq!(
        first
            .close_idle_writers(std::time::Duration::from_secs(3600))
            .unwrap(),
        2,
        "used just now: both stay open"
    );
    let impatient = VerbatimStore::new(dir.path());
    assert_eq!(
        impatient.append("s", 2, &[&event(2)]).unwrap_err().code(),
        "LOCKED"
    );
    let waiting = VerbatimStore::new(dir.path()).with_lock_wait(std::time::Duration::from_secs(30));
    std::thread::scope(|scope| {
        let taken = scope.spawn(|| waiting.append("s", 2, &[&event(2)]));
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!taken.is_finished(), "it waits for the lock");
        assert_eq!(
            first.close_idle_writers(std::time::Duration::ZERO).unwrap(),
            0
        );
        taken.join().unwrap().unwrap();
    });
    assert_eq!(waiting.load("s", 0).unwrap().unwrap().seq_next, 3);
    // The first store's next append finds the log moved on (VBT-6: refused, not merged).
    assert_eq!(
        first.append("s", 2, &[&event(2)]).unwrap_err().code(),
        "LOCKED"
    );
    waiting.close().unwrap();
    assert_eq!(
        first.append("s", 2, &[&event(2)]).unwrap_err().code(),
        "SEQ_NOT_CONTIGUOUS"
    );
    first.append("s", 3, &[&event(3)]).unwrap();
    first.close().unwrap();
}

/// VBT-6: a store keeps the writers of the 32 sessions it appended to last, holding their
/// locks until `close` or eviction; what they appended is durable and readable meanwhile.
#[test]
fn vbt_6_writers_are_kept_until_close_or_eviction() {
    use surfacelog::internals::log::LogWriter;
    let dir = tempfile::tempdir().unwrap();
    let store = VerbatimStore::new(dir.path());
    let event = |seq: u64| format!(r#"{{"type":"a","seq":{seq},"time":1}}"#);
    for n in 0..33 {
        let id = format!("s{n}");
        store
            .create(&id, &format!(r#"{{"id":"{id}"}}"#), &[&event(0)])
            .unwrap();
        store.append(&id, 1, &[&event(1)]).unwrap();
        assert_eq!(store.load(&id, 0).unwrap().unwrap().seq_next, 2);
    }
    let open = |id: &str| LogWriter::open(&store.locate(id).join("log"), LogOptions::default());
    // s0 was evicted (closed) when s32's writer was kept; s1 to s32 are held.
    let (writer, _) = open("s0").unwrap();
    writer.close().unwrap();
    assert_eq!(open("s1").unwrap_err().code(), "LOCKED");
    assert_eq!(open("s32").unwrap_err().code(), "LOCKED");
    // A second store over the same root is another writer.
    let other = VerbatimStore::new(dir.path());
    assert_eq!(
        other.append("s5", 2, &[&event(2)]).unwrap_err().code(),
        "LOCKED"
    );
    store.close().unwrap();
    other.append("s5", 2, &[&event(2)]).unwrap();
    other.close().unwrap();
    let (writer, _) = open("s32").unwrap();
    assert_eq!(writer.seq_next(), 2);
    writer.close().unwrap();
    assert_eq!(store.load("s5", 0).unwrap().unwrap().seq_next, 3);
}

/// VBT-7: a kept reader is refreshed at each read, so a read sees what another store (or
/// process) appended meanwhile, and a repair's closers after a torn tail.
#[test]
fn vbt_7_kept_readers_see_what_others_append() {
    let dir = tempfile::tempdir().unwrap();
    let reader = VerbatimStore::new(dir.path());
    let writer = small_segments(dir.path());
    let event = |seq: u64| {
        format!(
            r#"{{"type":"a","seq":{seq},"time":1,"data":"{}"}}"#,
            "x".repeat(300)
        )
    };
    writer.create("s", r#"{"id":"s"}"#, &[&event(0)]).unwrap();
    assert_eq!(reader.load("s", 0).unwrap().unwrap().count, 1);
    let mut expected = vec![event(0)];
    for seq in 1..40 {
        writer.append("s", seq, &[&event(seq)]).unwrap();
        expected.push(event(seq));
        let read = reader.load("s", 0).unwrap().unwrap();
        assert_eq!(read.events, array(&expected), "after seq {seq}");
        assert_eq!(Some(read.revision), writer.revision("s").unwrap());
    }
    writer.close().unwrap();
    tear(&last_segment(&writer, "s"));
    assert!(reader.load("s", 0).unwrap().unwrap().torn.is_some());
    writer.repair("s", &[&event(40)]).unwrap();
    expected.push(event(40));
    let read = reader.load("s", 0).unwrap().unwrap();
    assert_eq!((read.torn, read.events), (None, array(&expected)));
}

/// VBT-5: a creation removes the builds whose builders are gone (their lock files not held,
/// or missing), and leaves a build whose lock file is held, in whatever process.
#[test]
fn vbt_5_builds_of_dead_builders_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let store = VerbatimStore::new(dir.path());
    let event = r#"{"type":"a","seq":0,"time":1}"#;
    store.create("a", r#"{"id":"a"}"#, &[event]).unwrap();
    let tmp = dir.path().join("tmp");
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "a build or lock was left"
    );
    let build = |name: &str| {
        let path = tmp.join(name);
        std::fs::create_dir_all(path.join("log")).unwrap();
        std::fs::write(path.join("dsh-header.json"), "{}\n").unwrap();
        path
    };
    let unlocked = build("1-1-0");
    std::fs::write(tmp.join("1-1-0.lock"), b"").unwrap();
    let lockless = build("2-2-0");
    let running = build("3-3-0");
    let held = std::fs::File::create(tmp.join("3-3-0.lock")).unwrap();
    held.lock().unwrap();
    store.create("b", r#"{"id":"b"}"#, &[event]).unwrap();
    assert!(!unlocked.exists() && !tmp.join("1-1-0.lock").exists());
    assert!(!lockless.exists());
    assert!(running.exists(), "a running builder's build was removed");
    drop(held);
    store.create("c", r#"{"id":"c"}"#, &[event]).unwrap();
    assert!(!running.exists());
    assert_eq!(store.list().unwrap().len(), 3);
}

/// VBT-6, VBT-7: kept handles are used only while the session's directory is the one they
/// were opened in: a session removed behind the store's back is not found (never appended
/// to unlinked files), and one created again reads as itself, with a new revision.
#[test]
fn vbt_6_kept_handles_follow_the_directory_not_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = VerbatimStore::new(dir.path());
    let event = |seq: u64, n: u64| format!(r#"{{"type":"a","seq":{seq},"time":{n}}}"#);
    store.create("s", r#"{"gen":1}"#, &[&event(0, 1)]).unwrap();
    store.append("s", 1, &[&event(1, 1)]).unwrap(); // its writer is kept
    let old = store.load("s", 0).unwrap().unwrap(); // and its reader
    std::fs::remove_dir_all(store.locate("s")).unwrap();
    let error = store.append("s", 2, &[&event(2, 1)]).unwrap_err();
    assert_eq!(error.code(), "SESSION_NOT_FOUND", "{error}");
    assert_eq!(store.load("s", 0).unwrap(), None);
    assert_eq!(store.revision("s").unwrap(), None);
    let other = VerbatimStore::new(dir.path());
    other.create("s", r#"{"gen":2}"#, &[&event(0, 2)]).unwrap();
    let new = store.load("s", 0).unwrap().unwrap();
    assert_eq!(new.header, r#"{"gen":2}"#);
    assert_eq!(new.events, format!("[{}]", event(0, 2)));
    assert_ne!(new.revision, old.revision);
    assert_eq!(Some(new.revision), other.revision("s").unwrap());
    store.append("s", 1, &[&event(1, 2)]).unwrap();
    assert_eq!(other.load("s", 0).unwrap().unwrap().seq_next, 2);
}

/// VBT-6, VBT-7 under threads: appends to more sessions than the store keeps writers for,
/// from several threads at once, all land (no `LOCKED` from an eviction in progress), and
/// a revision read meanwhile never calls an append in progress a torn tail.
#[test]
fn vbt_6_concurrent_appends_and_reads() {
    let dir = tempfile::tempdir().unwrap();
    let store = VerbatimStore::new(dir.path());
    let sessions = 40;
    let rounds = 30;
    let event = |seq: u64| {
        format!(
            r#"{{"type":"a","seq":{seq},"time":1,"data":"{}"}}"#,
            "x".repeat(200)
        )
    };
    for n in 0..sessions {
        store.create(&format!("s{n}"), "{}", &[&event(0)]).unwrap();
    }
    std::thread::scope(|scope| {
        for t in 0..4 {
            let store = store.clone();
            scope.spawn(move || {
                for round in 1..=rounds {
                    for n in (t..sessions).step_by(4) {
                        store
                            .append(&format!("s{n}"), round, &[&event(round)])
                            .unwrap();
                    }
                }
            });
        }
        let store = store.clone();
        scope.spawn(move || {
            for _ in 0..200 {
                for n in 0..sessions {
                    if let Some(revision) = store.revision(&format!("s{n}")).unwrap() {
                        assert!(!revision.ends_with(":torn"), "{revision}");
                    }
                }
            }
        });
    });
    for n in 0..sessions {
        assert_eq!(
            store.load(&format!("s{n}"), 0).unwrap().unwrap().seq_next,
            rounds + 1
        );
    }
    store.close().unwrap();
}

/// [`snapshot`] without the indexes, caches a restore may remove (log-format IDX-2,
/// DUR-12), and with each segment's trailing zeros cut: a segment grows ahead of its
/// records (SEG-6) and keeps its length when they are taken back (SEG-8).
fn data_snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = snapshot(dir);
    files.retain(|(path, _)| path.extension().is_none_or(|e| e != "idx"));
    for (path, bytes) in &mut files {
        if path.extension().is_some_and(|e| e == "seg") {
            let end = bytes.iter().rposition(|b| *b != 0).map_or(0, |at| at + 1);
            bytes.truncate(end);
        }
    }
    files
}

/// A verbatim store over a filesystem whose writes and syncs fail as planned, with small
/// segments so that a batch spans several.
fn faulty_store(
    root: &Path,
) -> (
    VerbatimStore,
    std::sync::Arc<surfacelog::internals::storage::faulty::Faults>,
) {
    let storage = surfacelog::internals::storage::faulty::FaultyStorage::default();
    let faults = std::sync::Arc::clone(&storage.faults);
    let options = LogOptions {
        segment_bytes: 2048,
        storage: std::sync::Arc::new(storage),
        ..LogOptions::default()
    };
    (VerbatimStore::with_options(root, options), faults)
}

/// A batch of `n` events from seq `first`, each of about 150 bytes: a batch of 20 spans
/// two segments of 2,048 bytes.
fn sized_batch(first: u64, n: usize) -> Vec<String> {
    let kinds: Vec<(u8, String)> = (0..n)
        .map(|i| {
            (
                u8::try_from(i % 5).unwrap(),
                format!("payload {i} {}", "x".repeat(60)),
            )
        })
        .collect();
    batch(first, &kinds)
}

/// DUR-12, VBT-6 (the DSH hook's "on failure restore the prior state, then reject",
/// PERS-16): every write and every sync of a batch that spans segments is failed in turn,
/// a write also torn after some of its bytes. Each failed append is refused with `IO`,
/// says that nothing was written, and leaves the session as it was: the same events and
/// revision, no torn tail, the same bytes in every file but the indexes (caches); the same
/// batch then appends. A failure while the restore runs leaves the error's fate unknown,
/// and the log holds its events and a prefix of the batch, never anything else.
#[test]
fn dur_12_a_failed_append_is_taken_back() {
    let dir = tempfile::tempdir().unwrap();
    let (store, faults) = faulty_store(dir.path());
    let mut all = sized_batch(0, 5);
    store.create("s", r#"{"id":"s"}"#, &refs(&all)).unwrap();
    let mut failed = 0;
    for (plan, torn) in [("write", 0), ("write", 7), ("write", 300), ("sync", 0)] {
        for n in 1.. {
            // Closed so that the last segment has an index, which the restore must drop.
            store.close().unwrap();
            let before = store.load("s", 0).unwrap().unwrap();
            let files = data_snapshot(dir.path());
            let all_files = snapshot(dir.path());
            let next = sized_batch(all.len() as u64, 20);
            if plan == "write" {
                faults.fail_write(n, torn);
            } else {
                faults.fail_sync(n);
            }
            match store.append("s", all.len() as u64, &refs(&next)) {
                Ok(()) => {
                    all.extend(next);
                    break;
                }
                Err(error) => {
                    failed += 1;
                    assert_eq!(error.code(), "IO", "{plan} {n}: {error}");
                    assert_eq!(
                        error.outcome(),
                        surfacelog::Outcome::NothingWritten,
                        "{plan} {n}: {error}"
                    );
                    assert_eq!(store.load("s", 0).unwrap().unwrap(), before, "{plan} {n}");
                    assert_eq!(data_snapshot(dir.path()), files, "{plan} {n}");
                    if plan == "write" && n == 1 {
                        // The first write is the batch's records in the last segment: its
                        // index, written at close, lists none of them and stays, a durable
                        // mark (IDX-5); every byte of every file is as before.
                        assert_eq!(snapshot(dir.path()), all_files, "{plan} {n}");
                    }
                    store.append("s", all.len() as u64, &refs(&next)).unwrap();
                    all.extend(next);
                }
            }
        }
    }
    assert!(failed >= 8, "only {failed} failures planned");
    let read = store.load("s", 0).unwrap().unwrap();
    assert_eq!(read.events, array(&all));
    // The restore's own sync fails too: the append's error keeps its fate unknown, and
    // the log then holds its events and a prefix of the batch, whole.
    store.close().unwrap();
    let next = sized_batch(all.len() as u64, 20);
    faults.fail_write(1, 300);
    faults.fail_sync(1);
    let error = store
        .append("s", all.len() as u64, &refs(&next))
        .unwrap_err();
    assert!(error.is_fate_unknown(), "{error}");
    let read = store.load("s", 0).unwrap().unwrap();
    let kept = usize::try_from(read.count).unwrap() - all.len();
    assert!(kept <= next.len());
    all.extend_from_slice(&next[..kept]);
    assert_eq!(read.events, array(&all));
}

/// One run of [`dur_12_restores_survive_power_loss`]: batches appended to session `s` (as
/// [`created`] makes it) over `sim`, with faults injected and the power going at I/O point `crash` (if any). Returns
/// the events acknowledged, the batch in flight when the run ended (another batch is
/// appended after a restored failure, none after one whose fate is unknown), and how many
/// failures were restored.
fn faulty_run(
    root: &Path,
    sim: &std::sync::Arc<surfacelog::internals::storage::sim::SimStorage>,
    seed: u64,
) -> (Vec<String>, Vec<String>, usize) {
    let options = LogOptions {
        segment_bytes: 1024,
        storage: std::sync::Arc::clone(sim) as _,
        ..LogOptions::default()
    };
    let store = VerbatimStore::with_options(root, options);
    let mut acked = sized_batch(0, 3);
    let mut in_flight = Vec::new();
    let mut restored = 0;
    for round in 0..12u64 {
        // After a restored failure, a batch of other texts goes to the same seqs: the
        // failed one must never come back.
        let n = 1 + usize::try_from((seed + round * 7) % 9).unwrap();
        in_flight = sized_batch(acked.len() as u64, n)
            .into_iter()
            .map(|text| text.replace("payload", &format!("round {round}")))
            .collect();
        match store.append("s", acked.len() as u64, &refs(&in_flight)) {
            Ok(()) => {
                acked.append(&mut in_flight);
            }
            Err(error) if error.outcome() == surfacelog::Outcome::NothingWritten => {
                restored += 1;
            }
            Err(_) => break,
        }
    }
    (acked, in_flight, restored)
}

/// Session `s` of three events created in `root`, durably, through the real filesystem:
/// the simulated disk then takes it as its durable image. (Creation publishes by a rename
/// the `Storage` trait does not model, VBT-5.)
fn created(root: &Path) {
    let store = VerbatimStore::new(root);
    store
        .create("s", r#"{"id":"s"}"#, &refs(&sized_batch(0, 3)))
        .unwrap();
}

/// DUR-12 under power loss: appends with injected faults (writes, syncs, renames,
/// listings fail or tear) and the power going at chosen I/O points, then the disk as a
/// crash could leave it, read (a torn tail is reported, RD-6, VBT-7), then recovered by a
/// repair. The session then holds every acknowledged event, followed by a
/// prefix of the batch in flight at most: a batch whose failure was restored (nothing
/// written) never comes back, and nothing else appears.
#[test]
fn dur_12_restores_survive_power_loss() {
    use surfacelog::internals::storage::sim::SimStorage;
    let (mut restored, mut tails) = (0, 0);
    for seed in 0..64u64 {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().join("root");
        std::fs::create_dir(&root).unwrap();
        created(&root);
        let points = {
            let probe = tempfile::tempdir().unwrap();
            created(probe.path());
            let sim = std::sync::Arc::new(SimStorage::new(probe.path(), seed).unwrap());
            sim.set_fault_rate(30_000);
            faulty_run(probe.path(), &sim, seed);
            sim.points()
        };
        let sim = std::sync::Arc::new(SimStorage::new(&root, seed).unwrap());
        sim.set_fault_rate(30_000);
        sim.crash_at(1 + (seed * 7919) % points.max(1));
        let (acked, in_flight, restores) = faulty_run(&root, &sim, seed);
        restored += restores;
        sim.crash().unwrap();
        // Read as the crash left it (a torn tail reported, never taken for damage, VBT-7),
        // then as a repair leaves it (log-format §7 drops the torn tail): the same events.
        let store = VerbatimStore::new(&root);
        let torn = store.load("s", 0).unwrap().unwrap();
        assert_eq!(
            torn.revision.ends_with(":torn"),
            torn.torn.is_some(),
            "seed {seed}"
        );
        store.repair("s", &[]).unwrap();
        let read = store.load("s", 0).unwrap().unwrap();
        assert_eq!(
            (&read.events, read.torn.is_none()),
            (&torn.events, true),
            "seed {seed}"
        );
        tails += usize::from(torn.torn.is_some());
        let kept = usize::try_from(read.count).unwrap();
        assert!(
            kept >= acked.len() && kept <= acked.len() + in_flight.len(),
            "seed {seed}: {kept} events, {} acknowledged, {} in flight",
            acked.len(),
            in_flight.len()
        );
        let expected = [&acked[..], &in_flight[..kept - acked.len()]].concat();
        assert_eq!(read.events, array(&expected), "seed {seed}");
    }
    assert!(restored >= 20, "only {restored} failures restored");
    assert!(tails >= 3, "only {tails} torn tails");
}

/// Flips a bit of the checksum (or, in a compact record whose `len` takes one byte, of the
/// first byte its checksum covers) of the record of seq `seq` of the segment file
/// `segment`, a record that starts with that seq, found by walking the records in the
/// segment's format (REC-1, REC-3, REC-15); returns its offset.
fn damage_record(segment: &Path, seq: u64) -> usize {
    use std::os::unix::fs::FileExt;
    let record = common::record_of_seq(segment, seq);
    assert_eq!(record.seqs.start, seq, "{record:?}");
    let at = record.at.start;
    let bytes = std::fs::read(segment).unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(segment)
        .unwrap();
    file.write_all_at(&[bytes[at + 5] ^ 0x40], at as u64 + 5)
        .unwrap();
    at
}

/// Stops a reading thread however the test's thread leaves its scope, a panic included, so
/// that the scope's join cannot wait for ever.
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// VBT-7 and RD-6: RCV-4's shape (a record that does not check out, valid ones after it) in
/// records appended since the writer opened, while the store holds that writer, is
/// `CORRUPT` naming the file and offset, never a shorter log: no append in progress leaves
/// it. Once the writer is closed, its index vouches for every record, and the damage under
/// it is `CORRUPT` too (RCV-13).
#[test]
fn damage_under_a_kept_writer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = VerbatimStore::new(dir.path());
    let first = sized_batch(0, 3);
    store.create("s", r#"{"id":"s"}"#, &refs(&first)).unwrap();
    store.close().unwrap();
    store.append("s", 3, &refs(&sized_batch(3, 5))).unwrap();
    let segment = last_segment(&store, "s");
    let at = damage_record(&segment, 4);
    let error = store.load("s", 0).unwrap_err();
    assert_eq!(error.code(), "CORRUPT", "{error}");
    assert!(
        error.to_string().contains(&format!("offset={at}")),
        "{error}"
    );
    store.close().unwrap();
    let error = store.load("s", 0).unwrap_err();
    assert_eq!(error.code(), "CORRUPT", "{error}");
}

/// DUR-12 with reads running: a thread reads the session over and over while appends fail
/// and are restored. Reads beside an append may see its records, or fail; every read that
/// runs while no append is under way returns the session exactly as it was, whatever the
/// store kept from the reads before. (A reader kept with records a restore undid would
/// make such a read fail. The interleaving where the store kept one, a read opened after
/// `Readers::forget` ran first and before the zeros, was not hit in trials of the earlier
/// order; `verbatim_handles.rs` tests the rule itself.)
#[test]
fn dur_12_reads_during_restores_are_not_kept() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
    let dir = tempfile::tempdir().unwrap();
    let (store, faults) = faulty_store(dir.path());
    let first = sized_batch(0, 5);
    store.create("s", r#"{"id":"s"}"#, &refs(&first)).unwrap();
    let before = store.load("s", 0).unwrap().unwrap();
    let stop = AtomicBool::new(false);
    // Odd while an append (and its restore) is under way; bumped before and after each.
    let appends = AtomicU64::new(0);
    std::thread::scope(|scope| {
        let _stop = StopOnDrop(&stop);
        let reader = scope.spawn(|| {
            let (mut racing, mut quiet, mut wrong) = (0, 0, Vec::new());
            while !stop.load(SeqCst) {
                let started = appends.load(SeqCst);
                let read = store.load("s", 0);
                if started % 2 == 1 || appends.load(SeqCst) != started {
                    // It ran beside an append: it may see anything in flux, or fail.
                    racing += usize::from(matches!(&read, Ok(Some(r)) if r.count > 5));
                    continue;
                }
                quiet += 1;
                match read {
                    Ok(Some(read)) if read == before => {}
                    other => wrong.push(format!("{other:?}")),
                }
            }
            (racing, quiet, wrong)
        });
        for round in 0..300u64 {
            let next = sized_batch(5, 20 + usize::try_from(round % 7).unwrap());
            faults.fail_write(1, 200 + 300 * (round % 5));
            appends.fetch_add(1, SeqCst);
            let error = store.append("s", 5, &refs(&next)).unwrap_err();
            appends.fetch_add(1, SeqCst);
            assert_eq!(
                error.outcome(),
                surfacelog::Outcome::NothingWritten,
                "{error}"
            );
            std::thread::yield_now();
        }
        stop.store(true, SeqCst);
        let (racing, quiet, wrong) = reader.join().unwrap();
        // The race ran: reads saw failed batches' records before their restores.
        assert!(
            racing > 0 && quiet > 0,
            "{racing} racing reads, {quiet} quiet ones"
        );
        assert!(
            wrong.is_empty(),
            "{} of {quiet} reads after a restore: {:?}",
            wrong.len(),
            wrong.first()
        );
    });
}

/// VBT-7 while a writer recovers: a torn tail of RCV-4's shape (a record lost, a later one
/// kept, as a power cut leaves them past the durable marks) is reported by reads while no
/// writer is open, and while a repair's writer is recovering it, reads neither report it
/// as damage nor fail: the tail is that recovery's to drop. After the repair, the events
/// before the tail remain and no tail is reported.
#[test]
fn reads_while_a_writer_recovers_a_torn_tail() {
    type Slot<T> = std::sync::Arc<std::sync::Mutex<Option<T>>>;
    let dir = tempfile::tempdir().unwrap();
    // The first creation of a quarantine file (a writer's recovery setting a torn tail
    // aside, log-format RCV-12) waits until the test lets it go.
    let paused_slot: Slot<std::sync::mpsc::Sender<()>> = Slot::default();
    let go_slot: Slot<std::sync::mpsc::Receiver<()>> = Slot::default();
    let hook = {
        let (paused, go) = (paused_slot.clone(), go_slot.clone());
        move |op: common::Op<'_>| {
            let quarantine =
                matches!(op, common::Op::Create(p) if p.to_string_lossy().contains(".quarantine"));
            // Taken out first: the lock is not held while the creation waits (reads meanwhile
            // run this hook too).
            let taken = paused.lock().unwrap().take_if(|_| quarantine);
            if let Some(paused) = taken {
                paused.send(()).unwrap();
                let go = go.lock().unwrap().take().unwrap();
                go.recv().unwrap();
            }
            Ok(())
        }
    };
    let options = LogOptions {
        segment_bytes: 1 << 20,
        storage: std::sync::Arc::new(common::HookedStorage(Box::new(hook))),
        ..LogOptions::default()
    };
    let store = VerbatimStore::with_options(dir.path(), options);
    store
        .create("s", r#"{"id":"s"}"#, &refs(&sized_batch(0, 3)))
        .unwrap();
    store.close().unwrap();
    let log = store.locate("s").join("log");
    let index = log.join("00000000000000000000.idx");
    let vouching_three = std::fs::read(&index).unwrap();
    store.append("s", 3, &refs(&sized_batch(3, 5))).unwrap();
    store.close().unwrap();
    // The index of the first three events back (a durable mark below the tail), and record
    // 4's frame damaged: records 5 to 7 follow it, RCV-4's shape above the mark.
    std::fs::write(&index, vouching_three).unwrap();
    let segment = last_segment(&store, "s");
    let at = damage_record(&segment, 4);
    let torn = store.load("s", 0).unwrap().unwrap();
    assert_eq!(
        (torn.count, torn.torn.as_ref().map(|t| t.1.start)),
        (4, Some(at))
    );
    let (paused_tx, paused) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    *paused_slot.lock().unwrap() = Some(paused_tx);
    *go_slot.lock().unwrap() = Some(go_rx);
    std::thread::scope(|scope| {
        let repair = scope.spawn(|| store.repair("s", &[]));
        paused.recv().unwrap();
        // The repair's writer is recovering: the tail is its to drop.
        let read = store.load("s", 0);
        go.send(()).unwrap();
        let read = read.unwrap().unwrap();
        assert_eq!((read.count, read.torn), (4, None));
        repair.join().unwrap().unwrap();
    });
    let read = store.load("s", 0).unwrap().unwrap();
    assert_eq!((read.count, read.torn), (4, None));
    let kept = [sized_batch(0, 3), sized_batch(3, 1)].concat();
    assert_eq!(read.events, array(&kept));
}

/// DUR-12 next to a compressed segment (log-format.md CZ-6): the log's last segment is an
/// empty one that begins at the log's end (a roll whose first record was never written),
/// and the segment before it has been compressed since. A failed append is taken back
/// without reading the compressed segment as a plain one and without leaving it last: the
/// empty segment is kept and emptied, the session reads as before, and the same batch then
/// appends.
#[cfg(feature = "compress")]
#[test]
fn dur_12_a_failed_append_after_a_compressed_segment_is_taken_back() {
    use surfacelog::internals::log::segment::SegmentHeader;
    let dir = tempfile::tempdir().unwrap();
    let (store, faults) = faulty_store(dir.path());
    let mut all = sized_batch(0, 5);
    store.create("s", r#"{"id":"s"}"#, &refs(&all)).unwrap();
    for _ in 0..3 {
        let next = sized_batch(all.len() as u64, 20);
        store.append("s", all.len() as u64, &refs(&next)).unwrap();
        all.extend(next);
    }
    store.close().unwrap();
    let log = store.locate("s").join("log");
    let last = last_segment(&store, "s");
    let header = SegmentHeader::decode(&std::fs::read(&last).unwrap()).unwrap();
    let empty = SegmentHeader {
        index: header.index + 1,
        first_seq: all.len() as u64,
        capacity: 2048,
        ..header
    };
    let mut bytes = empty.encode().to_vec();
    bytes.resize(2048, 0);
    std::fs::write(log.join(format!("{:020}.seg", all.len())), &bytes).unwrap();
    let report = surfacelog::internals::log::compact_with(
        &surfacelog::internals::storage::FsStorage,
        &log,
        surfacelog::CompactOptions::new().compress(true),
    )
    .unwrap();
    assert!(
        report
            .rewritten
            .iter()
            .any(|r| r.first_seq == header.first_seq && r.compressed),
        "{report:?}"
    );
    let before = store.load("s", 0).unwrap().unwrap();
    let next = sized_batch(all.len() as u64, 5);
    faults.fail_sync(1);
    let error = store
        .append("s", all.len() as u64, &refs(&next))
        .unwrap_err();
    assert_eq!(error.code(), "IO", "{error}");
    assert_eq!(
        error.outcome(),
        surfacelog::Outcome::NothingWritten,
        "{error}"
    );
    assert_eq!(store.load("s", 0).unwrap().unwrap(), before);
    store.append("s", all.len() as u64, &refs(&next)).unwrap();
    all.extend(next);
    store.close().unwrap();
    assert_eq!(store.load("s", 0).unwrap().unwrap().events, array(&all));
}

/// A directory's files copied into `to`, recursively (a backup restored, `cp -a`).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// VBT-8 (DSH persistence §1.12 rule 4): a copy of a store has its own revisions though
/// its logs keep their ids, and two logs of one id and length that end with other events
/// differ too; every read of one state gives one token.
#[test]
fn vbt_8_revisions_are_source_qualified() {
    let scratch = tempfile::tempdir().unwrap();
    let first = scratch.path().join("first");
    let store = VerbatimStore::new(&first);
    store
        .create("s", r#"{"id":"s"}"#, &[r#"{"type":"a","seq":0,"time":1}"#])
        .unwrap();
    store.close().unwrap();
    let copy = scratch.path().join("copy");
    copy_tree(&first, &copy);
    let copied = VerbatimStore::new(&copy);
    let token = store.revision("s").unwrap().unwrap();
    assert_eq!(store.load("s", 0).unwrap().unwrap().revision, token);
    assert_eq!(store.list().unwrap()[0].1, token);
    assert_eq!(
        VerbatimStore::new(&first).revision("s").unwrap().unwrap(),
        token
    );
    assert_ne!(
        copied.revision("s").unwrap().unwrap(),
        token,
        "a copy is another store"
    );
    // The same log, of the same length, ending with other events: moved into the place of
    // the other (its directory's identity kept), it still gives another token.
    store
        .append("s", 1, &[r#"{"type":"b","seq":1,"time":2}"#])
        .unwrap();
    copied
        .append("s", 1, &[r#"{"type":"c","seq":1,"time":2}"#])
        .unwrap();
    store.close().unwrap();
    copied.close().unwrap();
    let before = store.revision("s").unwrap().unwrap();
    let log = first.join("sessions").join("s").join("log");
    for entry in std::fs::read_dir(&log).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    copy_tree(&copy.join("sessions").join("s").join("log"), &log);
    let after = VerbatimStore::new(&first).revision("s").unwrap().unwrap();
    assert_ne!(after, before);
    assert!(after.contains(":2:"), "{after}");
}

/// VBT-5: a create is durable when it returns `Ok`, and a create that fails leaves no
/// session: every directory sync of a create is failed in turn, and each failure is
/// refused with nothing published (the id not loadable, not listed), after which the same
/// create succeeds. Before, a failed sync of `sessions/` after the publishing rename
/// returned `IO` with the session left published, so the retry was refused
/// `SESSION_EXISTS` for a create the caller was told had failed.
#[test]
fn vbt_5_a_create_whose_directory_sync_fails_leaves_no_session() {
    let events = sized_batch(0, 3);
    let mut failed = 0;
    for n in 1.. {
        let dir = tempfile::tempdir().unwrap();
        let (store, faults) = faulty_store(dir.path());
        faults.fail_sync_dir(n);
        match store.create("s", r#"{"id":"s"}"#, &refs(&events)) {
            Ok(()) => {
                assert!(store.load("s", 0).unwrap().is_some());
                break;
            }
            Err(error) => {
                failed += 1;
                assert_eq!(error.code(), "IO", "sync {n}: {error}");
                assert!(store.load("s", 0).unwrap().is_none(), "sync {n}: published");
                assert!(store.list().unwrap().is_empty(), "sync {n}: listed");
                store.create("s", r#"{"id":"s"}"#, &refs(&events)).unwrap();
                let loaded = store.load("s", 0).unwrap().unwrap();
                assert_eq!(loaded.count, events.len() as u64, "sync {n}");
            }
        }
    }
    assert!(failed >= 3, "{failed} syncs failed");
}
