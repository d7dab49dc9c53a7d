//! DSH interop benchmarks (`dsh-formats.md`): import of raw JSONL into the store, export
//! back to raw JSONL, and import of a `SQLite` database.
//!
//! The workload is one synthetic session written the way the reference writes it (one
//! batch per turn, delta runs packed into rows), built once before any timing under
//! [`std::env::temp_dir`]. Each turn has 31 events: `turn/start`, a `user/message`
//! (~200 bytes of text), `step/start`, 12 `text-delta` chunks (one packed row), an
//! `assistant/message` with a tool-call block citing them, a `tool/call`, a `tool/result`
//! with ~2 KB of output, `step/end`; a second step with 8 chunks (one row) and a text
//! answer; `turn/end`. That is ~150 bytes of JSONL per event, and unpacking the rows
//! makes the events' text ~1.5× the file, close to the vendored DSH corpus (157 bytes
//! per event, 1.54×). 20,000 turns by default: 620,000 events, ~90 MB
//! (`SURFACELOG_BENCH_TURNS` changes the turn count).
//!
//! Measured (medians; throughput in bytes of the JSONL file, or events):
//! 1. `import_jsonl`: [`jsonl::import_jsonl`] into an empty store (the session is removed,
//!    untimed, after each run, and the removal is synced so that its cost does not land in
//!    the next run). It includes the scan, the import-path checks of every event, the log
//!    writes, the checkpoint, the message pack and the final fsync. Target ≥ 150 MB/s.
//!    `import_jsonl_no_pack`: the same with `StoreOptions::message_pack(0)`, side by side.
//!    `import_jsonl_zstd`: the same session from DSH's Zstandard log (a frame per turn, as
//!    DSH writes one per append batch), throughput in bytes of the raw JSONL it holds.
//! 2. `export_jsonl`: [`jsonl::write_jsonl`] of the stored session, packing on, through
//!    [`jsonl::export_file`] (temporary file, fsync, rename). Target ≥ 200 MB/s.
//! 3. `import_sqlite`: [`import_sqlite`] of a schema-17 database holding the same session
//!    (written once by `sqlite::export_session`). Target ≥ 100k events/s.
//!
//! 4. `resident_memory` (printed, not timed): a child process (this executable again)
//!    imports the workload scaled to 200,000 turns (~1 GB of JSONL) and prints its peak
//!    resident memory (`VmHWM`). Target ≤ 100 MB.
//!
//! `cargo test --benches` runs each once over a session 100× smaller. Run with
//! `cargo bench --bench interop`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{Criterion, Throughput};
use surfacelog::internals::adapters::jsonl::{self, Compression};
use surfacelog::internals::adapters::rows;
use surfacelog::internals::adapters::sqlite;
use surfacelog::internals::adapters::sqlite_import::import_sqlite;
use surfacelog::internals::store::{Store, StoreOptions};

const EVENTS_PER_TURN: u64 = 31;

