//! Importing a host's DSH sessions into the verbatim store (`verbatim-store.md` VBT-11):
//! every vendored real log imports with the reference loader's header and event count and
//! its scalar records byte for byte (and every log the reference refuses is reported, not
//! imported); `SQLite` databases import as they read; the JSONL root's
//! layout rules (DIR-5, DIR-6, DIR-8, DIR-9) refuse what DSH refuses; sources stay untouched.

#![cfg(feature = "dsh")]

use std::path::{Path, PathBuf};

use surfacelog::internals::adapters::sqlite::export_session;
use surfacelog::internals::json::{Json, equal};
use surfacelog::internals::session::{Options, Session};
use surfacelog::{DshSource, VerbatimStore};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/dsh-sessions")
}

mod common;

fn fixtures() -> Vec<PathBuf> {
    common::files_ending(&corpus(), ".jsonl")
}

/// The id a JSONL log's header line names.
fn id_of(text: &str) -> String {
    let line = text.lines().next().unwrap();
    let json = Json::parse(line).unwrap();
    json.root()
        .get("id")
        .unwrap()
        .as_str()
        .unwrap()
        .into_owned()
}

/// DIR-3 for the ids of the corpus and these tests (ASCII).
fn dir_name(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
                char::from(b).to_string()
            } else {
                format!("~{b:04X}")
            }
        })
        .collect()
}

