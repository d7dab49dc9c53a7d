//! A log missing a segment (LOG-2, RCV-14): what readers report, in the cases the message
//! depends on: gaps of one or several segments, right before the last one, after
//! compressed segments, after a damaged header, after a fork's limited segment, and after
//! a segment whose index lists only a prefix of its records.

use std::path::{Path, PathBuf};

use surfacelog::{Boundary, NoSurface, Store, StoreOptions, kinds};

/// The segments' capacity: small enough that a few hundred small events span several
/// segments in either record format (compact records, the default, take a third of the
/// bytes of version 1 records).
const SEGMENT_BYTES: u64 = 1024;

fn segs(log: &Path) -> Vec<String> {
    let mut segs: Vec<String> = std::fs::read_dir(log)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| Path::new(n).extension().is_some_and(|e| e == "seg"))
        .collect();
    segs.sort();
    segs
}

fn first(name: &str) -> u64 {
    name.trim_end_matches(".seg").parse().unwrap()
}

fn store(prefix: &str, turns: u32) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    let store = Store::open_or_create(dir.path(), StoreOptions::new().segment_bytes(SEGMENT_BYTES))
        .unwrap();
    let mut s = store.create("s", None, None).unwrap();
    for t in 0..turns {
        s.append::<kinds::TurnStart>(&format!(r#"{{"turn":{t}}}"#), NoSurface)
            .unwrap();
    }
    s.close().unwrap();
    let log = dir.path().join("sessions/s/log");
    (dir, log)
}

fn inspect(dir: &Path, id: &str) -> String {
    let store = Store::open(dir, StoreOptions::new()).unwrap();
    let error = store.inspect(id).map(|_| ()).expect_err("must refuse");
    assert_eq!(error.code(), "CORRUPT", "{error}");
    error.to_string()
}

#[test]
fn gap_of_several_segments() {
    let (dir, log) = store("probe-several", 200);
    let s = segs(&log);
    assert!(s.len() >= 5, "{s:?}");
    std::fs::remove_file(log.join(&s[2])).unwrap();
    std::fs::remove_file(log.join(&s[3])).unwrap();
    let text = inspect(dir.path(), "s");
    eprintln!("several: {text}");
    assert!(
        text.contains(&format!("seqs {}..{}", first(&s[2]), first(&s[4]))),
        "{text}"
    );
}

#[test]
fn gap_right_before_the_last_segment() {
    let (dir, log) = store("probe-last", 200);
    let s = segs(&log);
    let n = s.len();
    std::fs::remove_file(log.join(&s[n - 2])).unwrap();
    let text = inspect(dir.path(), "s");
    eprintln!("before last: {text}");
    assert!(
        text.contains(&format!("seqs {}..{}", first(&s[n - 2]), first(&s[n - 1]))),
        "{text}"
    );
}

#[cfg(feature = "compress")]
#[test]
fn gap_after_compressed_segments() {
    let (dir, log) = store("probe-cz", 200);
    {
        let store = Store::open(dir.path(), StoreOptions::new()).unwrap();
        let report = store
            .compact_log_with("s", surfacelog::CompactOptions::new().compress(true))
            .unwrap();
        assert!(!report.rewritten.is_empty());
    }
    let s = segs(&log);
    eprintln!(
        "files: {:?}",
        std::fs::read_dir(&log)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect::<Vec<_>>()
    );
    std::fs::remove_file(log.join(&s[2])).unwrap();
    let text = inspect(dir.path(), "s");
    eprintln!("compressed: {text}");
    // Compressed segments keep no index: the first segment after the gap is named (LOG-2).
    assert!(
        text.contains(&format!("seqs {}..{}", first(&s[2]), first(&s[3])))
            || (text.contains(&s[3]) && text.contains("before this one is missing")),
        "{text}"
    );
}

#[test]
fn gap_after_a_segment_with_a_damaged_header() {
    let (dir, log) = store("probe-dmg", 200);
    let s = segs(&log);
    std::fs::remove_file(log.join(&s[3])).unwrap();
    // Segment 1's header damaged (its magic).
    let f = std::fs::File::options()
        .write(true)
        .open(log.join(&s[1]))
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[0xFF; 4], 0).unwrap();
    let text = inspect(dir.path(), "s");
    eprintln!("damaged header: {text}");
    assert!(
        !text.contains("a segment before this one is missing") || !text.contains(&s[1]),
        "names the present, damaged segment 1 as following a gap: {text}"
    );
}

