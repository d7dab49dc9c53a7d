//! Storage footprint and read locality on a session shaped like a real one (issue 16):
//! the vendored fixture `acp-agent--fs-delete-recreate--session.jsonl` (one turn of 191
//! events, packed chunk rows) repeated with its seqs, `seq0`s, times, turn numbers and
//! provenance renumbered until the log holds about `SURFACELOG_FOOTPRINT_EVENTS` events
//! (default 1,000,000), written as DSH raw JSONL and imported into a store.
//!
//! Printed: the bytes of the DSH JSONL file, of the same log as Zstandard JSONL (the
//! reference's compressed format), and of the stored session (blocks on disk and file
//! lengths). Measured (criterion):
//! 1. `open+messages/warm/pack`: `Store::open_session` of the imported session and its
//!    `messages()`, page cache warm, the messages read from the message pack the import
//!    wrote (`format-spec/message-pack.md`);
//! 2. `open+messages/cold/pack`: the same after `echo 3 > /proc/sys/vm/drop_caches` before
//!    each run (only when running as root; otherwise reported as skipped);
//! 3. `open+messages/{warm,cold}/log`: the same with the pack moved aside, every message
//!    read from its log record (what every build before the pack did).
//!
//! `cargo bench --bench footprint`. The scratch store lives under the system's temporary
//! directory (on disk: cold reads mean something) and is removed at the end.
//!
//! 4. printed, not timed by criterion: the same log imported by a writer without chunk
//!    records (an older build's log), its bytes, and its bytes after `Store::compact_log`
//!    (log-format.md §13) with the time that took.
//!
//! Measured side by side in one run (2026-12-04, ext4, 2 cores, criterion medians), the
//! build before chunk records (86e35f9) and with them: 1,000,076 events, DSH raw JSONL
//! 92.4 MB (92.4 B/event), DSH zstd JSONL 5.26 MB, 57,596 messages.
//!
//! | | before | chunk records |
//! |---|---|---|
//! | surfacelog on disk | 312.8 MB (3.38x the JSONL) | 171.1 MB (1.85x) |
//! | open + all messages, warm | 37.7 ms | 32.2 ms |
//! | open + all messages, cold | 236.9 ms | 162.9 ms |
//!
//! An older log of 312.8 MB is 174.1 MB (1.88x) after `compact` (36 sealed segments
//! rewritten, the last kept), which took 1.2 to 2.3 s (each segment is checked, then
//! checked again right before its rewrite, so that one is open at a time).
//!
//! With the message pack (`format-spec/message-pack.md`), two runs (2026-12-04, same
//! machine, criterion medians; `log` is the same session with its pack moved aside, so
//! every message comes from its record as before; each run side by side):
//!
//! | | pack | log |
//! |---|---|---|
//! | open + all 57,596 messages, warm | 3.81 / 3.64 ms | 43.2 / 34.1 ms |
//! | open + all 57,596 messages, cold | 29.6 / 27.2 ms | 191.9 / 157.8 ms |
//!
//! The pack is 25.1 MB (57,596 entries and 24.2 MB of message text), so the session is
//! 196.2 MB on disk (2.12x the JSONL) with it, 171.1 MB without (`message_pack(0)`).
//!
//! 5. printed, then measured: the session compressed by `compact --compress`
//!    (`log-format.md` §14, `message-pack.md` MSP-8), its bytes by file kind, a table of
//!    Zstandard levels and block sizes for its first segment, and side by side (criterion
//!    medians) open + all messages and reads of the log, plain and compressed.
//!
//! Measured (2026-12-05, same machine, one run):
//!
//! | | plain | compressed (level 9) |
//! |---|---|---|
//! | on disk | 196.3 MB (2.12x the JSONL) | 23.7 MB (0.26x the JSONL, 4.5x its zstd) |
//! | of which sealed segments, last segment, pack | 164 MB, 7.2 MB, 25.1 MB | 15.5 MB, 7.2 MB (plain), 0.25 MB |
//! | open + all 57,596 messages, warm | 3.91 ms | 11.5 / 12.7 ms (the pack decompressed at open) |
//! | open + all 57,596 messages, cold | 36.0 ms | 19.5 ms (0.25 MB of pack read, not 25 MB) |
//! | open + one event in the middle (a first access into its segment) | 0.082 ms | 5.15 ms (its 8 MiB decompressed) |
//! | a fresh reader reads all 1,000,076 events | 251 ms | 401 ms |
//! | fork at the last event | | 2.46 ms (compressed segments linked, not decompressed) |
//!
//! A process keeps the decompressed copies of its last reads (CZ-4, at most 64 copies and
//! 128 MiB), so a session opened again maps them instead of decompressing (criterion
//! medians, one run, 2026-12-05, `-first`/no suffix: kept copies released before each
//! iteration, untimed; `-kept`/`warm`: opened again):
//!
//! | | first read in the process | again |
//! |---|---|---|
//! | open + all 57,596 messages (the pack) | 11.7 ms | 3.70 ms |
//! | open + one event in the middle (its segment) | 7.62 ms | 0.79 ms (0.7 MB read and checked) |
//! | a fresh reader reads all events | 388 ms | 410 ms (176 MiB of segments: none kept long enough) |
//!
//! Compaction took 2.5 s at level 9 (1.2 s at level 3, where the session is 25.7 MB); the
//! log alone at level 19 is 20.7 MB (52.7 s).

