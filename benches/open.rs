//! Store benchmarks: opening a stored session (with and without its surface checkpoint),
//! the memory an open session holds, and fork (`format-spec/store.md`,
//! `format-spec/checkpoint.md`).
//!
//! The workloads are stored sessions built once, before any timing, in a store under
//! [`std::env::temp_dir`] that is removed afterwards. They are built with
//! [`Durability::Manual`] through `Session::append_all` in batches of 10,000 events, in
//! turns of 40 events: `turn/start`, then every 4th event a `user/message` appended to
//! the surface (`SurfaceIntent::append()`, ~190 bytes of data), the others log-only
//! `assistant/chunk`s (~170 bytes of data), then `turn/end`: ~240 bytes of JSON text and
//! ~330 bytes of record per event. Every session ends outside a turn, so opening it
//! appends no repair closer, and `Session::close` leaves a fresh checkpoint. Three sessions: 10k events, 1M events (~0.33 GB of records) and 5M events
//! (~1.2 GB of event text, ~1.6 GB of records). The sessions are opened through a store
//! with the default options (`Durability::Sync`, 8 MiB segments, `store.md` STORE-12);
//! `SURFACELOG_BENCH_RECORDS=v1` or `=compact` chooses the records the logs hold (version
//! 1, or compact, log-format.md §4.2).
//!
//! Measured, with the targets of the issue (medians; ratios from the same run):
//!
//! 1. `open_checkpointed`: [`Store::open_session`] of the 1M-event session with a fresh checkpoint,
//!    beside the 10k-event one. Only the open is timed (`iter_custom`); the session is
//!    dropped outside the timed region. Target: 1M ≤ 5 ms and ≤ 1.5× the 10k open.
//!    The open reads none of the surface's nodes (CKP-7); their first read checks them
//!    (CKP-2). `open_then_read_nodes` times the open and that first read
//!    (`session.surface().nodes()`), to show where that cost went (no target).
//! 2. `open_rebuild`: [`Store::open_session`] of the 1M-event session whose `checkpoint` file is
//!    deleted (untimed) before each open, so the whole log is folded and the repair scan
//!    runs over it; the open then writes a new checkpoint (CKP-5), which is in the time.
//!    Throughput: the record bytes in the `.seg` files (frames up to each segment's end
//!    marker; segment headers and the zeroed tail excluded). Target: ≥ 300 MB/s.
//! 3. `resident_memory` (printed, not timed): a child process (this executable again, so
//!    nothing of the build is resident) reads `VmRSS` (and `RssAnon`, `RssFile`, `VmHWM`)
//!    from `/proc/self/status` before and after [`Store::open_session`] of the 5M-event session,
//!    with its checkpoint and, second, without it. Target: ≤ 64 MB plus the surface index
//!    (nodes × 8 bytes).
//! 4. `fork`: [`Store::fork`] of the 5M-event session at [`Boundary::Last`]; the child is
//!    deleted and purged (untimed) after each fork. Beside it, `fork_child_open`: what fork
//!    does after publishing the child, which already holds its end-seed marker (STORE-13):
//!    [`Store::open_session`] of the child with the checkpoint it shares with its source (CKP-7),
//!    folding the one event after it, timed on a child forked just before (untimed), so
//!    each pair gives the share of the fork spent opening the child (an upper bound: fork
//!    hands the child the segments its reader has opened and checked, and this open lists
//!    the directory and opens its last and its limited segment again).
//!    Target: fork ≤ 20 ms.
//!
//! Also printed: the phases of [`Store::open_session`] replayed with the public pieces it is made
//! of (header, [`DiskLog::open`] and its [`LogReader::open`] half, [`Checkpoint::load`], the
//! repair scan, the fold, the checkpoint write), and a summary with each target, the median
//! of the timed iterations (warm-up included) and pass/fail. The replayed `DiskLog::open`
//! lists the log directory; [`Store::open_session`] with a checkpoint does not, since it takes the
//! segment chain the checkpoint records (`checkpoint.md` CKP-8, `log-format.md` RCV-11), so
//! with a checkpoint the phases add up to more than the open.
//!
//! `cargo test --benches` (criterion's test mode) runs every benchmark once over sessions
//! 1000× smaller, and each open phase once. The machine may be shared: rerun when the
//! numbers are noisy. Run with `cargo bench --bench open`.

