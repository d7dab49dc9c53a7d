//! Segment 0 judged with its index at the index's own `log_id` (RCV-7, RCV-13): the flows
//! that leave a new segment 0 beside an old index (salvage), and readers and writers after
//! them.

use std::path::Path;

use surfacelog::{NoSurface, Store, StoreOptions, kinds};

fn store(prefix: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    let store = Store::open_or_create(dir.path(), StoreOptions::new()).unwrap();
    let mut s = store.create("s", None, None).unwrap();
    for t in 0..5 {
        s.append::<kinds::TurnStart>(&format!(r#"{{"turn":{t}}}"#), NoSurface)
            .unwrap();
    }
    s.close().unwrap();
    dir
}

fn all_open(dir: &Path) {
    let store = Store::open(dir, StoreOptions::new()).unwrap();
    store.inspect("s").map(|_| ()).unwrap();
    store.follow("s").map(|_| ()).unwrap();
    let (s, _) = store.open_session("s").unwrap();
    s.close().unwrap();
    store.inspect("s").map(|_| ()).unwrap();
}

/// Salvage of a log whose segment 0's header is damaged: a new segment 0, every reader
/// and writer opens the log.
#[test]
fn salvage_of_a_damaged_segment_0() {
    let dir = store("probe-slv0");
    let log = dir.path().join("sessions/s/log");
    let f = std::fs::File::options()
        .write(true)
        .open(log.join("00000000000000000000.seg"))
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[0xFF; 4], 0).unwrap();
    {
        let store = Store::open(dir.path(), StoreOptions::new()).unwrap();
        store.salvage("s").unwrap();
    }
    all_open(dir.path());
}

/// A salvage cut short after it moved segment 0 aside, before it removed its index: the
/// next salvage makes segment 0 anew (SLV-3) beside the old index.
#[test]
fn salvage_with_no_segment_beside_an_old_index() {
    let dir = store("probe-slvnone");
    let log = dir.path().join("sessions/s/log");
    assert!(log.join("00000000000000000000.idx").exists());
    std::fs::rename(log.join("00000000000000000000.seg"), log.join("aside")).unwrap();
    let _ = std::fs::remove_file(dir.path().join("sessions/s/checkpoint"));
    {
        let store = Store::open(dir.path(), StoreOptions::new()).unwrap();
        store.salvage("s").unwrap();
    }
    eprintln!(
        "idx left: {}",
        log.join("00000000000000000000.idx").exists()
    );
    all_open(dir.path());
}

/// As above, while the new segment 0 is being created (its file made, its header not yet
/// written: SEG-6): a reader's view, the state a crash leaves there.
#[test]
fn segment_0_being_created_beside_an_old_index() {
    let dir = store("probe-creating");
    let log = dir.path().join("sessions/s/log");
    std::fs::rename(log.join("00000000000000000000.seg"), log.join("aside")).unwrap();
    let _ = std::fs::remove_file(dir.path().join("sessions/s/checkpoint"));
    let _ = std::fs::remove_file(dir.path().join("sessions/s/messages"));
    std::fs::File::create(log.join("00000000000000000000.seg")).unwrap();
    let store = Store::open(dir.path(), StoreOptions::new()).unwrap();
    let inspect = store.inspect("s").map(|_| ());
    let open = store.open_session("s").map(|_| ());
    eprintln!(
        "creating: inspect {:?} / open {:?}",
        inspect.as_ref().err().map(ToString::to_string),
        open.as_ref().err().map(ToString::to_string)
    );
    // And salvage takes the log back to one that opens.
    store.salvage("s").unwrap();
    drop(store);
    all_open(dir.path());
}
