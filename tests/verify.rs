//! `surfacelog verify` and `store::verify` (`store.md` STORE-16): a clean store checks out,
//! through the library and the command line; each class of damage is reported with its file,
//! offset and rule; and one flipped byte anywhere in a session's log, indexes, limits or
//! checkpoint is always reported, never a panic.

use std::path::{Path, PathBuf};

use surfacelog::internals::log::Durability;
use surfacelog::internals::session::{Boundary, Session, SessionLog};
use surfacelog::internals::store::{Severity, Store, StoreOptions, VerifyReport};

mod common;

#[cfg(feature = "cli")]
use common::surfacelog;
use common::{files_ending, numbered_turn, prune_to_empty};

/// A store in a scratch directory, removed when dropped.
struct Fixture {
    dir: common::ScratchPath,
    store: Store,
}

/// Turns with a tool call each, and a prune every other turn (replacements: keys and a
/// replace generation in the checkpoint).
fn workload<L: SessionLog>(session: &mut Session<L>, turns: u64) {
    for turn in 1..=turns {
        let stored = numbered_turn(session, turn);
        if turn % 2 == 0 {
            prune_to_empty(session, stored.result);
        }
    }
}

/// Session `a`: `turns` turns over several 1 KiB segments of the default records (compact
/// records, §4.2), closed (indexes, checkpoint); session `b`: a fork of `a` inside one of
/// its sealed segments (a limit file), closed; with `small`, session `c`: two turns.
fn fixture(name: &str, turns: u64, small: bool) -> Fixture {
    fixture_with(
        name,
        turns,
        small,
        common::store_options(Durability::Manual, 1 << 10),
    )
}

/// [`fixture`] of a store opened with `options`.
fn fixture_with(name: &str, turns: u64, small: bool, options: StoreOptions) -> Fixture {
    let dir = common::scratch_path("verify", name);
    let store = Store::open_or_create(&dir, options).unwrap();
    let mut a = store.create("a", None, None).unwrap();
    workload(&mut a, turns);
    a.close().unwrap();
    let forked = (10..40).find_map(|seq| store.fork("a", Boundary::Seq(seq), "b").ok());
    let mut b = forked.expect("a fork boundary");
    workload(&mut b, 1);
    b.close().unwrap();
    if small {
        let mut c = store.create("c", None, None).unwrap();
        workload(&mut c, 2);
        c.close().unwrap();
    }
    let fixture = Fixture { dir, store };
    assert!(
        files(&fixture, "a", ".seg").len() >= 3,
        "a spans several segments"
    );
    assert_eq!(files(&fixture, "b", ".lim").len(), 1, "b has a limit");
    assert!(!files(&fixture, "a", ".idx").is_empty(), "a has indexes");
    assert!(fixture.dir.join("sessions/a/checkpoint").exists());
    fixture
}

/// The files of session `id`'s log ending with `suffix`, in name order.
fn files(fixture: &Fixture, id: &str, suffix: &str) -> Vec<PathBuf> {
    files_ending(&fixture.dir.join("sessions").join(id).join("log"), suffix)
}

#[cfg(feature = "cli")]
fn cli_verify(fixture: &Fixture, extra: &[&str]) -> (i32, String) {
    let mut args = vec!["verify", "--store", fixture.dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    let output = surfacelog(&args);
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
    )
}

fn report(fixture: &Fixture) -> VerifyReport {
    fixture.store.verify(None).unwrap()
}

/// Asserts that the report names `file` (relative to the store) with `rule`, at `offset`
/// when given, as an error of session `id`.
#[track_caller]
fn assert_reported(report: &VerifyReport, id: &str, file: &Path, rule: &str, offset: Option<u64>) {
    let file = report.relative(file).to_owned();
    let found = report.sessions.iter().filter(|s| s.id == id).any(|s| {
        !s.ok()
            && s.problems.iter().any(|p| {
                report.relative(&p.file) == file
                    && p.rule == rule
                    && p.severity == Severity::Error
                    && offset.is_none_or(|o| p.offset == Some(o))
            })
    });
    assert!(
        found,
        "expected {id}: {} [{rule}] at {offset:?} in:\n{}",
        file.display(),
        report.lines().join("\n")
    );
}

/// An offset inside the checksummed bytes of the first record of the segment file `path`
/// (its middle), and the record's offset.
fn inside_first_record(path: &Path) -> (u64, u64) {
    let first = common::segment_records(&std::fs::read(path).unwrap()).remove(0);
    let middle = first.at.start.midpoint(first.at.end);
    (middle as u64, first.at.start as u64)
}

fn flip(path: &Path, at: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[usize::try_from(at).unwrap()] ^= 0x20;
    std::fs::write(path, bytes).unwrap();
}