use std::fmt;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use surfacelog::internals::event::header::NegativeZero;
use surfacelog::internals::event::{EventSource, Header, Vocabulary};
use surfacelog::internals::log::segment::{SEGMENT_HEADER_LEN, SegmentHeader, parse_segment_name};
use surfacelog::internals::log::{DiskLog, Durability, LogReader};
use surfacelog::internals::record::decode_as;
use surfacelog::internals::session::repair::RepairState;
use surfacelog::internals::session::{Boundary, SurfaceIntent};
use surfacelog::internals::store::checkpoint::{CHECKPOINT_FILE, Checkpoint, LogOrigin, Unusable};
use surfacelog::internals::store::{Store, StoreOptions, escape_id};
use surfacelog::internals::surface::{NodeState, Surface};

/// Criterion samples per benchmark (its minimum).
const SAMPLE_SIZE: usize = 10;
/// Events per turn, `turn/start` and `turn/end` included.
const TURN_EVENTS: u64 = 40;
/// Every this many events (by position in the turn), a `user/message`.
const USER_EVERY: u64 = 4;
/// Events per `Session::append_all` while building.
const BATCH_EVENTS: u64 = 10_000;
/// Runs of each replayed open phase (one in criterion's test mode).
const PHASE_RUNS: usize = 5;
/// The environment variable that makes this executable the resident-memory child.
const RSS_CHILD: &str = "SURFACELOG_OPEN_BENCH_RSS_CHILD";
/// The forked child's id.
const CHILD_ID: &str = "fork-child";

/// Filler for the event data.
const PAD: &str = "the model streams a run of tokens about the failing test, the file it \
                   reads and the fix it proposes";

/// One stored session to build. `Display` labels the runs.
#[derive(Debug, Clone, Copy)]
struct Workload {
    /// Events in the session (a multiple of [`TURN_EVENTS`]).
    events: u64,
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ev/turn{TURN_EVENTS}/user1in{USER_EVERY}", self.events)
    }
}

impl Workload {
    /// The session's id in the store.
    fn id(self) -> String {
        format!("s{}", self.events)
    }
}

/// The three sessions: small, large, huge (criterion's test mode: 1000× smaller).
fn workloads(full: bool) -> [Workload; 3] {
    let scale = if full { 1 } else { 1000 };
    [10_000, 1_000_000, 5_000_000].map(|events: u64| Workload {
        events: (events / scale).next_multiple_of(TURN_EVENTS),
    })
}

/// What building a session left on disk.
#[derive(Debug, Clone)]
struct Built {
    workload: Workload,
    /// Bytes of event JSON text.
    text_bytes: u64,
    /// Record bytes in the `.seg` files (to each segment's end marker, headers excluded).
    log_bytes: u64,
    /// Segment files.
    segments: usize,
    /// Record bytes in the last segment: what an open takes from its index without reading
    /// them (IDX-5), or scans when its index does not vouch for them.
    last_fill: u64,
    /// Surface nodes.
    nodes: usize,
    /// The size of the checkpoint file.
    checkpoint_bytes: u64,
}

impl Built {
    fn id(&self) -> String {
        self.workload.id()
    }
}