//!
//! 6. compact records (log-format.md §4.2): the same JSONL imported into a store writing
//!    them (`StoreOptions::compact_records`), whose message pack is compressed (MSP-8);
//!    printed, its bytes and import time, and (unless quick) the bytes of a second such
//!    store after `compact --compress`; measured beside the version 1 store, open + all
//!    messages warm (`warm`: opened again in the process, the decompressed pack kept;
//!    `warm-first`: the first time), cold, with and without the pack, and a fresh reader's
//!    read of every event. `SURFACELOG_FOOTPRINT_QUICK=1` skips parts 4 and 5 and the
//!    compressed compact store.
//!
//! Measured side by side (2026-12-06, one run, criterion medians; the message pack of a
//! compact store written at level 1 from the import's end):
//!
//! | | version 1 records | compact records |
//! |---|---|---|
//! | on disk | 196.3 MB (2.12x the JSONL), 171.1 MB without the pack | 69.9 MB (0.756x), 69.7 MB without the pack |
//! | after `compact --compress` (level 9) | 23.7 MB (0.26x) | 11.6 MB (0.13x) in 0.5 s |
//! | import (printed, one run, this workload's packed rows) | 0.83 s (112 MB/s) | 0.86 s (107 MB/s) |
//! | open + all messages, pack, warm / warm-first / cold | 3.55 / 3.47 / 27.4 ms | 3.58 / 9.36 / 26.5 ms |
//! | open + all messages, no pack, warm / cold | 38.6 / 155.3 ms | 29.9 / 72.2 ms |
//! | a fresh reader reads all 1,000,076 events | 282 ms | 602 ms |

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use surfacelog::internals::adapters::jsonl::{self, Compression};
use surfacelog::internals::event::EventSource;
use surfacelog::internals::json::Json;
use surfacelog::internals::log::LogReader;
use surfacelog::{CompactOptions, Durability, Store, StoreOptions};

/// The fixture whose turn is repeated.
const FIXTURE: &str = "tests/data/dsh-sessions/acp-agent--fs-delete-recreate--session.jsonl";

