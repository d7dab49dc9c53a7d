//! The message pack (`format-spec/message-pack.md`, MSP-1 to MSP-7): a cache of the
//! surface's message texts beside the log. Deriving messages through it gives exactly
//! what the log gives (a model comparison over random turns, compactions, prunes, flushes
//! and reopens); a damaged pack, or one bound to another log, is ignored and reported by
//! `verify`; a pack encoded by hand from the spec is read as written, by a writer and by a
//! read-only inspection; a fork shares it and salvage removes one that covers more than
//! the log it keeps.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

mod common;

use proptest::prelude::*;
use surfacelog::internals::event::MemLog;
use surfacelog::internals::session::Session;
use surfacelog::{Boundary, Durability, MessageText, SessionReport, Severity, Store, StoreOptions};

/// One step of a plan.
#[derive(Debug, Clone)]
enum Op {
    /// A closed turn of `tests/common` (a user message, an assistant message, a result).
    Turn,
    /// Compacts the current messages from the one at `a` to the one at `b` (fractions of
    /// the surface, in 1/256ths).
    Compact(u8, u8),
    /// Prunes the `k`-th tool result still on the surface.
    Prune(u8),
    /// `Session::flush`: a checkpoint, and a pack when MSP-5 says so.
    Flush,
    /// Closes and reopens the stored session.
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Turn),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::Compact(a, b)),
        2 => any::<u8>().prop_map(Op::Prune),
        2 => Just(Op::Flush),
        1 => Just(Op::Reopen),
    ]
}

/// The messages of a session as `(seq, text)`.
type Messages = Vec<(u64, String)>;

/// The messages of `session`, read the two ways: as strings (`Session::messages`), and
/// with the pack's texts lent (`Session::each_lent_message`), which must give the same.
fn messages_of<L: surfacelog::internals::session::SessionLog>(session: &Session<L>) -> Messages {
    let messages: Messages = session
        .messages()
        .unwrap()
        .iter()
        .map(|m| (m.seq, m.json.to_owned()))
        .collect();
    assert_eq!(lent_messages_of(session), messages, "lent as read");
    messages
}

/// The messages of `session` as `Session::each_lent_message` gives them, each lent span
/// read from the bytes it returns (as UTF-8: the caller's check).
fn lent_messages_of<L: surfacelog::internals::session::SessionLog>(
    session: &Session<L>,
) -> Messages {
    let mut visited = Vec::new();
    let texts = session
        .each_lent_message(|seq, text| visited.push((seq, text)))
        .unwrap();
    let lent = visited
        .iter()
        .any(|(_, text)| matches!(text, MessageText::Lent(_)));
    assert_eq!(
        texts.is_some(),
        lent,
        "the bytes returned exactly when lent"
    );
    visited
        .into_iter()
        .map(|(seq, text)| match text {
            MessageText::Lent(span) => {
                let bytes = &texts.as_ref().unwrap()[span];
                (seq, String::from_utf8(bytes.to_vec()).unwrap())
            }
            MessageText::Text(json) => (seq, json.to_owned()),
        })
        .collect()
}

fn options(pack_min: u64) -> StoreOptions {
    common::store_options(Durability::Sync, 1 << 20)
        .checkpoint_every(37)
        .message_pack(pack_min)
}