/// The event at `seq`: its type, its data and whether it is a surface append.
fn event_at(seq: u64) -> (&'static str, String, bool) {
    let turn = seq / TURN_EVENTS + 1;
    match seq % TURN_EVENTS {
        0 => ("turn/start", format!(r#"{{"turn":{turn}}}"#), false),
        p if p == TURN_EVENTS - 1 => ("turn/end", format!(r#"{{"turn":{turn}}}"#), false),
        p if p % USER_EVERY == 1 => {
            let data = format!(
                r#"{{"id":"u{seq}","role":"user","source":{{"kind":"user"}},"content":[{{"type":"text","text":"Please look at item {seq} again: {}"}}]}}"#,
                &PAD[..60]
            );
            ("user/message", data, true)
        }
        _ => {
            let data = format!(
                r#"{{"turn":{turn},"step":1,"delta":{{"type":"text","text":"run {seq}: {PAD}"}}}}"#
            );
            ("assistant/chunk", data, false)
        }
    }
}

/// Creates session `workload.id()` in `store` and appends its events.
fn build(store: &Store, workload: Workload) -> Built {
    let start = Instant::now();
    let id = workload.id();
    let mut session = store.create(&id, None, None).expect("creates the session");
    let mut text_bytes = 0;
    let mut seq = 0;
    while seq < workload.events {
        let end = (seq + BATCH_EVENTS).min(workload.events);
        let events: Vec<_> = (seq..end).map(event_at).collect();
        let batch: Vec<(&str, &str, Option<SurfaceIntent>)> = events
            .iter()
            .map(|(kind, data, surface)| {
                (*kind, data.as_str(), surface.then(SurfaceIntent::append))
            })
            .collect();
        session.append_all(&batch).expect("admits the batch");
        seq = end;
    }
    for seq in 0..session.seq_next() {
        text_bytes += session
            .event(seq)
            .expect("appended")
            .expect("in the log")
            .text()
            .len() as u64;
    }
    let nodes = session.surface().nodes().len();
    session.close().expect("closes the session");
    let build = start.elapsed();
    let dir = session_dir(store, &id);
    let (segments, log_bytes, last_fill) = segment_stats(&dir.join("log"));
    let checkpoint_bytes = std::fs::metadata(dir.join(CHECKPOINT_FILE))
        .expect("close wrote a checkpoint")
        .len();
    let built = Built {
        workload,
        text_bytes,
        log_bytes,
        segments,
        last_fill,
        nodes,
        checkpoint_bytes,
    };
    eprintln!(
        "built {workload} in {:.1} s: {} MB of event text, {} MB of records in {} segments \
         (last one {:.1} MB), {} surface nodes, checkpoint {:.1} MB",
        build.as_secs_f64(),
        built.text_bytes / 1_000_000,
        built.log_bytes / 1_000_000,
        built.segments,
        mb(built.last_fill),
        built.nodes,
        mb(built.checkpoint_bytes),
    );
    built
}

/// The number of segments, their record bytes, and the record bytes of the last one.
fn segment_stats(log_dir: &Path) -> (usize, u64, u64) {
    let mut firsts: Vec<(u64, PathBuf)> = std::fs::read_dir(log_dir)
        .expect("lists the log")
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let first = parse_segment_name(path.file_name()?.to_str()?)?;
            Some((first, path))
        })
        .collect();
    firsts.sort();
    let mut total = 0;
    let mut last = 0;
    for (_, path) in &firsts {
        let bytes = std::fs::read(path).expect("reads a segment");
        let header = SegmentHeader::decode(&bytes).expect("a segment header");
        let mut at = SEGMENT_HEADER_LEN;
        while let Some(Ok((_, len))) = bytes.get(at..).map(|b| decode_as(header.format(), b)) {
            at += len;
        }
        last = (at - SEGMENT_HEADER_LEN) as u64;
        total += last;
    }
    (firsts.len(), total, last)
}

fn session_dir(store: &Store, id: &str) -> PathBuf {
    store.dir().join("sessions").join(escape_id(id))
}

/// The store directory, removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Per-iteration times of each benchmark, for the summary.
#[derive(Debug, Default)]
struct Times(Vec<(String, Vec<Duration>)>);

impl Times {
    fn slot(&mut self, name: String) -> &mut Vec<Duration> {
        self.0.push((name, Vec::new()));
        &mut self.0.last_mut().expect("just pushed").1
    }

    fn median(&self, name: &str) -> Duration {
        let (_, times) = self
            .0
            .iter()
            .find(|(n, _)| n == name)
            .expect("a benchmark that ran");
        median(times)
    }
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

fn main() {
    if let Ok(spec) = std::env::var(RSS_CHILD) {
        rss_child(&spec);
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    // Criterion's own rule: benchmarks with `--bench` alone, one test run otherwise.
    let full = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let mut criterion = Criterion::default().configure_from_args();
    benches(&mut criterion, full);
    criterion.final_summary();
}

/// The store options of every store here: the default, but for the records its logs
/// write when `SURFACELOG_BENCH_RECORDS` is `v1` or `compact` (log-format.md §4.2).
fn options() -> StoreOptions {
    match std::env::var("SURFACELOG_BENCH_RECORDS").as_deref() {
        Ok("v1") => StoreOptions::default().compact_records(false),
        Ok("compact") => StoreOptions::default().compact_records(true),
        _ => StoreOptions::default(),
    }
}

fn benches(c: &mut Criterion, full: bool) {
    let dir =
        TempDir(std::env::temp_dir().join(format!("surfacelog-open-bench-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    let building = options().durability(Durability::Manual);
    let builder = Store::open_or_create(&dir.0, building).expect("creates the store");
    let [small, large, huge] = workloads(full).map(|w| build(&builder, w));
    drop(builder);
    let store = Store::open_or_create(&dir.0, options()).expect("opens the store");
    let mut times = Times::default();

    open_checkpointed(c, &store, &[&small, &large], false, &mut times);
    open_checkpointed(c, &store, &[&small, &large], true, &mut times);
    open_rebuild(c, &store, &large, &mut times);
    print_phases(&store, &[&small, &large], if full { PHASE_RUNS } else { 1 });
    let memory = [true, false].map(|checkpointed| resident_memory(&store, &huge, checkpointed));
    let pairs = fork(c, &store, &huge, &mut times);
    summary(&times, &[&small, &large, &huge], &memory, &pairs);
}

/// Benchmark 1: open with a fresh checkpoint; only the events after it are folded (none
/// here). With `read_nodes`, the open and then the first read of the surface's nodes,
/// which checks them (CKP-2): where the cost of the nodes moved.
fn open_checkpointed(
    c: &mut Criterion,
    store: &Store,
    sessions: &[&Built],
    read_nodes: bool,
    times: &mut Times,
) {
    let name = if read_nodes {
        "open_then_read_nodes"
    } else {
        "open_checkpointed"
    };
    let mut group = c.benchmark_group(name);
    group
        .sample_size(SAMPLE_SIZE)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for built in sessions {
        let id = built.id();
        let events = built.workload.events;
        let slot = times.slot(format!("{name}/{}", built.workload));
        group.bench_function(BenchmarkId::from_parameter(built.workload), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let (session, opened) = store.open_session(black_box(&id)).expect("opens");
                    if read_nodes {
                        black_box(session.surface().nodes());
                    }
                    let elapsed = start.elapsed();
                    total += elapsed;
                    slot.push(elapsed);
                    assert_eq!(opened.checkpoint, Ok(events), "the checkpoint is used");
                    assert_eq!(opened.closers, 0);
                    let checked = if read_nodes {
                        NodeState::Checked
                    } else {
                        NodeState::Unchecked
                    };
                    assert_eq!(session.surface().node_state(), checked);
                    drop(session);
                }
                total
            });
        });
    }
    group.finish();
}

/// Benchmark 2: open without a checkpoint; the whole log is folded, then a checkpoint is
/// written.
fn open_rebuild(c: &mut Criterion, store: &Store, built: &Built, times: &mut Times) {
    let id = built.id();
    let checkpoint = session_dir(store, &id).join(CHECKPOINT_FILE);
    let mut group = c.benchmark_group("open_rebuild");
    group
        .sample_size(SAMPLE_SIZE)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(10))
        .throughput(Throughput::BytesDecimal(built.log_bytes));
    let slot = times.slot(format!("open_rebuild/{}", built.workload));
    group.bench_function(BenchmarkId::from_parameter(built.workload), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                std::fs::remove_file(&checkpoint).expect("the last open wrote a checkpoint");
                let start = Instant::now();
                let (session, opened) = store.open_session(black_box(&id)).expect("opens");
                let elapsed = start.elapsed();
                total += elapsed;
                slot.push(elapsed);
                assert_eq!(opened.checkpoint, Err(Unusable::Missing));
                drop(session);
            }
            total
        });
    });
    group.finish();
}