/// The events the generated log holds at least.
fn target_events() -> u64 {
    std::env::var("SURFACELOG_FOOTPRINT_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// `text` with the byte ranges of `edits` replaced (ranges sorted, not overlapping).
fn splice(text: &str, mut edits: Vec<(std::ops::Range<usize>, String)>) -> String {
    edits.sort_by_key(|(range, _)| range.start);
    let mut out = String::with_capacity(text.len() + 16);
    let mut at = 0;
    for (range, new) in edits {
        out.push_str(&text[at..range.start]);
        out.push_str(&new);
        at = range.end;
    }
    out.push_str(&text[at..]);
    out
}

/// One record of the fixture renumbered for repetition `rep`: seqs and `seq0` moved by
/// `seq_shift`, times by `time_shift`, the turn number set to `turn`, provenance and
/// replace ranges moved with the seqs. Every other byte is kept.
fn renumber(line: &str, seq_shift: u64, time_shift: i64, turn: u64) -> String {
    let json = Json::parse(line).expect("the fixture is JSON");
    let root = json.root();
    let mut edits = Vec::new();
    let shift = |value: surfacelog::internals::json::Value<'_, '_>, by: u64| {
        let n = value.as_safe_u64().expect("a seq");
        (value.span(), (n + by).to_string())
    };
    for key in ["seq", "seq0"] {
        if let Some(v) = root.get(key) {
            edits.push(shift(v, seq_shift));
        }
    }
    for key in ["time", "time0"] {
        if let Some(v) = root.get(key) {
            let t = v.as_safe_int().expect("a time");
            edits.push((v.span(), (t + time_shift).to_string()));
        }
    }
    if let Some(sources) = root.get("sourceEventSeqs") {
        edits.extend(sources.elements().map(|v| shift(v, seq_shift)));
    }
    if let Some(op) = root.get("surfaceOp") {
        for key in ["start", "end"] {
            if let Some(v) = op.get(key) {
                edits.push(shift(v, seq_shift));
            }
        }
    }
    if let Some(v) = root.get("data").and_then(|d| d.get("turn")) {
        edits.push((v.span(), turn.to_string()));
    }
    splice(line, edits)
}

/// The fixture's turn repeated until the log holds at least `events` events, as DSH raw
/// JSONL; returns the text and the number of events.
fn generate(events: u64) -> (String, u64) {
    let fixture = std::fs::read_to_string(FIXTURE).expect("the vendored fixture");
    let mut lines = fixture.lines();
    let header = lines.next().expect("a header line");
    let records: Vec<&str> = lines.collect();
    // The turn's events: one past the largest seq (a packed row counts its members).
    let per_turn = 1 + records
        .iter()
        .map(|r| {
            let json = Json::parse(r).expect("JSON");
            let root = json.root();
            match (root.get("seq"), root.get("seq0")) {
                (Some(seq), _) => seq.as_safe_u64().unwrap_or(0),
                (None, Some(seq0)) => {
                    let data = root.get("data").expect("a row's data");
                    let members = data.get("dt").map_or(1, |dt| dt.len() as u64);
                    seq0.as_safe_u64().unwrap_or(0) + members - 1
                }
                _ => 0,
            }
        })
        .max()
        .unwrap_or(0);
    let turn_ms = 10_000;
    let reps = events.div_ceil(per_turn);
    let capacity = usize::try_from(reps).map_or(0, |r| fixture.len().saturating_mul(r));
    let mut out = String::with_capacity(capacity);
    out.push_str(header);
    out.push('\n');
    for rep in 0..reps {
        for record in &records {
            out.push_str(&renumber(
                record,
                rep * per_turn,
                i64::try_from(rep).unwrap_or(0) * turn_ms,
                rep + 1,
            ));
            out.push('\n');
        }
    }
    (out, reps * per_turn)
}

/// Drops the page cache (root only): `sync`, then `3 > drop_caches`.
fn drop_caches() -> bool {
    rustix::fs::sync();
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

#[expect(
    clippy::cast_precision_loss,
    reason = "ratios printed with one or two decimals"
)]
fn benches(c: &mut Criterion) {
    let scratch = tempfile::Builder::new()
        .prefix("surfacelog-footprint-")
        .tempdir()
        .expect("a scratch directory");
    let started = Instant::now();
    let (text, events) = generate(target_events());
    let jsonl = scratch.path().join("session.jsonl");
    std::fs::write(&jsonl, &text).expect("writes the JSONL");
    drop(text);
    // Version 1 records (with chunk records): the store part 6 compares compact records with.
    let store = Store::open_or_create(
        scratch.path().join("store"),
        StoreOptions::new()
            .durability(Durability::Manual)
            .compact_records(false),
    )
    .expect("a store");
    let generated = started.elapsed();
    let started = Instant::now();
    let (imported, _) = jsonl::import_jsonl(&store, &jsonl, Compression::None, None, &mut |_| {})
        .expect("imports the generated log");
    let took = started.elapsed();
    assert_eq!(imported.events, events, "every generated event imported");
    let id = imported.id.clone();
    eprintln!(
        "footprint: generated {events} events in {generated:.1?}; imported into version 1 \
         records in {took:.1?} ({:.0} MB/s of JSONL)",
        std::fs::metadata(&jsonl).map_or(0, |m| m.len()) as f64 / 1e6 / took.as_secs_f64()
    );
    let zstd = {
        let session = store.inspect(&id).expect("inspects");
        let out = scratch.path().join("session.jsonl.zstd");
        jsonl::export_file(
            &out,
            session.header(),
            session.log(),
            true,
            Compression::Zstd,
        )
        .expect("exports zstd");
        std::fs::metadata(&out).map_or(0, |m| m.len())
    };
    let jsonl_bytes = std::fs::metadata(&jsonl).map_or(0, |m| m.len());
    let summary = store.summarize(&id).expect("summarizes");
    let messages = {
        let (session, _) = store.open_session(&id).expect("opens");
        session.messages().expect("messages").len()
    };
    eprintln!(
        "footprint: DSH raw JSONL {} B ({:.1} B/event); DSH zstd JSONL {} B; surfacelog {} B on \
         disk, {} B apparent ({:.1} B/event, {:.2}x the JSONL); {messages} messages",
        jsonl_bytes,
        jsonl_bytes as f64 / events as f64,
        zstd,
        summary.bytes,
        summary.apparent_bytes,
        summary.bytes as f64 / events as f64,
        summary.bytes as f64 / jsonl_bytes as f64,
    );

    let quick = std::env::var_os("SURFACELOG_FOOTPRINT_QUICK").is_some();
    if !quick {
        compaction(scratch.path(), &jsonl, jsonl_bytes);
    }
    let compact = compact_store(scratch.path(), &jsonl, jsonl_bytes, events);
    if !quick {
        compact_compressed(scratch.path(), &jsonl, jsonl_bytes);
    }

    // The message pack (message-pack.md) the import wrote, and the same session without
    // it (moved aside): the messages read from the pack, and from the log records.
    let pack = store.dir().join("sessions").join(&id).join("messages");
    let pack_bytes = std::fs::metadata(&pack).map_or(0, |m| m.len());
    eprintln!(
        "footprint: message pack {pack_bytes} B ({:.1}% of the session)",
        pack_bytes as f64 * 100.0 / summary.bytes as f64
    );
    open_messages(
        c,
        [(&store, &id), (&compact.0, &compact.1)],
        events,
        messages,
    );
    drop(compact);
    if !quick {
        compressed(c, &store, &id, events, messages, jsonl_bytes, zstd);
    }
    drop(store);
    let _ = std::fs::remove_dir_all(scratch.path());
}

/// Side by side, the version 1 log (`v1`) and the compact one (`compact`, log-format.md
/// §4.2), each with its message pack and with the pack moved aside (`log`): open + all
/// messages, warm and (as root) cold; then a fresh reader's read of every event.
fn open_messages(c: &mut Criterion, stores: [(&Store, &String); 2], events: u64, messages: usize) {
    let [(store, id), compact] = stores;
    let compact = (compact.0, compact.1);
    let mut group = c.benchmark_group("open+messages");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    let run = |store: &Store, id: &str| {
        let (session, _) = store.open_session(id).expect("opens");
        let n = session.messages().expect("messages").len();
        assert_eq!(n, messages);
    };
    let cold = drop_caches();
    if !cold {
        eprintln!("footprint: cold runs skipped (dropping the page cache needs root)");
    }
    for (records, store, id) in [("v1", store, id), ("compact", compact.0, compact.1)] {
        let pack = store.dir().join("sessions").join(id).join("messages");
        let aside = pack.with_extension("aside");
        for from in ["pack", "log"] {
            if from == "log" {
                std::fs::rename(&pack, &aside).expect("moves the pack aside");
            }
            group.bench_function(format!("warm/{records}/{from}/{events}ev"), |b| {
                b.iter(|| run(store, id));
            });
            // A compressed pack (MSP-8) the first time in a process: no kept copy (CZ-4).
            group.bench_function(format!("warm-first/{records}/{from}/{events}ev"), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        surfacelog::internals::log::release_decompressed_copies();
                        let start = Instant::now();
                        run(store, id);
                        total += start.elapsed();
                    }
                    total
                });
            });
            if cold {
                group.bench_function(format!("cold/{records}/{from}/{events}ev"), |b| {
                    b.iter_custom(|iters| {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            drop_caches();
                            let start = Instant::now();
                            run(store, id);
                            total += start.elapsed();
                        }
                        total
                    });
                });
            }
        }
        std::fs::rename(&aside, &pack).expect("puts the pack back");
    }
    group.finish();
    let mut group = c.benchmark_group("read-all-events");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    for (records, store, id) in [("v1", store, id), ("compact", compact.0, compact.1)] {
        let log = store.dir().join("sessions").join(id).join("log");
        group.bench_function(format!("{records}/{events}ev"), |b| {
            b.iter(|| read_all(&log, events));
        });
    }
    group.finish();
}

