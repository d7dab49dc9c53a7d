//! Damaged stores, each as a sweep found it mishandled (every file of a store with
//! forks, compressed segments, a pack, trash and an import, flipped, cut, zeroed, removed
//! or replaced by a directory or a link, under every CLI command and the library's reads):
//! `verify` reports a `header.json` or `checkpoint` that is not a regular file as its
//! session's problem and goes on (STORE-16); read-only commands change no byte, not even a
//! leftover build under `tmp/` (STORE-17); damage in the record under a fork's limit is
//! named at the segment and its offset (RCV-13), not at the intact limit file.

use std::path::Path;
use std::process::Command;

use surfacelog::{NoSurface, Store, StoreOptions, SurfaceIntent, kinds};

/// A store at `dir` with two closed sessions, `s` and `t`, each with a checkpoint.
fn store_with_two_sessions(dir: &Path) {
    let store = Store::open_or_create(dir, StoreOptions::new()).unwrap();
    for id in ["s", "t"] {
        let mut session = store.create(id, None, None).unwrap();
        session
            .append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)
            .unwrap();
        session
            .append::<kinds::UserMessage>(
                r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#,
                SurfaceIntent::append(),
            )
            .unwrap();
        session
            .append::<kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, NoSurface)
            .unwrap();
        session.close().unwrap();
    }
}

fn scratch(name: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix(name).tempdir().unwrap();
    store_with_two_sessions(dir.path());
    dir
}

/// STORE-16: verify reports each problem, naming its file, and goes on with the rest;
/// it is not refused as a whole because one session's file is not a regular file.
fn assert_verify_reports(dir: &Path, damaged: &str) {
    let store = Store::open(dir, StoreOptions::new()).unwrap();
    let report = match store.verify(None) {
        Ok(report) => report,
        Err(e) => panic!(
            "verify failed as a whole instead of reporting {damaged}: {} {e}",
            e.code()
        ),
    };
    assert!(!report.ok(), "{damaged} not reported");
    let s = report
        .sessions
        .iter()
        .find(|r| r.id == "s")
        .expect("s reported");
    assert!(
        s.problems.iter().any(|p| p.file.ends_with(damaged)),
        "no problem names {damaged}: {:?}",
        s.problems
    );
    assert!(report.sessions.iter().any(|r| r.id == "t" && r.ok()));
}

#[test]
fn verify_reports_a_symlinked_header_instead_of_failing() {
    let dir = scratch("rev-hdr-link");
    let header = dir.path().join("sessions/s/header.json");
    let aside = dir.path().join("aside.json");
    std::fs::rename(&header, &aside).unwrap();
    std::os::unix::fs::symlink(&aside, &header).unwrap();
    assert_verify_reports(dir.path(), "header.json");
}

#[test]
fn verify_reports_a_header_replaced_by_a_directory_instead_of_failing() {
    let dir = scratch("rev-hdr-dir");
    let header = dir.path().join("sessions/s/header.json");
    std::fs::remove_file(&header).unwrap();
    std::fs::create_dir(&header).unwrap();
    assert_verify_reports(dir.path(), "header.json");
}

#[test]
fn verify_reports_a_symlinked_checkpoint_instead_of_failing() {
    let dir = scratch("rev-ckp-link");
    let checkpoint = dir.path().join("sessions/s/checkpoint");
    let aside = dir.path().join("aside.ckp");
    std::fs::rename(&checkpoint, &aside).unwrap();
    std::os::unix::fs::symlink(&aside, &checkpoint).unwrap();
    assert_verify_reports(dir.path(), "checkpoint");
}

#[test]
fn verify_reports_a_checkpoint_replaced_by_a_directory_instead_of_failing() {
    let dir = scratch("rev-ckp-dir");
    let checkpoint = dir.path().join("sessions/s/checkpoint");
    std::fs::remove_file(&checkpoint).unwrap();
    std::fs::create_dir(&checkpoint).unwrap();
    assert_verify_reports(dir.path(), "checkpoint");
}

