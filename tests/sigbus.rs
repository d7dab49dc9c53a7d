//! Never SIGBUS (issue 12, item 1; log-format.md RD-8): no byte that is not known written
//! is read through a map. A torn tail recovered on a full filesystem, whose sparse
//! segment's holes cannot be given pages, and a segment another process truncated, end
//! in an error or a recovery, never in a signal. The opens that could fault run in a
//! child process (this test binary run again for one test), whose exit status must not
//! be a signal.

use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use surfacelog::internals::event::EventSource;
use surfacelog::internals::log::segment::segment_name;
use surfacelog::internals::log::{Durability, LogReader, LogWriter};
use surfacelog::internals::store::Store;

mod common;

use common::{log_options, numbered_turn, padded_event, scratch, store_options};

/// A sparse segment much larger than the filesystem the test mounts.
const SEGMENT: u64 = 8 << 20;
/// The environment variable naming the log a child test opens.
const CHILD_DIR: &str = "SURFACELOG_SIGBUS_CHILD_DIR";

/// A tmpfs mounted on a directory, unmounted when dropped (even when the test fails).
struct Mount(PathBuf);

impl Mount {
    /// Mounts a tmpfs of `size` on `dir`; `None` (with a notice) when that is not possible
    /// (not root, no mount permission in a container).
    fn tmpfs(dir: &Path, size: &str) -> Option<Self> {
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status();
        if status.is_ok_and(|s| s.success()) {
            Some(Self(dir.to_owned()))
        } else {
            eprintln!("notice: cannot mount a tmpfs (needs root): full-filesystem test skipped");
            None
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// Runs the test `name` of this binary in a child process with [`CHILD_DIR`] set to
/// `dir`, and asserts that it was not killed by a signal (SIGBUS) and passed.
fn run_child(name: &str, dir: &Path) {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, dir)
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        output.status.signal(),
        None,
        "the child was killed by a signal (7 is SIGBUS):\n{log}"
    );
    assert!(output.status.success(), "the child failed:\n{log}");
    assert!(log.contains("child ran"), "the child did not run:\n{log}");
}

/// The end of the records of segment `path`: past its last non-zero byte, 8-aligned
/// (REC-2: records are padded with zeros to 8 bytes).
fn records_end(path: &Path) -> usize {
    let bytes = std::fs::read(path).unwrap();
    let last = bytes.iter().rposition(|b| *b != 0).unwrap();
    (last + 1).next_multiple_of(8)
}

/// Fills the filesystem holding `dir` with a file until it has no free block left.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("fill");
    let mut file = std::fs::File::create(&path).unwrap();
    for chunk in [64 << 10, 4 << 10, 1] {
        let bytes = vec![0xA5_u8; chunk];
        while file.write_all(&bytes).is_ok() {}
    }
    let _ = file.sync_all();
    path
}

/// A log of `count` events in `dir` whose records end inside a page (so that bytes after
/// them can be written on a full filesystem); returns the end of its records.
fn write_log(dir: &Path, count: u64) -> usize {
    let (writer, _) = LogWriter::open(dir, log_options(Durability::Sync, SEGMENT)).unwrap();
    for seq in 0..count {
        writer.append(&[padded_event(seq, 300)]).unwrap();
    }
    let mut seq = count;
    while records_end(&dir.join(segment_name(0))).is_multiple_of(4096) {
        writer.append(&[padded_event(seq, 300)]).unwrap();
        seq += 1;
    }
    writer.close().unwrap();
    records_end(&dir.join(segment_name(0)))
}

/// Tears the tail of the log in `dir`: at `end`, the start of a frame whose length claims
/// a 1 MiB record, running into the segment's holes, and a few garbage bytes.
fn tear(dir: &Path, end: usize) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(segment_name(0)))
        .unwrap();
    let mut torn = (1_u32 << 20).to_le_bytes().to_vec();
    torn.extend_from_slice(&[0xEE; 4]);
    file.write_all_at(&torn, end as u64).unwrap();
}

/// RD-8: recovery of a torn tail on a full filesystem (the segment is sparse, the
/// filesystem has no block to give its holes) reads the bytes past the verified end with
/// pread: every open ends in a recovery or an `IO`/`CORRUPT` error, never a SIGBUS; once
/// there is room again, the tail is set aside and the events read back.
#[test]
fn a_torn_tail_on_a_full_filesystem_never_raises_sigbus() {
    let scratch = scratch("sigbus", "full");
    let mount_dir = scratch.join("mnt");
    std::fs::create_dir(&mount_dir).unwrap();
    let Some(mount) = Mount::tmpfs(&mount_dir, "4m") else {
        return;
    };
    let dir = mount_dir.join("log");
    let end = write_log(&dir, 20);
    let filler = fill(&mount_dir);
    tear(&dir, end);
    run_child("child_opens_a_log_many_times", &dir);
    // With room again, recovery sets the torn tail aside (RCV-12) and keeps every event.
    std::fs::remove_file(&filler).unwrap();
    let (writer, report) = LogWriter::open(&dir, log_options(Durability::Sync, SEGMENT)).unwrap();
    let torn = report.torn_tail.expect("the torn tail is reported");
    assert_eq!(torn.offset, end as u64);
    let events = writer.seq_next();
    assert!(events >= 20);
    writer.close().unwrap();
    let reader = LogReader::open(&dir).unwrap();
    for seq in 0..events {
        assert_eq!(reader.event_at(seq).unwrap().seq, seq);
    }
    drop(reader);
    drop(mount);
}