/// The generated JSONL imported into a store that writes compact records (log-format.md
/// §4.2), timed: its bytes on disk, with and without its message pack, are printed against
/// the JSONL's. Returns the store and the session's id.
#[expect(
    clippy::cast_precision_loss,
    reason = "ratios printed with one or two decimals"
)]
fn compact_store(
    scratch: &std::path::Path,
    jsonl: &std::path::Path,
    jsonl_bytes: u64,
    events: u64,
) -> (Store, String) {
    let (store, imported, took) = import_compact(&scratch.join("compact-store"), jsonl);
    assert_eq!(imported.events, events, "every generated event imported");
    let summary = store.summarize(&imported.id).expect("summarizes");
    let pack = store
        .dir()
        .join("sessions")
        .join(&imported.id)
        .join("messages");
    // On disk, as `summarize` counts: whole 4 KiB blocks.
    let pack_bytes = std::fs::metadata(&pack).map_or(0, |m| m.len().next_multiple_of(4096));
    let without = summary.bytes - pack_bytes;
    eprintln!(
        "footprint: compact records: imported in {took:.1?} ({:.0} MB/s of JSONL); {} B on \
         disk ({:.2}x the JSONL), {without} B without its message pack ({:.3}x, {:.1} \
         B/event)",
        jsonl_bytes as f64 / 1e6 / took.as_secs_f64(),
        summary.bytes,
        summary.bytes as f64 / jsonl_bytes as f64,
        without as f64 / jsonl_bytes as f64,
        without as f64 / events as f64,
    );
    (store, imported.id)
}

