//! The DSH session corpus (`tests/data/dsh-sessions*`, vendored from the shared fixtures):
//! every real and damaged log imports with exactly the reference loader's outcome in its
//! `expected/` file, and exports back byte for byte (the files' READMEs say how).

// The DSH adapters are the `dsh` feature.
#![cfg(feature = "dsh")]

use std::path::{Path, PathBuf};

use surfacelog::internals::adapters::jsonl::{self, Compression};
use surfacelog::internals::json::{Json, Kind, Value, equal};
use surfacelog::internals::store::{Store, StoreOptions};

fn data(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(dir)
}

mod common;

fn scratch(name: &str) -> common::Scratch {
    common::scratch("corpus", name)
}

fn fixtures(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(data(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    files
}

fn seqs(value: Value<'_, '_>) -> Vec<u64> {
    value
        .elements()
        .map(|v| v.as_safe_u64().expect("a seq"))
        .collect()
}

/// What went wrong with one fixture, or `None` when it matched.
fn check_fixture(corpus: &str, file: &Path, scratch_dir: &Path) -> Option<String> {
    let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
    let expected_text =
        std::fs::read_to_string(data(corpus).join("expected").join(format!("{stem}.json")))
            .unwrap();
    let expected = Json::parse(&expected_text).unwrap();
    let expected = expected.root();
    let original = std::fs::read(file).unwrap();

    let store_dir = scratch_dir.join(&stem);
    let store = Store::open_or_create(&store_dir, StoreOptions::default()).unwrap();
    let outcome = jsonl::import_jsonl(&store, file, Compression::None, None, &mut |_| {});
    assert_eq!(
        std::fs::read(file).unwrap(),
        original,
        "{stem}: the source changed"
    );

    if !expected.get("ok").unwrap().as_bool().unwrap() {
        return check_refusal(&stem, expected, outcome.map(|_| ()), &store, &store_dir);
    }
    let (imported, scan) = match outcome {
        Ok(done) => done,
        Err(error) => return Some(format!("{stem}: refused: {error}")),
    };
    let session = store.inspect(&imported.id).unwrap();
    let mut problems = Vec::new();

    let header = jsonl::logical_header(session.header());
    if !equal(
        Json::parse(&header).unwrap().root(),
        expected.get("header").unwrap(),
    ) {
        problems.push(format!("header {header}"));
    }
    if Some(imported.events) != expected.get("storedEvents").unwrap().as_safe_u64() {
        problems.push(format!("storedEvents {}", imported.events));
    }
    let closers = expected.get("closers").unwrap();
    let closers_ok = closers.len() == imported.closers.len()
        && closers
            .elements()
            .zip(&imported.closers)
            .all(|(want, got)| equal(want, Json::parse(got).unwrap().root()));
    if !closers_ok {
        problems.push(format!("closers {:?}", imported.closers));
    }
    if session.surface().nodes() != seqs(expected.get("surface").unwrap()).as_slice() {
        problems.push(format!("surface {:?}", session.surface().nodes()));
    }
    let messages = session.messages().unwrap();
    let message_seqs: Vec<u64> = messages.iter().map(|m| m.seq).collect();
    if message_seqs != seqs(expected.get("messageSeqs").unwrap()) {
        problems.push(format!("messageSeqs {message_seqs:?}"));
    }
    let want = expected.get("messages").unwrap();
    let messages_ok = want.len() == messages.len()
        && want
            .elements()
            .zip(&messages)
            .all(|(w, got)| equal(w, Json::parse(got.json).unwrap().root()));
    if !messages_ok {
        problems.push("messages differ".to_owned());
    }
    let truncated = expected.get("truncatedTo").unwrap();
    let torn_at = scan.torn.as_ref().map(|t| t.offset);
    let want_torn = (truncated.kind() != Kind::Null).then(|| truncated.as_safe_u64().unwrap());
    if torn_at != want_torn {
        problems.push(format!("truncatedTo {torn_at:?}"));
    }

    check_export(
        &stem,
        expected,
        &original,
        want_torn,
        &imported,
        &session,
        scratch_dir,
        &mut problems,
    );
    drop(session);
    (!problems.is_empty()).then(|| format!("{stem}: {}", problems.join("; ")))
}

/// An import the reference refuses: refused here in the same category, nothing stored.
fn check_refusal(
    stem: &str,
    expected: Value<'_, '_>,
    outcome: surfacelog::Result<()>,
    store: &Store,
    store_dir: &Path,
) -> Option<String> {
    let Err(error) = outcome else {
        return Some(format!("{stem}: imported, but the reference refuses it"));
    };
    let message = expected
        .get("error")
        .and_then(|e| e.get("message"))
        .and_then(|m| m.as_str())
        .unwrap()
        .into_owned();
    // Compare the category of the refusal, not its text.
    let category_ok = match error.code() {
        "CORRUPT" => {
            let text = error.to_string();
            (message.contains("first line is not a session header")
                && text.contains("not a session header"))
                || (message.contains("unparsable") && text.contains("unparsable"))
                || (message.contains("seq gap") && text.contains("seq gap"))
        }
        _ => false,
    };
    if !category_ok {
        return Some(format!("{stem}: refused as {error}, reference: {message}"));
    }
    let left =
        store.list().unwrap().len() + std::fs::read_dir(store_dir.join("tmp")).unwrap().count();
    if left != 0 {
        return Some(format!("{stem}: a refused import left {left} entries"));
    }
    None
}

/// The export after the committed repair equals the repaired file byte for byte, and
/// importing that file again needs no repair.
#[expect(
    clippy::too_many_arguments,
    reason = "one fixture's state, checked in place"
)]
fn check_export(
    stem: &str,
    expected: Value<'_, '_>,
    original: &[u8],
    want_torn: Option<u64>,
    imported: &surfacelog::internals::store::Imported,
    session: &surfacelog::internals::session::Session<surfacelog::internals::store::ReadOnlyLog>,
    scratch_dir: &Path,
    problems: &mut Vec<String>,
) {
    // Export: the repaired file, byte for byte.
    let appended = expected.get("repairAppended").unwrap().as_str().unwrap();
    let mut want_bytes =
        original[..usize::try_from(want_torn.unwrap_or(original.len() as u64)).unwrap()].to_vec();
    want_bytes.extend_from_slice(appended.as_bytes());
    let out = scratch_dir.join(format!("{stem}.export.jsonl"));
    let exported = jsonl::export_file(
        &out,
        session.header(),
        session.log(),
        true,
        Compression::None,
    );
    if let Err(error) = exported {
        problems.push(format!("export failed: {error}"));
    } else if std::fs::read(&out).unwrap() != want_bytes {
        problems.push("export differs from the repaired file".to_owned());
    } else {
        // A second import of the repaired file is clean.
        let again = Store::open_or_create(
            scratch_dir.join(format!("{stem}-again")),
            StoreOptions::default(),
        )
        .unwrap();
        match jsonl::import_jsonl(&again, &out, Compression::None, None, &mut |_| {}) {
            Ok((second, scan)) => {
                if !second.closers.is_empty() || scan.torn.is_some() {
                    problems.push("the repaired file needs repair again".to_owned());
                }
                if second.events != imported.events + imported.closers.len() as u64 {
                    problems.push(format!("reimport holds {} events", second.events));
                }
            }
            Err(error) => problems.push(format!("reimport refused: {error}")),
        }
    }
}

fn run_corpus(corpus: &str, expected_files: usize) {
    let dir = scratch(corpus);
    let files = fixtures(corpus);
    assert_eq!(
        files.len(),
        expected_files,
        "the vendored corpus is complete"
    );
    let failures: Vec<String> = files
        .iter()
        .filter_map(|file| check_fixture(corpus, file, &dir))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} fixtures differ:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn real_sessions_import_and_export_exactly() {
    run_corpus("dsh-sessions", 115);
}

#[test]
fn damaged_sessions_repair_like_the_reference() {
    run_corpus("dsh-sessions-damaged", 127);
}