/// The directory under `dir` holding the first segment of a log.
fn log_dir_under(dir: &Path) -> Option<PathBuf> {
    let mut subdirs = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name() == Some(segment_name(0).as_ref()) {
            return Some(dir.to_owned());
        }
        if path.is_dir() {
            subdirs.push(path);
        }
    }
    subdirs.iter().find_map(|sub| log_dir_under(sub))
}

/// RD-8 through the store: opening a stored session whose log has a torn tail on a full
/// filesystem ends in an opened session or an `IO`/`CORRUPT` error, never a SIGBUS.
#[test]
fn a_torn_session_tail_on_a_full_filesystem_never_raises_sigbus() {
    let scratch = scratch("sigbus", "store");
    let mount_dir = scratch.join("mnt");
    std::fs::create_dir(&mount_dir).unwrap();
    let Some(mount) = Mount::tmpfs(&mount_dir, "4m") else {
        return;
    };
    let store_dir = mount_dir.join("store");
    let store =
        Store::open_or_create(&store_dir, store_options(Durability::Sync, SEGMENT)).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    for turn in 1..=8 {
        numbered_turn(&mut session, turn);
    }
    session.close().unwrap();
    drop(store);
    let log = log_dir_under(&store_dir).expect("the session's log");
    let end = records_end(&log.join(segment_name(0)));
    assert!(!end.is_multiple_of(4096), "the records end inside a page");
    let _filler = fill(&mount_dir);
    tear(&log, end);
    run_child("child_opens_a_stored_session_many_times", &store_dir);
    drop(mount);
}

/// The child of [`a_torn_session_tail_on_a_full_filesystem_never_raises_sigbus`]: runs
/// only as that child.
#[test]
fn child_opens_a_stored_session_many_times() {
    let Some(dir) = std::env::var_os(CHILD_DIR).map(PathBuf::from) else {
        return;
    };
    for _ in 0..20 {
        let opened = Store::open_or_create(&dir, store_options(Durability::Sync, SEGMENT))
            .and_then(|store| store.open_session("s").map(|_| ()));
        if let Err(e) = opened {
            assert!(matches!(e.code(), "IO" | "CORRUPT"), "{e}");
        }
    }
    println!("child ran");
}

/// The child of [`a_torn_tail_on_a_full_filesystem_never_raises_sigbus`]: opens the log
/// for writing and for reading, many times. Runs only as that child.
#[test]
fn child_opens_a_log_many_times() {
    let Some(dir) = std::env::var_os(CHILD_DIR).map(PathBuf::from) else {
        return;
    };
    for _ in 0..40 {
        match LogWriter::open(&dir, log_options(Durability::Sync, SEGMENT)) {
            Ok((writer, _)) => writer.close().unwrap(),
            Err(e) => assert!(matches!(e.code(), "IO" | "CORRUPT"), "{e}"),
        }
        match LogReader::open(&dir) {
            Ok(reader) => {
                for seq in 0..reader.seq_next() {
                    reader.event_at(seq).unwrap();
                }
            }
            Err(e) => assert!(matches!(e.code(), "IO" | "CORRUPT"), "{e}"),
        }
    }
    println!("child ran");
}

/// RD-8, SEG-8: a segment another process truncates under a reader that holds it mapped
/// is reported at the reader's next refresh as `CORRUPT` naming the file, before any byte
/// of it is read again: no SIGBUS, no shorter log taken for the end of the data.
#[test]
fn a_segment_truncated_by_another_process_is_reported_not_a_sigbus() {
    let scratch = scratch("sigbus", "truncated");
    let dir = scratch.join("log");
    write_log(&dir, 20);
    run_child("child_refreshes_a_truncated_segment", &dir);
}