/// A read-only command never writes: a leftover build directory under `tmp/` (an
/// interrupted create, STORE-17) is still there, byte for byte, after `ls`, `show`,
/// `tail`, `export`, `stats` and `verify` (STORE-16: verify "changes no file").
#[test]
fn read_only_commands_leave_a_leftover_build_directory_in_place() {
    let dir = scratch("rev-tmp");
    let leftover = dir.path().join("tmp/s2-4242-0");
    std::fs::create_dir_all(leftover.join("log")).unwrap();
    std::fs::write(
        leftover.join("header.json"),
        "{\"version\":0,\"id\":\"s2\",\"createdAt\":1}\n",
    )
    .unwrap();
    for args in [
        &["ls"][..],
        &["show", "s"],
        &["show", "s", "--events"],
        &["tail", "s", "-n", "2"],
        &["export", "s", "--format", "dsh-jsonl", "--out", "-"],
        &["stats"],
        &["verify"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_surfacelog"))
            .env_remove("SURFACELOG_STORE")
            .arg("--store")
            .arg(dir.path())
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            leftover.join("header.json").exists(),
            "read-only `{}` removed tmp/s2-4242-0",
            args.join(" ")
        );
    }
}

/// RCV-13: "a limited segment's record fails (LIM-3): `CORRUPT` at the segment and `p`".
/// A bit flipped in the last record under a fork's limit (the limit file intact) is named
/// by readers at the segment, as `verify` names it (it was named at the limit file).
#[test]
fn damage_under_a_forks_limit_names_the_segment_not_the_limit() {
    let dir = scratch("rev-lim");
    let store = Store::open(dir.path(), StoreOptions::new()).unwrap();
    store
        .fork("s", surfacelog::Boundary::Last, "f")
        .unwrap()
        .close()
        .unwrap();
    let log = dir.path().join("sessions/f/log");
    let lim = std::fs::read(log.join("00000000000000000000.lim")).unwrap();
    let end = u64::from(u32::from_le_bytes(lim[52..56].try_into().unwrap()));
    // the lim's `end` (the last record under it ends there): flip a byte just before it
    let seg = log.join("00000000000000000000.seg");
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = usize::try_from(end).unwrap() - 10;
    bytes[at] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();
    let report = store.verify(Some(&["f"])).unwrap();
    assert!(
        report.sessions[0]
            .problems
            .iter()
            .any(|p| p.file.ends_with("00000000000000000000.seg"))
    );
    let error = match store.inspect("f") {
        Ok(session) => (0..session.seq_next())
            .find_map(|seq| session.event(seq).err())
            .expect("the damaged record is refused"),
        Err(error) => error,
    };
    let text = error.to_string();
    assert!(
        text.contains("00000000000000000000.seg"),
        "damage in the segment is named at another file: {text}"
    );
}

/// A `header.json` of another version is refused `FORMAT_VERSION` (not damage, STORE-4),
/// naming the file and the place of its `version` (contract §11: context with every
/// refusal; it named nothing).
#[test]
fn a_header_of_another_version_names_its_file() {
    let dir = scratch("rev-version");
    let path = dir.path().join("sessions/s/header.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let newer = text.replacen("\"version\":0", "\"version\":1", 1);
    assert_ne!(newer, text);
    std::fs::write(&path, &newer).unwrap();
    let store = Store::open(dir.path(), StoreOptions::new()).unwrap();
    for error in [
        store.open_session("s").map(|_| ()).unwrap_err(),
        store.inspect("s").map(|_| ()).unwrap_err(),
    ] {
        assert_eq!(error.code(), "FORMAT_VERSION");
        let shown = error.to_string();
        let at = newer.find("\"version\"").unwrap();
        assert!(
            shown.contains(&format!("{} offset={at}", path.display())),
            "{shown}"
        );
    }
}