/// `jsonl` imported into a new store at `dir` writing compact records: the store, what was
/// imported, and how long the import took.
fn import_compact(
    dir: &std::path::Path,
    jsonl: &std::path::Path,
) -> (Store, surfacelog::internals::store::Imported, Duration) {
    let options = StoreOptions::new()
        .durability(Durability::Manual)
        .compact_records(true);
    let store = Store::open_or_create(dir, options).expect("a store");
    let started = Instant::now();
    let (imported, _) = jsonl::import_jsonl(&store, jsonl, Compression::None, None, &mut |_| {})
        .expect("imports the generated log");
    (store, imported, started.elapsed())
}

/// The same JSONL imported into a store writing compact records, then compressed by
/// `compact --compress` (log-format.md §14, level 9): bytes on disk before and after, and
/// the time the compaction took (printed).
#[expect(
    clippy::cast_precision_loss,
    reason = "ratios printed with two decimals"
)]
fn compact_compressed(scratch: &std::path::Path, jsonl: &std::path::Path, jsonl_bytes: u64) {
    let (store, imported, _) = import_compact(&scratch.join("compact-compressed-store"), jsonl);
    let before = store.summarize(&imported.id).expect("summarizes").bytes;
    let started = Instant::now();
    store
        .compact_log_with(&imported.id, CompactOptions::new().compress(true))
        .expect("compresses");
    let took = started.elapsed();
    let after = store.summarize(&imported.id).expect("summarizes").bytes;
    eprintln!(
        "footprint: compact records compressed: {before} B -> {after} B on disk ({:.2}x the \
         JSONL) in {took:.1?}",
        after as f64 / jsonl_bytes as f64,
    );
}

