//! The `import`, `export` and `show` commands, run as the built binary over the vendored
//! DSH corpus: what they print, their exit codes, and the files they write.

// Runs the binary, built with the `cli` feature.
#![cfg(feature = "cli")]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use surfacelog::internals::json::{Json, Kind, equal};

mod common;

fn scratch(name: &str) -> common::Scratch {
    common::scratch("dshcli", name)
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_surfacelog"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().unwrap()
}

fn data(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(path)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Runs a command that must succeed; returns its stdout.
fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Imports `file` (raw JSONL) into `store`; returns the session id.
fn import_id(file: &Path, store: &Path) -> String {
    let line = ok(&[
        "import",
        "--format",
        "dsh-jsonl",
        s(file),
        "--store",
        s(store),
    ]);
    let report = Json::parse(line.trim_end()).unwrap();
    report
        .root()
        .get("id")
        .unwrap()
        .as_str()
        .unwrap()
        .into_owned()
}

/// Runs a command that must be refused with `code` (exit 5 for a session or store not
/// found, 4 for I/O, else 3; nothing on stdout); returns its stderr.
fn refused(args: &[&str], code: &str) -> String {
    let out = run(args);
    let stderr = text(&out.stderr);
    let status = match code {
        "SESSION_NOT_FOUND" | "STORE_NOT_FOUND" => 5,
        "IO" => 4,
        _ => 3,
    };
    assert_eq!(out.status.code(), Some(status), "{args:?}: {stderr}");
    assert!(stderr.starts_with(&format!("error[{code}]: ")), "{stderr}");
    assert!(out.stdout.is_empty());
    stderr
}

/// The ok fixtures of the real corpus, with their expected results.
fn loadable() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(data("dsh-sessions")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let expected =
            std::fs::read_to_string(data(&format!("dsh-sessions/expected/{stem}.json"))).unwrap();
        let ok = Json::parse(&expected)
            .unwrap()
            .root()
            .get("ok")
            .unwrap()
            .as_bool();
        if ok == Some(true) {
            out.push((path, expected));
        }
    }
    out.sort();
    out
}

#[test]
fn import_show_export_reproduce_the_reference_results() {
    let dir = scratch("corpus");
    let fixtures = loadable();
    assert_eq!(fixtures.len(), 89);
    for (i, (file, expected)) in fixtures.iter().enumerate() {
        let expected = Json::parse(expected).unwrap();
        let expected = expected.root();
        let store = dir.join(format!("store-{i}"));
        let out = run(&[
            "import",
            "--format",
            "dsh-jsonl",
            s(file),
            "--store",
            s(&store),
        ]);
        assert!(out.status.success(), "{file:?}: {}", text(&out.stderr));
        assert!(out.stderr.is_empty(), "no progress bar when piped");
        let line = text(&out.stdout);
        let report = Json::parse(line.trim_end()).unwrap();
        let report = report.root();
        let id = report.get("id").unwrap().as_str().unwrap().into_owned();
        assert_eq!(
            report.get("events").unwrap().as_safe_u64(),
            expected.get("storedEvents").unwrap().as_safe_u64()
        );
        assert_eq!(report.get("repaired").unwrap().as_bool(), Some(false));
        assert_eq!(report.get("closers").unwrap().as_safe_u64(), Some(0));

        let shown = run(&["show", &id, "--json", "--store", s(&store)]);
        assert!(shown.status.success(), "{}", text(&shown.stderr));
        let shown_text = text(&shown.stdout);
        let shown = Json::parse(shown_text.trim_end()).unwrap();
        let shown = shown.root();
        assert!(
            equal(
                shown.get("header").unwrap(),
                expected.get("header").unwrap()
            ),
            "{file:?}"
        );
        assert!(
            equal(
                shown.get("surface").unwrap(),
                expected.get("surface").unwrap()
            ),
            "{file:?}"
        );
        let messages = shown.get("messages").unwrap();
        let seqs: Vec<_> = messages
            .elements()
            .map(|m| m.get("seq").unwrap().as_safe_u64())
            .collect();
        let want_seqs: Vec<_> = expected
            .get("messageSeqs")
            .unwrap()
            .elements()
            .map(|v| v.as_safe_u64())
            .collect();
        assert_eq!(seqs, want_seqs, "{file:?}");
        for (got, want) in messages
            .elements()
            .zip(expected.get("messages").unwrap().elements())
        {
            assert!(equal(got.get("message").unwrap(), want), "{file:?}");
        }
        assert_eq!(shown.get("replacements").unwrap().kind(), Kind::Array);

        let target = dir.join(format!("export-{i}.jsonl"));
        let exported = run(&[
            "export",
            &id,
            "--format",
            "dsh-jsonl",
            "--out",
            s(&target),
            "--store",
            s(&store),
        ]);
        assert!(exported.status.success(), "{}", text(&exported.stderr));
        assert_eq!(
            std::fs::read(&target).unwrap(),
            std::fs::read(file).unwrap(),
            "{file:?}"
        );
    }
}

#[test]
fn replacements_are_shown_with_what_they_shadowed() {
    let dir = scratch("replace");
    let file = data("dsh-sessions/headless-agent--compaction-recovery--session.jsonl");
    let store = dir.join("store");
    let id = import_id(&file, &store);
    let shown = ok(&["show", &id, "--json", "--store", s(&store)]);
    let shown = Json::parse(shown.trim_end()).unwrap();
    let replacements: Vec<_> = shown
        .root()
        .get("replacements")
        .unwrap()
        .elements()
        .collect();
    assert_eq!(replacements.len(), 1);
    let r = replacements[0];
    let field = |k: &str| r.get(k).unwrap().as_safe_u64().unwrap();
    assert_eq!((field("seq"), field("start"), field("end")), (21, 4, 4));
    let shadowed: Vec<_> = r
        .get("shadowed")
        .unwrap()
        .elements()
        .map(|v| v.as_safe_u64().unwrap())
        .collect();
    assert_eq!(shadowed, vec![4]);
}