/// Applies `op` to `session`; `turn` numbers the turns.
fn apply<L: surfacelog::internals::session::SessionLog>(
    session: &mut Session<L>,
    op: &Op,
    turn: &mut u64,
) {
    let current = messages_of(session);
    match *op {
        Op::Turn => {
            *turn += 1;
            common::numbered_turn(session, *turn);
        }
        Op::Compact(a, b) => {
            // Tool pairing stays balanced (contract §5): the range starts at a user message
            // (or a summary) and does not end at an assistant message, whose result
            // follows it.
            let starts: Vec<usize> = (0..current.len())
                .filter(|&i| {
                    !current[i].1.contains(r#""kind":"tool""#) && !is_assistant(&current[i].1)
                })
                .collect();
            let Some(&first) = starts.get(usize::from(a) * starts.len() / 256) else {
                return;
            };
            let ends: Vec<usize> = (first..current.len())
                .filter(|&j| !is_assistant(&current[j].1))
                .collect();
            let j = ends[usize::from(b) * ends.len() / 256];
            common::compact(session, current[first].0, current[j].0, "summary");
        }
        Op::Prune(k) => {
            let results: Vec<u64> = current
                .iter()
                .filter(|(_, text)| text.contains(r#""id":"r"#))
                .map(|(seq, _)| *seq)
                .collect();
            if !results.is_empty() {
                common::prune_to_empty(session, results[usize::from(k) % results.len()]);
            }
        }
        _ => {}
    }
}

fn is_assistant(text: &str) -> bool {
    text.contains(r#""role":"assistant""#)
}

/// Runs `plan` on a stored session with `pack_min` and returns the messages seen after
/// each flush and reopen, and at the end after a last reopen.
fn run_stored(dir: &Path, plan: &[Op], pack_min: u64) -> Vec<Messages> {
    let store = Store::open_or_create(dir, options(pack_min)).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    let (mut turn, mut seen) = (0, Vec::new());
    for op in plan {
        apply(&mut session, op, &mut turn);
        match op {
            Op::Flush => {
                session.flush().unwrap();
                seen.push(messages_of(&session));
            }
            Op::Reopen => {
                session.close().unwrap();
                session = store.open_session("s").unwrap().0;
                seen.push(messages_of(&session));
            }
            _ => {}
        }
    }
    session.close().unwrap();
    let (session, _) = store.open_session("s").unwrap();
    seen.push(messages_of(&session));
    drop(session);
    // MSP-4 for a read-only inspection: the same messages.
    let inspected = messages_of(&store.inspect("s").unwrap());
    assert_eq!(Some(&inspected), seen.last());
    seen
}

/// The same plan on an in-memory session: the messages at the same points.
fn run_in_memory(plan: &[Op]) -> Vec<Messages> {
    let mut session: Session<MemLog> = Session::in_memory("s", &options(0)).unwrap();
    let (mut turn, mut seen) = (0, Vec::new());
    for op in plan {
        apply(&mut session, op, &mut turn);
        if matches!(op, Op::Flush | Op::Reopen) {
            seen.push(messages_of(&session));
        }
    }
    seen.push(messages_of(&session));
    seen
}

fn session_report(store: &Store) -> SessionReport {
    let report = store.verify(None).unwrap();
    assert!(report.store.is_empty(), "{:?}", report.store);
    report.sessions.into_iter().next().expect("one session")
}

fn pack_path(dir: &Path) -> PathBuf {
    let sessions = dir.join("sessions");
    let session = std::fs::read_dir(&sessions)
        .unwrap()
        .next()
        .expect("one session")
        .unwrap()
        .path();
    session.join("messages")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// MSP-4: with a pack written at every chance (`pack_min` 1), or with none, a stored
    /// session derives the same messages as an in-memory one, after every flush and
    /// reopen; `verify` finds the pack's entries equal to a fold of the log (MSP-3).
    #[test]
    fn messages_through_the_pack_equal_the_log_s(plan in proptest::collection::vec(op(), 1..48)) {
        let model = run_in_memory(&plan);
        for pack_min in [1, 3, 0] {
            let dir = common::scratch("message_pack", "model");
            let seen = run_stored(dir.as_ref(), &plan, pack_min);
            prop_assert_eq!(&seen, &model, "pack_min {}", pack_min);
            let store = Store::open_or_create(dir.as_ref(), options(pack_min)).unwrap();
            let report = session_report(&store);
            prop_assert!(report.problems.is_empty(), "{:?}", report.problems);
            let packed = pack_path(dir.as_ref()).exists();
            let any_turn = plan.iter().any(|op| matches!(op, Op::Turn));
            // MSP-5: `pack_min` 1 packs at the last close at the latest; 0 never packs.
            match pack_min {
                0 => prop_assert!(!packed),
                1 => prop_assert_eq!(packed, any_turn),
                _ => {}
            }
        }
    }
}

/// A closed session of `turns` turns, packed, in `dir`; its messages (from the log: the
/// pack removed and put back). The store writes version 1 records, so that its pack is
/// written plain (MSP-1), the bytes these tests read and change: a store of compact records
/// (the default) compresses it (MSP-8).
fn packed_session(dir: &Path, turns: u64) -> (Store, Messages, Vec<u8>) {
    let store = Store::open_or_create(dir, options(1).compact_records(false)).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    for turn in 1..=turns {
        common::numbered_turn(&mut session, turn);
    }
    common::compact(&mut session, 1, 11, "early turns");
    session.close().unwrap();
    let path = pack_path(dir);
    let pack = std::fs::read(&path).expect("a pack was written at close");
    std::fs::remove_file(&path).unwrap();
    let truth = messages_of(&store.open_session("s").unwrap().0);
    std::fs::write(&path, &pack).unwrap();
    (store, truth, pack)
}

/// The spec's fields of a pack (MSP-1), read independently of the engine.
struct Fields {
    seq_next: u64,
    entries: Vec<(u64, u64)>,
    text: Vec<u8>,
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

fn parse(pack: &[u8]) -> Fields {
    assert_eq!(&pack[..8], b"surfmsg\0");
    assert_eq!(u32::from_le_bytes(pack[8..12].try_into().unwrap()), 1);
    let (seq_next, count, text_len) = (u64_at(pack, 16), u64_at(pack, 24), u64_at(pack, 32));
    let count = usize::try_from(count).unwrap();
    let entries = (0..count)
        .map(|i| (u64_at(pack, 48 + 16 * i), u64_at(pack, 56 + 16 * i)))
        .collect();
    let text = pack[48 + 16 * count..].to_vec();
    assert_eq!(text.len() as u64, text_len);
    Fields {
        seq_next,
        entries,
        text,
    }
}

/// `fields` with `text` as the text area (entries and `seq_next` unchanged).
fn with_text(fields: &Fields, text: Vec<u8>) -> Fields {
    Fields {
        seq_next: fields.seq_next,
        entries: fields.entries.clone(),
        text,
    }
}

/// The bytes of a pack per MSP-1, CRCs computed here.
fn encode(last_text_crc: u32, fields: &Fields) -> Vec<u8> {
    let mut out = b"surfmsg\0".to_vec();
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&last_text_crc.to_le_bytes());
    out.extend_from_slice(&fields.seq_next.to_le_bytes());
    out.extend_from_slice(&(fields.entries.len() as u64).to_le_bytes());
    out.extend_from_slice(&(fields.text.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&fields.text).to_le_bytes());
    let mut entries = Vec::new();
    for (seq, end) in &fields.entries {
        entries.extend_from_slice(&seq.to_le_bytes());
        entries.extend_from_slice(&end.to_le_bytes());
    }
    let crc = crc32c::crc32c_append(crc32c::crc32c(&out), &entries);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&entries);
    out.extend_from_slice(&fields.text);
    out
}

fn has_problem(report: &SessionReport, rule: &str, severity: Severity) -> bool {
    report
        .problems
        .iter()
        .any(|p| p.rule == rule && p.severity == severity)
}

/// MSP-1: any flipped bit, a cut and an extension make the pack ignored whole: the
/// messages come from the log, and `verify` reports it (a warning: a crash may tear it).
#[test]
fn a_damaged_pack_is_ignored_and_reported() {
    let dir = common::scratch("message_pack", "damage");
    let (store, truth, pack) = packed_session(dir.as_ref(), 12);
    let path = pack_path(dir.as_ref());
    let mut damaged: Vec<Vec<u8>> = Vec::new();
    let step = (pack.len() / 97).max(1);
    for at in (0..48).chain((48..pack.len()).step_by(step)) {
        for bit in [0, 5] {
            let mut bytes = pack.clone();
            bytes[at] ^= 1 << bit;
            damaged.push(bytes);
        }
    }
    damaged.push(pack[..pack.len() - 1].to_vec());
    damaged.push(pack[..47].to_vec());
    damaged.push([&pack[..], b"x"].concat());
    for bytes in damaged {
        std::fs::write(&path, &bytes).unwrap();
        // Read-only first (a writer's open removes a pack whose `seq_next` a flipped bit
        // put ahead of the log, MSP-7), then through a writer.
        assert_eq!(messages_of(&store.inspect("s").unwrap()), truth);
        let report = session_report(&store);
        let (session, _) = store.open_session("s").unwrap();
        assert_eq!(messages_of(&session), truth);
        drop(session);
        // A warning: the pack is a cache written without a sync, which a crash may tear
        // (MSP-6).
        assert!(
            has_problem(&report, "MSP-1", Severity::Warning),
            "{:?}",
            report.problems
        );
        assert!(
            report
                .problems
                .iter()
                .all(|p| p.severity == Severity::Warning)
        );
    }
}

/// MSP-1 to MSP-4 from the reader's side: a pack encoded here by the spec is read as
/// written (one message text changed shows through, and `verify` reports that text as
/// not its record's, MSP-3); bound to another log's last event (MSP-2) or covering more
/// events than the log holds, it is ignored.
#[test]
fn a_pack_encoded_by_the_spec_is_read_as_written_and_bound_to_its_log() {
    let dir = common::scratch("message_pack", "spec");
    let (store, truth, pack) = packed_session(dir.as_ref(), 6);
    let path = pack_path(dir.as_ref());
    let last_text_crc = u32::from_le_bytes(pack[12..16].try_into().unwrap());
    let fields = parse(&pack);
    assert_eq!(
        encode(last_text_crc, &fields),
        pack,
        "the writer follows MSP-1"
    );

    // The text of turn 3's user message, `u3` changed to `U3` (the same length).
    let (shown, span) = message_in("u3", &truth, &fields);
    let (start, end) = (span.start, span.end);
    let original = String::from_utf8(fields.text[start..end].to_vec()).unwrap();
    assert_eq!(original, truth[shown].1);
    let changed = original.replace("u3", "U3");
    assert_ne!(changed, original);
    let mut text = fields.text.clone();
    text[start..end].copy_from_slice(changed.as_bytes());
    let altered = with_text(&fields, text);
    std::fs::write(&path, encode(last_text_crc, &altered)).unwrap();
    let (session, _) = store.open_session("s").unwrap();
    let read = messages_of(&session);
    assert_eq!(read[shown].1, changed, "the pack is what the reader read");
    assert_eq!(read[..shown], truth[..shown]);
    assert_eq!(read[shown + 1..], truth[shown + 1..]);
    drop(session);
    // A read-only inspection reads through it too, and changes nothing.
    assert_eq!(messages_of(&store.inspect("s").unwrap()), read);
    assert!(has_problem(
        &session_report(&store),
        "MSP-3",
        Severity::Error
    ));

    // MSP-2: another log's last event; then more events than the log holds.
    let fields = parse(&encode(last_text_crc, &altered));
    std::fs::write(&path, encode(last_text_crc ^ 1, &fields)).unwrap();
    assert_eq!(messages_of(&store.open_session("s").unwrap().0), truth);
    assert!(has_problem(
        &session_report(&store),
        "MSP-2",
        Severity::Warning
    ));
    let longer = Fields {
        seq_next: fields.seq_next + 1,
        ..fields
    };
    std::fs::write(&path, encode(last_text_crc, &longer)).unwrap();
    // A read-only inspection ignores it and changes nothing; a writer's open removes it
    // (MSP-7), before anything is appended.
    assert_eq!(messages_of(&store.inspect("s").unwrap()), truth);
    assert!(path.exists());
    assert_eq!(messages_of(&store.open_session("s").unwrap().0), truth);
    assert!(
        !path.exists(),
        "MSP-7: a pack ahead of the log is removed at open"
    );
}

/// The bytes `Session::each_lent_message` lends from, and the `(seq, span)` of every
/// message, each of which must be lent (none read from the log).
fn all_lent<L: surfacelog::internals::session::SessionLog>(
    session: &Session<L>,
) -> (surfacelog::SharedBytes, Vec<(u64, std::ops::Range<usize>)>) {
    let mut spans = Vec::new();
    let texts = session
        .each_lent_message(|seq, text| match text {
            MessageText::Lent(span) => spans.push((seq, span)),
            MessageText::Text(json) => panic!("{seq} read from the log: {json}"),
        })
        .unwrap()
        .expect("texts lent");
    (texts, spans)
}

/// Where the user message of id `id` is among `truth`, and the span of its text in the
/// text area of the pack `fields` were parsed from (MSP-1: entry i ends where i + 1
/// starts).
fn message_in(id: &str, truth: &Messages, fields: &Fields) -> (usize, std::ops::Range<usize>) {
    let shown = truth
        .iter()
        .position(|m| m.1.contains(&format!(r#""id":"{id}""#)))
        .unwrap();
    let index = fields
        .entries
        .iter()
        .position(|e| e.0 == truth[shown].0)
        .unwrap();
    let start = match index.checked_sub(1) {
        Some(before) => fields.entries[before].1,
        None => 0,
    };
    let end = fields.entries[index].1;
    (
        shown,
        usize::try_from(start).unwrap()..usize::try_from(end).unwrap(),
    )
}

/// MSP-3: a pack whose checksums hold but one of whose texts is not UTF-8 (a faulty
/// writer's): `messages()` takes that message from the log, while `each_lent_message`,
/// which leaves the UTF-8 check to its caller, lends the span as the pack gives it, for the
/// caller to refuse; the other messages come from the pack both ways.
#[test]
fn msp_3_a_packed_text_that_is_not_utf8_is_read_from_the_log_or_lent_for_the_caller_to_refuse() {
    let dir = common::scratch("message_pack", "not-utf8");
    let (store, truth, pack) = packed_session(dir.as_ref(), 6);
    let path = pack_path(dir.as_ref());
    let last_text_crc = u32::from_le_bytes(pack[12..16].try_into().unwrap());
    let fields = parse(&pack);
    let (shown, span) = message_in("u3", &truth, &fields);
    let (start, end) = (span.start, span.end);
    let at = start + truth[shown].1.find("u3").unwrap();
    let mut text = fields.text.clone();
    text[at] = 0xFF;
    std::fs::write(&path, encode(last_text_crc, &with_text(&fields, text))).unwrap();

    let (session, _) = store.open_session("s").unwrap();
    let read: Messages = session
        .messages()
        .unwrap()
        .iter()
        .map(|m| (m.seq, m.json.to_owned()))
        .collect();
    assert_eq!(
        read, truth,
        "that message from the log, the others from the pack"
    );
    let (texts, spans) = all_lent(&session);
    assert_eq!(spans.len(), truth.len());
    for ((seq, span), (truth_seq, truth_text)) in spans.into_iter().zip(&truth) {
        assert_eq!(seq, *truth_seq);
        let checked = std::str::from_utf8(&texts[span.clone()]);
        if seq == truth[shown].0 {
            assert_eq!(span, start..end);
            assert!(checked.is_err(), "the caller's check refuses it");
        } else {
            assert_eq!(checked.unwrap(), truth_text);
        }
    }
}

/// MSP-6: a fork at or past the pack's `seq_next` shares it by a hard link, and its
/// messages are the source's prefix; a fork before it gets none. MSP-7: salvage of a log
/// cut before the pack's `seq_next` removes the pack.
#[test]
fn a_fork_shares_the_pack_and_salvage_removes_a_longer_one() {
    let dir = common::scratch("message_pack", "fork");
    let (store, truth, pack) = packed_session(dir.as_ref(), 8);
    let path = pack_path(dir.as_ref());
    let seq_next = parse(&pack).seq_next;
    drop(store.fork("s", Boundary::Last, "child").unwrap());
    let child_pack = dir.as_ref().join("sessions/child/messages");
    assert_eq!(
        std::fs::metadata(&child_pack).unwrap().ino(),
        std::fs::metadata(&path).unwrap().ino()
    );
    let (child, _) = store.open_session("child").unwrap();
    assert_eq!(messages_of(&child), truth);
    drop(child);
    // The child, closed, writes a pack of its own (`pack_min` 1), not the source's.
    drop(
        store
            .fork("s", Boundary::Seq(seq_next - 3), "early")
            .unwrap(),
    );
    let early = dir.as_ref().join("sessions/early/messages");
    let ino = std::fs::metadata(&path).unwrap().ino();
    if let Ok(own) = std::fs::read(&early) {
        assert_ne!(std::fs::metadata(&early).unwrap().ino(), ino);
        assert!(parse(&own).seq_next < seq_next);
    }

    let damage_last_record = || {
        let log = path.with_file_name("log");
        let segment = common::files_ending(&log, ".seg").pop().unwrap();
        let mut bytes = std::fs::read(&segment).unwrap();
        let end = bytes.iter().rposition(|b| *b != 0).unwrap();
        bytes[end] ^= 0xff;
        std::fs::write(&segment, &bytes).unwrap();
    };
    // Events after the pack (appended by a writer that packs nothing), then the last
    // record damaged: salvage keeps the pack's events, and the pack.
    drop(store);
    let unpacked = Store::open_or_create(dir.as_ref(), options(0)).unwrap();
    let mut session = unpacked.open_session("s").unwrap().0;
    common::numbered_turn(&mut session, 9);
    session.close().unwrap();
    damage_last_record();
    let salvaged = unpacked.salvage("s").unwrap();
    assert!(salvaged.log.seq_next >= seq_next);
    assert_eq!(parse(&std::fs::read(&path).unwrap()).seq_next, seq_next);
    // Then cut, record by record, under it: the pack goes as soon as it covers more.
    let mut kept = salvaged.log.seq_next;
    while kept >= seq_next {
        damage_last_record();
        kept = unpacked.salvage("s").unwrap().log.seq_next;
        assert_eq!(
            path.exists(),
            kept >= seq_next,
            "MSP-7 with {kept} events kept"
        );
    }
    assert!(dir.as_ref().join("sessions/child/messages").exists());
}

/// MSP-8: a compaction that compresses the log compresses the pack (version 2, its fixed
/// fields kept but for the version), and a reader reads through it what the version 1 pack
/// held: a text changed in the pack before compression shows through (and `verify` says
/// so, MSP-3), the true pack compressed gives the log's messages with nothing reported,
/// and a damaged compressed pack is ignored (MSP-1) with the messages read from the log.
#[cfg(feature = "compress")]
#[test]
fn msp_8_a_compressed_pack_is_read_as_the_pack_it_stands_for() {
    let dir = common::scratch("message_pack", "compressed");
    let (store, truth, pack) = packed_session(dir.as_ref(), 40);
    let path = pack_path(dir.as_ref());
    let last_text_crc = u32::from_le_bytes(pack[12..16].try_into().unwrap());
    let fields = parse(&pack);
    let compress = || {
        store
            .compact_log_with("s", surfacelog::CompactOptions::new().compress(true))
            .unwrap()
            .pack_bytes
    };

    // Turn 30's user message, `u30` changed to `U30` in the version 1 pack.
    let (shown, span) = message_in("u30", &truth, &fields);
    let (start, end) = (span.start, span.end);
    let changed = truth[shown].1.replace("u30", "U30");
    let mut text = fields.text.clone();
    text[start..end].copy_from_slice(changed.as_bytes());
    let altered = encode(last_text_crc, &with_text(&fields, text));
    std::fs::write(&path, &altered).unwrap();
    let (before, after) = compress().expect("the pack is compressed");
    assert_eq!(before, altered.len() as u64);
    let stored = std::fs::read(&path).unwrap();
    assert_eq!(stored.len() as u64, after);
    assert!(after < before / 2, "{before} -> {after}");
    assert_eq!(u32::from_le_bytes(stored[8..12].try_into().unwrap()), 2);
    assert_eq!(stored[..8], altered[..8]);
    assert_eq!(stored[12..48], altered[12..48]);
    let read = messages_of(&store.inspect("s").unwrap());
    assert_eq!(
        read[shown].1, changed,
        "the compressed pack is what was read"
    );
    assert_eq!(read[..shown], truth[..shown]);
    assert_eq!(read[shown + 1..], truth[shown + 1..]);
    assert!(has_problem(
        &session_report(&store),
        "MSP-3",
        Severity::Error
    ));

    // The true pack, compressed: the log's messages, nothing reported.
    std::fs::write(&path, &pack).unwrap();
    assert!(compress().is_some());
    assert_eq!(messages_of(&store.open_session("s").unwrap().0), truth);
    let report = session_report(&store);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(
        compress(),
        None,
        "a compressed pack is not compressed again"
    );

    // Damage anywhere after the fixed fields: ignored, the messages come from the log.
    let compressed = std::fs::read(&path).unwrap();
    for at in [48, 52, 60, compressed.len() / 2, compressed.len() - 1] {
        let mut bytes = compressed.clone();
        bytes[at] ^= 0x04;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(
            messages_of(&store.inspect("s").unwrap()),
            truth,
            "byte {at}"
        );
        let report = session_report(&store);
        assert!(
            has_problem(&report, "MSP-1", Severity::Warning),
            "byte {at}: {:?}",
            report.problems
        );
    }
}

/// `Session::message_texts` lends the pack's text area (MSP-1) as it was checked: every
/// message the pack holds (MSP-4) is a slice of it, no other is, and the bytes stay as
/// they were after the session is gone and its pack rewritten (MSP-6), or when they are a
/// compressed pack's decompressed copy (MSP-8). No usable pack, or an in-memory session:
/// nothing to lend.
#[test]
fn message_texts_lend_the_pack_text_area_and_outlive_the_session() {
    let dir = common::scratch("message_pack", "lend");
    let (store, truth, pack) = packed_session(dir.as_ref(), 12);
    let fields = parse(&pack);
    let path = pack_path(dir.as_ref());

    let (mut session, _) = store.open_session("s").unwrap();
    let texts = session.message_texts().expect("a usable pack");
    assert_eq!(&texts[..], &fields.text[..]);
    // The spans the pack's entries give, by seq (MSP-1: entry i ends where i + 1 starts).
    let spans: std::collections::HashMap<u64, std::ops::Range<usize>> = fields
        .entries
        .iter()
        .scan(0, |start, &(seq, end)| {
            let span = *start..usize::try_from(end).unwrap();
            *start = span.end;
            Some((seq, span))
        })
        .collect();
    let mut lent = 0;
    session
        .each_message(|m| {
            let span = texts.span_of(m.json).expect("read from the pack");
            assert_eq!(span, spans[&m.seq]);
            assert_eq!(&texts[span], m.json.as_bytes());
            lent += 1;
        })
        .unwrap();
    assert_eq!(lent, truth.len());
    assert!(
        texts.span_of(&truth[0].1).is_none(),
        "an equal copy elsewhere"
    );
    // `each_lent_message` lends the same spans, and returns the same bytes.
    let (lent_texts, lent_spans) = all_lent(&session);
    assert_eq!(&lent_texts[..], &fields.text[..]);
    let expected: Vec<_> = truth
        .iter()
        .map(|(seq, _)| (*seq, spans[seq].clone()))
        .collect();
    assert_eq!(lent_spans, expected);

    // Messages after the pack come from the log: not lent. Closing rewrites the pack (as
    // many new nodes as it covers, MSP-5).
    for turn in 13..=24 {
        common::numbered_turn(&mut session, turn);
    }
    let mut after = 0;
    session
        .each_message(|m| {
            if m.seq >= fields.seq_next {
                assert_eq!(texts.span_of(m.json), None);
                after += 1;
            }
        })
        .unwrap();
    assert!(after > 0);
    let mut read = 0;
    session
        .each_lent_message(|seq, text| {
            if seq >= fields.seq_next {
                assert!(matches!(text, MessageText::Text(_)), "{seq} {text:?}");
                read += 1;
            }
        })
        .unwrap();
    assert_eq!(read, after);
    session.close().unwrap();
    assert!(
        std::fs::read(&path).unwrap() != pack,
        "a new pack was written"
    );
    assert_eq!(&texts[..], &fields.text[..], "the lent bytes are unchanged");

    // A compressed pack lends its decompressed text area, which outlives the session.
    #[cfg(feature = "compress")]
    {
        std::fs::write(&path, &pack).unwrap();
        store
            .compact_log_with("s", surfacelog::CompactOptions::new().compress(true))
            .unwrap();
        let view = store.inspect("s").unwrap();
        let decompressed = view.message_texts().expect("the compressed pack is usable");
        drop(view);
        assert_eq!(&decompressed[..], &fields.text[..]);
    }

    // A pack that does not check out (MSP-1) lends nothing; neither does a session in
    // memory.
    let mut damaged = pack.clone();
    *damaged.last_mut().unwrap() ^= 1;
    std::fs::write(&path, &damaged).unwrap();
    assert!(store.inspect("s").unwrap().message_texts().is_none());
    let memory: Session<MemLog> = Session::in_memory("m", &options(0)).unwrap();
    assert!(memory.message_texts().is_none());
}

/// A packed session of 12 turns in `dir` ([`packed_session`]), its messages, and a change
/// in place (the same inode) of a letter of the first message's text in the pack to the
/// byte given: still UTF-8, still JSON, another message.
fn pack_changed_in_place(dir: &Path) -> (Store, Messages, impl Fn(u8)) {
    use std::os::unix::fs::FileExt;
    let (store, truth, pack) = packed_session(dir, 12);
    let path = pack_path(dir);
    let fields = parse(&pack);
    let offset =
        pack.len() - fields.text.len() + fields.text.iter().position(|&b| b == b'u').unwrap();
    let change = move |byte: u8| {
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&[byte], offset as u64).unwrap();
    };
    (store, truth, change)
}

/// MSP-4: a session keeps its pack mapped, and a map is not a copy: bytes changed in place
/// after the pack was read and checked (what a page read again from failing media, or a
/// write that is not the engine's, gives) are checked again as the next read of every
/// message begins, and the pack is not used from then on: the messages come from the
/// log, by a writer and by a read-only inspection alike; the writer's close writes a
/// sound pack again.
#[test]
fn msp_4_a_pack_changed_in_place_under_a_held_session_is_not_used_again() {
    let dir = common::scratch("message_pack", "in-place");
    let (store, truth, change) = pack_changed_in_place(dir.as_ref());
    let (writer, _) = store.open_session("s").unwrap();
    let reader = store.inspect("s").unwrap();
    for session_messages in [&(|| messages_of(&writer)) as &dyn Fn() -> Messages, &|| {
        messages_of(&reader)
    }] {
        change(b'u');
        assert_eq!(session_messages(), truth, "read through the pack");
        change(b'v');
        assert_eq!(session_messages(), truth, "the changed pack is not used");
        change(b'u');
        assert_eq!(session_messages(), truth, "nor after it is put back");
    }
    assert!(
        reader.message_texts().is_none(),
        "nothing of it is lent either"
    );
    drop(reader);
    change(b'v');
    writer.close().unwrap();
    // The pack was written again at close (MSP-5: the old one unusable): it checks out,
    // and a new session reads its messages from it.
    let (session, _) = store.open_session("s").unwrap();
    assert_eq!(messages_of(&session), truth);
    assert!(session.message_texts().is_some());
    let report = session_report(&store);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// MSP-4: the pack loaded by `Session::message_texts` outside a read of the messages is
/// checked again by the next read all the same: its load's check is not taken for one made
/// for that read.
#[test]
fn msp_4_a_pack_loaded_by_message_texts_is_checked_again_by_the_next_read() {
    let dir = common::scratch("message_pack", "texts-then-read");
    let (store, truth, change) = pack_changed_in_place(dir.as_ref());
    let reader = store.inspect("s").unwrap();
    assert!(reader.message_texts().is_some(), "loaded and checked");
    change(b'v');
    assert_eq!(messages_of(&reader), truth);
    assert!(reader.message_texts().is_none(), "found changed, not lent");
}

/// MSP-4: a read of every message whose caller's visit panics (caught, as a server's task
/// runner does) still ends: the next read, the pack changed in place since, checks it
/// again and reads the log instead of returning the changed bytes.
#[test]
fn msp_4_a_read_whose_visit_panicked_leaves_later_reads_checking_the_pack() {
    let dir = common::scratch("message_pack", "visit-panics");
    let (store, truth, change) = pack_changed_in_place(dir.as_ref());
    let reader = store.inspect("s").unwrap();
    // The first read loads (and checks) the pack; its visit panics at the first message.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        reader
            .each_message(|_| panic!("the caller's visit fails"))
            .unwrap();
    }));
    assert!(panicked.is_err());
    change(b'v');
    assert_eq!(messages_of(&reader), truth, "the changed pack is not used");
}
