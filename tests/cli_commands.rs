//! Every subcommand of the built `surfacelog` binary (issue 15, `/work/notes/cli-spec.md`):
//! the global options, exit codes, the `error[CODE]: ` line on stderr, the `--json`
//! schemas, `tail -f` against a writer in another process and `append --durable` killed
//! with SIGKILL mid-stream.

// Runs the binary, built with the `cli` feature.
#![cfg(feature = "cli")]

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use serde_json::value::RawValue;

fn scratch(name: &str) -> common::Scratch {
    common::scratch("clicmd", name)
}

/// The binary with no `SURFACELOG_STORE` from the test's environment.
fn bin() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_surfacelog"));
    command.env_remove("SURFACELOG_STORE");
    command
}

/// Runs `command` with `stdin` fed to it (from a thread, so a large input cannot
/// deadlock against a full stdout pipe) and collects what it printed.
fn run_fed(command: &mut Command, stdin: &str) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut pipe = child.stdin.take().unwrap();
    let input = stdin.to_owned();
    let feeder = std::thread::spawn(move || {
        // The child may stop reading early (a refused line): a closed pipe is fine.
        let _ = pipe.write_all(input.as_bytes());
    });
    let output = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    output
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"))
}

/// The keys of a JSON object, sorted.
fn keys(value: &Value) -> Vec<String> {
    let mut keys: Vec<String> = value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .cloned()
        .collect();
    keys.sort();
    keys
}

#[track_caller]
fn assert_keys(value: &Value, expected: &[&str]) {
    let mut expected: Vec<String> = expected.iter().map(|k| (*k).to_owned()).collect();
    expected.sort();
    assert_eq!(keys(value), expected, "{value}");
}

/// Checks a refusal: exit `exit`, stderr's first line `error[CODE]: ...`; returns stderr.
#[track_caller]
fn assert_refused(output: &Output, exit: i32, code: &str) -> String {
    let stderr = text(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(exit),
        "stdout {:?} stderr {stderr}",
        text(&output.stdout)
    );
    let first = stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!("error[{code}]: ")),
        "expected error[{code}]: {stderr}"
    );
    stderr
}

/// A store directory (which need not exist) the commands run against.
struct Store(PathBuf);

impl Store {
    fn args<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut all = vec!["--store", s(&self.0)];
        all.extend_from_slice(args);
        all
    }

    fn run(&self, args: &[&str]) -> Output {
        bin().args(self.args(args)).output().unwrap()
    }

    /// A command that must succeed; its stdout.
    #[track_caller]
    fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "{args:?}: {:?} {}",
            output.status.code(),
            text(&output.stderr)
        );
        text(&output.stdout)
    }

    /// A command that must be refused with `code` and exit `exit`; its stderr.
    #[track_caller]
    fn refused(&self, args: &[&str], exit: i32, code: &str) -> String {
        assert_refused(&self.run(args), exit, code)
    }

    /// `--json` command that must succeed; its one JSON document.
    #[track_caller]
    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        json(self.ok(&all).trim_end())
    }

    /// `append ID [extra]` fed `lines`.
    fn append(&self, id: &str, extra: &[&str], lines: &[&str]) -> Output {
        let mut args = vec!["append", id];
        args.extend_from_slice(extra);
        let mut input = lines.join("\n");
        input.push('\n');
        run_fed(bin().args(self.args(&args)), &input)
    }

    /// `append ID --create` of `lines`, which must all be appended.
    #[track_caller]
    fn create(&self, id: &str, lines: &[&str]) {
        let output = self.append(id, &["--create"], lines);
        assert!(output.status.success(), "{}", text(&output.stderr));
    }

    /// The stored texts of every event of `id`, from `show --events --json`, verbatim.
    #[track_caller]
    fn event_texts(&self, id: &str) -> Vec<String> {
        let out = self.ok(&["show", id, "--events", "--json"]);
        let events: HashMap<String, Vec<Box<RawValue>>> =
            serde_json::from_str(out.trim_end()).unwrap();
        events["events"]
            .iter()
            .map(|raw| raw.get().to_owned())
            .collect()
    }
}

fn store_in(scratch: &Path) -> Store {
    Store(scratch.join("store"))
}

/// One closed turn, then a replace of its user message (outside the turn):
/// seqs 0..=4, surface `[4]`, transcript `[1]`, one replacement.
const SCRIPT: [&str; 5] = [
    r#"{"type":"turn/start","data":{"turn":1}}"#,
    r#"{"type":"user/message","data":{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]},"surfaceOp":"append"}"#,
    r#"{"type":"plugin/x","data":{"a":1.50,"b":"\u00e9"}}"#,
    r#"{"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}"#,
    r#"{"type":"user/message","data":{"id":"u2","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"summary"}]},"surfaceOp":{"op":"replace","start":1,"end":1},"sourceEventSeqs":[1]}"#,
];

