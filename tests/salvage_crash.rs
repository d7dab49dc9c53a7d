//! Salvage cut short by a crash at any I/O point (SLV-1 to SLV-4, RCV-13, LIM-5): the store
//! opens, or opens after a second salvage, with the events an uncrashed salvage keeps, and
//! every byte set aside is found whole in the log directory (quarantine).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use surfacelog::internals::log::Durability;
use surfacelog::internals::storage::sim::SimStorage;
use surfacelog::internals::store::{Store, StoreOptions};

mod common;

/// The options of every open: sync durability (what a store's segment size is matters
/// only where its sessions are written, `created`).
fn options() -> StoreOptions {
    created(64 << 10)
}

/// The options of the store the sessions are written with, segments of `segment_bytes`.
fn created(segment_bytes: u64) -> StoreOptions {
    common::store_options(Durability::Sync, segment_bytes)
}

/// Every event text of session `id`, read by a writer's open.
fn opened(store: &Path, id: &str) -> Result<Vec<String>, String> {
    common::opened_texts(store, id, options())
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

/// Whether `needle` (the bytes set aside) is found whole in some file of `dir`.
fn kept_somewhere(dir: &Path, needle: &[u8]) -> bool {
    files(dir)
        .iter()
        .any(|f| std::fs::read(f).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)))
}

/// A closed single-segment session `s` (indexed to its end, checkpointed) whose 3rd turn's
/// text has a flipped byte: below the index's mark, so the open is CORRUPT (RCV-13) and
/// salvage is the tool. Returns the pristine store dir and the bytes salvage must keep
/// somewhere (from the damaged record on).
fn damaged_store(root: &Path, segment_bytes: u64, turns: u64, damaged: u64) -> Vec<u8> {
    let store = Store::open_or_create(root.join("store"), created(segment_bytes)).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    for t in 1..=turns {
        common::closed_turn(&mut session, t, &format!("question number {t}"), "out");
    }
    session.close().unwrap();
    drop(store);
    let needle = format!("question number {damaged}\"");
    let needle = needle.as_bytes();
    let seg = files(&root.join("store/sessions/s/log"))
        .into_iter()
        .find(|f| {
            f.extension().is_some_and(|e| e == "seg")
                && std::fs::read(f)
                    .unwrap()
                    .windows(needle.len())
                    .any(|w| w == needle)
        })
        .unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap()
        + 4;
    bytes[at] ^= 0x20;
    std::fs::write(&seg, &bytes).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    bytes[at..end].to_vec()
}

/// SLV-1..SLV-4 with RCV-13: a salvage crashed at any I/O point leaves a store that opens,
/// or that a second salvage finishes; nothing is lost.
#[test]
fn salvage_crashed_anywhere_then_salvaged_again_opens_with_nothing_lost() {
    crashed_salvage(64 << 10, 5, 3);
}

/// The same with several segments: the damage in a sealed segment, later segments moved
/// aside whole (SLV-3).
#[test]
fn salvage_of_many_segments_crashed_anywhere_then_salvaged_again_opens() {
    crashed_salvage(4096, 12, 3);
}

fn crashed_salvage(segment_bytes: u64, turns: u64, damaged: u64) {
    let pristine = tempfile::tempdir().unwrap();
    let tail = damaged_store(pristine.path(), segment_bytes, turns, damaged);
    run_crashed_salvage(pristine.path(), "s", &[tail]);
}