/// Puts `text` where DSH's JSONL backend keeps session `id` under `root` (DIR-1).
fn place(root: &Path, id: &str, text: &str) -> PathBuf {
    let dir = root.join(project_name(text)).join(dir_name(id));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("session.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

/// DIR-2 for the `cwd` of the header line of `text` (ASCII `cwd`s): the project directory
/// DSH keeps the log in (DIR-9 refuses it anywhere else).
fn project_name(text: &str) -> String {
    use std::fmt::Write;
    let line = text.lines().next().unwrap();
    let json = Json::parse(line).unwrap();
    let Some(cwd) = json.root().get("cwd").and_then(|c| c.as_str()) else {
        return "_no-cwd".to_owned();
    };
    let mut slug = String::new();
    let mut separator = false;
    for b in cwd.bytes() {
        if matches!(b, b'/' | b'\\' | b':') {
            if !separator {
                slug.push('-');
            }
            separator = true;
            continue;
        }
        separator = false;
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            slug.push(char::from(b));
        } else {
            let _ = write!(slug, "~{b:04X}");
        }
    }
    let slug = slug.trim_start_matches('-');
    let slug = if slug.is_empty() { "root" } else { slug };
    format!("--{}--", &slug[..slug.len().min(251)])
}

/// The elements of a JSON array text, each as its exact text.
fn elements(array: &str) -> Vec<String> {
    let json = Json::parse(array).unwrap();
    json.root().elements().map(|e| e.raw().to_owned()).collect()
}

#[test]
fn every_real_log_imports_as_the_reference_reads_it() {
    let scratch = tempfile::tempdir().unwrap();
    let mut refused = 0;
    for (n, fixture) in fixtures().iter().enumerate() {
        let name = fixture.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(fixture).unwrap();
        let id = id_of(&text);
        let root = scratch.path().join(format!("jsonl-{n}"));
        let source = place(&root, &id, &text);
        let store = VerbatimStore::new(scratch.path().join(format!("store-{n}")));
        let report = store.import_dsh(&DshSource::Jsonl(root.clone())).unwrap();
        let expected =
            std::fs::read_to_string(corpus().join("expected").join(format!("{name}.json")))
                .unwrap();
        let expected = Json::parse(&expected).unwrap();
        if !expected.root().get("ok").unwrap().is_true() {
            // The reference refuses it: reported with the file, not imported.
            assert!(report.imported.is_empty(), "{name}");
            assert_eq!(report.refused.len(), 1, "{name}");
            assert_eq!(report.refused[0].place, source.display().to_string());
            assert_eq!(report.refused[0].id.as_ref(), Some(&id), "{name}");
            assert_eq!(report.refused[0].error.code(), "CORRUPT", "{name}");
            assert_eq!(store.load(&id, 0).unwrap(), None);
            refused += 1;
            continue;
        }
        assert_eq!(report.imported, std::slice::from_ref(&id), "{name}");
        let read = store.load(&id, 0).unwrap().unwrap();
        let header = Json::parse(&read.header).unwrap();
        assert!(
            equal(header.root(), expected.root().get("header").unwrap()),
            "{name}: {}",
            read.header
        );
        let stored = expected
            .root()
            .get("storedEvents")
            .unwrap()
            .as_safe_u64()
            .unwrap();
        assert_eq!(read.count, stored, "{name}");
        // Scalar records are stored byte for byte; packed rows as their expanded events.
        let events = elements(&read.events);
        for line in text.lines().skip(1) {
            let record = Json::parse(line).unwrap();
            if record.root().get("seq0").is_none() {
                assert!(
                    events.iter().any(|e| e == line),
                    "{name}: {line} not stored as given"
                );
            }
        }
        let seqs: Vec<u64> = events
            .iter()
            .map(|e| {
                Json::parse(e)
                    .unwrap()
                    .root()
                    .get("seq")
                    .unwrap()
                    .as_safe_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(seqs, (0..stored).collect::<Vec<_>>(), "{name}");
        // Once: a second import leaves the session, and the source is only read.
        let again = store.import_dsh(&DshSource::Jsonl(root)).unwrap();
        assert_eq!((again.imported.len(), again.present), (0, vec![id]));
        assert_eq!(std::fs::read_to_string(&source).unwrap(), text);
    }
    // The corpus's expected results say which logs the reference refuses.
    assert_eq!(refused, 26);
}

#[test]
fn sqlite_sessions_import_as_the_database_reads_them() {
    let scratch = tempfile::tempdir().unwrap();
    let database = scratch.path().join("dsh").join("sessions.db");
    std::fs::create_dir_all(database.parent().unwrap()).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let private = std::fs::Permissions::from_mode(0o700);
        std::fs::set_permissions(database.parent().unwrap(), private).unwrap();
    }
    // Each log's events as the JSONL import stores them, exported to one database.
    let mut expected = Vec::new();
    for (n, fixture) in fixtures().iter().take(12).enumerate() {
        let text = std::fs::read_to_string(fixture).unwrap();
        let id = id_of(&text);
        if expected.iter().any(|(known, _, _)| *known == id) {
            continue;
        }
        let root = scratch.path().join(format!("jsonl-{n}"));
        place(&root, &id, &text);
        let store = VerbatimStore::new(scratch.path().join(format!("store-{n}")));
        store.import_dsh(&DshSource::Jsonl(root)).unwrap();
        let Some(read) = store.load(&id, 0).unwrap() else {
            continue; // a log the reference refuses
        };
        let events = elements(&read.events);
        let texts: Vec<&str> = events.iter().map(String::as_str).collect();
        let (session, _) = Session::reopen(&id, &read.header, &texts, Options::default()).unwrap();
        export_session(&database, session.header(), session.log(), true).unwrap();
        expected.push((id, read.header, events));
    }
    let store = VerbatimStore::new(scratch.path().join("from-sqlite"));
    let report = store.import_dsh(&DshSource::Sqlite(database)).unwrap();
    let mut ids: Vec<String> = expected.iter().map(|(id, _, _)| id.clone()).collect();
    ids.sort();
    assert_eq!(report.imported, ids);
    for (id, header, events) in &expected {
        let read = store.load(id, 0).unwrap().unwrap();
        let (a, b) = (
            Json::parse(&read.header).unwrap(),
            Json::parse(header).unwrap(),
        );
        assert!(
            equal(a.root(), b.root()),
            "{id}: {} vs {header}",
            read.header
        );
        let imported = elements(&read.events);
        assert_eq!(imported.len(), events.len(), "{id}");
        for (got, want) in imported.iter().zip(events) {
            let (a, b) = (Json::parse(got).unwrap(), Json::parse(want).unwrap());
            assert!(equal(a.root(), b.root()), "{id}: {got} vs {want}");
        }
    }
}

#[test]
fn dir_rules_refuse_what_dsh_refuses() {
    let header = |id: &str| {
        format!(
            "{{\"type\":\"session\",\"version\":0,\"id\":\"{id}\",\"createdAt\":1,\"delegationDepth\":0}}\n\
             {{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{{\"turn\":1}}}}\n"
        )
    };
    let scratch = tempfile::tempdir().unwrap();
    // Each log a rule refuses is reported with its id (where its directory names one),
    // not imported; the other sessions of the root are.
    let refused = |root: &Path, rule: &str, ids: &[Option<&str>]| {
        place(root, "fine", &header("fine"));
        let store = VerbatimStore::new(root.join("..").join(format!("store-{rule}")));
        let report = store
            .import_dsh(&DshSource::Jsonl(root.to_owned()))
            .unwrap();
        assert_eq!(report.imported, ["fine"], "{rule}");
        let got: Vec<Option<&str>> = report.refused.iter().map(|r| r.id.as_deref()).collect();
        assert_eq!(got, ids, "{rule}");
        for refused in &report.refused {
            assert_eq!(refused.error.code(), "CORRUPT", "{}", refused.error);
            assert!(
                refused.error.to_string().contains(rule),
                "{rule}: {}",
                refused.error
            );
            if let Some(id) = &refused.id {
                assert_eq!(store.load(id, 0).unwrap(), None, "{rule}: not imported");
            }
        }
    };
    // An escaped id is found under its DIR-3 name.
    let ok = scratch.path().join("ok");
    place(&ok, "a/b", &header("a/b"));
    let store = VerbatimStore::new(scratch.path().join("store-ok"));
    assert_eq!(
        store.import_dsh(&DshSource::Jsonl(ok)).unwrap().imported,
        ["a/b"]
    );
    assert_eq!(store.load("a/b", 0).unwrap().unwrap().count, 1);
    // DIR-9: a directory that does not name the header's id.
    let moved = scratch.path().join("dir9");
    let path = place(&moved, "x", &header("y"));
    let _ = path;
    refused(&moved, "DIR-9", &[Some("x")]);
    // DIR-8: one id in two project directories.
    let twice = scratch.path().join("dir8");
    place(&twice, "x", &header("x"));
    let other = twice.join("--other--").join("x");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("session.jsonl"), header("x")).unwrap();
    refused(&twice, "DIR-8", &[Some("x"), Some("x")]);
    // DIR-5: both encodings in one session directory.
    let both = scratch.path().join("dir5");
    let path = place(&both, "x", &header("x"));
    std::fs::write(path.with_file_name("session.jsonl.zstd"), b"").unwrap();
    refused(&both, "DIR-5", &[Some("x")]);
    // DIR-6: the obsolete flat layout.
    let flat = scratch.path().join("dir6");
    std::fs::create_dir_all(flat.join("--p--")).unwrap();
    std::fs::write(flat.join("--p--").join("x.jsonl"), header("x")).unwrap();
    refused(&flat, "DIR-6", &[None]);
    // A missing root holds nothing.
    let none = VerbatimStore::new(scratch.path().join("store-none"));
    let report = none
        .import_dsh(&DshSource::Jsonl(scratch.path().join("absent")))
        .unwrap();
    assert!(report.imported.is_empty() && report.present.is_empty());
}

/// VBT-11: a session DSH's JSONL backend stored but this store cannot hold (an event that
/// repeats a key, JSON-4) is reported and skipped; the rest imports, an event whose `time`
/// is not an integer among them (stored as given, VBT-4: DSH judges it when it reads it).
#[test]
fn a_session_the_store_cannot_hold_is_reported_not_fatal() {
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().join("dsh");
    let log = |id: &str, time: &str| {
        format!(
            "{{\"type\":\"session\",\"version\":0,\"id\":\"{id}\",\"createdAt\":1,\"delegationDepth\":0}}\n\
             {{\"type\":\"x/note\",\"seq\":0,\"time\":{time},\"data\":{{}},\"ignorable\":true}}\n"
        )
    };
    place(&root, "a", &log("a", "1"));
    let refused = place(&root, "b", &log("b", "1").replace("{}", r#"{"k":1,"k":2}"#));
    place(&root, "c", &log("c", "1.5"));
    let store = VerbatimStore::new(scratch.path().join("store"));
    let report = store.import_dsh(&DshSource::Jsonl(root.clone())).unwrap();
    assert_eq!(report.imported, ["a", "c"]);
    assert_eq!(report.refused.len(), 1);
    assert_eq!(report.refused[0].place, refused.display().to_string());
    assert_eq!(report.refused[0].id.as_deref(), Some("b"));
    assert_eq!(report.refused[0].error.code(), "DATA_DUPLICATE_KEY");
    assert_eq!(store.load("b", 0).unwrap(), None);
    let c = store.load("c", 0).unwrap().unwrap();
    assert_eq!(
        c.events,
        r#"[{"type":"x/note","seq":0,"time":1.5,"data":{},"ignorable":true}]"#
    );
    // So are a repeated key (VBT-4), wherever it is, and an id with a lone surrogate,
    // which a store cannot name: the others are imported.
    let more = scratch.path().join("more");
    place(&more, "d", &log("d", "1").replace("{}", r#"{"k":1,"k":2}"#));
    let lone = log("e", "1").replace(r#""id":"e""#, r#""id":"e\ud800""#);
    place(&more, "e", &lone);
    place(&more, "f", &log("f", "1"));
    let report = store.import_dsh(&DshSource::Jsonl(more)).unwrap();
    assert_eq!(report.imported, ["f"]);
    let codes: Vec<&str> = report.refused.iter().map(|r| r.error.code()).collect();
    assert_eq!(codes, ["DATA_DUPLICATE_KEY", "INVALID_ID"]);
    // A second import refuses it again, and imports nothing twice.
    let again = store.import_dsh(&DshSource::Jsonl(root)).unwrap();
    assert_eq!(
        (
            again.imported.len(),
            again.present.len(),
            again.refused.len()
        ),
        (0, 2, 1)
    );
}

/// DIR-8 in any order: one id in two project directories refuses both logs, whichever
/// sorts first and whether or not the other log is readable.
#[test]
fn dir_8_refuses_a_duplicate_id_whatever_the_order() {
    let header = "{\"type\":\"session\",\"version\":0,\"id\":\"x\",\"createdAt\":1,\"delegationDepth\":0}\n\
                  {\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1}}\n";
    let broken = "{\"type\":\"session\",\"version\":0,\"id\":\"x\",\"createdAt\":1,\"delegationDepth\":0}\n\
                  {\"type\":\"turn/start\",\"seq\":0,\n";
    let scratch = tempfile::tempdir().unwrap();
    for (n, (first, second)) in [(header, broken), (broken, header), (header, header)]
        .into_iter()
        .enumerate()
    {
        let root = scratch.path().join(format!("root-{n}"));
        for (project, text) in [("--a--", first), ("--b--", second)] {
            let dir = root.join(project).join("x");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("session.jsonl"), text).unwrap();
        }
        let store = VerbatimStore::new(scratch.path().join(format!("store-{n}")));
        let report = store.import_dsh(&DshSource::Jsonl(root)).unwrap();
        assert!(
            report.imported.is_empty(),
            "case {n}: {:?}",
            report.imported
        );
        assert_eq!(report.refused.len(), 2, "case {n}");
        for refused in &report.refused {
            assert_eq!(refused.id.as_deref(), Some("x"));
            assert!(
                refused.error.to_string().contains("DIR-8"),
                "case {n}: {}",
                refused.error
            );
        }
        assert_eq!(store.load("x", 0).unwrap(), None);
    }
}