/// A [`fixture`] `name` of 6 turns, and the first file of session `id` ending with
/// `suffix` and its bytes before the byte at `at` was flipped in it.
fn flipped_first(name: &str, id: &str, suffix: &str, at: u64) -> (Fixture, PathBuf, Vec<u8>) {
    let fixture = fixture(name, 6, false);
    let file = files(&fixture, id, suffix)[0].clone();
    let original = std::fs::read(&file).unwrap();
    flip(&file, at);
    (fixture, file, original)
}

/// Every file of the store and its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_clean_store_checks_out_and_nothing_is_changed() {
    let fixture = fixture("clean", 6, true);
    let before = snapshot(&fixture.dir);
    let report = report(&fixture);
    assert!(report.ok(), "{}", report.lines().join("\n"));
    assert!(report.store.is_empty());
    let ids: Vec<&str> = report.sessions.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert!(
        report.sessions.iter().all(|s| s.problems.is_empty()),
        "{:?}",
        report.lines()
    );
    #[cfg(feature = "cli")]
    {
        let (code, stdout) = cli_verify(&fixture, &[]);
        assert_eq!(code, 0, "{stdout}");
        assert_eq!(stdout, "a: ok\nb: ok\nc: ok\n");
        let (code, stdout) = cli_verify(&fixture, &["b", "--json"]);
        assert_eq!(code, 0);
        assert_eq!(
            stdout.trim_end(),
            r#"{"store":[],"sessions":[{"id":"b","ok":true,"problems":[]}],"ok":true}"#
        );
    }
    assert_eq!(snapshot(&fixture.dir), before, "verify changed no file");
}

#[cfg(feature = "cli")]
#[test]
fn refused_input_and_a_missing_store() {
    let fixture = fixture("refused", 3, false);
    let output = surfacelog(&["verify", "--store", fixture.dir.to_str().unwrap(), "nope"]);
    assert_eq!(output.status.code(), Some(5), "not found");
    assert!(String::from_utf8_lossy(&output.stderr).contains("SESSION_NOT_FOUND"));
    let missing = fixture.dir.join("no-such-store");
    let output = surfacelog(&["verify", "--store", missing.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(5), "not found");
    assert!(String::from_utf8_lossy(&output.stderr).starts_with("error[STORE_NOT_FOUND]: "));
    assert!(!missing.exists(), "verify never creates a store");
}

#[test]
fn flipped_records_in_two_sealed_segments_are_both_reported() {
    let fixture = fixture("sealed", 6, false);
    let segments = files(&fixture, "a", ".seg");
    for segment in &segments[..2] {
        let (inside, record) = inside_first_record(segment);
        assert_eq!(record, 64);
        flip(segment, inside);
    }
    let report = report(&fixture);
    assert_reported(&report, "a", &segments[0], "REC-2", Some(64));
    assert_reported(&report, "a", &segments[1], "REC-2", Some(64));
    #[cfg(feature = "cli")]
    {
        let (code, stdout) = cli_verify(&fixture, &["a"]);
        assert_eq!(code, 1);
        assert!(
            stdout.contains("a: sessions/a/log/00000000000000000000.seg offset=64 [REC-2]"),
            "{stdout}"
        );
        let (code, stdout) = cli_verify(&fixture, &["a", "--json"]);
        assert_eq!(code, 1);
        assert!(stdout.contains(r#""offset":64,"rule":"REC-2""#), "{stdout}");
        assert!(stdout.ends_with("\"ok\":false}\n"), "{stdout}");
    }
}

#[test]
fn a_flipped_record_in_the_last_segment() {
    let fixture = fixture("last", 6, false);
    let last = files(&fixture, "a", ".seg").pop().unwrap();
    let (inside, record) = inside_first_record(&last);
    assert_eq!(record, 64);
    flip(&last, inside);
    assert_reported(&report(&fixture), "a", &last, "REC-2", Some(64));
}

#[test]
fn a_flipped_segment_header() {
    let fixture = fixture("header", 6, false);
    let segment = files(&fixture, "a", ".seg")[1].clone();
    flip(&segment, 20);
    let report = report(&fixture);
    assert_reported(&report, "a", &segment, "SEG-2", Some(0));
}

/// Rewrites an index's `crc` (IDX-1: bytes 0..52, then the offsets) after a change.
fn redo_index_crc(path: &Path, change: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).unwrap();
    change(&mut bytes);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[..52]), &bytes[56..]);
    bytes[52..56].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_damaged_index_its_offsets_and_its_data_crc() {
    let (fixture, index, original) = flipped_first("index", "a", ".idx", 60);
    // A crc that fails may be a crash's tear of a cache written without a sync: a warning.
    let torn = report(&fixture);
    assert!(torn.ok(), "{}", torn.lines().join("\n"));
    assert!(
        torn.sessions[0]
            .problems
            .iter()
            .any(|p| p.rule == "IDX-2" && p.offset == Some(52) && p.severity == Severity::Warning),
        "{}",
        torn.lines().join("\n")
    );
    std::fs::write(&index, &original).unwrap();
    redo_index_crc(&index, |b| b[60] = b[60].wrapping_add(8));
    assert_reported(&report(&fixture), "a", &index, "IDX-2", Some(60));
    std::fs::write(&index, &original).unwrap();
    redo_index_crc(&index, |b| b[44] ^= 1);
    assert_reported(&report(&fixture), "a", &index, "IDX-1", Some(44));
    std::fs::write(&index, &original).unwrap();
    assert!(report(&fixture).ok());
}

#[test]
fn a_damaged_limit() {
    let (fixture, limit, original) = flipped_first("limit", "b", ".lim", 44);
    assert_reported(&report(&fixture), "b", &limit, "LIM-2", Some(60));
    // A limit whose crc checks out but whose last record is not where it says (LIM-3).
    let mut bytes = original.clone();
    let last = u32::from_le_bytes(bytes[48..52].try_into().unwrap());
    bytes[48..52].copy_from_slice(&(last - 8).to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..60]);
    bytes[60..64].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&limit, &bytes).unwrap();
    assert_reported(&report(&fixture), "b", &limit, "LIM-3", Some(48));
}