/// Every event of the session's log read by a fresh reader (its text's length summed):
/// the whole log, sealed segments first accessed (decompressed when compressed, CZ-4).
fn read_all(log: &std::path::Path, events: u64) {
    let reader = LogReader::open(log).expect("opens the log");
    let mut bytes = 0;
    for seq in 0..events {
        bytes += reader.event_at(seq).expect("reads").text().len();
    }
    assert!(bytes > 0);
}

/// log-format.md §14: the session's sealed segments compressed by `compact --compress`
/// (CZ-5): the bytes on disk before and after and the time it took (printed), then, side
/// by side, `open+messages` (the pack is unchanged) and a read of every event of the log
/// by a fresh reader, plain (a copy of the log made before) and compressed.
#[expect(
    clippy::cast_precision_loss,
    reason = "ratios printed with one or two decimals"
)]
fn compressed(
    c: &mut Criterion,
    store: &Store,
    id: &str,
    events: u64,
    messages: usize,
    jsonl_bytes: u64,
    zstd: u64,
) {
    let log = store.dir().join("sessions").join(id).join("log");
    let plain = store.dir().join("plain-log");
    std::fs::create_dir_all(&plain).expect("a copy of the log");
    for entry in std::fs::read_dir(&log).expect("lists the log") {
        let entry = entry.expect("an entry");
        std::fs::copy(entry.path(), plain.join(entry.file_name())).expect("copies");
    }
    let before = store.summarize(id).expect("summarizes");
    let started = Instant::now();
    let report = store
        .compact_log_with(id, CompactOptions::new().compress(true))
        .expect("compresses");
    let took = started.elapsed();
    let after = store.summarize(id).expect("summarizes");
    let pack = std::fs::metadata(store.dir().join("sessions").join(id).join("messages"))
        .map_or(0, |m| m.len());
    eprintln!(
        "footprint: compressed {} sealed segments ({} kept) in {took:.1?}: {} B -> {} B on disk \
         ({:.2}x the JSONL, {:.2}x its zstd); without the message pack ({pack} B) {} B",
        report.rewritten.len(),
        report.kept.len(),
        before.bytes,
        after.bytes,
        after.bytes as f64 / jsonl_bytes as f64,
        after.bytes as f64 / zstd as f64,
        after.bytes.saturating_sub(pack),
    );
    eprintln!(
        "footprint: by file kind, {}",
        by_kind(log.parent().expect("the session"))
    );
    trade_offs(&plain);
    let mut group = c.benchmark_group("compressed");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    // Opened again in this process: the pack's decompressed copy is kept (CZ-4).
    group.bench_function(format!("open+messages/warm/{events}ev"), |b| {
        b.iter(|| {
            let (session, _) = store.open_session(id).expect("opens");
            assert_eq!(session.messages().expect("messages").len(), messages);
        });
    });
    // The first open in a process: no kept copy, the pack decompressed.
    group.bench_function(format!("open+messages/warm-first/{events}ev"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                surfacelog::internals::log::release_decompressed_copies();
                let start = Instant::now();
                let (session, _) = store.open_session(id).expect("opens");
                assert_eq!(session.messages().expect("messages").len(), messages);
                total += start.elapsed();
            }
            total
        });
    });
    if drop_caches() {
        group.bench_function(format!("open+messages/cold/{events}ev"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    surfacelog::internals::log::release_decompressed_copies();
                    drop_caches();
                    let start = Instant::now();
                    let (session, _) = store.open_session(id).expect("opens");
                    assert_eq!(session.messages().expect("messages").len(), messages);
                    total += start.elapsed();
                }
                total
            });
        });
    }
    reads(&mut group, &plain, &log, events);
    fork_compressed(&mut group, store, id, events);
    group.finish();
    // The plain copy of the log compressed at level 19 (CZ-5: smaller, slower to write).
    let started = Instant::now();
    let report = surfacelog::internals::log::compact_with(
        &surfacelog::internals::storage::FsStorage,
        &plain,
        CompactOptions::new().compression_level(19),
    )
    .expect("compresses at level 19");
    eprintln!(
        "footprint: the log alone compressed at level 19 ({} segments) in {:.1?}: {}",
        report.rewritten.len(),
        started.elapsed(),
        by_kind(&plain),
    );
}