/// Salvages session `id` of the store under `pristine` (a copy of it, on a simulated disk)
/// crashed at every I/O point with several seeds; after each crash, the store must open
/// (or open after a second salvage on the real disk) with the events of an uncrashed
/// salvage, and every blob of `keep` must be found whole in some file of the log's
/// directory (nothing lost).
fn run_crashed_salvage(pristine: &Path, id: &str, keep: &[Vec<u8>]) {
    let err = opened(&pristine.join("store"), id).unwrap_err();
    eprintln!("before salvage: {err}");
    let run = |crash_at: Option<u64>, seed: u64| -> (u64, Result<Vec<String>, String>) {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().canonicalize().unwrap();
        common::copy_tree(pristine, &root);
        let sim = Arc::new(SimStorage::new(&root, seed).unwrap());
        let store = Store::open(root.join("store"), options().storage(sim.clone())).unwrap();
        let base = sim.points();
        if let Some(point) = crash_at {
            sim.crash_at(base + point);
        }
        let _ = store.salvage(id);
        drop(store);
        let points = sim.points() - base;
        sim.crash().unwrap();
        let log = root.join("store/sessions").join(id).join("log");
        let after = opened(&root.join("store"), id).or_else(|first| {
            let store = Store::open(root.join("store"), options()).unwrap();
            store
                .salvage(id)
                .map_err(|e| format!("second salvage: {e} (after open: {first})"))?;
            drop(store);
            opened(&root.join("store"), id).map_err(|e| {
                format!(
                    "after a second salvage: {e} (first open: {first}); files: {:?}",
                    files(&log)
                        .iter()
                        .map(|f| f.file_name().unwrap().to_owned())
                        .collect::<Vec<_>>()
                )
            })
        });
        for blob in keep {
            assert!(
                kept_somewhere(&log, blob),
                "crash at {crash_at:?} seed {seed}: bytes set aside are lost: {:?}",
                files(&log)
            );
        }
        (points, after)
    };
    let (points, whole) = run(None, 0);
    let whole = whole.unwrap();
    let mut failures = Vec::new();
    for point in 1..=points {
        for seed in 0..8 {
            let (_, after) = run(Some(point), seed);
            match after {
                Ok(texts) if texts == whole => {}
                Ok(texts) => failures.push(format!(
                    "crash at {point} seed {seed}: {} events, not {}",
                    texts.len(),
                    whole.len()
                )),
                Err(e) => failures.push(format!("crash at {point} seed {seed}: {e}")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs fail; the first:\n{}",
        failures.len(),
        points * 8,
        failures.join("\n")
    );
}

/// SLV-3, LIM-5: a fork whose boundary segment is limited, salvaged when a segment before
/// it has a damaged header: every later segment and its limit are moved aside; a crash
/// in between must not leave a limit of no segment (CORRUPT, which salvage ignores).
#[test]
fn salvage_of_a_fork_crashed_anywhere_then_salvaged_again_opens() {
    let pristine = tempfile::tempdir().unwrap();
    let root = pristine.path();
    let store = Store::open_or_create(root.join("store"), created(4096)).unwrap();
    let mut session = store.create("src", None, None).unwrap();
    for t in 1..=12 {
        common::closed_turn(&mut session, t, &format!("question number {t}"), "out");
    }
    session.close().unwrap();
    store
        .fork("src", surfacelog::Boundary::Last, "c")
        .unwrap()
        .close()
        .unwrap();
    drop(store);
    let log = root.join("store/sessions/c/log");
    let names: Vec<_> = files(&log)
        .iter()
        .map(|f| f.file_name().unwrap().to_owned())
        .collect();
    eprintln!("child: {names:?}");
    assert!(names.iter().any(|n| n.to_string_lossy().ends_with(".lim")));
    // Break segment 1's header (its log_id), in the child's copy only.
    let seg1 = files(&log)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "seg"))
        .nth(1)
        .unwrap();
    let mut bytes = std::fs::read(&seg1).unwrap();
    bytes[20] ^= 0xff;
    std::fs::remove_file(&seg1).unwrap();
    std::fs::write(&seg1, &bytes).unwrap();
    // Every file of the log from segment 1 on must be kept whole somewhere.
    let keep: Vec<Vec<u8>> = files(&log)
        .into_iter()
        .filter(|f| {
            let n = f.file_name().unwrap().to_string_lossy().into_owned();
            let kind = f.extension().and_then(|x| x.to_str());
            matches!(kind, Some("seg" | "lim")) && !n.starts_with("00000000000000000000")
        })
        .map(|f| std::fs::read(f).unwrap())
        .collect();
    run_crashed_salvage(root, "c", &keep);
}

/// SLV-2, RCV-13: a log whose last segment's index lists records the segment no longer
/// holds (zeros where they were: what a crash of an earlier build's salvage or compaction
/// could leave, the index beside a shorter copy) never opens; salvage removes that index
/// (a cache), reports the first lost seq, and the log then opens with what is left.
#[test]
fn salvage_removes_an_index_that_lists_records_the_segment_lost() {
    let pristine = tempfile::tempdir().unwrap();
    let dir = pristine.path().join("store");
    let store = Store::open_or_create(&dir, options()).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    for t in 1..=3 {
        common::closed_turn(&mut session, t, &format!("question number {t}"), "out");
    }
    let total = session.seq_next();
    session.close().unwrap();
    let before = opened(&dir, "s").unwrap();
    let log = dir.join("sessions/s/log");
    let segment = files(&log)
        .into_iter()
        .rfind(|f| f.extension().is_some_and(|e| e == "seg"))
        .unwrap();
    assert!(
        segment.with_extension("idx").exists(),
        "closed: indexed (IDX-5)"
    );
    // The last record zeroed (found by walking the records in the segment's format): the
    // file keeps its length, the records end before it.
    let mut bytes = std::fs::read(&segment).unwrap();
    let last = common::segment_records(&bytes).pop().unwrap();
    assert_eq!(
        last.seqs,
        total - 1..total,
        "the turn's end, a record of its own"
    );
    bytes[last.at].fill(0);
    std::fs::write(&segment, &bytes).unwrap();
    let error = opened(&dir, "s").unwrap_err();
    assert!(error.contains("RCV-13"), "{error}");
    let report = store.salvage("s").unwrap();
    assert_eq!(report.log.first_lost_seq, Some(total - 1), "{report:?}");
    // What is left, then the closer of the turn the lost record had ended (contract §8).
    let after = opened(&dir, "s").unwrap();
    let kept = usize::try_from(total - 1).unwrap();
    assert_eq!(after[..kept], before[..kept]);
    assert!(
        after[kept..].iter().all(|e| e.contains("interrupted")),
        "{:?}",
        &after[kept..]
    );
}