#[test]
fn a_damaged_checkpoint_nodes_and_header() {
    let fixture = fixture("checkpoint", 6, false);
    let checkpoint = fixture.dir.join("sessions/a/checkpoint");
    flip(&checkpoint, 48);
    assert_reported(&report(&fixture), "a", &checkpoint, "CKP-2", None);
    flip(&checkpoint, 48);
    assert!(report(&fixture).ok());
    flip(&checkpoint, 16);
    assert_reported(&report(&fixture), "a", &checkpoint, "CKP-1", None);
}

#[test]
fn a_deleted_middle_segment() {
    let fixture = fixture("middle", 6, false);
    let segments = files(&fixture, "a", ".seg");
    std::fs::remove_file(&segments[1]).unwrap();
    let report = report(&fixture);
    assert_reported(&report, "a", &segments[1], "LOG-2", None);
    assert_reported(&report, "a", &segments[2], "SEG-3", Some(32));
}

#[test]
fn a_deleted_last_segment_is_lost_data() {
    let fixture = fixture("lastgone", 6, false);
    let last = files(&fixture, "a", ".seg").pop().unwrap();
    std::fs::remove_file(&last).unwrap();
    let report = report(&fixture);
    let checkpoint = fixture.dir.join("sessions/a/checkpoint");
    assert_reported(&report, "a", &checkpoint, "CKP-3", Some(16));
    assert_reported(&report, "a", &last.with_extension("idx"), "LOG-1", None);
}

#[test]
fn a_truncated_segment() {
    let fixture = fixture("truncated", 6, false);
    let segment = files(&fixture, "a", ".seg")[1].clone();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    file.set_len(200).unwrap();
    drop(file);
    let report = report(&fixture);
    assert_reported(&report, "a", &segment, "SEG-6", Some(200));
}

#[test]
fn a_stray_file_is_a_warning() {
    let fixture = fixture("stray", 3, false);
    let stray = fixture.dir.join("sessions/a/log/notes.txt");
    std::fs::write(&stray, "hello").unwrap();
    let report = report(&fixture);
    assert!(report.ok(), "a warning is not an error");
    let a = &report.sessions[0];
    assert!(
        a.problems
            .iter()
            .any(|p| p.file == stray && p.rule == "LOG-1" && p.severity == Severity::Warning),
        "{:?}",
        a.problems
    );
    #[cfg(feature = "cli")]
    {
        let (code, stdout) = cli_verify(&fixture, &["a"]);
        assert_eq!(code, 0);
        assert!(
            stdout.contains("sessions/a/log/notes.txt [LOG-1] warning: "),
            "{stdout}"
        );
        assert!(stdout.ends_with("a: ok\n"), "{stdout}");
    }
}