/// Reads of the log by a fresh reader, plain (`plain`) and compressed (`log`): the first in
/// the process (its kept copies released, untimed) and again (`-kept`, CZ-4).
fn reads(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    plain: &std::path::Path,
    log: &std::path::Path,
    events: u64,
) {
    // One event in the middle of the log by a fresh reader: the cost of a first access into
    // a sealed segment (a compressed one is decompressed whole, CZ-4).
    let middle = events / 2;
    for (name, dir, release) in [
        ("plain", plain, false),
        ("compressed", log, true),
        ("compressed-kept", log, false),
    ] {
        group.bench_function(format!("open+one-event/{name}/{events}ev"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    if release {
                        surfacelog::internals::log::release_decompressed_copies();
                    }
                    let start = Instant::now();
                    let reader = LogReader::open(dir).expect("opens the log");
                    assert!(!reader.event_at(middle).expect("reads").text().is_empty());
                    total += start.elapsed();
                }
                total
            });
        });
    }
    group.bench_function(format!("read-all-events/plain/{events}ev"), |b| {
        b.iter(|| read_all(plain, events));
    });
    group.bench_function(format!("read-all-events/compressed/{events}ev"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                surfacelog::internals::log::release_decompressed_copies();
                let start = Instant::now();
                read_all(log, events);
                total += start.elapsed();
            }
            total
        });
    });
    group.bench_function(format!("read-all-events/compressed-kept/{events}ev"), |b| {
        b.iter(|| read_all(log, events));
    });
}

/// A fork of the compressed session at its last event: its compressed segments are linked,
/// never decompressed (the child is deleted and purged after each, untimed).
fn fork_compressed(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    store: &Store,
    id: &str,
    events: u64,
) {
    group.bench_function(format!("fork/compressed/{events}ev"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let child = store
                    .fork(id, surfacelog::Boundary::Last, "child")
                    .expect("forks");
                total += start.elapsed();
                drop(child);
                store.delete("child").expect("deletes the child");
                store.purge().expect("purges the trash");
            }
            total
        });
    });
}