/// As above, for a header whose text has a `"version"` before its own, in a member of
/// the host's: the header's own is named (the first of the text was, before the fix).
#[test]
fn a_header_of_another_version_names_its_own_version_not_a_nested_one() {
    let dir = tempfile::Builder::new()
        .prefix("rev-version-nested")
        .tempdir()
        .unwrap();
    let store = Store::open_or_create(dir.path(), StoreOptions::new()).unwrap();
    let text = r#"{"tool":{"name":"x","version":"2.1"},"version":0,"id":"s","createdAt":1}"#;
    store
        .create("s", Some(text), None)
        .unwrap()
        .close()
        .unwrap();
    drop(store);
    let path = dir.path().join("sessions/s/header.json");
    let stored = std::fs::read_to_string(&path).unwrap();
    let newer = stored.replacen("\"version\":0", "\"version\":1", 1);
    assert_ne!(newer, stored);
    std::fs::write(&path, &newer).unwrap();
    let own = newer.find("\"version\":1").unwrap();
    let store = Store::open(dir.path(), StoreOptions::new()).unwrap();
    let error = store.open_session("s").map(|_| ()).unwrap_err();
    assert_eq!(error.code(), "FORMAT_VERSION");
    let shown = error.to_string();
    assert!(
        shown.contains(&format!("{} offset={own}", path.display())),
        "the header's own version is at offset {own}: {shown}"
    );
}

/// RCV-7, RD-6: segment 0 cut to nothing, beside the index its writer left at close (an
/// index lists only durable records, IDX-5) and with the checkpoint gone: readers report
/// `CORRUPT` at the segment, as a writer's open does, never an empty session (they took
/// it for a log being created: segment 0 has no segment before it to give the log's id,
/// so its index was not consulted).
#[test]
fn segment_0_cut_to_nothing_under_its_index_is_corrupt_for_readers() {
    let dir = scratch("rev-seg0");
    let session = dir.path().join("sessions/s");
    std::fs::remove_file(session.join("checkpoint")).unwrap();
    let _ = std::fs::remove_file(session.join("messages"));
    let segment = session.join("log/00000000000000000000.seg");
    assert!(session.join("log/00000000000000000000.idx").exists());
    std::fs::File::options()
        .write(true)
        .open(&segment)
        .unwrap()
        .set_len(0)
        .unwrap();
    let store = Store::open(dir.path(), StoreOptions::new()).unwrap();
    let refusals = [
        ("inspect", store.inspect("s").map(|_| ()).unwrap_err()),
        ("follow", store.follow("s").map(|_| ()).unwrap_err()),
        ("open", store.open_session("s").map(|_| ()).unwrap_err()),
    ];
    for (what, error) in refusals {
        assert_eq!(error.code(), "CORRUPT", "{what}: {error}");
        assert!(
            error.to_string().contains("00000000000000000000.seg"),
            "{what}: {error}"
        );
    }
}

/// A closed session `s` of at least three 1 KiB segments (in either record format), with
/// its checkpoint; the names of its segment files, sorted.
fn store_with_segments(prefix: &str) -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    let store = Store::open_or_create(dir.path(), StoreOptions::new().segment_bytes(1024)).unwrap();
    let mut s = store.create("s", None, None).unwrap();
    for t in 0..120 {
        s.append::<kinds::TurnStart>(&format!(r#"{{"turn":{t}}}"#), NoSurface)
            .unwrap();
    }
    s.close().unwrap();
    drop(store);
    let log = dir.path().join("sessions/s/log");
    let mut segs: Vec<String> = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| Path::new(n).extension().is_some_and(|e| e == "seg"))
        .collect();
    segs.sort();
    assert!(segs.len() >= 3, "{segs:?}");
    (dir, segs)
}