/// The median time of each phase of [`Store::open_session`], replayed from its public pieces.
#[derive(Debug, Default)]
struct Phases {
    header: Vec<Duration>,
    disk_log: Vec<Duration>,
    reader: Vec<Duration>,
    checkpoint: Vec<Duration>,
    repair_scan: Vec<Duration>,
    fold: Vec<Duration>,
    flush: Vec<Duration>,
}

impl Phases {
    /// One open of session `id`: without its checkpoint when `rebuild`, and then, as
    /// `Store::open_session` does, a checkpoint written (the log's flush has nothing to sync: no
    /// closer was appended).
    fn run(&mut self, store: &Store, id: &str, rebuild: bool) {
        let dir = session_dir(store, id);
        let log_dir = dir.join("log");
        let vocabulary = Vocabulary::dsh_v0();
        if rebuild {
            std::fs::remove_file(dir.join(CHECKPOINT_FILE)).expect("a checkpoint to remove");
        }
        let start = Instant::now();
        let text = std::fs::read_to_string(dir.join("header.json")).expect("reads the header");
        Header::parse(text.trim_end(), id, NegativeZero::Accept).expect("a valid header");
        self.header.push(start.elapsed());

        let start = Instant::now();
        let (log, _) =
            DiskLog::open(&log_dir, options().get_log_options().clone()).expect("opens the log");
        self.disk_log.push(start.elapsed());

        let start = Instant::now();
        let reader = LogReader::open(&log_dir).expect("opens a reader");
        self.reader.push(start.elapsed());
        drop(reader);

        let start = Instant::now();
        let origin = LogOrigin {
            dir: log_dir.clone(),
            storage: options().get_log_options().storage.clone(),
            vocabulary: options().get_session_options().vocabulary.clone(),
        };
        let loaded = Checkpoint::load(&dir, &log, origin).expect("the checkpoint can be read");
        self.checkpoint.push(start.elapsed());
        assert_eq!(loaded.is_err(), rebuild);
        let (mut surface, mut repair) = match loaded {
            Ok(checkpoint) => (checkpoint.surface, checkpoint.repair),
            Err(_) => (Surface::new(), RepairState::default()),
        };

        let start = Instant::now();
        repair.observe_from(&log, surface.seq_next()).unwrap();
        self.repair_scan.push(start.elapsed());

        let start = Instant::now();
        surface.catch_up(&log, &vocabulary).expect("folds");
        self.fold.push(start.elapsed());
        assert_eq!(surface.seq_next(), log.seq_next());

        if rebuild {
            let start = Instant::now();
            let bytes = Checkpoint::of(&surface, &repair, &log).unwrap().encode();
            write_atomically(&dir, &bytes);
            self.flush.push(start.elapsed());
        }
    }