/// The bytes of the session directory `dir`'s files on disk, by kind: compressed and plain
/// segments, indexes, the message pack, the rest.
fn by_kind(dir: &std::path::Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let mut kinds = std::collections::BTreeMap::<&str, (u64, u64)>::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("lists") {
            let path = entry.expect("an entry").path();
            let meta = std::fs::metadata(&path).expect("stats");
            if meta.is_dir() {
                pending.push(path);
                continue;
            }
            let name = path
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned());
            let extension = path
                .extension()
                .and_then(|e| e.to_str())
                .unwrap_or_default();
            let kind = if extension == "seg" {
                let head = std::fs::read(&path)
                    .expect("reads")
                    .get(58)
                    .copied()
                    .unwrap_or(0);
                if head & 0x02 == 0 {
                    "plain segments"
                } else {
                    "compressed segments"
                }
            } else if extension == "idx" {
                "indexes"
            } else if name == "messages" {
                "message pack"
            } else {
                "other"
            };
            let slot = kinds.entry(kind).or_default();
            slot.0 += 1;
            slot.1 += meta.blocks() * 512;
        }
    }
    kinds
        .iter()
        .map(|(kind, (n, bytes))| format!("{kind}: {n} files, {bytes} B"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// CZ-5's parameters: the first sealed segment of the plain log `plain` compressed at
/// several Zstandard levels and block sizes, each with its size and the time to compress
/// and to decompress it (one run each: a trade-off table, not a measurement).
#[expect(
    clippy::cast_precision_loss,
    reason = "ratios printed with two decimals"
)]
fn trade_offs(plain: &std::path::Path) {
    use surfacelog::internals::log::segment::{
        compress, decompress, logical_segment, segment_name,
    };
    let Ok(bytes) = std::fs::read(plain.join(segment_name(0))) else {
        return;
    };
    let Some(logical) = logical_segment(&bytes) else {
        return;
    };
    let end = logical.len();
    for level in [1, 3, 9, 19] {
        for block in [256 << 10, 1 << 20, 4 << 20] {
            let started = Instant::now();
            let packed = compress(&logical, block, level)
                .expect("compresses")
                .expect("a logical segment");
            let compressing = started.elapsed();
            let started = Instant::now();
            let back = decompress(&packed, plain).expect("decompresses");
            let decompressing = started.elapsed();
            assert_eq!(back, logical);
            eprintln!(
                "footprint: segment 0 ({end} B) at level {level}, blocks of {} KiB: {} B \
                 ({:.2}%), compressed in {compressing:.1?}, decompressed in {decompressing:.1?}",
                block >> 10,
                packed.len(),
                packed.len() as f64 * 100.0 / end as f64,
            );
        }
    }
}

/// The same log imported by a writer without chunk records (a log of an older build),
/// then rewritten by `Store::compact_log` (log-format.md §13): its bytes before and after,
/// and the time the compaction took (one run: it is a maintenance command).
#[expect(
    clippy::cast_precision_loss,
    reason = "ratios printed with one or two decimals"
)]
fn compaction(scratch: &std::path::Path, jsonl: &std::path::Path, jsonl_bytes: u64) {
    let mut log = StoreOptions::new()
        .durability(Durability::Manual)
        .get_log_options()
        .clone();
    log.chunk_records = false;
    log.compact_records = false;
    let store = Store::open_or_create(
        scratch.join("store-without-chunk-records"),
        StoreOptions::new().log_options(log),
    )
    .expect("a store");
    let (imported, _) = jsonl::import_jsonl(&store, jsonl, Compression::None, None, &mut |_| {})
        .expect("imports the generated log");
    let before = store.summarize(&imported.id).expect("summarizes").bytes;
    let started = Instant::now();
    let report = store.compact_log(&imported.id).expect("compacts");
    let took = started.elapsed();
    let after = store.summarize(&imported.id).expect("summarizes").bytes;
    eprintln!(
        "footprint: without chunk records {before} B on disk ({:.2}x the JSONL); after \
         `compact` {after} B ({:.2}x; {} segments rewritten, {} kept) in {took:.1?}",
        before as f64 / jsonl_bytes as f64,
        after as f64 / jsonl_bytes as f64,
        report.rewritten.len(),
        report.kept.len(),
    );
}

criterion_group!(footprint_benches, benches);
criterion_main!(footprint_benches);