/// The `data` text of a line of [`SCRIPT`], as written.
fn data_of(line: &str) -> &str {
    let start = line.find(r#""data":"#).unwrap() + 7;
    let value: &RawValue = serde_json::from_str::<HashMap<&str, &RawValue>>(line).unwrap()["data"];
    &line[start..start + value.get().len()]
}

/// A store holding session `s1` made of [`SCRIPT`].
fn scripted(scratch: &Path) -> Store {
    let store = store_in(scratch);
    store.create("s1", &SCRIPT);
    store
}

/// The `seq` of a stored event text.
fn seq_of(event: &str) -> u64 {
    json(event)["seq"].as_u64().unwrap()
}

// ---------------------------------------------------------------------------------------
// Global options.

#[test]
fn store_option_before_or_after_the_subcommand_and_json_anywhere() {
    let dir = scratch("global");
    let store = store_in(&dir);
    let path = s(&store.0);
    // --store before the subcommand, then after it.
    let before = run_fed(bin().args(["--store", path, "append", "a", "--create"]), "");
    assert!(before.status.success(), "{}", text(&before.stderr));
    let after = run_fed(bin().args(["append", "b", "--create", "--store", path]), "");
    assert!(after.status.success(), "{}", text(&after.stderr));
    for args in [
        ["--json", "--store", path, "ls"],
        ["--store", path, "ls", "--json"],
        ["ls", "--json", "--store", path],
        ["ls", "--store", path, "--json"],
    ] {
        let output = bin().args(args).output().unwrap();
        assert!(output.status.success(), "{args:?}");
        let ls = json(text(&output.stdout).trim_end());
        let ids: Vec<&str> = ls["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["a", "b"], "{args:?}");
    }
}

#[test]
fn the_store_comes_from_the_environment_then_the_current_directory() {
    let dir = scratch("env");
    let store = store_in(&dir);
    store.create("e1", &[]);
    // SURFACELOG_STORE when there is no --store.
    let output = bin()
        .args(["ls", "--json"])
        .env("SURFACELOG_STORE", &store.0)
        .current_dir(&*dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        json(text(&output.stdout).trim_end())["sessions"][0]["id"],
        "e1"
    );
    // --store wins over the environment.
    let elsewhere = dir.join("elsewhere");
    let output = bin()
        .args(["--store", s(&elsewhere), "ls"])
        .env("SURFACELOG_STORE", &store.0)
        .output()
        .unwrap();
    assert_refused(&output, 5, "STORE_NOT_FOUND");
    assert!(!elsewhere.exists());

    // Else ./surfacelog-data, relative to the current directory.
    let cwd = dir.join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let output = bin().arg("ls").current_dir(&cwd).output().unwrap();
    let stderr = assert_refused(&output, 5, "STORE_NOT_FOUND");
    assert!(stderr.contains("surfacelog-data"), "{stderr}");
    assert!(!cwd.join("surfacelog-data").exists());
    let output = run_fed(
        bin().args(["append", "d1", "--create"]).current_dir(&cwd),
        r#"{"type":"plugin/d","data":1}"#,
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(cwd.join("surfacelog-data/sessions/d1").is_dir());
    let output = bin().arg("ls").current_dir(&cwd).output().unwrap();
    assert!(output.status.success());
    let listing = text(&output.stdout);
    assert!(
        listing.lines().nth(1).unwrap().starts_with("d1 "),
        "{listing}"
    );
    assert!(!store.0.join("sessions/d1").exists());
}

#[test]
fn reading_commands_on_a_missing_store_create_nothing() {
    let dir = scratch("missing");
    let store = store_in(&dir);
    let out = dir.join("out.jsonl");
    let commands: Vec<Vec<&str>> = vec![
        vec!["ls"],
        vec!["show", "s1"],
        vec!["show", "s1", "--events"],
        vec!["tail", "s1"],
        vec!["tail", "s1", "-f"],
        vec!["stats"],
        vec!["stats", "s1"],
        vec!["verify"],
        vec!["export", "s1", "--format", "dsh-jsonl", "--out", s(&out)],
        vec!["export", "s1", "--format", "dsh-jsonl", "--out", "-"],
        vec!["wait", "s1", "0", "--timeout-ms", "10"],
        vec!["fork", "s1", "--at", "last", "--as", "s2"],
        vec!["rm", "s1"],
        vec!["restore", "s1"],
        vec!["purge"],
        vec!["salvage", "s1"],
        vec!["append", "s1"],
    ];
    for args in &commands {
        for json in [false, true] {
            let mut args = args.clone();
            if json {
                args.push("--json");
            }
            let stderr = store.refused(&args, 5, "STORE_NOT_FOUND");
            assert!(stderr.contains(s(&store.0)), "{args:?}: {stderr}");
            assert!(!store.0.exists(), "{args:?} created the store");
            assert!(!out.exists(), "{args:?} wrote the export");
        }
    }
}

// ---------------------------------------------------------------------------------------
// ls.

/// A `CREATED` cell: `YYYY-MM-DDTHH:MM:SSZ`.
fn is_utc_time(cell: &str) -> bool {
    let b = cell.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

#[test]
fn ls_lists_every_session_and_sorts() {
    let dir = scratch("ls");
    let store = store_in(&dir);
    // Created in the order c, a, b: c 5 events, a 1, b 40 large ones.
    store.create("c", &SCRIPT);
    store.create("a", &[r#"{"type":"plugin/a","data":1}"#]);
    let big = format!(r#"{{"type":"plugin/b","data":"{}"}}"#, "b".repeat(4000));
    store.create("b", &vec![big.as_str(); 40]);
    store.ok(&["fork", "c", "--at", "last", "--as", "d"]);

    let ls = store.json(&["ls"]);
    assert_keys(&ls, &["sessions", "damaged"]);
    assert_eq!(ls["damaged"], Value::Array(vec![]));
    let rows = ls["sessions"].as_array().unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["a", "b", "c", "d"], "sorted by id by default");
    let row = |id: &str| rows.iter().find(|r| r["id"] == id).unwrap();
    for r in rows {
        assert_keys(
            r,
            &[
                "id",
                "createdAt",
                "events",
                "surface",
                "bytes",
                "apparentBytes",
                "parent",
            ],
        );
        assert!(r["bytes"].as_u64().unwrap() > 0, "{r}");
        assert!(r["apparentBytes"].as_u64().unwrap() > 0, "{r}");
    }
    assert_eq!(row("a")["events"], 1);
    assert_eq!(row("b")["events"], 40);
    assert_eq!(row("c")["events"], 5);
    assert_eq!(row("c")["surface"], 1);
    assert_eq!(row("a")["surface"], 0);
    assert_eq!(row("c")["parent"], Value::Null);
    assert_eq!(row("d")["parent"], "c");
    assert!(row("b")["apparentBytes"].as_u64().unwrap() > 160_000);
    let created = |id: &str| row(id)["createdAt"].as_u64().unwrap();
    assert!(created("c") <= created("a") && created("a") <= created("b"));

    let sorted = |by: &str| -> Vec<String> {
        store.json(&["ls", "--sort", by])["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect()
    };
    // Oldest first (ties by id).
    let mut by_created = vec!["a", "b", "c", "d"];
    by_created.sort_by_key(|id| (created(id), *id));
    assert_eq!(sorted("created"), by_created);
    // Most events first: b 40, d (fork of c: 5 + its marker), c 5, a 1.
    assert_eq!(sorted("events"), ["b", "d", "c", "a"]);
    // Largest on disk first: b, whatever the order of the rest.
    let by_size = sorted("size");
    assert_eq!(by_size[0], "b");
    let bytes: Vec<u64> = by_size
        .iter()
        .map(|id| row(id)["bytes"].as_u64().unwrap())
        .collect();
    assert!(bytes.windows(2).all(|w| w[0] >= w[1]), "{bytes:?}");
    assert_eq!(sorted("id"), ["a", "b", "c", "d"]);
    let bad = store.run(&["ls", "--sort", "colour"]);
    assert_eq!(bad.status.code(), Some(2));

    // Human: the header row, then one row per session.
    let human = store.ok(&["ls"]);
    let lines: Vec<&str> = human.lines().collect();
    assert_eq!(lines.len(), 5, "{human}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["ID", "CREATED", "EVENTS", "SURFACE", "SIZE", "PARENT"]
    );
    for (line, id) in lines[1..].iter().zip(["a", "b", "c", "d"]) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        // ID CREATED EVENTS SURFACE SIZE(number unit) PARENT
        assert_eq!(cells.len(), 7, "{line}");
        assert_eq!(cells[0], id);
        assert!(is_utc_time(cells[1]), "{line}");
        assert_eq!(cells[2], row(id)["events"].to_string(), "{line}");
        assert!(["B", "KiB", "MiB"].contains(&cells[5]), "{line}");
        assert_eq!(cells[6], if id == "d" { "c" } else { "-" }, "{line}");
    }
}

// ---------------------------------------------------------------------------------------
// show.

#[test]
fn show_summary_in_both_forms() {
    let dir = scratch("summary");
    let store = scripted(&dir);
    let summary = store.json(&["show", "s1"]);
    assert_keys(
        &summary,
        &[
            "id",
            "createdAt",
            "parent",
            "seedLength",
            "header",
            "events",
            "surface",
            "messages",
            "replacements",
            "lastEventTime",
        ],
    );
    assert_eq!(summary["id"], "s1");
    assert_eq!(summary["parent"], Value::Null);
    assert_eq!(summary["seedLength"], Value::Null);
    assert_eq!(summary["header"]["id"], "s1");
    assert_eq!(summary["events"], 5);
    assert_eq!(summary["surface"], json("[4]"));
    // The contract says counts; the code gives the lists: accept either, exactly.
    match &summary["messages"] {
        Value::Array(list) => {
            assert_eq!(list.len(), 1);
            assert_eq!(list[0]["seq"], 4);
            assert_eq!(list[0]["message"]["id"], "u2");
        }
        other => assert_eq!(*other, 1),
    }
    match &summary["replacements"] {
        Value::Array(list) => assert_eq!(
            *list,
            [json(r#"{"seq":4,"start":1,"end":1,"shadowed":[1]}"#)]
        ),
        other => assert_eq!(*other, 1),
    }
    let last = json(store.event_texts("s1").last().unwrap())["time"].clone();
    assert_eq!(summary["lastEventTime"], last);
    assert!(summary["createdAt"].as_u64().unwrap() > 0);

    let human = store.ok(&["show", "s1"]);
    let lines: Vec<&str> = human.lines().collect();
    let labels = [
        "id",
        "created",
        "parent",
        "events",
        "surface",
        "messages",
        "replacements",
        "last event",
    ];
    assert_eq!(lines.len(), labels.len(), "{human}");
    for (line, label) in lines.iter().zip(labels) {
        assert!(line.starts_with(label), "{line:?} is not {label}");
    }
    let value = |i: usize| lines[i][labels[i].len()..].trim();
    assert_eq!(value(0), "s1");
    assert!(is_utc_time(value(1)), "{human}");
    assert_eq!(value(2), "-");
    assert_eq!(value(3), "5");
    assert!(value(4).starts_with("1 nodes [4]"), "{human}");
    assert_eq!(value(5), "1");
    assert_eq!(value(6), "1");

    store.refused(&["show", "nope"], 5, "SESSION_NOT_FOUND");
    store.refused(&["show", "nope", "--json"], 5, "SESSION_NOT_FOUND");
}

#[test]
fn show_views() {
    let dir = scratch("views");
    let store = scripted(&dir);
    // --events: every stored text, with the data byte for byte as appended.
    let texts = store.event_texts("s1");
    assert_eq!(texts.len(), 5);
    for (seq, (event, line)) in texts.iter().zip(SCRIPT).enumerate() {
        assert_eq!(seq_of(event), seq as u64);
        assert!(
            event.contains(&format!(r#""data":{}"#, data_of(line))),
            "{event} lost {line}"
        );
    }
    assert!(texts[2].contains(r#""data":{"a":1.50,"b":"\u00e9"}"#));
    // --from --limit.
    let window = store.json(&["show", "s1", "--events", "--from", "2", "--limit", "2"]);
    assert_keys(&window, &["events"]);
    let seqs: Vec<u64> = window["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [2, 3]);
    let rest = store.json(&["show", "s1", "--events", "--from", "3"]);
    assert_eq!(rest["events"].as_array().unwrap().len(), 2);
    let past = store.json(&["show", "s1", "--events", "--from", "9"]);
    assert_eq!(past["events"], json("[]"));
    let human = store.ok(&["show", "s1", "--events", "--from", "2", "--limit", "2"]);
    let lines: Vec<&str> = human.lines().collect();
    assert_eq!(lines.len(), 2, "{human}");
    let cells: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(cells, ["2", "plugin/x", r#"{"a":1.50,"b":"\u00e9"}"#]);
    assert!(lines[1].trim_start().starts_with("3  turn/end"), "{human}");
    // --from without --events is a usage error.
    assert_eq!(
        store.run(&["show", "s1", "--from", "2"]).status.code(),
        Some(2)
    );

    // --messages.
    let messages = store.json(&["show", "s1", "--messages"]);
    assert_keys(&messages, &["messages"]);
    let list = messages["messages"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_keys(&list[0], &["seq", "message"]);
    assert_eq!(list[0]["seq"], 4);
    assert_eq!(list[0]["message"], json(data_of(SCRIPT[4])));
    let human = store.ok(&["show", "s1", "--messages"]);
    assert_eq!(human.lines().count(), 1);
    assert!(
        human.trim_start().starts_with("4  {\"id\":\"u2\""),
        "{human}"
    );

    // --transcript and --replacements.
    assert_eq!(
        store.json(&["show", "s1", "--transcript"]),
        json(r#"{"transcript":[1]}"#)
    );
    let replacements = store.json(&["show", "s1", "--replacements"]);
    assert_eq!(
        replacements,
        json(r#"{"replacements":[{"seq":4,"start":1,"end":1,"shadowed":[1]}]}"#)
    );
    let human = store.ok(&["show", "s1", "--replacements"]);
    assert!(human.contains("replaces 1..=1"), "{human}");

    // --as-of: the state after a seq.
    let before = store.json(&["show", "s1", "--as-of", "3"]);
    assert_eq!(before["events"], 4);
    assert_eq!(before["surface"], json("[1]"));
    let last = json(&texts[3])["time"].clone();
    assert_eq!(before["lastEventTime"], last);
    match &before["replacements"] {
        Value::Array(list) => assert!(list.is_empty()),
        other => assert_eq!(*other, 0),
    }
    let old = store.json(&["show", "s1", "--as-of", "3", "--messages"]);
    assert_eq!(old["messages"][0]["seq"], 1);
    assert_eq!(old["messages"].as_array().unwrap().len(), 1);
    let first = store.json(&["show", "s1", "--as-of", "0", "--transcript"]);
    assert_eq!(first, json(r#"{"transcript":[]}"#));
    let now = store.json(&["show", "s1", "--as-of", "4", "--messages"]);
    assert_eq!(now["messages"][0]["seq"], 4);
    for seq in ["5", "1000"] {
        store.refused(&["show", "s1", "--as-of", seq], 3, "INVALID_BOUNDARY");
        store.refused(
            &["show", "s1", "--as-of", seq, "--messages", "--json"],
            3,
            "INVALID_BOUNDARY",
        );
    }
    // --as-of does not apply to --events.
    let conflict = store.run(&["show", "s1", "--events", "--as-of", "1"]);
    assert_eq!(conflict.status.code(), Some(2));
}

// ---------------------------------------------------------------------------------------
// tail.

#[test]
fn tail_prints_the_last_events_verbatim() {
    let dir = scratch("tail");
    let store = scripted(&dir);
    let texts = store.event_texts("s1");
    for (n, expected) in [("0", 0), ("2", 2), ("5", 5), ("100", 5)] {
        let out = store.ok(&["tail", "s1", "-n", n, "--json"]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines, texts[5 - expected..], "-n {n}");
    }
    // Default: the last 10.
    let lines: Vec<String> = (0..12)
        .map(|i| format!(r#"{{"type":"plugin/n","data":{i}}}"#))
        .collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    store.create("long", &refs);
    let out = store.ok(&["tail", "long", "--json"]);
    let seqs: Vec<u64> = out.lines().map(seq_of).collect();
    assert_eq!(seqs, (2..12).collect::<Vec<_>>());
    // Human: SEQ TYPE data.
    let human = store.ok(&["tail", "s1", "-n", "2"]);
    let lines: Vec<&str> = human.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].trim_start().starts_with("3  turn/end"), "{human}");
    assert!(
        lines[1].trim_start().starts_with("4  user/message"),
        "{human}"
    );
    assert!(lines[1].contains("replace 1..=1"), "{human}");
    store.refused(&["tail", "nope"], 5, "SESSION_NOT_FOUND");
    store.refused(&["tail", "nope", "-f"], 5, "SESSION_NOT_FOUND");
}

/// A child process killed and reaped when dropped, so that a failing test leaves no
/// follower running (nor a writer recreating files in a removed scratch directory).
struct Guard(Child);

impl std::ops::Deref for Guard {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Guard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Lines of `child`'s stdout, as they come, through a channel.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    receive
}

#[test]
fn tail_follows_a_writer_in_another_process() {
    let dir = scratch("follow");
    let store = store_in(&dir);
    // A closed turn: a writer's reopen would close an open one (`interrupted`).
    store.create("f", &SCRIPT[..4]);
    let mut follower = bin()
        .args(store.args(&["tail", "f", "-f", "--json", "-n", "1"]))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map(Guard)
        .unwrap();
    let followed = lines_of(&mut follower);
    // The last committed event first: the follower is running.
    let first = followed.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(seq_of(&first), 3);

    // --durable: without it the events stay in the writer's buffer until its end (see
    // `append_without_durable_is_followed_before_its_end`).
    let mut writer = bin()
        .args(store.args(&["append", "f", "--durable"]))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(Guard)
        .unwrap();
    let mut input = writer.stdin.take().unwrap();
    let appended = lines_of(&mut writer);
    let more = [
        SCRIPT[4],
        r#"{"type":"plugin/f","data":{"n":1.50}}"#,
        r#"{"type":"plugin/f","data":"two"}"#,
    ];
    for (i, line) in more.iter().enumerate() {
        writeln!(input, "{line}").unwrap();
        input.flush().unwrap();
        let seq = json(&appended.recv_timeout(Duration::from_secs(10)).unwrap())["seq"]
            .as_u64()
            .unwrap();
        assert_eq!(seq, 4 + i as u64);
        let shown = followed
            .recv_timeout(Duration::from_secs(1))
            .unwrap_or_else(|e| panic!("seq {seq} not followed within 1 s: {e}"));
        assert_eq!(seq_of(&shown), seq);
        assert!(
            shown.contains(&format!(r#""data":{}"#, data_of(line))),
            "{shown}"
        );
    }
    drop(input);
    assert!(writer.wait().unwrap().success());
    // Nothing more, and the follower is still following.
    assert!(followed.recv_timeout(Duration::from_millis(100)).is_err());
    assert!(follower.try_wait().unwrap().is_none());
    // What it printed is what is stored.
    assert_eq!(store.event_texts("f").len(), 7);
    // A second writer process later on: followed too.
    let output = store.append("f", &[], &[r#"{"type":"plugin/late","data":[ 1, 2 ]}"#]);
    assert!(output.status.success());
    let shown = followed.recv_timeout(Duration::from_secs(1)).unwrap();
    assert_eq!(shown, *store.event_texts("f").last().unwrap());
    assert!(shown.contains(r#""data":[ 1, 2 ]"#), "{shown}");
    follower.kill().unwrap();
    follower.wait().unwrap();
}

#[test]
fn append_without_durable_is_followed_before_its_end() {
    let dir = scratch("buffered");
    let store = store_in(&dir);
    store.create("f", &SCRIPT[..4]);
    let mut writer = bin()
        .args(store.args(&["append", "f"]))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map(Guard)
        .unwrap();
    let mut input = writer.stdin.take().unwrap();
    let appended = lines_of(&mut writer);
    writeln!(input, r#"{{"type":"plugin/f","data":1}}"#).unwrap();
    input.flush().unwrap();
    let printed = appended.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(printed, r#"{"seq":4}"#);
    // Printed, so written to the OS: killed at once (before any background sync or
    // flush could run), the writer leaves it in the file, and another process reads it.
    writer.kill().unwrap();
    writer.wait().unwrap();
    drop(input);
    let texts = store.event_texts("f");
    assert_eq!(
        texts.len(),
        5,
        "the printed seq 4 is in the log after a SIGKILL"
    );
    assert_eq!(data_of(&texts[4]), "1");
}

// ---------------------------------------------------------------------------------------
// append.

#[test]
fn append_prints_seqs_and_stores_data_verbatim() {
    let dir = scratch("append");
    let store = store_in(&dir);
    let mut lines = SCRIPT.to_vec();
    lines.insert(2, "");
    lines.insert(3, "   ");
    lines.push(r#"{"type":"plugin/w","data": {"x" : [1, 2.0e0], "y":"\ud83d\ude00"} }"#);
    let output = store.append("s1", &["--create"], &lines);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(output.stderr.is_empty());
    let printed: Vec<Value> = text(&output.stdout).lines().map(json).collect();
    let expected: Vec<Value> = (0..6).map(|n| json(&format!(r#"{{"seq":{n}}}"#))).collect();
    assert_eq!(printed, expected);
    let texts = store.event_texts("s1");
    assert_eq!(texts.len(), 6);
    let tailed = store.ok(&["tail", "s1", "-n", "6", "--json"]);
    assert_eq!(tailed.lines().collect::<Vec<_>>(), texts);
    assert!(
        texts[2].contains(r#""data":{"a":1.50,"b":"\u00e9"}"#),
        "{}",
        texts[2]
    );
    assert!(
        texts[5].contains(r#""data":{"x" : [1, 2.0e0], "y":"\ud83d\ude00"}"#),
        "{}",
        texts[5]
    );
    // Appending to the existing session continues its seqs.
    let output = store.append("s1", &[], &[r#"{"type":"plugin/y","data":null}"#]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "{\"seq\":6}\n");
    // --durable prints the same.
    let output = store.append("s1", &["--durable"], &[r#"{"type":"plugin/y","data":0}"#]);
    assert_eq!(text(&output.stdout), "{\"seq\":7}\n");
    // An empty input creates the session and prints nothing.
    let output = store.append("empty", &["--create"], &[]);
    assert!(output.status.success());
    assert!(output.stdout.is_empty());
    assert_eq!(store.json(&["show", "empty"])["events"], 0);
}

#[test]
fn append_stops_at_a_refused_line() {
    let dir = scratch("refused");
    let store = store_in(&dir);
    store.create("s1", &SCRIPT[..4]);
    let cases: [(&str, &str); 7] = [
        (
            r#"{"type":"plugin/x","data":1,"bogus":2}"#,
            "ENVELOPE_INVALID",
        ),
        (r#"{"type":"plugin/x"}"#, "ENVELOPE_INVALID"),
        (r#"{"data":1}"#, "ENVELOPE_INVALID"),
        (r"[1,2]", "ENVELOPE_INVALID"),
        (r#"{"type":7,"data":1}"#, "ENVELOPE_INVALID"),
        (
            r#"{"type":"user/message","data":{"id":"u9","role":"user","source":{"kind":"user"},"content":[]},"surfaceOp":"sideways"}"#,
            "SURFACE_OP_INVALID",
        ),
        (
            r#"{"type":"user/message","data":{"id":"u9","role":"user","source":{"kind":"user"},"content":[]},"surfaceOp":{"op":"replace","start":1,"end":1}}"#,
            "REPLACE_SOURCES_INCOMPLETE",
        ),
    ];
    for (bad, code) in cases {
        let before = store.event_texts("s1");
        let good = r#"{"type":"plugin/ok","data":"good"}"#;
        let after = r#"{"type":"plugin/after","data":"after"}"#;
        let output = store.append("s1", &[], &[good, "", good, bad, after]);
        let stderr = assert_refused(&output, 3, code);
        assert!(stderr.contains("line 4"), "{bad}: {stderr}");
        let n = before.len() as u64;
        let printed: Vec<u64> = text(&output.stdout)
            .lines()
            .map(|l| json(l)["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(printed, [n, n + 1], "{bad}");
        let texts = store.event_texts("s1");
        assert_eq!(texts[..before.len()], before[..]);
        assert_eq!(texts.len(), before.len() + 2, "{bad}: {texts:?}");
        assert!(texts.iter().all(|t| !t.contains("plugin/after")));
    }
    // Not JSON at all: refused with its code, exit 3.
    let output = store.append("s1", &[], &["{not json"]);
    assert_eq!(output.status.code(), Some(3));
    assert!(text(&output.stderr).starts_with("error["));
    assert!(output.stdout.is_empty());
    // A missing session without --create: not found, and not created.
    let output = store.append("nope", &[], &[r#"{"type":"plugin/x","data":1}"#]);
    assert_refused(&output, 5, "SESSION_NOT_FOUND");
    assert!(output.stdout.is_empty());
    store.refused(&["show", "nope"], 5, "SESSION_NOT_FOUND");
}

/// Flips a bit of the first (or, with `rfind`, the last) occurrence of `needle` in the
/// first segment of session `id`.
fn damage(store: &Store, id: &str, needle: &[u8], rfind: bool) {
    let seg = store
        .0
        .join(format!("sessions/{id}/log/00000000000000000000.seg"));
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = if rfind {
        bytes.windows(needle.len()).rposition(|w| w == needle)
    } else {
        bytes.windows(needle.len()).position(|w| w == needle)
    }
    .unwrap();
    bytes[at] ^= 0x01;
    std::fs::write(&seg, bytes).unwrap();
}

#[test]
fn a_damaged_last_record_is_refused_and_left_as_is() {
    let dir = scratch("damaged");
    let store = scripted(&dir);
    store.create("tailbad", &[r#"{"type":"plugin/x","data":"marker-data"}"#]);
    damage(&store, "tailbad", b"marker-data", true);
    let seg = store
        .0
        .join("sessions/tailbad/log/00000000000000000000.seg");
    let bytes = std::fs::read(&seg).unwrap();
    let output = store.append("tailbad", &[], &[r#"{"type":"plugin/y","data":1}"#]);
    assert_refused(&output, 3, "CORRUPT");
    assert!(output.stdout.is_empty());
    assert_eq!(
        std::fs::read(&seg).unwrap(),
        bytes,
        "append changed a damaged log"
    );
    // verify: exit 1 and the problem in JSON; the rest checks out.
    let output = store.run(&["verify", "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let report = json(text(&output.stdout).trim_end());
    assert_keys(&report, &["store", "sessions", "ok"]);
    assert_eq!(report["ok"], false);
    let sessions = report["sessions"].as_array().unwrap();
    let bad = sessions.iter().find(|s| s["id"] == "tailbad").unwrap();
    assert_eq!(bad["ok"], false);
    assert_keys(
        &bad["problems"][0],
        &["file", "offset", "rule", "severity", "message"],
    );
    assert_eq!(bad["problems"][0]["rule"], "REC-2");
    let good = sessions.iter().find(|s| s["id"] == "s1").unwrap();
    assert_eq!(good["ok"], true);
    let output = store.run(&["verify", "s1"]);
    assert_eq!(output.status.code(), Some(0));
    store.refused(&["show", "tailbad", "--events"], 3, "CORRUPT");
    store.refused(&["stats"], 3, "CORRUPT");
}

#[test]
fn append_refuses_a_session_damaged_before_its_last_record() {
    let dir = scratch("middamage");
    let store = scripted(&dir);
    damage(&store, "s1", b"u00e9", false);
    let output = store.append("s1", &[], &[r#"{"type":"plugin/y","data":1}"#]);
    assert_refused(&output, 3, "CORRUPT");
}

/// The statistics of the whole store are its sessions' totals: a session whose header is
/// damaged refuses them with `CORRUPT` naming the file, as a session whose log is damaged
/// does. Before, its events were left out of the totals, which were printed with exit 0,
/// the damage only a line on stderr.
#[test]
fn stats_of_the_store_refuses_a_session_whose_header_is_damaged() {
    let dir = scratch("statshdr");
    let store = scripted(&dir);
    store.create("s2", &[r#"{"type":"plugin/x","data":2}"#]);
    let header = store.0.join("sessions/s2/header.json");
    std::fs::write(&header, b"{not a header}\n").unwrap();
    for args in [&["stats"][..], &["stats", "--json"][..]] {
        let output = store.run(args);
        let stderr = assert_refused(&output, 3, "CORRUPT");
        assert!(stderr.contains("header.json"), "{stderr}");
        assert!(
            output.stdout.is_empty(),
            "{args:?}: totals printed without the damaged session: {}",
            text(&output.stdout)
        );
    }
    // One session's statistics do not depend on another's header.
    store.json(&["stats", "s1"]);
}

// ---------------------------------------------------------------------------------------
// fork, rm, restore, purge.

#[test]
fn fork_at_last_or_a_seq_and_its_refusals() {
    let dir = scratch("fork");
    let store = scripted(&dir);
    let forked = store.json(&["fork", "s1", "--at", "last", "--as", "s2"]);
    assert_eq!(forked, json(r#"{"id":"s2","parent":"s1","seedLength":5}"#));
    let child = store.json(&["show", "s2"]);
    assert_eq!(child["parent"], "s1");
    assert_eq!(child["seedLength"], 5);
    assert_eq!(child["surface"], json("[4]"));
    // The seed is the source's events, verbatim.
    assert_eq!(store.event_texts("s2")[..5], store.event_texts("s1")[..]);
    let human = store.ok(&["fork", "s1", "--at", "3", "--as", "s3"]);
    assert!(human.contains("s3"), "{human}");
    assert_eq!(store.json(&["show", "s3"])["seedLength"], 4);
    assert_eq!(store.json(&["show", "s3"])["surface"], json("[1]"));

    for (at, new, exit, code) in [
        ("1", "x", 3, "OPEN_TURN"),
        ("5", "x", 3, "INVALID_BOUNDARY"),
        ("99", "x", 3, "INVALID_BOUNDARY"),
        ("x", "x", 3, "INVALID_BOUNDARY"),
        ("-1", "x", 3, "INVALID_BOUNDARY"),
        ("1.5", "x", 3, "INVALID_BOUNDARY"),
        ("last", "s2", 3, "SESSION_EXISTS"),
        ("last", "s1", 3, "SESSION_EXISTS"),
    ] {
        let at = format!("--at={at}");
        store.refused(&["fork", "s1", &at, "--as", new], exit, code);
    }
    store.refused(
        &["fork", "nope", "--at", "last", "--as", "x"],
        5,
        "SESSION_NOT_FOUND",
    );
    store.refused(&["show", "x"], 5, "SESSION_NOT_FOUND");
    assert_eq!(
        store.run(&["fork", "s1", "--as", "x"]).status.code(),
        Some(2)
    );
}

#[test]
fn rm_restore_and_purge() {
    let dir = scratch("trash");
    let store = scripted(&dir);
    let texts = store.event_texts("s1");
    let ids = |store: &Store| -> Vec<String> {
        store.json(&["ls"])["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        store.json(&["rm", "s1"]),
        json(r#"{"id":"s1","trashed":true}"#)
    );
    assert!(ids(&store).is_empty());
    store.refused(&["show", "s1"], 5, "SESSION_NOT_FOUND");
    store.refused(&["rm", "s1"], 5, "SESSION_NOT_FOUND");
    assert_eq!(
        store.json(&["restore", "s1"]),
        json(r#"{"id":"s1","restored":true}"#)
    );
    assert_eq!(store.event_texts("s1"), texts);
    // Restore of an id never deleted, and over an existing session.
    store.refused(&["restore", "never"], 5, "SESSION_NOT_FOUND");
    store.ok(&["rm", "s1"]);
    store.create("s1", &[r#"{"type":"plugin/new","data":1}"#]);
    store.refused(&["restore", "s1"], 3, "SESSION_EXISTS");
    assert_eq!(
        store.event_texts("s1").len(),
        1,
        "the existing session was kept"
    );
    let human = store.ok(&["rm", "s1"]);
    assert!(human.contains("s1"), "{human}");

    // Purge: --older-than keeps what was trashed just now; 0s removes it.
    assert_eq!(
        store.json(&["purge", "--older-than", "1h"]),
        json(r#"{"removed":0}"#)
    );
    assert_eq!(
        store.json(&["purge", "--older-than", "7d"]),
        json(r#"{"removed":0}"#)
    );
    store.ok(&["restore", "s1"]);
    assert_eq!(store.event_texts("s1").len(), 1, "the newest trashed copy");
    store.ok(&["rm", "s1"]);
    assert_eq!(
        store.json(&["purge", "--older-than", "0s"]),
        json(r#"{"removed":2}"#)
    );
    store.refused(&["restore", "s1"], 5, "SESSION_NOT_FOUND");
    assert_eq!(store.json(&["purge"]), json(r#"{"removed":0}"#));
    // Purge without --older-than: everything in the trash.
    store.create("t1", &[]);
    store.create("t2", &[]);
    store.ok(&["rm", "t1"]);
    store.ok(&["rm", "t2"]);
    let human = store.ok(&["purge"]);
    assert!(human.contains('2'), "{human}");
    store.refused(&["restore", "t2"], 5, "SESSION_NOT_FOUND");
    for bad in ["5x", "h", "", "-1s", "1.5h", "99999999999999999999d"] {
        let output = store.run(&["purge", &format!("--older-than={bad}")]);
        assert_eq!(output.status.code(), Some(2), "{bad:?}");
        assert!(text(&output.stderr).contains("older-than"), "{bad:?}");
    }
}

// ---------------------------------------------------------------------------------------
// stats.

#[test]
fn stats_of_one_session_and_of_the_store() {
    let dir = scratch("stats");
    let store = scripted(&dir);
    store.create("s2", &[r#"{"type":"plugin/x","data":2}"#]);
    let all_texts: Vec<String> = ["s1", "s2"]
        .iter()
        .flat_map(|id| store.event_texts(id))
        .collect();
    let keys_all = [
        "sessions",
        "events",
        "byType",
        "segments",
        "bytes",
        "apparentBytes",
        "surface",
        "replacements",
        "lastEventTime",
    ];
    let check = |stats: &Value, texts: &[String]| {
        assert_eq!(stats["events"], texts.len());
        let by_type = stats["byType"].as_object().unwrap();
        let mut expected: HashMap<String, (u64, u64)> = HashMap::new();
        for t in texts {
            let e = expected
                .entry(json(t)["type"].as_str().unwrap().to_owned())
                .or_default();
            e.0 += 1;
            e.1 += t.len() as u64;
        }
        assert_eq!(by_type.len(), expected.len(), "{stats}");
        for (name, counts) in by_type {
            assert_keys(counts, &["events", "bytes"]);
            let (events, bytes) = expected[name];
            assert_eq!(counts["events"], events, "{name}");
            assert_eq!(counts["bytes"], bytes, "{name}");
        }
        let sum: u64 = by_type
            .values()
            .map(|c| c["events"].as_u64().unwrap())
            .sum();
        assert_eq!(stats["events"], sum);
        assert!(stats["segments"].as_u64().unwrap() >= 1);
        assert!(stats["bytes"].as_u64().unwrap() > 0);
        assert!(stats["apparentBytes"].as_u64().unwrap() > 0);
        let last = texts
            .iter()
            .map(|t| json(t)["time"].as_i64().unwrap())
            .max();
        assert_eq!(stats["lastEventTime"].as_i64(), last);
    };
    let whole = store.json(&["stats"]);
    assert_keys(&whole, &keys_all);
    assert_eq!(whole["sessions"], 2);
    assert_eq!(whole["surface"], 1);
    assert_eq!(whole["replacements"], 1);
    check(&whole, &all_texts);
    assert_eq!(whole["byType"]["plugin/x"]["events"], 2);

    let one = store.json(&["stats", "s2"]);
    let mut with_id = keys_all.to_vec();
    with_id.push("id");
    assert_keys(&one, &with_id);
    assert_eq!(one["id"], "s2");
    assert_eq!(one["sessions"], 1);
    assert_eq!(one["replacements"], 0);
    check(&one, &store.event_texts("s2"));

    let human = store.ok(&["stats", "s1"]);
    assert!(human.starts_with("session"), "{human}");
    assert!(
        human
            .lines()
            .any(|l| l.split_whitespace().eq(["events", "5"])),
        "{human}"
    );
    assert!(
        human
            .lines()
            .any(|l| l.trim_start().starts_with("user/message")),
        "{human}"
    );
    let human = store.ok(&["stats"]);
    assert!(
        human
            .lines()
            .any(|l| l.split_whitespace().eq(["sessions", "2"])),
        "{human}"
    );
    store.refused(&["stats", "nope"], 5, "SESSION_NOT_FOUND");
    // An empty store.
    let empty = Store(dir.join("empty"));
    empty.create("e", &[]);
    empty.ok(&["rm", "e"]);
    let stats = empty.json(&["stats"]);
    assert_eq!(stats["sessions"], 0);
    assert_eq!(stats["events"], 0);
    assert_eq!(stats["lastEventTime"], Value::Null);
}

// ---------------------------------------------------------------------------------------
// export, import.

/// STORE-15: an export never writes over one of the store's files, nor into a session's
/// directory or anywhere under the store's directories (`UNSAFE_PATH`, nothing changed),
/// `--force` or not. Before, a read-only export wrote its file there, and with `--force`
/// replaced a session's `header.json` or the store's `STORE`.
#[test]
fn export_never_writes_into_the_store() {
    let dir = scratch("export-inside");
    let store = scripted(&dir);
    // Never over one of the store's files, nor into a session's directory or anywhere
    // under the store's directories: a read-only command writes nothing there.
    for inside in [
        store.0.join("STORE"),
        store.0.join("sessions").join("s1").join("out.jsonl"),
        store.0.join("sessions").join("s1").join("header.json"),
        store.0.join("trash").join("out.jsonl"),
    ] {
        let before = common::tree_snapshot(&store.0);
        for format in ["dsh-jsonl", "dsh-sqlite"] {
            let args = [
                "export",
                "s1",
                "--format",
                format,
                "--out",
                s(&inside),
                "--force",
            ];
            store.refused(&args, 3, "UNSAFE_PATH");
        }
        assert_eq!(
            common::tree_snapshot(&store.0),
            before,
            "{}",
            inside.display()
        );
    }
}

#[test]
fn export_to_stdout_or_a_file_never_overwriting() {
    let dir = scratch("export");
    let store = scripted(&dir);
    let output = store.run(&["export", "s1", "--format", "dsh-jsonl", "--out", "-"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let jsonl = text(&output.stdout);
    let summary = json(text(&output.stderr).trim_end());
    assert_keys(
        &summary,
        &["id", "events", "records", "packedRows", "textBytes"],
    );
    assert_eq!(summary["id"], "s1");
    assert_eq!(summary["events"], 5);
    let lines: Vec<&str> = jsonl.lines().collect();
    assert_eq!(json(lines[0])["type"], "session");
    assert_eq!(lines[1..], store.event_texts("s1")[..]);

    // To a file: the same bytes, the summary on stdout.
    let file = dir.join("s1.jsonl");
    let out = store.ok(&["export", "s1", "--format", "dsh-jsonl", "--out", s(&file)]);
    assert_eq!(json(out.trim_end()), summary);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), jsonl);
    // Never over an existing file; with --force, replaced.
    let existing = dir.join("existing.jsonl");
    std::fs::write(&existing, "keep me\n").unwrap();
    let stderr = store.refused(
        &[
            "export",
            "s1",
            "--format",
            "dsh-jsonl",
            "--out",
            s(&existing),
        ],
        3,
        "UNSAFE_PATH",
    );
    assert!(stderr.contains("existing.jsonl"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me\n");
    store.ok(&[
        "export",
        "s1",
        "--format",
        "dsh-jsonl",
        "--out",
        s(&existing),
        "--force",
    ]);
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), jsonl);

    // A directory others can write to: only with the sticky bit (as /tmp).
    let sticky = dir.join("sticky");
    std::fs::create_dir(&sticky).unwrap();
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let target = sticky.join("s1.jsonl");
    store.ok(&["export", "s1", "--format", "dsh-jsonl", "--out", s(&target)]);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), jsonl);
    let open = dir.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let target = open.join("s1.jsonl");
    store.refused(
        &["export", "s1", "--format", "dsh-jsonl", "--out", s(&target)],
        3,
        "UNSAFE_PATH",
    );
    assert!(!target.exists());
    assert_eq!(std::fs::read_dir(&open).unwrap().count(), 0);

    // SQLite cannot go to stdout; a missing session is not found.
    let output = store.run(&["export", "s1", "--format", "dsh-sqlite", "--out", "-"]);
    assert_refused(&output, 3, "UNSAFE_PATH");
    assert!(output.stdout.is_empty());
    store.refused(
        &["export", "nope", "--format", "dsh-jsonl", "--out", "-"],
        5,
        "SESSION_NOT_FOUND",
    );
    assert!(!dir.join("nope.jsonl").exists());
    assert_eq!(
        store.run(&["export", "s1", "--out", "-"]).status.code(),
        Some(2),
        "--format is required"
    );
}

/// LOG-1: a log without its `LOCK` file has no writer (a writer's open makes the file
/// again, `verify` finds nothing wrong), so `export` and `log --check-writer` read it, and
/// create nothing. Before, both refused with `IO` and exit 5, as if the session were not
/// there, because the check opened the missing file to lock it.
#[test]
fn a_log_without_its_lock_file_has_no_writer() {
    let dir = scratch("nolock");
    let store = scripted(&dir);
    let expected = store.ok(&["export", "s1", "--format", "dsh-jsonl", "--out", "-"]);
    let log = store.0.join("sessions/s1/log");
    std::fs::remove_file(log.join("LOCK")).unwrap();
    let before = common::tree_snapshot(&store.0);
    assert_eq!(
        store.ok(&["export", "s1", "--format", "dsh-jsonl", "--out", "-"]),
        expected
    );
    let out = store.ok(&["log", s(&log), "--check-writer", "--json"]);
    assert_eq!(json(out.trim_end())["events"], 5);
    assert!(
        common::tree_snapshot(&store.0) == before,
        "a read-only command changed the store"
    );
}

/// An export to stdout of a session damaged part way writes nothing: every event is read
/// and checked before the first byte, as `show --events --json` does, so what reads the
/// stream never gets a session cut short at the damage (a DSH loader takes a file that
/// ends there for a shorter session). Before, the events before the damage were written,
/// then the error, in both JSONL formats.
#[test]
fn an_export_to_stdout_of_a_damaged_session_writes_nothing() {
    let dir = scratch("exportdamaged");
    let store = scripted(&dir);
    // Under the checkpoint: the inspection the export reads through does not read it.
    damage(&store, "s1", b"u00e9", false);
    for format in ["dsh-jsonl", "dsh-jsonl-zstd"] {
        let output = store.run(&["export", "s1", "--format", format, "--out", "-"]);
        let stderr = assert_refused(&output, 3, "CORRUPT");
        assert!(stderr.contains("00000000000000000000.seg"), "{stderr}");
        assert!(
            output.stdout.is_empty(),
            "{format}: {} bytes written before the damage",
            output.stdout.len()
        );
    }
}

#[test]
fn import_detects_jsonl_zstd_and_sqlite() {
    let dir = scratch("import");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/dsh-sessions/acp-agent--cancel--session.jsonl");
    let store = store_in(&dir);
    let out = store.ok(&["import", s(&fixture)]);
    let line = json(out.trim_end());
    assert_keys(&line, &["id", "events", "repaired", "closers"]);
    assert_eq!(line["id"], "fx-8699d9fc0c");
    let events = line["events"].as_u64().unwrap();
    assert!(events > 0);
    let texts = store.event_texts("fx-8699d9fc0c");
    assert_eq!(texts.len() as u64, events);
    // The raw fixture's events are stored verbatim (those not repaired).
    let raw = std::fs::read_to_string(&fixture).unwrap();
    assert_eq!(texts[0], raw.lines().nth(1).unwrap());

    // zstd: exported, detected by its magic, imported into another store.
    let zst = dir.join("s.jsonl.zst");
    store.ok(&[
        "export",
        "fx-8699d9fc0c",
        "--format",
        "dsh-jsonl-zstd",
        "--out",
        s(&zst),
    ]);
    assert_eq!(std::fs::read(&zst).unwrap()[..4], [0x28, 0xB5, 0x2F, 0xFD]);
    let other = Store(dir.join("other"));
    let line = json(
        other
            .ok(&["import", s(&zst), "--format", "auto"])
            .trim_end(),
    );
    assert_eq!(line["id"], "fx-8699d9fc0c");
    assert_eq!(line["events"], events);
    assert_eq!(other.event_texts("fx-8699d9fc0c"), texts);

    // SQLite: a database made by export, detected by its header.
    let db = dir.join("s.db");
    store.ok(&[
        "export",
        "fx-8699d9fc0c",
        "--format",
        "dsh-sqlite",
        "--out",
        s(&db),
    ]);
    assert!(
        std::fs::read(&db)
            .unwrap()
            .starts_with(b"SQLite format 3\0")
    );
    let third = Store(dir.join("third"));
    let line = json(third.ok(&["import", s(&db)]).trim_end());
    assert_eq!(line["id"], "fx-8699d9fc0c");
    assert_eq!(line["events"], events);
    assert_eq!(third.event_texts("fx-8699d9fc0c"), texts);
    // The same again: the session exists.
    third.refused(&["import", s(&db)], 3, "SESSION_EXISTS");

    // A missing file: not found, and no store made for it.
    let fourth = Store(dir.join("fourth"));
    let missing = dir.join("missing.jsonl");
    for format in ["auto", "dsh-jsonl", "dsh-sqlite"] {
        let output = fourth.run(&["import", s(&missing), "--format", format]);
        assert_eq!(
            output.status.code(),
            Some(5),
            "{format}: {}",
            text(&output.stderr)
        );
        assert!(text(&output.stderr).starts_with("error["), "{format}");
        assert!(text(&output.stderr).contains("missing.jsonl"), "{format}");
        if format == "auto" {
            // (With an explicit format the store is created before the file is opened.)
            assert!(!fourth.0.exists());
        }
    }
}

// ---------------------------------------------------------------------------------------
// wait, log, salvage.

#[test]
fn wait_log_and_salvage() {
    let dir = scratch("wait");
    let store = scripted(&dir);
    store.ok(&["wait", "s1", "4", "--timeout-ms", "10"]);
    let output = store.run(&["wait", "s1", "5", "--timeout-ms", "20"]);
    assert_refused(&output, 4, "TIMEOUT");
    store.refused(&["wait", "nope", "0"], 5, "SESSION_NOT_FOUND");
    let log = store.0.join("sessions/s1/log");
    let out = store.json(&["log", s(&log)]);
    assert_eq!(out["events"], 5);
    assert_eq!(out["dir"], s(&log));
    let salvaged = store.json(&["salvage", "s1"]);
    assert_eq!(salvaged["id"], "s1");
    assert_eq!(salvaged["kept"], 5);
    assert_eq!(salvaged["firstLostSeq"], Value::Null);
    assert_eq!(salvaged["setAside"], json("[]"));
    assert_eq!(store.event_texts("s1").len(), 5);
}

// ---------------------------------------------------------------------------------------
// completions, help, version, usage.

#[test]
fn completions_help_version_and_usage_errors() {
    for shell in ["bash", "zsh", "fish"] {
        let output = bin().args(["completions", shell]).output().unwrap();
        assert!(output.status.success(), "{shell}");
        let script = text(&output.stdout);
        assert!(script.len() > 200, "{shell}: {script}");
        assert!(script.contains("surfacelog"), "{shell}");
        assert!(
            script.contains("tail") && script.contains("store"),
            "{shell}"
        );
    }
    assert_eq!(
        bin()
            .args(["completions", "tcsh"])
            .output()
            .unwrap()
            .status
            .code(),
        Some(2)
    );
    let subcommands = [
        "demo",
        "ls",
        "show",
        "tail",
        "append",
        "fork",
        "rm",
        "restore",
        "purge",
        "stats",
        "import",
        "export",
        "wait",
        "verify",
        "salvage",
        "log",
        "completions",
    ];
    let top = bin().arg("--help").output().unwrap();
    assert!(top.status.success());
    let top = text(&top.stdout);
    assert!(top.contains("Examples:"));
    for sub in subcommands {
        assert!(
            top.contains(&format!("\n  {sub} ")),
            "{sub} missing from --help"
        );
        let output = bin().args([sub, "--help"]).output().unwrap();
        assert!(output.status.success(), "{sub}");
        let help = text(&output.stdout);
        let examples = help
            .find("Examples:")
            .unwrap_or_else(|| panic!("{sub}: {help}"));
        assert!(
            help[examples..].contains(&format!("surfacelog {sub}"))
                || help[examples..].contains(&format!("| surfacelog {sub}"))
                || help[examples..].contains(&format!(" {sub} ")),
            "{sub}: {help}"
        );
    }
    let version = bin().arg("--version").output().unwrap();
    assert!(version.status.success());
    assert_eq!(
        text(&version.stdout).trim_end(),
        format!("surfacelog {}", env!("CARGO_PKG_VERSION"))
    );
    for args in [
        &[][..],
        &["no-such-command"][..],
        &["show"][..],
        &["tail", "s1", "-n", "many"][..],
        &["ls", "--bogus"][..],
        &["--color", "sometimes", "ls"][..],
        &["wait", "s1"][..],
    ] {
        let output = common::surfacelog(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(output.stdout.is_empty(), "{args:?}");
        let stderr = text(&output.stderr);
        assert!(
            stderr.starts_with("error: ") || stderr.contains("Usage"),
            "{args:?}: {stderr}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// append --durable under SIGKILL.

/// xorshift64*: seeded, reproducible timing and kill points.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The data of line `k` of the durable test: varied lengths and spacing.
fn durable_data(k: u64, rng: &mut Rng) -> String {
    let pad = "x".repeat(usize::try_from(rng.below(300)).unwrap());
    if k.is_multiple_of(2) {
        format!(r#"{{"k":{k},"pad":"{pad}"}}"#)
    } else {
        format!(r#"{{ "k" : {k} , "pad" : "{pad}" , "f" : 1.0 }}"#)
    }
}

#[test]
fn append_durable_killed_mid_stream_keeps_every_printed_seq() {
    const LINES: u64 = 400;
    for round in 0..5_u64 {
        let dir = scratch(&format!("kill{round}"));
        let store = store_in(&dir);
        let mut rng = Rng(0x5EED_0000 + round * 7919);
        let data: Vec<String> = (0..LINES).map(|k| durable_data(k, &mut rng)).collect();
        let kill_after = 1 + rng.below(120);
        let pause_every = 1 + rng.below(20);

        let mut child = bin()
            .args(store.args(&["append", "k", "--durable", "--create"]))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map(Guard)
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let lines: Vec<String> = data
            .iter()
            .map(|d| format!("{{\"type\":\"plugin/k\",\"data\":{d}}}\n"))
            .collect();
        let writer = std::thread::spawn(move || {
            let mut written = 0_u64;
            for (k, line) in lines.iter().enumerate() {
                if stdin
                    .write_all(line.as_bytes())
                    .and_then(|()| stdin.flush())
                    .is_err()
                {
                    break;
                }
                written += 1;
                if (k as u64).is_multiple_of(pause_every) {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            written
        });
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut printed = Vec::new();
        let mut killed = false;
        for line in stdout.lines() {
            let Ok(line) = line else { break };
            printed.push(json(&line)["seq"].as_u64().unwrap());
            if !killed && printed.len() as u64 == kill_after {
                child.kill().unwrap();
                killed = true;
            }
        }
        assert!(killed, "round {round}: the child ended before the kill");
        let status = child.wait().unwrap();
        assert!(!status.success(), "round {round}: not killed");
        let written = writer.join().unwrap();
        assert_eq!(
            printed,
            (0..printed.len() as u64).collect::<Vec<_>>(),
            "round {round}"
        );

        // Reopen (the writer's crash repair) and compare with what was sent.
        let lib = surfacelog::Store::open(&store.0, surfacelog::StoreOptions::new()).unwrap();
        let (session, _) = lib.open_session("k").unwrap();
        let stored = session.seq_next();
        assert!(
            stored >= printed.len() as u64,
            "round {round}: {} printed, {stored} stored",
            printed.len()
        );
        assert!(stored <= written, "round {round}: more stored than sent");
        for seq in 0..stored {
            let event = session.event(seq).unwrap().unwrap();
            assert_eq!(event.event_type, "plugin/k");
            assert_eq!(
                event.data(),
                data[usize::try_from(seq).unwrap()],
                "round {round} seq {seq}"
            );
        }
        drop(session);
        drop(lib);
    }
}

// ---------------------------------------------------------------------------------------
// Findings of the first run, fixed: each test failed before its fix.

#[test]
fn tail_f_ends_when_its_session_is_deleted() {
    let dir = scratch("follow-rm");
    let store = store_in(&dir);
    store.create("f", &SCRIPT[..4]);
    let mut follower = bin()
        .args(store.args(&["tail", "f", "-f", "-n", "0"]))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map(Guard)
        .unwrap();
    store.ok(&["rm", "f"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = follower.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "tail -f still running after rm"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(follower.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(5), "{stderr}");
    assert!(stderr.starts_with("error[SESSION_NOT_FOUND]: "), "{stderr}");
}

#[test]
fn force_is_refused_for_a_sqlite_target_and_hyphen_boundaries_parse() {
    let dir = scratch("force-sqlite");
    let store = scripted(&dir);
    let db = dir.join("s.db");
    store.ok(&["export", "s1", "--format", "dsh-sqlite", "--out", s(&db)]);
    let before = std::fs::read(&db).unwrap();
    let args = [
        "export",
        "s1",
        "--format",
        "dsh-sqlite",
        "--out",
        s(&db),
        "--force",
    ];
    store.refused(&args, 3, "UNSAFE_PATH");
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "the database is untouched"
    );
    store.refused(
        &["fork", "s1", "--at", "-1", "--as", "g"],
        3,
        "INVALID_BOUNDARY",
    );
}

#[test]
fn importing_a_missing_file_creates_no_store_whatever_the_format() {
    let dir = scratch("import-missing");
    let store = store_in(&dir);
    let missing = dir.join("missing.jsonl");
    for format in ["auto", "dsh-jsonl", "dsh-sqlite"] {
        store.refused(&["import", s(&missing), "--format", format], 5, "IO");
        assert!(!store.0.exists(), "{format}: the store was created");
    }
}

// ---------------------------------------------------------------------------------------
// Fixed faults: each test failed (or hung, or panicked) before its fix.

/// Runs `args` and waits at most 20 s for it: a hang is a failure, not a stuck suite.
fn run_bounded(store: &Store, args: &[&str]) -> Output {
    let child = bin()
        .args(store.args(args))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (done, waited) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let output = child.wait_with_output().unwrap();
        let _ = done.send(());
        output
    });
    if waited.recv_timeout(Duration::from_secs(20)).is_err() {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        panic!("{args:?} hung");
    }
    waiter.join().unwrap()
}

#[test]
fn ls_refuses_a_fifo_an_oversized_header_and_a_linked_session_without_hanging() {
    let dir = scratch("ls-hostile");
    let store = scripted(&dir);
    store.create("fifo", &SCRIPT[..1]);
    store.create("huge", &SCRIPT[..1]);
    let sessions = store.0.join("sessions");
    let checkpoint = sessions.join("fifo/checkpoint");
    std::fs::remove_file(&checkpoint).unwrap();
    assert!(
        Command::new("mkfifo")
            .arg(&checkpoint)
            .status()
            .unwrap()
            .success()
    );
    // A sparse 1 TiB header.json: read whole, it would exhaust memory.
    std::fs::OpenOptions::new()
        .write(true)
        .open(sessions.join("huge/header.json"))
        .unwrap()
        .set_len(1 << 40)
        .unwrap();
    std::os::unix::fs::symlink(sessions.join("s1"), sessions.join("linked")).unwrap();
    let output = run_bounded(&store, &["ls", "--json"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let listed = json(text(&output.stdout).trim_end());
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["s1"]);
    let damaged: Vec<String> = listed["damaged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| format!("{} {}", d["code"], d["message"]))
        .collect();
    assert_eq!(damaged.len(), 3, "{damaged:?}");
    assert!(
        damaged
            .iter()
            .any(|d| d.contains("UNSAFE_PATH") && d.contains("checkpoint")),
        "{damaged:?}"
    );
    assert!(
        damaged
            .iter()
            .any(|d| d.contains("CORRUPT") && d.contains("huge")),
        "{damaged:?}"
    );
    assert!(
        damaged
            .iter()
            .any(|d| d.contains("UNSAFE_PATH") && d.contains("linked")),
        "{damaged:?}"
    );
    // The oversized header is damage for a writer's open too, never an abort.
    let output = run_bounded(&store, &["show", "huge"]);
    assert_refused(&output, 3, "CORRUPT");
}

#[test]
fn a_tail_line_is_one_line_even_when_the_data_spans_lines() {
    let dir = scratch("tail-lines");
    let store = store_in(&dir);
    {
        let lib =
            surfacelog::Store::open_or_create(&store.0, surfacelog::StoreOptions::new()).unwrap();
        let mut session = lib.create("p", None, None).unwrap();
        session
            .append_dynamic("plugin/x", "{\n  \"a\": 1,\r\n  \"b\": \"x\"\n}", None)
            .unwrap();
        session.close().unwrap();
    }
    let lines = store.ok(&["tail", "p", "--json"]);
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let event = json(lines[0]);
    assert_eq!(event["data"], json(r#"{"a":1,"b":"x"}"#));
}

#[test]
fn show_events_json_is_whole_or_nothing() {
    let dir = scratch("events-whole");
    let store = scripted(&dir);
    store.create(
        "bad",
        &[
            r#"{"type":"plugin/x","data":"first-marker"}"#,
            r#"{"type":"plugin/x","data":"last-marker"}"#,
        ],
    );
    damage(&store, "bad", b"first-marker", false);
    let output = store.run(&["show", "bad", "--events", "--json"]);
    assert_refused(&output, 3, "CORRUPT");
    assert!(
        output.stdout.is_empty(),
        "half a document: {}",
        text(&output.stdout)
    );
}

#[test]
fn a_closed_pipe_is_an_io_error_not_a_panic() {
    let dir = scratch("pipe");
    let store = scripted(&dir);
    for i in 0..300 {
        store.create(&format!("p{i:03}"), &SCRIPT[..1]);
    }
    let mut child = bin()
        .args(store.args(&["verify"]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    assert_ne!(output.status.code(), Some(101), "{}", text(&output.stderr));
    assert_refused(&output, 4, "IO");
}

#[test]
fn exit_codes_of_io_and_of_a_line_that_is_not_utf8() {
    let dir = scratch("codes");
    let store = scripted(&dir);
    let nowhere = dir.join("no/such/dir/x.jsonl");
    let args = [
        "export",
        "s1",
        "--format",
        "dsh-jsonl",
        "--out",
        s(&nowhere),
    ];
    store.refused(&args, 4, "IO");
    let mut command = bin();
    command.args(store.args(&["append", "s1"]));
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(
            b"{\"type\":\"plugin/a\",\"data\":1}\n{\"type\":\"plugin/b\",\"data\":\"\xff\"}\n",
        )
        .unwrap();
    drop(input);
    let output = child.wait_with_output().unwrap();
    let stderr = assert_refused(&output, 3, "DATA_INVALID_JSON");
    assert!(stderr.contains("stdin line 2"), "{stderr}");
    assert_eq!(text(&output.stdout).trim_end(), r#"{"seq":5}"#);
    // A pipe is not imported (its first bytes would be lost to the format's detection):
    // refused as a path that is not a regular file, as with `--format`.
    let fifo = dir.join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let other = store_in(&dir.join("other"));
    for format in ["auto", "dsh-jsonl"] {
        let output = run_bounded(&other, &["import", "--format", format, s(&fifo)]);
        assert_refused(&output, 3, "UNSAFE_PATH");
    }
}

#[test]
fn purge_empties_the_trash_and_spares_what_a_restore_holds() {
    let dir = scratch("purge-lock");
    let store = scripted(&dir);
    store.ok(&["rm", "s1"]);
    let trash = store.0.join("trash");
    let trashed = std::fs::read_dir(&trash)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // What a restore holds while it moves a copy back: its log's lock.
    let lock = std::fs::File::open(trashed.join("log/LOCK")).unwrap();
    lock.try_lock().unwrap();
    assert_eq!(store.json(&["purge"])["removed"], 0);
    assert!(trashed.exists(), "a held session is not removed");
    drop(lock);
    // An entry the store did not name is removed by a plain purge too (all of the trash).
    std::fs::create_dir(trash.join("stray")).unwrap();
    assert_eq!(store.json(&["purge"])["removed"], 2);
    assert_eq!(std::fs::read_dir(&trash).unwrap().count(), 0);
}

#[test]
fn restore_refuses_a_damaged_newest_copy_instead_of_an_older_one() {
    let dir = scratch("restore-damaged");
    let store = scripted(&dir);
    store.ok(&["rm", "s1"]);
    store.create("s1", &SCRIPT[..1]);
    store.ok(&["rm", "s1"]);
    let mut copies: Vec<PathBuf> = std::fs::read_dir(store.0.join("trash"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    copies.sort();
    let newest = copies.last().unwrap();
    std::fs::write(newest.join("header.json"), b"{not a header").unwrap();
    store.refused(&["restore", "s1"], 3, "CORRUPT");
    assert!(!store.0.join("sessions/s1").exists());
}

#[test]
fn append_to_a_session_damaged_before_its_last_segment_changes_nothing() {
    let dir = scratch("damaged-sealed");
    let store = store_in(&dir);
    {
        let options = surfacelog::StoreOptions::new().segment_bytes(4096);
        let lib = surfacelog::Store::open_or_create(&store.0, options).unwrap();
        let mut session = lib.create("d", None, None).unwrap();
        session
            .append_dynamic("turn/start", r#"{"turn":1}"#, None)
            .unwrap();
        for i in 0..60 {
            session
                .append_dynamic(
                    "plugin/x",
                    &format!(r#"{{"n":{i},"pad":"sealed-{i:03}"}}"#),
                    None,
                )
                .unwrap();
        }
        // Dropped with turn 1 open: an open for writing would append its closer.
        drop(session);
    }
    damage(&store, "d", b"sealed-000", false);
    let session_dir = store.0.join("sessions/d");
    let snapshot = |dir: &Path| -> Vec<(PathBuf, Vec<u8>)> {
        let mut files: Vec<_> = walk(dir)
            .into_iter()
            .filter(|p| p.is_file())
            .map(|p| {
                let bytes = std::fs::read(&p).unwrap();
                (p, bytes)
            })
            .collect();
        files.sort();
        files
    };
    let before = snapshot(&session_dir);
    let output = store.append("d", &[], &[r#"{"type":"plugin/y","data":1}"#]);
    let stderr = assert_refused(&output, 3, "CORRUPT");
    assert!(stderr.contains("00000000000000000000.seg"), "{stderr}");
    assert_eq!(
        snapshot(&session_dir),
        before,
        "nothing changed: no closer, no checkpoint"
    );
}

/// Every path under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path.clone());
            }
            out.push(path);
        }
    }
    out
}

/// Refusals a user meets at the edges: a closed stdout is `IO` (exit 4) for
/// `completions` too, never a panic; an import of a file that is not regular is
/// `UNSAFE_PATH` (exit 3) whether its format is named or detected, and a refused import
/// into a store path that did not exist leaves nothing there; `--color` governs the error
/// line; `log DIR` refuses the same directory with the same code with or without
/// `--check-writer`.
#[test]
fn edge_refusals_keep_their_codes_and_leave_nothing() {
    let dir = scratch("edges");
    // A pipe whose reading end is closed before the command writes.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = bin()
        .args(["completions", "zsh"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_refused(&output, 4, "IO");
    assert!(!text(&output.stderr).contains("panicked"));

    let store = Store(dir.join("store"));
    for format in [&[][..], &["--format", "dsh-jsonl"][..]] {
        let mut args = vec!["import"];
        args.extend_from_slice(format);
        args.push(s(&dir));
        assert_refused(&store.run(&args), 3, "UNSAFE_PATH");
    }
    let empty = dir.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    assert_refused(&store.run(&["import", s(&empty)]), 3, "CORRUPT");
    assert!(!store.0.exists(), "a refused import created the store");
    // Nor does a refused `append --create` leave the session it created, nor the store.
    let output = run_fed(
        bin().args(store.args(&["append", "new", "--create"])),
        "garbage\n",
    );
    assert_refused(&output, 3, "DATA_INVALID_JSON");
    assert!(!store.0.exists(), "a refused append created the store");

    for (when, colored) in [("always", true), ("never", false), ("auto", false)] {
        let output = store.run(&["--color", when, "ls"]);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(5), "{stderr}");
        assert_eq!(
            stderr.contains('\x1b'),
            colored,
            "--color {when}: {stderr:?}"
        );
        assert!(stderr.contains("error[STORE_NOT_FOUND]"), "{stderr}");
    }

    let missing = dir.join("missing");
    let not_a_log = dir.join("not-a-log");
    std::fs::create_dir(&not_a_log).unwrap();
    for (path, exit, code) in [(&missing, 5, "IO"), (&not_a_log, 3, "CORRUPT")] {
        for flags in [&[][..], &["--check-writer"][..]] {
            let mut args = vec!["log", s(path)];
            args.extend_from_slice(flags);
            assert_refused(&bin().args(&args).output().unwrap(), exit, code);
        }
    }
}