/// LOG-2, RCV-14: a sealed segment removed from the middle of the chain is named with the
/// seqs it held, not an intact later segment with SEG-3.
#[test]
fn a_missing_recorded_segment_is_named_by_readers() {
    let (dir, segs) = store_with_segments("sweep2-missing");
    let log = dir.path().join("sessions/s/log");
    // A sealed segment in the middle of the chain the checkpoint records (in place: the
    // chain is this directory's).
    let gone = segs[1].clone();
    let first_seq: u64 = gone.trim_end_matches(".seg").parse().unwrap();
    std::fs::remove_file(log.join(&gone)).unwrap();

    let store = Store::open(dir.path(), StoreOptions::new()).unwrap();
    let error = store
        .inspect("s")
        .map(|_| ())
        .expect_err("inspect must refuse a log missing a segment");
    let text = error.to_string();
    assert_eq!(error.code(), "CORRUPT", "{text}");
    assert!(
        text.contains(&gone) || text.contains(&format!("seqs {first_seq}")),
        "the error names neither the missing segment {gone} nor its seqs: {text}"
    );
}

/// As above, for segment 0.
#[test]
fn a_missing_first_segment_is_named_by_readers() {
    let (dir, segs) = store_with_segments("sweep2-missing0");
    let log = dir.path().join("sessions/s/log");
    let gone = segs[0].clone();
    std::fs::remove_file(log.join(&gone)).unwrap();

    let store = Store::open(dir.path(), StoreOptions::new()).unwrap();
    let error = store
        .inspect("s")
        .map(|_| ())
        .expect_err("inspect must refuse a log missing segment 0");
    let text = error.to_string();
    assert_eq!(error.code(), "CORRUPT", "{text}");
    assert!(
        text.contains(&gone) || text.contains("seqs 0"),
        "the error names neither the missing segment {gone} nor its seqs: {text}"
    );
}

/// LOG-2, RCV-13: the last segment removed, with the checkpoint gone, beside the index its
/// writer left at close (an index lists only durable records, IDX-5). Readers took the
/// segment before it for the end of the log and returned the session without the removed
/// segment's events (`inspect`, `follow`, the `log` reader), while `verify` reported the
/// missing segment; a writer's open likewise took the log to end there, so the seqs of the
/// lost events would have been given to new ones.
#[test]
fn a_missing_last_segment_beside_its_index_is_corrupt_for_readers() {
    let (dir, segs) = store_with_segments("missing-last");
    let session = dir.path().join("sessions/s");
    let log = session.join("log");
    let gone = segs.last().unwrap().clone();
    let first_seq: u64 = gone.trim_end_matches(".seg").parse().unwrap();
    assert!(log.join(gone.replace(".seg", ".idx")).exists());
    std::fs::remove_file(log.join(&gone)).unwrap();
    std::fs::remove_file(session.join("checkpoint")).unwrap();
    let _ = std::fs::remove_file(session.join("messages"));

    let store = Store::open(dir.path(), StoreOptions::new()).unwrap();
    let refusals = [
        ("inspect", store.inspect("s").map(|_| ()).unwrap_err()),
        ("follow", store.follow("s").map(|_| ()).unwrap_err()),
        (
            "log reader",
            surfacelog::internals::log::LogReader::open(&log)
                .map(|_| ())
                .unwrap_err(),
        ),
        ("open", store.open_session("s").map(|_| ()).unwrap_err()),
    ];
    for (what, error) in refusals {
        let text = error.to_string();
        assert_eq!(error.code(), "CORRUPT", "{what}: {text}");
        assert!(
            text.contains(&gone) && text.contains(&format!("seqs {first_seq}")),
            "{what}: the error names neither the missing segment {gone} nor its seqs: {text}"
        );
    }
    drop(store);

    // Salvage takes the log's new end for what it is: the index of the segment that is gone
    // is removed, the lost seqs reported, and the log opens again.
    let store = Store::open(dir.path(), StoreOptions::new()).unwrap();
    let report = store.salvage("s").unwrap();
    assert_eq!(report.log.seq_next, first_seq);
    assert_eq!(report.log.first_lost_seq, Some(first_seq));
    assert!(!log.join(gone.replace(".seg", ".idx")).exists());
    assert_eq!(store.inspect("s").unwrap().seq_next(), first_seq);
    assert!(store.verify(Some(&["s"])).unwrap().ok());
}

