//! The verbatim store against damage (VBT-5, VBT-10; DSH persistence §1.17): a writer
//! never creates a log under a stored session whose log lost its segments or its
//! directory, and a listing lists such a session as unreadable and goes on.

mod common;

use common::tree_snapshot as snapshot;
use surfacelog::VerbatimStore;

/// A 200-byte event of seq `seq`.
fn event(seq: u64) -> String {
    format!(
        r#"{{"type":"user/message","seq":{seq},"time":1,"data":{{"content":"{}"}}}}"#,
        "x".repeat(200)
    )
}

fn events(first: u64, n: u64) -> Vec<String> {
    (first..first + n).map(event).collect()
}

fn refs(texts: &[String]) -> Vec<&str> {
    texts.iter().map(String::as_str).collect()
}

/// VBT-5, DSH persistence §1.17: a session whose log lost its only segment, or its whole
/// directory, is `CORRUPT` for a writer too, which never creates a new empty log under it
/// (it did: the refused append left that log, and the session then read as empty).
#[test]
fn a_writer_never_creates_a_log_under_a_stored_session() {
    for remove_dir in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let store = VerbatimStore::new(dir.path());
        store
            .create("s", r#"{"id":"s"}"#, &refs(&events(0, 2)))
            .unwrap();
        store.close().unwrap();
        let log = store.locate("s").join("log");
        if remove_dir {
            std::fs::remove_dir_all(&log).unwrap();
        } else {
            std::fs::remove_file(log.join("00000000000000000000.seg")).unwrap();
        }
        assert!(store.load("s", 0).is_err(), "the damage is seen by a read");
        let before = snapshot(dir.path());
        let error = store.append("s", 2, &refs(&events(2, 1))).unwrap_err();
        match store.load("s", 0) {
            Ok(read) => panic!(
                "remove_dir {remove_dir}: after a refused append ({error}), the damaged session reads {read:?}"
            ),
            Err(error) => assert_eq!(error.code(), "CORRUPT", "{error}"),
        }
        assert_eq!(
            snapshot(dir.path()),
            before,
            "remove_dir {remove_dir}: a refused append left a trace ({error})"
        );
        assert_eq!(error.code(), "CORRUPT", "{error}");
    }
}

/// VBT-10: a session whose `log/` directory is gone (damage: a session is published with
/// its log, VBT-5) is listed as unreadable beside the others (it refused the whole listing
/// with `IO`).
#[test]
fn a_listing_survives_a_session_without_its_log_directory() {
    let dir = tempfile::tempdir().unwrap();
    let store = VerbatimStore::new(dir.path());
    for id in ["a", "b"] {
        store
            .create(id, &format!(r#"{{"id":"{id}"}}"#), &refs(&events(0, 1)))
            .unwrap();
    }
    std::fs::remove_dir_all(store.locate("b").join("log")).unwrap();
    let listed = store
        .list()
        .unwrap_or_else(|e| panic!("the listing is refused: [{}] {e}", e.code()));
    assert_eq!(listed.len(), 2);
    assert!(
        listed
            .iter()
            .any(|(h, r)| h.contains("\"b\"") && r.starts_with("surfacelog:unreadable:")),
        "{listed:?}"
    );
    let error = store.load("b", 0).unwrap_err();
    assert_eq!(error.code(), "CORRUPT", "{error}");
}
