//! DSH SQLite schema 17 (`dsh-formats.md` §8) through the public API: sessions built in
//! memory are exported with `export_session` and read back with `DshDatabase`, and the
//! database is inspected and damaged with raw SQL to check the identity refusals
//! (SQL-3 to SQL-8), torn tails versus corruption (SQL-25 to SQL-27), the file checks
//! (SQL-1, SQL-2) and bad input.

#![expect(clippy::doc_markdown, reason = "SQLite is a name in prose, not code")]
// The DSH adapters are the `dsh` feature.
#![cfg(feature = "dsh")]

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rusqlite::Connection;
use surfacelog::internals::adapters::rows;
use surfacelog::internals::adapters::sqlite::{DshDatabase, ExportReport, RowsEnd, export_session};
use surfacelog::internals::clock::ManualClock;
use surfacelog::internals::event::{EventRef, EventSource};
use surfacelog::internals::json::{Json, equal};
use surfacelog::internals::session::{Options, Prune, Session};
use surfacelog::{Error, ErrorKind};

mod common;

fn scratch(name: &str) -> common::Scratch {
    common::scratch("dsh-sqlite", name)
}

fn options() -> Options {
    Options {
        clock: Arc::new(ManualClock::new(5_000)),
        ..Options::default()
    }
}

fn chunk(seq: u64, time: i64, chunk: &str) -> String {
    format!(
        r#"{{"type":"assistant/chunk","seq":{seq},"time":{time},"data":{{"turn":1,"step":1,"chunk":{chunk}}}}}"#
    )
}

const USER: &str =
    r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#;

/// The seq of the big `assistant/message` in [`big_session`].
const BIG_MESSAGE: u64 = 1036;