/// The names of the segment files in log directory `log`, sorted (by first seq).
fn segment_names(log: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(log)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| Path::new(n).extension().is_some_and(|e| e == "seg"))
        .collect();
    names.sort();
    names
}

/// LOG-2, RCV-11, RCV-13: the segments after the last one an older checkpoint records
/// removed, their indexes left (a writer that rolled past them and stopped before its next
/// checkpoint; the index of each lists its durable records, IDX-5). Readers refused the log,
/// but a writer's open took the recorded chain (RCV-11), found no file under the next
/// segment's name and opened the log as ending there: the lost events' seqs would have been
/// given to new ones.
#[test]
fn a_missing_last_segment_beside_its_index_is_corrupt_for_an_open_from_an_older_checkpoint() {
    let dir = tempfile::Builder::new()
        .prefix("missing-last-ckp")
        .tempdir()
        .unwrap();
    let options = || StoreOptions::new().segment_bytes(4096);
    let log = dir.path().join("sessions/s/log");
    let segs = || segment_names(&log);
    let store = Store::open_or_create(dir.path(), options()).unwrap();
    let mut s = store.create("s", None, None).unwrap();
    let mut t = 0;
    while segs().len() < 2 {
        s.append::<kinds::TurnStart>(&format!(r#"{{"turn":{t}}}"#), NoSurface)
            .unwrap();
        t += 1;
    }
    s.close().unwrap();
    let recorded = segs();
    let checkpoint = dir.path().join("sessions/s/checkpoint");
    let older = std::fs::read(&checkpoint).unwrap();
    let (mut s, _) = store.open_session("s").unwrap();
    while segs().len() < recorded.len() + 2 {
        s.append::<kinds::TurnStart>(&format!(r#"{{"turn":{t}}}"#), NoSurface)
            .unwrap();
        t += 1;
    }
    s.close().unwrap();
    drop(store);
    // The checkpoint as the writer left it before its last session.
    std::fs::write(&checkpoint, older).unwrap();
    let later: Vec<String> = segs().split_off(recorded.len());
    let gone = later.first().unwrap().clone();
    let first_seq: u64 = gone.trim_end_matches(".seg").parse().unwrap();
    assert!(log.join(gone.replace(".seg", ".idx")).exists());
    for seg in &later {
        std::fs::remove_file(log.join(seg)).unwrap();
    }

    let store = Store::open(dir.path(), options()).unwrap();
    let inspected = store.inspect("s").map(|_| ()).unwrap_err();
    assert_eq!(inspected.code(), "CORRUPT", "{inspected}");
    match store.open_session("s") {
        Ok((s, _)) => panic!(
            "a writer opened the log as ending at seq {} (the index of {gone} lists seqs from {first_seq})",
            s.seq_next()
        ),
        Err(error) => {
            let text = error.to_string();
            assert_eq!(error.code(), "CORRUPT", "{text}");
            assert!(
                text.contains(&gone) && text.contains(&format!("seqs {first_seq}")),
                "the error names neither the missing segment {gone} nor its seqs: {text}"
            );
        }
    }
}

/// LOG-2, RCV-13: the only segment of a log removed, with the checkpoint gone, beside the
/// index its writer left at close. Readers refused the log (no first segment), but a
/// writer's open took a directory without segments for a new log: it created an empty
/// segment 0 and opened the session with none of its events, their seqs given to new ones.
#[test]
fn a_missing_only_segment_beside_its_index_is_corrupt_for_an_open() {
    let dir = tempfile::Builder::new()
        .prefix("missing-only")
        .tempdir()
        .unwrap();
    store_with_two_sessions(dir.path());
    let session = dir.path().join("sessions/s");
    let log = session.join("log");
    let gone = "00000000000000000000.seg";
    assert!(log.join("00000000000000000000.idx").exists());
    std::fs::remove_file(log.join(gone)).unwrap();
    std::fs::remove_file(session.join("checkpoint")).unwrap();
    let _ = std::fs::remove_file(session.join("messages"));

    let store = Store::open(dir.path(), StoreOptions::new()).unwrap();
    assert_eq!(
        store.inspect("s").map(|_| ()).unwrap_err().code(),
        "CORRUPT"
    );
    match store.open_session("s") {
        Ok((s, _)) => panic!(
            "a writer opened the log as a new one of {} events",
            s.seq_next()
        ),
        Err(error) => {
            let text = error.to_string();
            assert_eq!(error.code(), "CORRUPT", "{text}");
            assert!(
                text.contains(gone) && text.contains("seqs 0.."),
                "the error names neither the missing segment {gone} nor its seqs: {text}"
            );
        }
    }
    assert!(
        !log.join(gone).exists(),
        "the refused open created a segment"
    );
    drop(store);

    // Salvage takes the log for what is left of it: nothing.
    let store = Store::open(dir.path(), StoreOptions::new()).unwrap();
    let report = store.salvage("s").unwrap();
    assert_eq!(report.log.seq_next, 0);
    assert_eq!(report.log.first_lost_seq, Some(0));
    assert!(!log.join("00000000000000000000.idx").exists());
    assert_eq!(store.inspect("s").unwrap().seq_next(), 0);
}

/// LOG-2, RCV-13, RD-6: a reader that had read the log to the end of its last segment, then
/// refreshed after the writer rolled past it, closed, and the segment it rolled to was
/// removed beside its index (which lists its durable records). A fresh reader refused the
/// log, but the refreshing one found no segment under the next seq's name nor after it and
/// took the log to end there: a follower waited at the lost seqs as at the end of the log.
#[test]
fn a_missing_last_segment_beside_its_index_is_corrupt_for_a_refreshing_reader() {
    let dir = tempfile::Builder::new()
        .prefix("missing-last-refresh")
        .tempdir()
        .unwrap();
    let options = || StoreOptions::new().segment_bytes(4096);
    let log = dir.path().join("sessions/s/log");
    let segs = || segment_names(&log);
    let store = Store::open_or_create(dir.path(), options()).unwrap();
    let mut s = store.create("s", None, None).unwrap();
    s.append::<kinds::TurnStart>(r#"{"turn":0}"#, NoSurface)
        .unwrap();
    let mut reader = surfacelog::internals::log::LogReader::open(&log).unwrap();
    let before = reader.refresh().unwrap();
    let mut t = 1;
    while segs().len() < 2 {
        s.append::<kinds::TurnStart>(&format!(r#"{{"turn":{t}}}"#), NoSurface)
            .unwrap();
        t += 1;
    }
    s.close().unwrap();
    let gone = segs().pop().unwrap();
    let first_seq: u64 = gone.trim_end_matches(".seg").parse().unwrap();
    assert!(log.join(gone.replace(".seg", ".idx")).exists());
    std::fs::remove_file(log.join(&gone)).unwrap();

    assert!(
        surfacelog::internals::log::LogReader::open(&log).is_err(),
        "a fresh reader refuses the log"
    );
    match reader.refresh() {
        Ok(seq_next) => panic!(
            "the reader (at seq {before}) took the log to end at seq {seq_next}; the index of \
             {gone} lists seqs from {first_seq}"
        ),
        Err(error) => {
            let text = error.to_string();
            assert_eq!(error.code(), "CORRUPT", "{text}");
            assert!(
                text.contains(&gone),
                "the error does not name {gone}: {text}"
            );
        }
    }
}