fn turns() -> u64 {
    let default = if std::env::args().any(|a| a == "--bench") {
        20_000
    } else {
        200
    };
    std::env::var("SURFACELOG_BENCH_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One turn's events, seqs from `base`, as the reference would write them (JS-JSON).
fn turn_events(turn: u64, base: u64, time: u64) -> Vec<String> {
    let mut events: Vec<String> = Vec::new();
    let next = |events: &Vec<String>| base + events.len() as u64;
    let chunks = |events: &mut Vec<String>, step: u64, n: u64| {
        let first = next(events);
        for k in 0..n {
            let seq = next(events);
            events.push(format!(
                r#"{{"type":"assistant/chunk","seq":{seq},"time":{},"data":{{"turn":{turn},"step":{step},"chunk":{{"type":"text-delta","index":0,"text":"part {k:02} of the reply, "}}}}}}"#,
                time + k
            ));
        }
        (first..first + n)
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let seq = next(&events);
    events.push(format!(
        r#"{{"type":"turn/start","seq":{seq},"time":{time},"data":{{"turn":{turn}}}}}"#
    ));
    let seq = next(&events);
    events.push(format!(
        r#"{{"type":"user/message","seq":{seq},"time":{time},"data":{{"id":"u{turn}","role":"user","content":[{{"type":"text","text":"Please look at the build output for turn {turn} and tell me which tests fail, then fix the first failure you find in the parser module. Keep the public API as it is and add a regression test for the bug."}}],"source":{{"kind":"user"}}}},"surfaceOp":"append"}}"#
    ));
    let seq = next(&events);
    events.push(format!(
        r#"{{"type":"step/start","seq":{seq},"time":{time},"data":{{"turn":{turn},"step":1}}}}"#
    ));
    let sources = chunks(&mut events, 1, 12);
    let call = format!("call_{turn}");
    let seq = next(&events);
    events.push(format!(
        r#"{{"type":"assistant/message","seq":{seq},"time":{time},"data":{{"turn":{turn},"step":1,"message":{{"id":"a{turn}","role":"assistant","content":[{{"type":"text","text":"Let me run the tests first."}},{{"type":"tool-call","id":"{call}","name":"bash","arguments":"{{\"cmd\":\"cargo test\"}}"}}],"source":{{"kind":"model","provider":"p","model":"m"}}}}}},"surfaceOp":"append","sourceEventSeqs":[{sources}]}}"#
    ));
    let call_seq = next(&events);
    events.push(format!(
        r#"{{"type":"tool/call","seq":{call_seq},"time":{time},"data":{{"turn":{turn},"step":1,"callId":"{call}","name":"bash","arguments":"{{\"cmd\":\"cargo test\"}}"}}}}"#
    ));
    let output = "test parser::tests::nested_arrays_of_objects ... ok\\n".repeat(40);
    let seq = next(&events);
    events.push(format!(
        r#"{{"type":"tool/result","seq":{seq},"time":{time},"data":{{"turn":{turn},"step":1,"message":{{"id":"r{turn}","role":"user","content":[{{"type":"tool-result","toolCallId":"{call}","content":[{{"type":"text","text":"{output}"}}]}}],"source":{{"kind":"tool","callId":"{call}"}}}}}},"surfaceOp":"append","sourceEventSeqs":[{call_seq}]}}"#
    ));
    let seq = next(&events);
    events.push(format!(
        r#"{{"type":"step/end","seq":{seq},"time":{time},"data":{{"turn":{turn},"step":1}}}}"#
    ));
    let seq = next(&events);
    events.push(format!(
        r#"{{"type":"step/start","seq":{seq},"time":{time},"data":{{"turn":{turn},"step":2}}}}"#
    ));
    let sources = chunks(&mut events, 2, 8);
    let seq = next(&events);
    events.push(format!(
        r#"{{"type":"assistant/message","seq":{seq},"time":{time},"data":{{"turn":{turn},"step":2,"message":{{"id":"b{turn}","role":"assistant","content":[{{"type":"text","text":"The first failure was an off-by-one in the array parser; it is fixed, a regression test covers it, and all tests pass now."}}],"source":{{"kind":"model","provider":"p","model":"m"}}}}}},"surfaceOp":"append","sourceEventSeqs":[{sources}]}}"#
    ));
    let seq = next(&events);
    events.push(format!(
        r#"{{"type":"step/end","seq":{seq},"time":{time},"data":{{"turn":{turn},"step":2}}}}"#
    ));
    let seq = next(&events);
    events.push(format!(r#"{{"type":"turn/end","seq":{seq},"time":{time},"data":{{"turn":{turn},"reason":{{"kind":"completed"}}}}}}"#));
    events
}

/// Writes the workload file; returns (path, bytes, events).
fn write_workload(dir: &Path) -> (PathBuf, u64, u64) {
    write_workload_turns(dir, turns())
}

/// [`write_workload`] with `turns` turns.
fn write_workload_turns(dir: &Path, turns: u64) -> (PathBuf, u64, u64) {
    use std::io::Write;
    let path = dir.join("session.jsonl");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    out.write_all(b"{\"type\":\"session\",\"version\":0,\"id\":\"bench\",\"createdAt\":1700000000000,\"cwd\":\"/work/bench\",\"delegationDepth\":0}\n").unwrap();
    let mut seq = 0;
    for turn in 1..=turns {
        let events = turn_events(turn, seq, 1_700_000_000_000 + turn * 1000);
        seq += events.len() as u64;
        let texts: Vec<&str> = events.iter().map(String::as_str).collect();
        for record in rows::pack(&texts).unwrap() {
            out.write_all(record.as_bytes()).unwrap();
            out.write_all(b"\n").unwrap();
        }
    }
    out.flush().unwrap();
    drop(out);
    let bytes = std::fs::metadata(&path).unwrap().len();
    (path, bytes, seq)
}

/// The workload of [`write_workload`] as DSH's Zstandard log (`dsh-formats.md` §6): the
/// header in a frame of its own, then a frame per turn (DSH writes one per append batch),
/// content checksums on. Returns its path.
fn write_zstd_workload(dir: &Path) -> PathBuf {
    use std::io::Write;
    let frame = |plain: &[u8]| {
        let mut encoder = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
        encoder.include_checksum(true).unwrap();
        encoder.write_all(plain).unwrap();
        encoder.finish().unwrap()
    };
    let path = dir.join("session.jsonl.zstd");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    out.write_all(&frame(b"{\"type\":\"session\",\"version\":0,\"id\":\"bench\",\"createdAt\":1700000000000,\"cwd\":\"/work/bench\",\"delegationDepth\":0}\n")).unwrap();
    let mut seq = 0;
    for turn in 1..=turns() {
        let events = turn_events(turn, seq, 1_700_000_000_000 + turn * 1000);
        seq += events.len() as u64;
        let texts: Vec<&str> = events.iter().map(String::as_str).collect();
        let mut batch = Vec::new();
        for record in rows::pack(&texts).unwrap() {
            batch.extend_from_slice(record.as_bytes());
            batch.push(b'\n');
        }
        out.write_all(&frame(&batch)).unwrap();
    }
    out.flush().unwrap();
    path
}

/// An empty store in `dir`, after removing what the last run stored there. The removal is
/// then committed (`sync`), so that a timed import does not pay for it: on a filesystem
/// mounted with `discard`, freeing the last run's ~220 MB makes the device busy for a while,
/// which is the cleanup's cost, not the import's.
fn fresh_store(dir: &Path) -> Store {
    fresh_store_with(dir, StoreOptions::default())
}

/// [`fresh_store`] with `options`.
fn fresh_store_with(dir: &Path, options: StoreOptions) -> Store {
    let _ = std::fs::remove_dir_all(dir);
    rustix::fs::sync();
    Store::open_or_create(dir, options).unwrap()
}

/// The store options of an import case: the message pack's threshold (the default when
/// `None`) and whether the log holds compact records.
fn import_options(pack_min: Option<u64>, compact: bool) -> StoreOptions {
    let options = StoreOptions::default().compact_records(compact);
    match pack_min {
        Some(min) => options.message_pack(min),
        None => options,
    }
}

fn bench(c: &mut Criterion) {
    let root =
        std::env::temp_dir().join(format!("surfacelog-bench-interop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let (file, bytes, events) = write_workload(&root);
    assert_eq!(events, turns() * EVENTS_PER_TURN);
    eprintln!("workload: {bytes} bytes of JSONL, {events} events");

    let mut group = c.benchmark_group("interop");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.throughput(Throughput::Bytes(bytes));
    let scratch = root.join("import-store");
    // The import writes the session's message pack at its end (message-pack.md MSP-5);
    // `import_jsonl_no_pack` is the same with packs off, for the pack's cost side by side;
    // `import_jsonl_compact` writes compact records (log-format.md §4.2).
    for (name, pack_min, compact) in [
        ("import_jsonl", None, false),
        ("import_jsonl_no_pack", Some(0), false),
        ("import_jsonl_compact", None, true),
    ] {
        group.bench_function(name, |b| {
            b.iter_batched(
                || fresh_store_with(&scratch, import_options(pack_min, compact)),
                |store| {
                    let (imported, _) =
                        jsonl::import_jsonl(&store, &file, Compression::None, None, &mut |_| {})
                            .unwrap();
                    assert_eq!(imported.events, events);
                    store
                },
                criterion::BatchSize::PerIteration,
            );
        });
    }

    // The same session from DSH's Zstandard log, a frame per turn; throughput in bytes of
    // the raw JSONL it holds, so that the two imports compare directly.
    let zstd_file = write_zstd_workload(&root);
    group.bench_function("import_jsonl_zstd", |b| {
        b.iter_batched(
            || fresh_store(&scratch),
            |store| {
                let (imported, _) =
                    jsonl::import_jsonl(&store, &zstd_file, Compression::Zstd, None, &mut |_| {})
                        .unwrap();
                assert_eq!(imported.events, events);
                store
            },
            criterion::BatchSize::PerIteration,
        );
    });

    let store = fresh_store(&root.join("store"));
    jsonl::import_jsonl(&store, &file, Compression::None, None, &mut |_| {}).unwrap();
    let session = store.inspect("bench").unwrap();
    let mut n = 0;
    group.bench_function("export_jsonl", |b| {
        b.iter(|| {
            n += 1;
            let out = root.join(format!("export-{n}.jsonl"));
            let exported = jsonl::export_file(
                &out,
                session.header(),
                session.log(),
                true,
                Compression::None,
            )
            .unwrap();
            black_box(exported);
            std::fs::remove_file(&out).unwrap();
        });
    });
    let check = root.join("check.jsonl");
    jsonl::export_file(
        &check,
        session.header(),
        session.log(),
        true,
        Compression::None,
    )
    .unwrap();
    assert_eq!(
        std::fs::read(&check).unwrap(),
        std::fs::read(&file).unwrap()
    );

    let db = root.join("db").join("sessions.db");
    sqlite::export_session(&db, session.header(), session.log(), true).unwrap();
    group.throughput(Throughput::Elements(events));
    let scratch = root.join("sqlite-store");
    group.bench_function("import_sqlite", |b| {
        b.iter_batched(
            || fresh_store(&scratch),
            |store| {
                let imported = import_sqlite(&store, &db, None).unwrap();
                assert_eq!(imported[0].0.events, events);
                store
            },
            criterion::BatchSize::PerIteration,
        );
    });
    group.finish();
    drop(session);
    let _ = std::fs::remove_dir_all(&root);
}

/// Set in the child of [`resident_memory`]: the file to import and the store, one per line.
const RSS_CHILD: &str = "SURFACELOG_INTEROP_BENCH_RSS_CHILD";

/// Imports the workload scaled to `turns` turns in a child process (this executable
/// again, so nothing of the build is resident) and prints its peak resident memory.
fn resident_memory(root: &Path, turns: u64) {
    let dir = root.join(format!("rss-{turns}"));
    std::fs::create_dir_all(&dir).unwrap();
    let (file, bytes, events) = write_workload_turns(&dir, turns);
    let spec = format!("{}\n{}", file.display(), dir.join("store").display());
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .env(RSS_CHILD, spec)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let field = |key: &str| -> f64 {
        report
            .lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse::<f64>().ok())
            .unwrap_or_default()
            / 1024.0
    };
    eprintln!(
        "resident_memory: import of {} MB ({events} events): peak VmHWM {:.1} MB \
         (RssAnon {:.1} MB, RssFile {:.1} MB at the end); target <= 100 MB",
        bytes / 1_000_000,
        field("hwm"),
        field("anon"),
        field("file"),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The child of [`resident_memory`].
fn rss_child(spec: &str) {
    let (file, store) = spec.split_once('\n').unwrap();
    // `SURFACELOG_BENCH_RECORDS=v1` or `=compact` chooses the records (log-format.md §4.2).
    let options = match std::env::var("SURFACELOG_BENCH_RECORDS").as_deref() {
        Ok("v1") => StoreOptions::default().compact_records(false),
        Ok("compact") => StoreOptions::default().compact_records(true),
        _ => StoreOptions::default(),
    };
    let store = Store::open_or_create(Path::new(store), options).unwrap();
    jsonl::import_jsonl(
        &store,
        Path::new(file),
        Compression::None,
        None,
        &mut |_| {},
    )
    .unwrap();
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    for (key, name) in [
        ("VmHWM:", "hwm"),
        ("RssAnon:", "anon"),
        ("RssFile:", "file"),
    ] {
        let value = status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map_or("0", |v| v.trim().trim_end_matches(" kB"));
        println!("{name} {value}");
    }
}

fn main() {
    if let Ok(spec) = std::env::var(RSS_CHILD) {
        rss_child(&spec);
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    let full = std::env::args().any(|a| a == "--bench");
    let root = std::env::temp_dir().join(format!("surfacelog-bench-rss-{}", std::process::id()));
    // About 1 GB of JSONL in a full run.
    resident_memory(&root, if full { 200_000 } else { 200 });
    let _ = std::fs::remove_dir_all(&root);
    criterion.final_summary();
}