/// The child of [`a_segment_truncated_by_another_process_is_reported_not_a_sigbus`]:
/// runs only as that child.
#[test]
fn child_refreshes_a_truncated_segment() {
    let Some(dir) = std::env::var_os(CHILD_DIR).map(PathBuf::from) else {
        return;
    };
    let path = dir.join(segment_name(0));
    let mut reader = LogReader::open(&dir).unwrap();
    let events = reader.seq_next();
    assert!(events >= 20);
    // Another process appends and then cuts the file to half (still past the records),
    // then to inside the records.
    let (writer, _) = LogWriter::open(&dir, log_options(Durability::Sync, SEGMENT)).unwrap();
    writer.append(&[padded_event(events, 300)]).unwrap();
    writer.close().unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let file_len = file.metadata().unwrap().len();
    assert!(file_len < SEGMENT, "the file grows in steps (SEG-6)");
    for len in [file_len / 2, 200] {
        file.set_len(len).unwrap();
        let error = reader.refresh().unwrap_err();
        assert_eq!(error.code(), "CORRUPT", "{error}");
        assert!(
            error.to_string().contains(&*path.to_string_lossy()),
            "{error}"
        );
        assert!(error.to_string().contains("truncated"), "{error}");
        assert_eq!(
            reader.seq_next(),
            events,
            "nothing was taken from the cut file"
        );
    }
    // A fresh reader and a writer's recovery map the file as it is now and read nothing
    // past its end: an error or a recovery, never a signal.
    for _ in 0..3 {
        if let Ok(reader) = LogReader::open(&dir) {
            for seq in 0..reader.seq_next() {
                let _ = reader.event(seq);
            }
        }
        if let Ok((writer, _)) = LogWriter::open(&dir, log_options(Durability::Sync, SEGMENT)) {
            let _ = writer.close();
        }
    }
    println!("child ran");
}

/// RD-8 for salvage and compaction (SLV-1, CMP-2): a segment's header is read with `pread`,
/// never through its map. A writer killed while it created a segment leaves a sparse file
/// whose header is a hole (SEG-6, RCV-7); on a full filesystem touching that hole through
/// a map raises SIGBUS. Salvage examines every segment, the last too, and compaction every
/// sealed one: each must end in a report or an `IO`/`CORRUPT` error, never a signal.
#[test]
fn salvage_and_compaction_of_a_segment_whose_header_is_a_hole_never_raise_sigbus() {
    let scratch = scratch("sigbus", "examine");
    let mount_dir = scratch.join("mnt");
    std::fs::create_dir(&mount_dir).unwrap();
    let Some(mount) = Mount::tmpfs(&mount_dir, "4m") else {
        return;
    };
    let dir = mount_dir.join("log");
    let (writer, _) = LogWriter::open(&dir, log_options(Durability::Sync, 4096)).unwrap();
    for seq in 0..40 {
        writer.append(&[padded_event(seq, 300)]).unwrap();
    }
    let events = writer.seq_next();
    writer.close().unwrap();
    let names = |dir: &Path| {
        let mut firsts: Vec<u64> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                name.strip_suffix(".seg")?.parse().ok()
            })
            .collect();
        firsts.sort_unstable();
        firsts
    };
    assert!(names(&dir).len() >= 3, "several segments");
    // Salvage's log: the next segment's creation cut short, its header never written.
    let unborn = dir.join(segment_name(events));
    std::fs::File::create(&unborn)
        .unwrap()
        .set_len(64 << 10)
        .unwrap();
    // Compaction's log: a copy whose second segment's header is a hole (damage).
    let damaged = mount_dir.join("damaged");
    std::fs::create_dir(&damaged).unwrap();
    for first in names(&dir) {
        let name = segment_name(first);
        if first == events {
            continue;
        }
        std::fs::copy(dir.join(&name), damaged.join(&name)).unwrap();
    }
    let second = damaged.join(segment_name(names(&damaged)[1]));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&second)
        .unwrap();
    let len = file.metadata().unwrap().len();
    file.set_len(0).unwrap();
    file.set_len(len).unwrap();
    drop(file);
    let _filler = fill(&mount_dir);
    run_child("child_salvages_and_compacts", &mount_dir);
    drop(mount);
}

/// The child of
/// [`salvage_and_compaction_of_a_segment_whose_header_is_a_hole_never_raise_sigbus`]: runs
/// only as that child.
#[test]
fn child_salvages_and_compacts() {
    use surfacelog::internals::storage::FsStorage;
    let Some(dir) = std::env::var_os(CHILD_DIR).map(PathBuf::from) else {
        return;
    };
    match surfacelog::internals::log::salvage(&FsStorage, &dir.join("log"), |_| Ok(())) {
        Ok(report) => println!("salvaged: {report:?}"),
        Err(e) => assert!(matches!(e.code(), "IO" | "CORRUPT"), "{e}"),
    }
    let error = surfacelog::internals::log::compact(&FsStorage, &dir.join("damaged"))
        .expect_err("a segment whose header does not check out is refused (CMP-2)");
    assert!(matches!(error.code(), "IO" | "CORRUPT"), "{error}");
    println!("child ran");
}