#[test]
fn a_header_naming_another_id() {
    let fixture = fixture("otherid", 3, false);
    let header = fixture.dir.join("sessions/a/header.json");
    let text = std::fs::read_to_string(&header).unwrap();
    assert!(text.contains(r#""id":"a""#), "{text}");
    std::fs::write(&header, text.replace(r#""id":"a""#, r#""id":"z""#)).unwrap();
    let report = report(&fixture);
    assert_reported(&report, "z", &header, "STORE-3", None);
    let report = fixture.store.verify(Some(&["a"])).unwrap();
    assert_reported(&report, "a", &header, "STORE-3", None);
    #[cfg(feature = "cli")]
    {
        let (code, _) = cli_verify(&fixture, &["a"]);
        assert_eq!(code, 1);
    }
}

/// One flipped byte anywhere in a closed multi-segment session's log (segments, indexes,
/// the limit of its fork) or checkpoint is reported, naming that file, and never panics.
/// `header.json` has no checksum (a flipped digit can be another valid header), so it is
/// not swept. Segments are swept at every 7th byte past their records, every byte before.
/// In each record format: compact records (the default) and version 1 records.
#[test]
fn every_flipped_byte_is_reported() {
    every_flipped_byte_is_reported_in(&fixture("sweep", 4, false));
}

#[test]
fn every_flipped_byte_of_a_store_of_version_1_records_is_reported() {
    let options = common::v1_store_options(Durability::Manual, 2 << 10);
    every_flipped_byte_is_reported_in(&fixture_with("sweep-v1", 4, false, options));
}

fn every_flipped_byte_is_reported_in(fixture: &Fixture) {
    assert!(report(fixture).ok());
    let mut targets: Vec<PathBuf> = ["a", "b"]
        .iter()
        .flat_map(|id| files(fixture, id, ""))
        .filter(|p| !p.ends_with("LOCK"))
        .collect();
    targets.push(fixture.dir.join("sessions/a/checkpoint"));
    targets.push(fixture.dir.join("sessions/b/checkpoint"));
    // b's shared segments and indexes are hard links to a's: each file once.
    let mut inodes = std::collections::HashSet::new();
    targets.retain(|p| {
        inodes.insert(std::os::unix::fs::MetadataExt::ino(
            &std::fs::metadata(p).unwrap(),
        ))
    });
    let mut checked = 0;
    for path in targets {
        let original = std::fs::read(&path).unwrap();
        let used = original.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
        let name = path.file_name().unwrap().to_owned();
        for at in (0..original.len()).filter(|&at| at < used + 8 || at % 7 == 0) {
            let mut damaged = original.clone();
            damaged[at] ^= 0x01;
            std::fs::write(&path, &damaged).unwrap();
            // A file b shares with a (a hard link) is a's, found first.
            let owner = if path.starts_with(fixture.dir.join("sessions/a")) {
                "a"
            } else {
                "b"
            };
            let report = fixture.store.verify(Some(&[owner])).unwrap();
            // An index is a cache a crash may tear (IDX-2): its damage is a warning.
            let cache = path.extension().is_some_and(|e| e == "idx");
            let named = report.problems().any(|(_, p)| {
                (p.severity == Severity::Error || cache) && p.file.file_name() == Some(&name)
            });
            assert!(
                named,
                "byte {at} of {} not reported:\n{}",
                path.display(),
                report.lines().join("\n")
            );
            checked += 1;
        }
        std::fs::write(&path, &original).unwrap();
    }
    assert!(report(fixture).ok());
    assert!(checked > 1000, "{checked} flips");
}

/// STORE-1, STORE-16: verify follows no link. A sealed segment, an index and the checkpoint
/// replaced by links to intact copies outside the store are reported (or refused with
/// `UNSAFE_PATH`) naming the link, never read as if they were the store's.
#[test]
fn verify_follows_no_link() {
    let fixture = fixture("links", 6, false);
    let outside = common::scratch("verify", "links-outside");
    let checkpoint = fixture.dir.join("sessions/a/checkpoint");
    let targets = [
        files(&fixture, "a", ".seg")[0].clone(),
        files(&fixture, "a", ".idx")[0].clone(),
        checkpoint,
    ];
    for (n, path) in targets.iter().enumerate() {
        let copy = outside.join(format!("copy-{n}"));
        std::fs::copy(path, &copy).unwrap();
        std::fs::remove_file(path).unwrap();
        std::os::unix::fs::symlink(&copy, path).unwrap();
        // Reported as a problem of the link, or refused naming it: never checked out.
        match fixture.store.verify(None) {
            Ok(report) => assert!(
                !report.ok() && report.sessions[0].problems.iter().any(|p| p.file == *path),
                "{}",
                report.lines().join("\n")
            ),
            Err(error) => {
                assert_eq!(error.code(), "UNSAFE_PATH", "{error}");
                assert!(
                    error.to_string().contains(&*path.to_string_lossy()),
                    "{error}"
                );
            }
        }
        std::fs::remove_file(path).unwrap();
        std::fs::copy(&copy, path).unwrap();
    }
    let report = report(&fixture);
    assert!(report.ok(), "{}", report.lines().join("\n"));
}