    fn print(&self, label: &str) {
        let ms = |times: &[Duration]| {
            if times.is_empty() {
                "-".to_owned()
            } else {
                format!("{:.3}", median(times).as_secs_f64() * 1e3)
            }
        };
        let total: Duration = [
            &self.header,
            &self.disk_log,
            &self.checkpoint,
            &self.repair_scan,
            &self.fold,
            &self.flush,
        ]
        .iter()
        .map(|t| median(t))
        .sum();
        eprintln!(
            "open phases (ms, median of {}) {label}: header {} | DiskLog::open {} \
             (of which a LogReader::open alone takes {}) | checkpoint load {} | repair scan \
             {} | fold {} | checkpoint write {} | sum {:.3}",
            self.header.len(),
            ms(&self.header),
            ms(&self.disk_log),
            ms(&self.reader),
            ms(&self.checkpoint),
            ms(&self.repair_scan),
            ms(&self.fold),
            ms(&self.flush),
            total.as_secs_f64() * 1e3,
        );
    }
}

/// The checkpoint file as `StoredLog` writes it (CKP-5): temporary file, sync, rename,
/// directory sync.
fn write_atomically(dir: &Path, bytes: &[u8]) {
    let tmp = dir.join("checkpoint.tmp");
    let file = std::fs::File::create(&tmp).expect("creates the checkpoint");
    std::io::Write::write_all(&mut &file, bytes).expect("writes the checkpoint");
    file.sync_data().expect("syncs the checkpoint");
    std::fs::rename(&tmp, dir.join(CHECKPOINT_FILE)).expect("renames the checkpoint");
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .expect("syncs the directory");
}