/// A session with every row shape: a run of 1,027 text deltas, the tool-call run of
/// Example B (§4.6), `data` over 4,096 bytes with `sourceEventSeqs`, an ignorable event,
/// a scalar event typed like a row tag (SQL-16), and a prune (a `replace` surfaceOp).
fn big_session() -> Session {
    let mut events = vec![
        r#"{"type":"turn/start","seq":0,"time":1000,"data":{"turn":1}}"#.to_owned(),
        format!(
            r#"{{"type":"user/message","seq":1,"time":1001,"data":{USER},"surfaceOp":"append"}}"#
        ),
        r#"{"type":"step/start","seq":2,"time":1002,"data":{"turn":1,"step":1}}"#.to_owned(),
    ];
    for k in 0..1027_u32 {
        let time = 1003 + i64::from(k % 3);
        let delta = format!(r#"{{"type":"text-delta","index":0,"text":"z{k}"}}"#);
        events.push(chunk(3 + u64::from(k), time, &delta));
    }
    let call = |name: &str, args: &str| {
        let mut args_json = String::new();
        surfacelog::internals::json::push_js_string(&mut args_json, args.as_bytes());
        format!(
            r#"{{"type":"tool-call-delta","index":1,"id":"call_1",{name}"argumentsDelta":{args_json}}}"#
        )
    };
    events.extend([
        chunk(1030, 2000, r#"{"type":"block-start","index":1,"blockType":"tool-call"}"#),
        chunk(1031, 2000, &call(r#""name":"read","#, "")),
        chunk(1032, 2001, &call("", r#"{"pa"#)),
        chunk(1033, 2001, &call("", r#"th":""#)),
        chunk(1034, 2002, &call("", r#"a.txt"}"#)),
        chunk(1035, 2002, r#"{"type":"block-end","index":1,"block":{"type":"tool-call","id":"call_1","name":"read","arguments":"{\"path\":\"a.txt\"}"}}"#),
    ]);
    let long_text = "y".repeat(5000);
    events.extend([
        format!(
            r#"{{"type":"assistant/message","seq":1036,"time":2003,"data":{{"turn":1,"step":1,"message":{{"id":"a1","role":"assistant","source":{{"kind":"model","provider":"p","model":"m"}},"content":[{{"type":"text","text":"{long_text}"}},{{"type":"tool-call","id":"call_1"}}]}}}},"sourceEventSeqs":[1],"surfaceOp":"append"}}"#
        ),
        r#"{"type":"tool/result","seq":1037,"time":2004,"data":{"turn":1,"step":1,"message":{"id":"r1","role":"user","source":{"kind":"tool","callId":"call_1"},"content":[{"type":"tool-result","toolCallId":"call_1","content":[{"type":"text","text":"output"}]}]}},"surfaceOp":"append"}"#.to_owned(),
        r#"{"type":"x/note","seq":1038,"time":-7,"data":{"1":[1.5,1e+21,null],"note":"n"},"ignorable":true}"#.to_owned(),
        r#"{"type":"text-chunks","seq":1039,"time":2005,"data":{},"ignorable":true}"#.to_owned(),
        r#"{"type":"step/end","seq":1040,"time":2006,"data":{"turn":1,"step":1}}"#.to_owned(),
        r#"{"type":"turn/end","seq":1041,"time":2007,"data":{"turn":1,"reason":{"kind":"completed"}}}"#.to_owned(),
    ]);
    let texts: Vec<&str> = events.iter().map(String::as_str).collect();
    let header = r#"{"version":0,"id":"big","createdAt":1700000000000,"cwd":"/home/u/proj"}"#;
    let (mut session, reopened) = Session::reopen("big", header, &texts, options()).unwrap();
    assert_eq!(reopened.closers, 0);
    let content = r#"[{"type":"text","text":"pruned"}]"#;
    session
        .prune(&Prune {
            seq: 1037,
            content,
            shadowed_token_count: 1,
        })
        .unwrap();
    assert_eq!(session.seq_next(), 1044);
    session
}

/// Three events up to the only `turn/end` (seq 2), then three ignorable notes: damage
/// after seq 2 is a torn tail, at or before it corruption (SQL-27).
fn short_session(id: &str) -> Session {
    let events = [
        r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#.to_owned(),
        format!(r#"{{"type":"user/message","seq":1,"time":2,"data":{USER},"surfaceOp":"append"}}"#),
        r#"{"type":"turn/end","seq":2,"time":3,"data":{"turn":1,"reason":{"kind":"completed"}}}"#
            .to_owned(),
        r#"{"type":"x/note","seq":3,"time":4,"data":{"n":3},"ignorable":true}"#.to_owned(),
        r#"{"type":"x/note","seq":4,"time":5,"data":{"n":4},"ignorable":true}"#.to_owned(),
        r#"{"type":"x/note","seq":5,"time":6,"data":{"n":5},"ignorable":true}"#.to_owned(),
    ];
    let texts: Vec<&str> = events.iter().map(String::as_str).collect();
    let header = format!(r#"{{"version":0,"id":"{id}","createdAt":1}}"#);
    Session::reopen(id, &header, &texts, options()).unwrap().0
}

fn texts(log: &dyn EventSource) -> Vec<String> {
    (0..log.seq_next())
        .map(|seq| log.event(seq).unwrap().unwrap().text().into_owned())
        .collect()
}

fn export(path: &Path, session: &Session, pack: bool) -> ExportReport {
    export_session(path, session.header(), session.log(), pack).unwrap()
}

/// Every event of session `id`, and how the read ended.
fn read(path: &Path, id: &str) -> Result<(Vec<String>, RowsEnd), Error> {
    let database = DshDatabase::open(path)?;
    let mut events = Vec::new();
    let end = database.read_events(id, &mut |event| {
        events.push(event);
        Ok(())
    })?;
    Ok((events, end))
}

fn raw(path: &Path) -> Connection {
    Connection::open(path).unwrap()
}

fn query<T: rusqlite::types::FromSql>(path: &Path, sql: &str) -> T {
    raw(path).query_row(sql, [], |row| row.get(0)).unwrap()
}

fn is_v4_uuid(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            14 => *b == b'4',
            19 => matches!(b, b'8' | b'9' | b'a' | b'b'),
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(b),
        })
}

fn format_version(error: &Error) -> (String, bool) {
    match error.kind() {
        ErrorKind::FormatVersion { found, newer } => (found.clone(), *newer),
        other => panic!("expected FORMAT_VERSION, got {other:?}: {error}"),
    }
}

#[test]
fn round_trip_packed_and_unpacked_gives_back_every_event_text() {
    let dir = scratch("round-trip");
    let session = big_session();
    let expected = texts(session.log());
    for (pack, report) in [
        (
            true,
            ExportReport {
                rows: 1044 - 1030 + 3,
                packed_rows: 3,
                events: 1044,
            },
        ),
        (
            false,
            ExportReport {
                rows: 1044,
                packed_rows: 0,
                events: 1044,
            },
        ),
    ] {
        let path = dir.join(format!("pack-{pack}.sqlite"));
        assert_eq!(export(&path, &session, pack), report);
        let (events, end) = read(&path, "big").unwrap();
        assert_eq!(
            end,
            RowsEnd {
                events: 1044,
                torn_marker: None
            }
        );
        assert_eq!(events.len(), expected.len());
        for (seq, (got, want)) in events.iter().zip(&expected).enumerate() {
            assert_eq!(got, want, "pack={pack} seq={seq}");
        }
        let database = DshDatabase::open(&path).unwrap();
        assert_eq!(database.session_ids().unwrap(), ["big"]);
        assert_eq!(
            database.header("big").unwrap(),
            r#"{"version":0,"id":"big","createdAt":1700000000000,"cwd":"/home/u/proj"}"#,
            "SQL-13: delegationDepth stays absent"
        );
    }
}

#[test]
fn sql_21_to_23_rows_as_stored() {
    let dir = scratch("rows");
    let path = dir.join("db.sqlite");
    export(&path, &big_session(), true);
    let connection = raw(&path);
    let mut statement = connection
        .prepare(
            "SELECT seq, type, typeof(data), source_event_seqs IS NULL, surface_op IS NULL \
             FROM events WHERE ignorable = 0 ORDER BY seq",
        )
        .unwrap();
    let packed: Vec<(i64, String, String, bool, bool)> = statement
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let row = |seq, tag: &str, storage: &str| (seq, tag.to_owned(), storage.to_owned(), true, true);
    assert_eq!(
        packed,
        [
            row(3, "text-chunks", "blob"),
            row(1027, "text-chunks", "text"),
            row(1032, "tool-call-chunks", "text"),
        ],
        "1,027 deltas → 1,024 + 3; the named tool-call delta stays scalar"
    );
    let example_b: String = query(&path, "SELECT data FROM events WHERE seq = 1032");
    assert_eq!(
        example_b,
        r#"{"turn":1,"step":1,"index":1,"dt":[0,1],"id":"call_1","args":["{\"pa","th\":\"","a.txt\"}"]}"#
    );
    let named: (String, Option<i64>) = connection
        .query_row(
            "SELECT type, ignorable FROM events WHERE seq = 1031",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(named, ("assistant/chunk".to_owned(), None));
    let last_three: String = query(&path, "SELECT data FROM events WHERE seq = 1027");
    assert_eq!(
        last_three,
        r#"{"turn":1,"step":1,"index":0,"dt":[1,-2],"texts":["z1024","z1025","z1026"]}"#
    );

    let storage: String = query(
        &path,
        &format!("SELECT typeof(data) FROM events WHERE seq = {BIG_MESSAGE}"),
    );
    assert_eq!(storage, "blob", "SQL-17: 5,000 bytes compress");
    let sources: Vec<u8> = query(
        &path,
        &format!("SELECT source_event_seqs FROM events WHERE seq = {BIG_MESSAGE}"),
    );
    assert_eq!(sources, [0x01]);
    let append: String = query(&path, "SELECT surface_op FROM events WHERE seq = 1");
    assert_eq!(append, r#""append""#, "SQL-15: 8 bytes with the quotes");
    let replace: (String, Vec<u8>) = connection
        .query_row(
            "SELECT surface_op, source_event_seqs FROM events WHERE seq = 1043",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        replace,
        (
            r#"{"op":"replace","start":1037,"end":1037}"#.to_owned(),
            vec![0x8D, 0x08]
        )
    );
    let ignorable: Vec<(i64, String, i64)> = connection
        .prepare("SELECT seq, type, ignorable FROM events WHERE ignorable = 1 ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        ignorable,
        [
            (1038, "x/note".to_owned(), 1),
            (1039, "text-chunks".to_owned(), 1)
        ],
        "SQL-16: a scalar event typed like a row tag keeps ignorable 1"
    );
    let no_sources: bool = query(
        &path,
        "SELECT source_event_seqs IS NULL FROM events WHERE seq = 0",
    );
    assert!(no_sources, "SQL-15: NULL when absent");
}

#[test]
fn sql_15_data_is_written_as_js_json_text() {
    let dir = scratch("js-json");
    let path = dir.join("db.sqlite");
    let event =
        r#"{"type":"x/data","seq":0,"time":1,"data":{"b":1.0,"a":1e21,"2":"\u0041\ud800"}}"#;
    let header = r#"{"version":0,"id":"j","createdAt":1}"#;
    let (session, _) = Session::reopen("j", header, &[event], options()).unwrap();
    export(&path, &session, true);
    let data: String = query(&path, "SELECT data FROM events WHERE seq = 0");
    assert_eq!(
        data, r#"{"2":"A\ud800","b":1,"a":1e+21}"#,
        "JSON-11, JSON-12, JSON-13"
    );
    let (events, _) = read(&path, "j").unwrap();
    assert_eq!(
        events,
        [r#"{"type":"x/data","seq":0,"time":1,"data":{"2":"A\ud800","b":1,"a":1e+21}}"#]
    );
}

#[test]
fn sql_7_schema_identity_and_session_row_after_export() {
    let dir = scratch("schema");
    let path = dir.join("db.sqlite");
    export(&path, &short_session("s"), true);
    let connection = raw(&path);
    let schema: Vec<String> = connection
        .prepare("SELECT sql FROM sqlite_schema WHERE name NOT GLOB 'sqlite_*' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|sql| {
            sql.unwrap()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    assert_eq!(
        schema,
        [
            "CREATE TABLE events ( session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, seq INTEGER NOT NULL, type TEXT NOT NULL, time INTEGER NOT NULL, data ANY NOT NULL, source_event_seqs ANY, surface_op TEXT, ignorable INTEGER CHECK (ignorable IS NULL OR ignorable IN (0, 1)), PRIMARY KEY (session_id, seq) ) STRICT",
            "CREATE TABLE persistence_state ( singleton INTEGER PRIMARY KEY CHECK (singleton = 1), store_id TEXT NOT NULL ) STRICT",
            "CREATE TABLE sessions ( id TEXT PRIMARY KEY, version INTEGER NOT NULL, created_at INTEGER NOT NULL, cwd TEXT, parent_session TEXT, seed_length INTEGER, origin TEXT, delegation_depth INTEGER, agent_preset TEXT, incarnation TEXT NOT NULL, revision INTEGER NOT NULL ) STRICT",
        ]
    );
    assert_eq!(query::<i64>(&path, "PRAGMA user_version"), 17);
    assert_eq!(query::<i64>(&path, "PRAGMA application_id"), 1_146_308_688);
    assert_eq!(query::<String>(&path, "PRAGMA journal_mode"), "wal");
    let store_id: String = query(
        &path,
        "SELECT store_id FROM persistence_state WHERE singleton = 1",
    );
    assert!(is_v4_uuid(&store_id), "{store_id}");
    let (incarnation, revision, depth): (String, i64, Option<i64>) = connection
        .query_row(
            "SELECT incarnation, revision, delegation_depth FROM sessions WHERE id = 's'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert!(is_v4_uuid(&incarnation), "{incarnation}");
    assert_ne!(incarnation, store_id);
    assert_eq!(revision, 1, "SQL-10: one append");
    assert_eq!(depth, None);
    let mode = fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "SQL-2");
}

#[test]
fn sql_13_full_header_from_a_jsonl_header_line() {
    let dir = scratch("header");
    let path = dir.join("db.sqlite");
    let header = r#"{"type":"session","version":0,"id":"s2","createdAt":5,"cwd":"/home/u/proj","parentSession":"p0","seedLength":4,"origin":"subagent","delegationDepth":2,"agentPreset":"p","extra":{"k":1}}"#;
    let (session, _) = Session::reopen("s2", header, &[], options()).unwrap();
    assert_eq!(
        export(&path, &session, true),
        ExportReport::default(),
        "a session without events"
    );
    let database = DshDatabase::open(&path).unwrap();
    assert_eq!(
        database.header("s2").unwrap(),
        r#"{"version":0,"id":"s2","createdAt":5,"cwd":"/home/u/proj","parentSession":"p0","seedLength":4,"origin":"subagent","delegationDepth":2,"agentPreset":"p"}"#
    );
    let error = database.header("nope").unwrap_err();
    assert_eq!(error.code(), "SESSION_NOT_FOUND");
    let error = database.read_events("nope", &mut |_| Ok(())).unwrap_err();
    assert_eq!(error.code(), "SESSION_NOT_FOUND");
}

#[test]
fn two_sessions_share_one_database_and_a_second_export_is_refused() {
    let dir = scratch("exists");
    let path = dir.join("db.sqlite");
    export(&path, &short_session("b"), false);
    export(&path, &short_session("a"), true);
    let database = DshDatabase::open(&path).unwrap();
    assert_eq!(database.session_ids().unwrap(), ["a", "b"]);
    drop(database);
    let rows: i64 = query(&path, "SELECT count(*) FROM events");
    let error = export_session(
        &path,
        short_session("a").header(),
        short_session("a").log(),
        true,
    )
    .unwrap_err();
    assert_eq!(error.code(), "SESSION_EXISTS");
    assert_eq!(query::<i64>(&path, "SELECT count(*) FROM events"), rows);
    assert_eq!(
        query::<i64>(&path, "SELECT revision FROM sessions WHERE id = 'a'"),
        1
    );
}

/// Makes a database at `path` with raw SQL and gives it the permissions SQL-2 asks for.
fn raw_database(path: &Path, sql: &str) {
    raw(path).execute_batch(sql).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
}

/// The SQL-7 statements laid out over several lines, as the reference writes them.
fn reference_schema_sql() -> String {
    [
        "CREATE TABLE persistence_state (\n  singleton INTEGER PRIMARY KEY CHECK (singleton = 1),\n  store_id TEXT NOT NULL\n) STRICT;",
        "CREATE TABLE sessions (\n  id TEXT PRIMARY KEY,\n  version INTEGER NOT NULL,\n  created_at INTEGER NOT NULL,\n  cwd TEXT,\n  parent_session TEXT,\n  seed_length INTEGER,\n  origin TEXT,\n  delegation_depth INTEGER,\n  agent_preset TEXT,\n  incarnation TEXT NOT NULL,\n  revision INTEGER NOT NULL\n) STRICT;",
        "CREATE TABLE events (\n  session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,\n  seq INTEGER NOT NULL,\n  type TEXT NOT NULL,\n  time INTEGER NOT NULL,\n  data ANY NOT NULL,\n  source_event_seqs ANY,\n  surface_op TEXT,\n  ignorable INTEGER CHECK (ignorable IS NULL OR ignorable IN (0, 1)),\n  PRIMARY KEY (session_id, seq)\n) STRICT;",
        "INSERT INTO persistence_state VALUES (1, '0B5E2B51-3C4D-4E5F-8A6B-7C8D9E0F1A2B');",
        "PRAGMA application_id = 1146308688; PRAGMA user_version = 17;",
    ]
    .join("\n")
}

#[test]
fn a_database_written_like_the_reference_is_read() {
    let dir = scratch("reference");
    let path = dir.join("db.sqlite");
    let rows = r#"
        INSERT INTO sessions VALUES ('r', 0, 7, NULL, NULL, NULL, NULL, 0, NULL,
            '6f1d2c3b-aaaa-4bbb-9ccc-dddddddddddd', 3);
        INSERT INTO events VALUES ('r', 0, 'turn/start', 990, '{"turn":1}', NULL, NULL, NULL);
        INSERT INTO events VALUES ('r', 1, 'text-chunks', 1000,
            '{"turn":1,"step":1,"index":0,"dt":[3,-2],"texts":["Hel","lo","!"]}', NULL, NULL, 0);
        INSERT INTO events VALUES ('r', 4, 'tool/result', 1002, '{ "a" : 1 }', X'0100', '"append"', NULL);
        INSERT INTO events VALUES ('r', 5, 'turn/end', 1003, '{"turn":1}', NULL, NULL, NULL);
    "#;
    raw_database(&path, &format!("{}{rows}", reference_schema_sql()));
    let (events, end) = read(&path, "r").unwrap();
    let chunk = |seq, time, text| {
        format!(
            r#"{{"type":"assistant/chunk","seq":{seq},"time":{time},"data":{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"{text}"}}}}}}"#
        )
    };
    assert_eq!(
        events,
        [
            r#"{"type":"turn/start","seq":0,"time":990,"data":{"turn":1}}"#.to_owned(),
            chunk(1, 1000, "Hel"),
            chunk(2, 1003, "lo"),
            chunk(3, 1001, "!"),
            r#"{"type":"tool/result","seq":4,"time":1002,"data":{ "a" : 1 },"sourceEventSeqs":[1,1],"surfaceOp":"append"}"#.to_owned(),
            r#"{"type":"turn/end","seq":5,"time":1003,"data":{"turn":1}}"#.to_owned(),
        ],
        "Example A expands; a scalar row is the §10 concatenation, data text as stored"
    );
    assert_eq!(end.torn_marker, None);
    let database = DshDatabase::open(&path).unwrap();
    assert_eq!(
        database.header("r").unwrap(),
        r#"{"version":0,"id":"r","createdAt":7,"delegationDepth":0}"#
    );
}

/// A database refused by identity or schema: both import and export say
/// `FORMAT_VERSION`, and the file's bytes do not change.
fn assert_refused(path: &Path, found_part: &str, newer: bool) {
    let before = fs::read(path).unwrap();
    let error = DshDatabase::open(path).unwrap_err();
    let (found, is_newer) = format_version(&error);
    assert!(found.contains(found_part), "{found:?} lacks {found_part:?}");
    assert_eq!(is_newer, newer, "{found}");
    let session = short_session("x");
    let error = export_session(path, session.header(), session.log(), true).unwrap_err();
    let (found, _) = format_version(&error);
    assert!(
        found.contains(found_part),
        "export: {found:?} lacks {found_part:?}"
    );
    assert_eq!(
        fs::read(path).unwrap(),
        before,
        "{found_part}: the file changed"
    );
}

/// An exported database changed with raw SQL.
fn exported_then(dir: &Path, name: &str, sql: &str) -> PathBuf {
    let path = dir.join(format!("{name}.sqlite"));
    export(&path, &short_session("s"), true);
    raw(&path).execute_batch(sql).unwrap();
    path
}

#[test]
fn sql_3_to_8_foreign_or_other_version_databases_are_refused_unchanged() {
    let dir = scratch("identity");
    assert_refused(
        &exported_then(&dir, "v16", "PRAGMA user_version = 16"),
        "user_version=16",
        false,
    );
    assert_refused(
        &exported_then(&dir, "v18", "PRAGMA user_version = 18"),
        "user_version=18",
        true,
    );
    assert_refused(
        &exported_then(&dir, "app", "PRAGMA application_id = 123"),
        "application_id=123",
        false,
    );
    assert_refused(
        &exported_then(&dir, "index", "CREATE INDEX events_by_time ON events(time)"),
        "unexpected index events_by_time",
        false,
    );
    assert_refused(
        &exported_then(&dir, "view", "CREATE VIEW v AS SELECT 1"),
        "unexpected view v",
        false,
    );
    let unversioned = dir.join("unversioned.sqlite");
    raw_database(&unversioned, "CREATE TABLE t (x)");
    assert_refused(&unversioned, "unversioned", false);
    let foreign_id = dir.join("foreign-id.sqlite");
    raw_database(&foreign_id, "PRAGMA application_id = 5");
    assert_refused(&foreign_id, "unversioned", false);
    let loose = dir.join("not-strict.sqlite");
    raw_database(
        &loose,
        &reference_schema_sql().replacen(") STRICT;\nINSERT", ");\nINSERT", 1),
    );
    assert_refused(&loose, "events differs", false);
    let spacing = dir.join("spacing.sqlite");
    raw_database(
        &spacing,
        &reference_schema_sql().replace("(singleton = 1)", "(singleton=1)"),
    );
    assert_refused(&spacing, "persistence_state differs", false);
}

#[test]
fn sql_14_a_missing_or_invalid_store_id_is_corrupt() {
    let dir = scratch("store-id");
    for (name, sql) in [
        ("missing", "DELETE FROM persistence_state"),
        (
            "invalid",
            "UPDATE persistence_state SET store_id = 'not-a-uuid'",
        ),
    ] {
        let path = exported_then(&dir, name, sql);
        let error = DshDatabase::open(&path).unwrap_err();
        assert_eq!(error.code(), "CORRUPT", "{name}: {error}");
        assert!(
            error.to_string().contains("no valid store identity"),
            "{error}"
        );
    }
}

/// The events of [`short_session`] read back from a copy damaged by `sql`.
fn read_damaged(dir: &Path, name: &str, sql: &str) -> Result<(Vec<String>, RowsEnd), Error> {
    read(&exported_then(dir, name, sql), "s")
}

fn assert_corrupt_at(result: Result<(Vec<String>, RowsEnd), Error>, seq: u64, text: &str) {
    let error = result.expect_err("damage before the last turn/end");
    assert_eq!(error.code(), "CORRUPT", "{error}");
    assert_eq!(error.seq(), Some(seq), "{error}");
    let message = error.to_string();
    assert!(message.contains(text), "{message:?} lacks {text:?}");
}

/// A torn tail from the row at `marker` on; the events before `first_lost` came out.
fn assert_torn_at(result: Result<(Vec<String>, RowsEnd), Error>, marker: u64, first_lost: u64) {
    let (events, end) = result.expect("damage after the last turn/end is a torn tail");
    assert_eq!(end.torn_marker, Some(marker));
    assert_eq!(end.events, first_lost);
    let all = texts(short_session("s").log());
    assert_eq!(events, all[..usize::try_from(first_lost).unwrap()]);
}

#[test]
fn sql_27_damage_before_the_last_turn_end_is_corrupt_after_it_torn() {
    let dir = scratch("torn");
    let invalid_json = "UPDATE events SET data = '{not json' WHERE seq = ";
    let committed = "invalid committed physical row at seq 1";
    assert_corrupt_at(
        read_damaged(&dir, "json-1", &format!("{invalid_json}1")),
        1,
        committed,
    );
    assert_torn_at(
        read_damaged(&dir, "json-4", &format!("{invalid_json}4")),
        4,
        4,
    );
    // A `turn/end` row that does not decode is not committed: the tail starts there.
    assert_torn_at(
        read_damaged(&dir, "json-2", &format!("{invalid_json}2")),
        2,
        2,
    );

    let packed = "UPDATE events SET ignorable = 0 WHERE seq = ";
    let tag = "packed discriminator requires a chunk tag";
    assert_corrupt_at(read_damaged(&dir, "tag-1", &format!("{packed}1")), 1, tag);
    assert_torn_at(read_damaged(&dir, "tag-3", &format!("{packed}3")), 3, 3);

    let not_zstd = "UPDATE events SET data = X'0102030405' WHERE seq = ";
    assert_corrupt_at(
        read_damaged(&dir, "zstd-0", &format!("{not_zstd}0")),
        0,
        "Zstandard",
    );
    assert_torn_at(read_damaged(&dir, "zstd-5", &format!("{not_zstd}5")), 5, 5);

    let varint = "UPDATE events SET source_event_seqs = X'0580' WHERE seq = ";
    assert_corrupt_at(
        read_damaged(&dir, "varint-1", &format!("{varint}1")),
        1,
        "truncated varint",
    );
    assert_torn_at(read_damaged(&dir, "varint-4", &format!("{varint}4")), 4, 4);

    let gap = read_damaged(&dir, "gap", "DELETE FROM events WHERE seq = 1");
    assert_corrupt_at(gap, 2, "expected seq 1");
    let gap_tail = read_damaged(&dir, "gap-tail", "DELETE FROM events WHERE seq = 4");
    assert_torn_at(gap_tail, 5, 4);
}

/// A row whose `data` or `surface_op` repeats a key decodes for the reference (JSON-4:
/// the last value wins), so it is never a torn tail: the contract refuses it (§2.1)
/// wherever it is, the last row and a `turn/end` row included. The damage of SQL-27
/// names the database file.
#[test]
fn a_row_that_repeats_a_key_is_refused_not_taken_for_a_torn_tail() {
    let dir = scratch("repeated-key");
    let last = short_session("s").seq_next() - 1;
    for (name, sql, seq) in [
        ("last", format!("UPDATE events SET data = '{{\"a\":1,\"a\":2}}' WHERE seq = {last}"), last),
        ("first", "UPDATE events SET data = '{\"a\":1,\"a\":2}' WHERE seq = 0".to_owned(), 0),
        ("surface-op", "UPDATE events SET surface_op = '{\"a\":1,\"a\":2}' WHERE seq = 1".to_owned(), 1),
        ("turn-end", "UPDATE events SET data = '{\"turn\":1,\"reason\":{\"kind\":\"completed\"},\"turn\":1}' WHERE type = 'turn/end'".to_owned(), 2),
    ] {
        let error = read_damaged(&dir, name, &sql).unwrap_err();
        assert_eq!((error.code(), error.seq()), ("DATA_DUPLICATE_KEY", Some(seq)), "{name}: {error}");
    }
    // With a seq gap as well, the reference does not accept it: the tail from there is
    // torn (after the last committed turn/end), as for any row that does not continue.
    let gap = "UPDATE events SET data = '{\"a\":1,\"a\":2}', seq = 9 WHERE seq = 5";
    assert_torn_at(read_damaged(&dir, "repeated-gap", gap), 9, 5);
    // A row the reference finds malformed for another reason is malformed, repeated key or
    // not: after the last committed turn/end, the torn tail starts there.
    let bad_sources =
        "UPDATE events SET data = '{\"a\":1,\"a\":2}', source_event_seqs = X'0580' WHERE seq = 4";
    assert_torn_at(
        read_damaged(&dir, "repeated-bad-sources", bad_sources),
        4,
        4,
    );
    let bad_row = "DELETE FROM events WHERE seq IN (4, 5); UPDATE events SET type = 'text-chunks', \
        ignorable = 0, source_event_seqs = NULL, surface_op = NULL, data = '{\"turn\":1,\"step\":1,\
        \"index\":0,\"dt\":[0,0],\"texts\":[\"a\",\"b\",\"c\"],\"dt\":[0]}' WHERE seq = 3";
    assert_torn_at(read_damaged(&dir, "repeated-bad-row", bad_row), 3, 3);
    // A turn/end row the reference cannot decode is not committed (SQL-27).
    let undecodable_end = "UPDATE events SET data = '{\"turn\":1,\"reason\":{\"kind\":\"completed\"},\
        \"turn\":1}', source_event_seqs = X'0580' WHERE seq = 2; \
        UPDATE events SET data = '{bad' WHERE seq = 1";
    assert_torn_at(read_damaged(&dir, "repeated-end", undecodable_end), 1, 1);
    let path = dir.join("damaged-row.sqlite");
    let damaged = exported_then(
        &dir,
        "damaged-row",
        "UPDATE events SET data = '{not json' WHERE seq = 1",
    );
    let error = read(&damaged, "s").unwrap_err();
    assert!(
        error.to_string().contains(&path.display().to_string()),
        "{error}"
    );
}

/// LOAD-9: a database holding a `mode/set` event is refused at import (`LEGACY_EVENT`,
/// naming its seq), and nothing is stored.
#[test]
fn an_import_refuses_mode_set() {
    let dir = scratch("mode-set");
    let path = exported_then(
        &dir,
        "mode-set",
        "UPDATE events SET type = 'mode/set' WHERE seq = 4",
    );
    let store =
        surfacelog::Store::open_or_create(dir.join("store"), surfacelog::StoreOptions::new())
            .unwrap();
    let error = surfacelog::internals::adapters::sqlite_import::import_sqlite(&store, &path, None)
        .unwrap_err();
    assert_eq!(
        (error.code(), error.seq()),
        ("LEGACY_EVENT", Some(4)),
        "{error}"
    );
    assert!(store.list().unwrap().headers.is_empty());
}

#[test]
fn sql_25_a_bad_column_fails_the_whole_read_even_as_the_last_row() {
    let dir = scratch("columns");
    let text_sources = "UPDATE events SET source_event_seqs = '[1]' WHERE seq = 5";
    let error = read_damaged(&dir, "text-sources", text_sources).unwrap_err();
    assert_eq!(error.code(), "CORRUPT");
    assert!(
        error
            .to_string()
            .contains("source_event_seqs must be a blob or null"),
        "{error}"
    );
    let number_data = "UPDATE events SET data = 5 WHERE seq = 4";
    let error = read_damaged(&dir, "number-data", number_data).unwrap_err();
    assert!(
        error.to_string().contains("data must be text or a blob"),
        "{error}"
    );
    let negative = "UPDATE events SET seq = -1 WHERE seq = 5";
    let error = read_damaged(&dir, "negative-seq", negative).unwrap_err();
    assert!(
        error.to_string().contains("seq must be a non-negative"),
        "{error}"
    );
    let streamed = {
        let path = dir.join("text-sources.sqlite");
        let mut count = 0;
        let _ = DshDatabase::open(&path)
            .unwrap()
            .read_events("s", &mut |_| {
                count += 1;
                Ok(())
            });
        count
    };
    assert_eq!(
        streamed, 0,
        "columns are checked before any event is handed out"
    );
}

#[test]
fn sql_26_malformed_packed_rows_before_the_last_turn_end_are_corrupt() {
    let dir = scratch("packed");
    let path = dir.join("db.sqlite");
    export(&path, &big_session(), true);
    let pristine = fs::read(&path).unwrap();
    let damages = [
        (
            r#"UPDATE events SET data = '{"turn":1}' WHERE seq = 1027"#,
            1027,
        ),
        (
            "UPDATE events SET surface_op = '\"append\"' WHERE seq = 1032",
            1032,
        ),
        ("UPDATE events SET data = X'28B52FFD0000' WHERE seq = 3", 3),
        (
            r#"UPDATE events SET data = '{"turn":1,"step":1,"index":0,"dt":[0],"texts":["a","b"]}' WHERE seq = 1027"#,
            1027,
        ),
    ];
    for (sql, seq) in damages {
        fs::write(&path, &pristine).unwrap();
        raw(&path).execute_batch(sql).unwrap();
        let error = read(&path, "big").unwrap_err();
        assert_eq!(error.code(), "CORRUPT", "{sql}: {error}");
        assert_eq!(error.seq(), Some(seq), "{sql}: {error}");
    }
    // A valid row of other members is no longer contiguous with its neighbours.
    fs::write(&path, &pristine).unwrap();
    raw(&path)
        .execute_batch("UPDATE events SET seq = 1028 WHERE seq = 1027")
        .unwrap();
    assert_corrupt_at(read(&path, "big"), 1028, "expected seq 1027");
    // Expanded members are checked against the reference's example A (checklist 65).
    let members = rows::unpack(&[r#"{"type":"text-chunks","seq0":5,"time0":1000,"data":{"turn":1,"step":1,"index":0,"dt":[3,-2],"texts":["Hel","lo","!"]}}"#]).unwrap();
    assert_eq!(members.len(), 3);
}

#[test]
fn sql_1_and_2_unsafe_paths_are_refused() {
    let dir = scratch("unsafe");
    let path = dir.join("db.sqlite");
    let session = short_session("s");
    export(&path, &session, true);
    let code = |result: Result<(), Error>| result.unwrap_err().code();

    let link = dir.join("link.sqlite");
    symlink(&path, &link).unwrap();
    assert_eq!(code(DshDatabase::open(&link).map(drop)), "UNSAFE_PATH");
    let other = short_session("other");
    assert_eq!(
        code(export_session(&link, other.header(), other.log(), true).map(drop)),
        "UNSAFE_PATH"
    );

    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(code(DshDatabase::open(&path).map(drop)), "UNSAFE_PATH");
    assert_eq!(
        code(export_session(&path, other.header(), other.log(), true).map(drop)),
        "UNSAFE_PATH"
    );
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    assert!(DshDatabase::open(&path).is_ok());

    let directory = dir.join("a-directory.sqlite");
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&directory)
        .unwrap();
    assert_eq!(code(DshDatabase::open(&directory).map(drop)), "UNSAFE_PATH");

    let open_dir = dir.join("world-writable");
    fs::create_dir(&open_dir).unwrap();
    fs::set_permissions(&open_dir, fs::Permissions::from_mode(0o777)).unwrap();
    let target = open_dir.join("db.sqlite");
    let error = export_session(&target, other.header(), other.log(), true).unwrap_err();
    assert_eq!(error.code(), "UNSAFE_PATH");
    assert!(
        error.to_string().contains("not group/world-writable"),
        "{error}"
    );
    assert!(
        !target.exists(),
        "nothing is created in an unsafe directory"
    );

    let missing = DshDatabase::open(&dir.join("missing.sqlite")).unwrap_err();
    assert!(
        matches!(
            missing.kind(),
            ErrorKind::Io {
                kind: std::io::ErrorKind::NotFound,
                ..
            }
        ),
        "{missing}"
    );
}

/// A source that claims one event more than it has.
struct Short<'a>(&'a dyn EventSource);
impl EventSource for Short<'_> {
    fn seq_next(&self) -> u64 {
        self.0.seq_next() + 1
    }
    fn event(&self, seq: u64) -> surfacelog::Result<Option<EventRef<'_>>> {
        self.0.event(seq)
    }
}

#[test]
fn sql_1_export_creates_private_directories_and_removes_them_on_failure() {
    let dir = scratch("create");
    let path = dir.join("new/deeper/db.sqlite");
    export(&path, &short_session("s"), true);
    let mode = fs::metadata(dir.join("new")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);

    let session = short_session("t");
    let failing = dir.join("gone/db.sqlite");
    let error =
        export_session(&failing, session.header(), &Short(session.log()), true).unwrap_err();
    assert_eq!(error.code(), "CORRUPT", "{error}");
    assert!(
        !dir.join("gone").exists(),
        "the file and its new directory are removed"
    );

    // Into an existing database, a failure leaves it as it was.
    let before: i64 = query(&path, "SELECT count(*) FROM events");
    let error = export_session(&path, session.header(), &Short(session.log()), true).unwrap_err();
    assert_eq!(error.code(), "CORRUPT");
    assert_eq!(query::<i64>(&path, "SELECT count(*) FROM events"), before);
    assert_eq!(
        query::<i64>(&path, "SELECT count(*) FROM sessions WHERE id = 't'"),
        0
    );
}

/// A refused export leaves an existing database byte for byte as it was (`store.md`
/// STORE-15): the session it already holds, and an event source that fails part way, are
/// refused before the connection's journal mode is set (§8.2 step 5), which rewrites the
/// file's header. Before, both refusals switched a database kept in `DELETE` mode to WAL
/// and bumped its change counter.
#[test]
fn a_refused_export_leaves_an_existing_database_unchanged() {
    let dir = scratch("untouched");
    let path = dir.join("db.sqlite");
    export(&path, &short_session("a"), true);
    let mode: String = query(&path, "PRAGMA journal_mode = DELETE");
    assert_eq!(mode, "delete");
    let before = common::tree_snapshot(&dir);

    let again = short_session("a");
    let error = export_session(&path, again.header(), again.log(), true).unwrap_err();
    assert_eq!(error.code(), "SESSION_EXISTS", "{error}");
    assert!(
        common::tree_snapshot(&dir) == before,
        "an export refused with SESSION_EXISTS changed the database"
    );

    let other = short_session("t");
    let error = export_session(&path, other.header(), &Short(other.log()), true).unwrap_err();
    assert_eq!(error.code(), "CORRUPT", "{error}");
    assert!(
        common::tree_snapshot(&dir) == before,
        "an export refused with CORRUPT changed the database"
    );
    assert_eq!(query::<String>(&path, "PRAGMA journal_mode"), "delete");
}

#[test]
fn bad_input_is_refused_without_panic() {
    let dir = scratch("bad-input");
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let random: Vec<u8> = (0..8192)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect();
    let inputs: [(&str, &[u8]); 4] = [
        ("random", &random),
        ("text", b"{\"type\":\"session\"}\nnot a database\n"),
        ("header-only", &b"SQLite format 3\0"[..]),
        ("empty", b""),
    ];
    for (name, bytes) in inputs {
        let path = dir.join(name);
        fs::write(&path, bytes).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        let error = DshDatabase::open(&path).unwrap_err();
        assert!(
            matches!(error.code(), "FORMAT_VERSION" | "CORRUPT"),
            "{name}: {error}"
        );
        if name == "empty" {
            assert!(
                format_version(&error).0.contains("nothing to import"),
                "{error}"
            );
            continue;
        }
        let session = short_session("s");
        let error = export_session(&path, session.header(), session.log(), true).unwrap_err();
        assert!(
            matches!(error.code(), "FORMAT_VERSION" | "CORRUPT"),
            "{name}: {error}"
        );
        assert_eq!(fs::read(&path).unwrap(), bytes, "{name}: the file changed");
    }
    // A pristine (zero-length) file is initialized by an export.
    let empty = dir.join("empty");
    export(&empty, &short_session("s"), true);
    assert_eq!(read(&empty, "s").unwrap().1.events, 6);
}

/// The vendored DSH corpus (`tests/data/dsh-sessions`): every session that reopens goes
/// through SQLite and comes back as the same events. Only the repair closers' key order
/// (`surfaceOp` before `sourceEventSeqs`) differs from the scalar-row order of §2.3.
#[test]
fn corpus_sessions_round_trip_through_sqlite() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/dsh-sessions");
    let dir = scratch("corpus");
    let mut files: Vec<PathBuf> = fs::read_dir(&corpus)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    assert!(files.len() > 100, "the corpus is vendored");
    let mut exported = 0;
    for (n, file) in files.iter().enumerate() {
        let text = fs::read_to_string(file).unwrap();
        let mut lines = text.lines();
        let header = lines.next().unwrap();
        let id = Json::parse(header)
            .unwrap()
            .root()
            .get("id")
            .unwrap()
            .as_str()
            .unwrap()
            .into_owned();
        let records: Vec<&str> = lines.collect();
        let events = rows::unpack(&records).unwrap();
        let events: Vec<&str> = events.iter().map(String::as_str).collect();
        // Logs that need the legacy projections of §9.2 (or carry a pre-release header)
        // are the store import's business; the engine refuses them as they are.
        let Ok((session, _)) = Session::reopen(&id, header, &events, Options::default()) else {
            continue;
        };
        let path = dir.join(format!("{n}.sqlite"));
        export(&path, &session, n % 2 == 0);
        let (back, end) = read(&path, &id).unwrap();
        assert_eq!(end.torn_marker, None);
        let original = texts(session.log());
        assert_eq!(back.len(), original.len(), "{}", file.display());
        for (got, want) in back.iter().zip(&original) {
            if got != want {
                let (a, b) = (Json::parse(got).unwrap(), Json::parse(want).unwrap());
                assert!(
                    equal(a.root(), b.root()),
                    "{}: {got} != {want}",
                    file.display()
                );
                assert!(
                    want.contains(r#""surfaceOp":"append","sourceEventSeqs""#),
                    "{want}"
                );
            }
        }
        exported += 1;
    }
    assert!(exported > 90, "{exported} sessions exported");
}

/// SQL-25 and SQL-12: a `time` or `version` column holding the lowest 64-bit integer is
/// not a safe integer. The checks took its absolute value, which overflows: a debug build
/// panicked on such a database, and a release build (where the absolute value wraps to
/// the same negative number) took it for a safe integer and passed the row on.
#[test]
fn the_lowest_64_bit_integer_in_a_column_is_refused_not_a_panic() {
    let dir = scratch("lowest-integer");
    let time = "UPDATE events SET time = -9223372036854775808 WHERE seq = 4";
    let error = read_damaged(&dir, "time", time).unwrap_err();
    assert_eq!(error.code(), "CORRUPT", "{error}");
    assert!(
        error.to_string().contains("time must be a safe integer"),
        "{error}"
    );
    let version = "UPDATE sessions SET version = -9223372036854775808";
    let path = exported_then(&dir, "version", version);
    let error = DshDatabase::open(&path).unwrap().header("s").unwrap_err();
    assert_eq!(error.code(), "CORRUPT", "{error}");
    assert!(
        error.to_string().contains("version must be a safe integer"),
        "{error}"
    );
}

/// STORE-14: a database import is all or nothing. When a later session is refused, every
/// session the import already published is taken back, except one a writer opened
/// meanwhile (kept, and the import fails with that `LOCKED`). Before, the take-back
/// stopped at the first session it could not remove: the sessions published after it
/// stayed in the store although the import failed.
#[test]
fn a_refused_database_import_takes_back_every_session_it_can() {
    use std::sync::Mutex;
    use surfacelog::internals::store::{Step, Store, StoreOptions};
    let dir = scratch("take-back");
    let path = dir.join("three.sqlite");
    for id in ["a", "b", "c"] {
        export(&path, &short_session(id), true);
    }
    // Session c's user message loses its id: the import path refuses it (MESSAGE_SHAPE).
    raw(&path)
        .execute_batch(
            r#"UPDATE events SET data = '{"role":"user","source":{"kind":"user"},"content":[]}' WHERE session_id = 'c' AND seq = 1"#,
        )
        .unwrap();
    let root = dir.join("store");
    let other = Store::open_or_create(&root, StoreOptions::new()).unwrap();
    let held = Arc::new(Mutex::new(None));
    let holder = Arc::clone(&held);
    // A writer opens session a while b is being published.
    let store = Store::open_or_create(&root, StoreOptions::new())
        .unwrap()
        .with_hook(move |step| {
            if step == Step::BeforePublish("b") {
                let (session, _) = other.open_session("a").expect("a is published");
                *holder.lock().unwrap() = Some(session);
            }
        });
    let error = surfacelog::internals::adapters::sqlite_import::import_sqlite(&store, &path, None)
        .unwrap_err();
    assert_eq!(error.code(), "LOCKED", "{error}");
    let ids: Vec<String> = store
        .list()
        .unwrap()
        .headers
        .iter()
        .map(|h| h.id().to_owned())
        .collect();
    assert_eq!(ids, ["a"], "only the session a writer holds is kept");
    drop(held.lock().unwrap().take());
}

/// STORE-14: the take-back of a session a refused database import had published, cut
/// short part-way (a crash, an I/O error in the middle of the removal), leaves no part of
/// it where the store reads sessions. Before, the session's directory was removed where it
/// was published: with its checkpoint and last segment gone, session `a` stayed listed and
/// opened as a shorter log (its interrupted turn then closed by repair), from an import
/// that had failed.
#[test]
fn a_take_back_cut_short_leaves_no_shortened_session() {
    use surfacelog::internals::log::Durability;
    use surfacelog::internals::store::Store;
    let dir = scratch("take-back-cut");
    let path = dir.join("two.sqlite");
    let mut events = vec![r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#.to_owned()];
    for seq in 1..=300 {
        let note = "y".repeat(100);
        events.push(format!(
            r#"{{"type":"x/note","seq":{seq},"time":1,"data":{{"n":"{note}"}},"ignorable":true}}"#
        ));
    }
    events.push(
        r#"{"type":"turn/end","seq":301,"time":1,"data":{"turn":1,"reason":{"kind":"completed"}}}"#
            .to_owned(),
    );
    let texts: Vec<&str> = events.iter().map(String::as_str).collect();
    let header = r#"{"version":0,"id":"a","createdAt":1}"#;
    let (long, _) = Session::reopen("a", header, &texts, options()).unwrap();
    export(&path, &long, true);
    export(&path, &short_session("b"), true);
    raw(&path)
        .execute_batch("UPDATE events SET type = 'mode/set' WHERE session_id = 'b' AND seq = 4")
        .unwrap();
    // Every removal of a session's directory stops part-way: its checkpoint, its message
    // pack and its last segment removed, then EIO.
    let hook: common::Hook = Box::new(|op| match op {
        common::Op::RemoveAll(path) if path.join("log").is_dir() => {
            for name in ["checkpoint", "messages"] {
                let _ = fs::remove_file(path.join(name));
            }
            let mut segments: Vec<PathBuf> = fs::read_dir(path.join("log"))?
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "seg"))
                .collect();
            segments.sort();
            if let Some(last) = segments.pop() {
                let _ = fs::remove_file(last.with_extension("idx"));
                fs::remove_file(&last)?;
            }
            Err(std::io::Error::from_raw_os_error(5))
        }
        _ => Ok(()),
    });
    let root = dir.join("store");
    let options = common::store_options(Durability::Sync, 4096)
        .storage(Arc::new(common::HookedStorage(hook)));
    let store = Store::open_or_create(&root, options).unwrap();
    let error = surfacelog::internals::adapters::sqlite_import::import_sqlite(&store, &path, None)
        .unwrap_err();
    assert_eq!(error.code(), "LEGACY_EVENT", "{error}");
    assert!(
        store.list().unwrap().headers.is_empty(),
        "a session of the failed import is listed ({error})"
    );
    assert_eq!(store.inspect("a").unwrap_err().code(), "SESSION_NOT_FOUND");
    drop(store);
    // What the cut removal left is under tmp/, removed at the next open (STORE-17).
    let store =
        Store::open_or_create(&root, common::store_options(Durability::Sync, 4096)).unwrap();
    assert!(store.list().unwrap().headers.is_empty());
    assert_eq!(fs::read_dir(root.join("tmp")).unwrap().count(), 0);
}