#[test]
fn a_damaged_file_is_repaired_on_import_and_a_corrupt_one_refused() {
    let dir = scratch("damaged");
    let store = dir.join("store");
    let torn = data("dsh-sessions-damaged/acp-agent--fs-edit--session--torn-bytes-38.jsonl");
    let out = run(&[
        "import",
        "--format",
        "dsh-jsonl",
        s(&torn),
        "--store",
        s(&store),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    let report = Json::parse(report.trim_end()).unwrap();
    assert_eq!(report.root().get("repaired").unwrap().as_bool(), Some(true));

    let corrupt = data("dsh-sessions-damaged/acp-agent--bash-spill--session--gap-4.jsonl");
    let before = std::fs::read(&corrupt).unwrap();
    let empty_store = dir.join("empty");
    let stderr = refused(
        &[
            "import",
            "--format",
            "dsh-jsonl",
            s(&corrupt),
            "--store",
            s(&empty_store),
        ],
        "CORRUPT",
    );
    assert!(
        stderr.contains("seq gap") && stderr.contains("line 3"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&corrupt).unwrap(), before);
    // A refused import stores nothing: not even the store it would have created.
    assert!(!empty_store.exists());
    refused(
        &["show", "fx-anything", "--json", "--store", s(&empty_store)],
        "STORE_NOT_FOUND",
    );
}

#[test]
fn sqlite_round_trip_through_the_command_line() {
    let dir = scratch("sqlite");
    let files = [
        data("dsh-sessions/acp-agent--packed-chunks--session.jsonl"),
        data("dsh-sessions/acp-agent--parallel-tool-calls--session.jsonl"),
    ];
    let store = dir.join("store");
    let ids: Vec<String> = files.iter().map(|f| import_id(f, &store)).collect();
    let db = dir.join("db").join("sessions.db");
    for id in &ids {
        ok(&[
            "export",
            id,
            "--format",
            "dsh-sqlite",
            "--out",
            s(&db),
            "--store",
            s(&store),
        ]);
    }
    // Importing the whole database gives both sessions, one line each.
    let other = dir.join("other");
    let lines = ok(&[
        "import",
        "--format",
        "dsh-sqlite",
        s(&db),
        "--store",
        s(&other),
    ]);
    assert_eq!(lines.lines().count(), 2);
    // A second import of the same database is refused as a whole: nothing is added.
    refused(
        &[
            "import",
            "--format",
            "dsh-sqlite",
            s(&db),
            "--store",
            s(&other),
        ],
        "SESSION_EXISTS",
    );
    assert_eq!(
        std::fs::read_dir(other.join("sessions")).unwrap().count(),
        2
    );
    for (id, file) in ids.iter().zip(&files) {
        let back = dir.join(format!("{id}.jsonl"));
        ok(&[
            "export",
            id,
            "--format",
            "dsh-jsonl",
            "--out",
            s(&back),
            "--store",
            s(&other),
        ]);
        assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(file).unwrap());
    }
    // A foreign database is refused with FORMAT_VERSION and left as it was.
    let foreign = dir.join("db").join("foreign.db");
    {
        let conn = rusqlite::Connection::open(&foreign).unwrap();
        conn.execute_batch("PRAGMA user_version = 16; CREATE TABLE t (x INTEGER);")
            .unwrap();
    }
    std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o600)).unwrap();
    let before = std::fs::read(&foreign).unwrap();
    let x = dir.join("x");
    refused(
        &[
            "import",
            "--format",
            "dsh-sqlite",
            s(&foreign),
            "--store",
            s(&x),
        ],
        "FORMAT_VERSION",
    );
    assert_eq!(std::fs::read(&foreign).unwrap(), before);
}

#[test]
fn zstd_round_trip_through_the_command_line() {
    let dir = scratch("zstd");
    let file = data("dsh-sessions/acp-agent--packed-chunks--session.jsonl");
    let id = import_id(&file, &dir.join("store"));
    let zst = dir.join("s.jsonl.zstd");
    let store = dir.join("store");
    ok(&[
        "export",
        &id,
        "--format",
        "dsh-jsonl-zstd",
        "--out",
        s(&zst),
        "--store",
        s(&store),
    ]);
    let bytes = std::fs::read(&zst).unwrap();
    assert_eq!(&bytes[..4], &[0x28, 0xB5, 0x2F, 0xFD]);
    let third = dir.join("third");
    ok(&[
        "import",
        "--format",
        "dsh-jsonl-zstd",
        s(&zst),
        "--store",
        s(&third),
    ]);
    let raw = dir.join("raw.jsonl");
    ok(&[
        "export",
        &id,
        "--format",
        "dsh-jsonl",
        "--out",
        s(&raw),
        "--store",
        s(&third),
    ]);
    assert_eq!(std::fs::read(&raw).unwrap(), std::fs::read(&file).unwrap());
}

#[test]
fn export_never_overwrites_and_refuses_unsafe_targets() {
    let dir = scratch("targets");
    let store = dir.join("store");
    let id = import_id(
        &data("dsh-sessions/acp-agent--cancel--session.jsonl"),
        &store,
    );
    let existing = dir.join("existing.jsonl");
    std::fs::write(&existing, b"mine").unwrap();
    let out = s(&existing);
    let args = [
        "export",
        &id,
        "--format",
        "dsh-jsonl",
        "--out",
        out,
        "--store",
        s(&store),
    ];
    refused(&args, "UNSAFE_PATH");
    assert_eq!(std::fs::read(&existing).unwrap(), b"mine");
}