/// Prints where the time of an open goes, with and without a checkpoint.
fn print_phases(store: &Store, sessions: &[&Built], runs: usize) {
    for built in sessions {
        for rebuild in [false, true] {
            let mut phases = Phases::default();
            for _ in 0..runs {
                phases.run(store, &built.id(), rebuild);
            }
            let how = if rebuild { "rebuild" } else { "checkpointed" };
            let label = format!(
                "{how} {} (last segment {:.1} MB)",
                built.workload,
                mb(built.last_fill)
            );
            phases.print(&label);
        }
    }
}

/// What the resident-memory child measured, in kB of `/proc/self/status`.
#[derive(Debug, Clone, Default)]
struct Memory {
    checkpointed: bool,
    rss_before: u64,
    rss_after: u64,
    anon_after: u64,
    anon_before: u64,
    file_after: u64,
    file_before: u64,
    hwm_after: u64,
    nodes: u64,
}

impl Memory {
    /// The resident growth across the open, in bytes.
    fn growth(&self) -> u64 {
        self.rss_after.saturating_sub(self.rss_before) * 1024
    }
}

/// Benchmark 3: runs this executable as a fresh process that opens `built` and reports its
/// memory.
fn resident_memory(store: &Store, built: &Built, checkpointed: bool) -> Memory {
    if !checkpointed {
        let path = session_dir(store, &built.id()).join(CHECKPOINT_FILE);
        std::fs::remove_file(path).expect("a checkpoint to remove");
    }
    let spec = format!("{}\n{}", store.dir().display(), built.id());
    let output = Command::new(std::env::current_exe().expect("this executable"))
        .env(RSS_CHILD, spec)
        .output()
        .expect("runs the child");
    assert!(
        output.status.success(),
        "the child failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("UTF-8 output");
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("the child printed no {name}: {text}"))
    };
    let memory = Memory {
        checkpointed,
        rss_before: field("rss_before"),
        rss_after: field("rss_after"),
        anon_before: field("anon_before"),
        anon_after: field("anon_after"),
        file_before: field("file_before"),
        file_after: field("file_after"),
        hwm_after: field("hwm_after"),
        nodes: field("nodes"),
    };
    let kb_mb = |kb: u64| mb(kb * 1024);
    eprintln!(
        "resident_memory {} ({}): VmRSS {:.1} -> {:.1} MB (+{:.1} MB: RssAnon +{:.1}, RssFile \
         +{:.1}); VmHWM after {:.1} MB; surface {} nodes = {:.1} MB",
        built.workload,
        if checkpointed {
            "checkpointed"
        } else {
            "no checkpoint"
        },
        kb_mb(memory.rss_before),
        kb_mb(memory.rss_after),
        mb(memory.growth()),
        kb_mb(memory.anon_after.saturating_sub(memory.anon_before)),
        kb_mb(memory.file_after.saturating_sub(memory.file_before)),
        kb_mb(memory.hwm_after),
        memory.nodes,
        mb(memory.nodes * 8),
    );
    memory
}