#[test]
fn gap_after_a_forks_limited_segment() {
    let dir = tempfile::Builder::new()
        .prefix("probe-fork")
        .tempdir()
        .unwrap();
    let log = dir.path().join("sessions/s/log");
    {
        let store =
            Store::open_or_create(dir.path(), StoreOptions::new().segment_bytes(SEGMENT_BYTES))
                .unwrap();
        let mut s = store.create("s", None, None).unwrap();
        for t in 0..40 {
            s.append::<kinds::TurnStart>(&format!(r#"{{"turn":{t}}}"#), NoSurface)
                .unwrap();
            let end = format!(r#"{{"turn":{t},"reason":{{"kind":"completed"}}}}"#);
            s.append::<kinds::TurnEnd>(&end, NoSurface).unwrap();
        }
        s.close().unwrap();
    }
    let s = segs(&log);
    assert!(s.len() >= 3, "{s:?}");
    // A turn's end inside segment 1.
    let boundary = (first(&s[1]) + 3) | 1;
    assert!(boundary < first(&s[2]));
    {
        let store =
            Store::open(dir.path(), StoreOptions::new().segment_bytes(SEGMENT_BYTES)).unwrap();
        let mut child = store.fork("s", Boundary::Seq(boundary), "c").unwrap();
        for t in 100..200 {
            child
                .append::<kinds::TurnStart>(&format!(r#"{{"turn":{t}}}"#), NoSurface)
                .unwrap();
            let end = format!(r#"{{"turn":{t},"reason":{{"kind":"completed"}}}}"#);
            child.append::<kinds::TurnEnd>(&end, NoSurface).unwrap();
        }
        child.close().unwrap();
    }
    let clog = dir.path().join("sessions/c/log");
    let cs = segs(&clog);
    eprintln!(
        "child files: {:?}",
        std::fs::read_dir(&clog)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect::<Vec<_>>()
    );
    assert!(cs.len() >= 4, "{cs:?}");
    // The segment right after the limited one.
    std::fs::remove_file(clog.join(&cs[2])).unwrap();
    let text = inspect(dir.path(), "c");
    eprintln!("fork: {text}");
    assert!(
        text.contains(&format!("seqs {}..{}", first(&cs[2]), first(&cs[3]))),
        "{text}"
    );
}

/// An index is a cache (IDX-2): a sealed segment's may list only a prefix of its records
/// (the one written at an earlier close, when the index write at seal failed). The gap
/// after it must not be said to start inside the segment, at seqs it holds.
#[test]
fn gap_after_a_segment_whose_index_lists_a_prefix() {
    let dir = tempfile::Builder::new()
        .prefix("probe-prefix")
        .tempdir()
        .unwrap();
    let log = dir.path().join("sessions/s/log");
    let options = || StoreOptions::new().segment_bytes(SEGMENT_BYTES);
    {
        let store = Store::open_or_create(dir.path(), options()).unwrap();
        let mut s = store.create("s", None, None).unwrap();
        for t in 0..3 {
            s.append::<kinds::TurnStart>(&format!(r#"{{"turn":{t}}}"#), NoSurface)
                .unwrap();
        }
        s.close().unwrap();
    }
    let stale = std::fs::read(log.join("00000000000000000000.idx")).unwrap();
    {
        let store = Store::open(dir.path(), options()).unwrap();
        let (mut s, _) = store.open_session("s").unwrap();
        for t in 3..200 {
            s.append::<kinds::TurnStart>(&format!(r#"{{"turn":{t}}}"#), NoSurface)
                .unwrap();
        }
        s.close().unwrap();
    }
    let s = segs(&log);
    assert!(s.len() >= 3, "{s:?}");
    // The index write at seal failed: the one of the earlier close stands (a prefix).
    std::fs::write(log.join("00000000000000000000.idx"), &stale).unwrap();
    // Sound as it is: the log reads whole.
    {
        let store = Store::open(dir.path(), options()).unwrap();
        store.inspect("s").map(|_| ()).unwrap();
    }
    std::fs::remove_file(log.join(&s[1])).unwrap();
    let text = inspect(dir.path(), "s");
    eprintln!("prefix index: {text}");
    assert!(
        !text.contains("seqs 3.."),
        "seqs segment 0 holds are said to be missing: {text}"
    );
}