/// The child of [`resident_memory`]: opens the session named in `spec` and prints its
/// memory before and after.
fn rss_child(spec: &str) {
    let (dir, id) = spec.split_once('\n').expect("dir and id");
    let store = Store::open_or_create(Path::new(dir), options()).expect("opens the store");
    let before = proc_status();
    let (session, opened) = store.open_session(id).expect("opens the session");
    let after = proc_status();
    let get = |status: &[(String, u64)], key: &str| {
        status
            .iter()
            .find_map(|(k, v)| (k == key).then_some(*v))
            .unwrap_or_default()
    };
    println!("rss_before {}", get(&before, "VmRSS"));
    println!("rss_after {}", get(&after, "VmRSS"));
    println!("anon_before {}", get(&before, "RssAnon"));
    println!("anon_after {}", get(&after, "RssAnon"));
    println!("file_before {}", get(&before, "RssFile"));
    println!("file_after {}", get(&after, "RssFile"));
    println!("hwm_after {}", get(&after, "VmHWM"));
    println!("nodes {}", session.surface().nodes().len());
    println!("checkpoint {:?}", opened.checkpoint);
    drop(session);
}

/// The `kB` lines of `/proc/self/status`.
fn proc_status() -> Vec<(String, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").expect("reads /proc/self/status");
    status
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(':')?;
            let kb = value.trim().strip_suffix(" kB")?.parse().ok()?;
            Some((key.to_owned(), kb))
        })
        .collect()
}

/// Benchmark 4: fork at the last event, and the part of it that opens the child. Returns
/// the (fork, child open) pairs timed back to back.
fn fork(
    c: &mut Criterion,
    store: &Store,
    built: &Built,
    times: &mut Times,
) -> Vec<(Duration, Duration)> {
    let source = built.id();
    let mut group = c.benchmark_group("fork");
    group
        .sample_size(SAMPLE_SIZE)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(10));
    let fork_child = || {
        let start = Instant::now();
        let child = store
            .fork(black_box(&source), Boundary::Last, CHILD_ID)
            .expect("forks");
        let elapsed = start.elapsed();
        assert_eq!(child.seq_next(), built.workload.events + 1, "+ end-seed");
        drop(child);
        elapsed
    };
    let remove_child = || {
        store.delete(CHILD_ID).expect("deletes the child");
        store.purge().expect("purges the trash");
    };
    let slot = times.slot(format!("fork/{}", built.workload));
    group.bench_function(BenchmarkId::new("fork", built.workload), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let elapsed = fork_child();
                total += elapsed;
                slot.push(elapsed);
                remove_child();
            }
            total
        });
    });

    // What fork does once the child is published: open it with the checkpoint it shares
    // with its source (its end-seed marker is already stored, so nothing is appended or
    // synced). Each iteration forks a fresh child first (timed apart) and reopens it.
    let mut pairs = Vec::new();
    let slot = times.slot(format!("fork_child_open/{}", built.workload));
    group.bench_function(BenchmarkId::new("fork_child_open", built.workload), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let forked = fork_child();
                let start = Instant::now();
                let (child, opened) = store.open_session(black_box(CHILD_ID)).expect("opens");
                let elapsed = start.elapsed();
                total += elapsed;
                slot.push(elapsed);
                pairs.push((forked, elapsed));
                assert_eq!(
                    opened.checkpoint,
                    Ok(built.workload.events),
                    "the child uses the checkpoint it shares with its source"
                );
                assert_eq!(child.seq_next(), built.workload.events + 1, "+ end-seed");
                drop(child);
                remove_child();
            }
            total
        });
    });
    group.finish();
    pairs
}

/// Prints each target, the median of the timed iterations and pass/fail.
fn summary(
    times: &Times,
    sessions: &[&Built; 3],
    memory: &[Memory; 2],
    pairs: &[(Duration, Duration)],
) {
    let [small, large, huge] = *sessions;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    // A benchmark left out by a filter has no times (a zero median).
    let verdict = |ran: &[Duration], pass: bool| match (ran.iter().all(|d| !d.is_zero()), pass) {
        (false, _) => "not run",
        (true, true) => "PASS",
        (true, false) => "FAIL",
    };
    let open_small = times.median(&format!("open_checkpointed/{}", small.workload));
    let open_large = times.median(&format!("open_checkpointed/{}", large.workload));
    let read_small = times.median(&format!("open_then_read_nodes/{}", small.workload));
    let read_large = times.median(&format!("open_then_read_nodes/{}", large.workload));
    let rebuild = times.median(&format!("open_rebuild/{}", large.workload));
    let fork = times.median(&format!("fork/{}", huge.workload));
    let child_open = times.median(&format!("fork_child_open/{}", huge.workload));
    let ratio = open_large.as_secs_f64() / open_small.as_secs_f64();
    #[expect(clippy::cast_precision_loss, reason = "a rate printed to one decimal")]
    let rebuild_rate = large.log_bytes as f64 / rebuild.as_secs_f64() / 1e6;
    #[expect(clippy::cast_precision_loss, reason = "a rate printed to one decimal")]
    let text_rate = large.text_bytes as f64 / rebuild.as_secs_f64() / 1e6;
    eprintln!("summary (medians of the timed iterations, warm-up included):");
    eprintln!(
        "  open_checkpointed {}: {:.3} ms (target <= 5 ms) {}",
        large.workload,
        ms(open_large),
        verdict(&[open_large], open_large <= Duration::from_millis(5))
    );
    eprintln!(
        "  open_checkpointed {}: {:.3} ms; ratio {ratio:.2}x (target <= 1.5x) {}",
        small.workload,
        ms(open_small),
        verdict(&[open_small, open_large], ratio <= 1.5)
    );
    eprintln!(
        "  open_then_read_nodes (no target; the open, then the first read of the nodes, \
         which checks them): {} {:.3} ms, {} {:.3} ms",
        small.workload,
        ms(read_small),
        large.workload,
        ms(read_large),
    );
    eprintln!(
        "  open_rebuild {}: {:.1} ms = {rebuild_rate:.0} MB/s of records ({text_rate:.0} MB/s \
         of event text) (target >= 300 MB/s) {}",
        large.workload,
        ms(rebuild),
        verdict(&[rebuild], rebuild_rate >= 300.0)
    );
    for memory in memory {
        let limit = 64_000_000 + memory.nodes * 8;
        eprintln!(
            "  resident_memory {} ({}): VmRSS +{:.1} MB (RssAnon +{:.1}, RssFile +{:.1}) \
             (target <= 64 MB + {:.1} MB of nodes) {}",
            huge.workload,
            if memory.checkpointed {
                "checkpointed"
            } else {
                "no checkpoint"
            },
            mb(memory.growth()),
            mb(memory.anon_after.saturating_sub(memory.anon_before) * 1024),
            mb(memory.file_after.saturating_sub(memory.file_before) * 1024),
            mb(memory.nodes * 8),
            if memory.growth() <= limit {
                "PASS"
            } else {
                "FAIL"
            }
        );
    }
    // Back-to-back pairs: the median of the per-pair differences and shares.
    let mut rest: Vec<f64> = pairs.iter().map(|(f, o)| ms(*f) - ms(*o)).collect();
    let mut share: Vec<f64> = pairs.iter().map(|(f, o)| ms(*o) / ms(*f)).collect();
    rest.sort_by(f64::total_cmp);
    share.sort_by(f64::total_cmp);
    let middle = |v: &[f64]| v.get(v.len() / 2).copied().unwrap_or(f64::NAN);
    eprintln!(
        "  fork {}: {:.1} ms (target <= 20 ms) {}; the child's open {:.1} ms; per \
         back-to-back pair ({} pairs): open {:.0}% of the fork, the rest {:.1} ms",
        huge.workload,
        ms(fork),
        verdict(&[fork], fork <= Duration::from_millis(20)),
        ms(child_open),
        pairs.len(),
        100.0 * middle(&share),
        middle(&rest),
    );
}

#[expect(
    clippy::cast_precision_loss,
    reason = "megabytes printed to one decimal"
)]
fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}
