//! A header larger than a read takes back (16 MiB, `store.md` STORE-4) is refused by
//! `create`, by a fork whose child's header would be, and by an import (`HEADER_INVALID`),
//! before anything is written; each published it, and every later read of it was `CORRUPT`
//!.
use surfacelog::{Boundary, Store, StoreOptions};

#[test]
fn create_refuses_a_header_larger_than_a_read_takes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_or_create(dir.path(), StoreOptions::new()).unwrap();
    let pad = "x".repeat(17 << 20);
    let header = format!(r#"{{"version":0,"id":"big","createdAt":1,"note":"{pad}"}}"#);
    match store.create("big", Some(&header), None) {
        Err(error) => {
            // A refusal is fine, as long as it leaves nothing behind.
            let listed = store.list().unwrap();
            let names: Vec<_> = std::fs::read_dir(dir.path().join("sessions"))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert!(
                listed.is_empty() && listed.damaged.is_empty() && names.is_empty(),
                "create refused with {} ({error}) but left {names:?} behind, listed as damaged: {:?}",
                error.code(),
                listed.damaged
            );
        }
        Ok(session) => {
            session.close().unwrap();
            // What create accepted must open again.
            let reopened = store.open_session("big").map(|_| ());
            let listed = store.list().unwrap();
            assert!(
                reopened.is_ok() && listed.damaged.is_empty(),
                "create accepted the header, but reopening says {:?}; list damaged: {:?}",
                reopened.unwrap_err(),
                listed.damaged
            );
        }
    }
}

#[test]
fn a_fork_refuses_a_child_header_larger_than_a_read_takes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_or_create(dir.path(), StoreOptions::new()).unwrap();
    let shell = r#"{"version":0,"id":"s","createdAt":1,"cwd":"/"}"#;
    // The source's header.json (text and newline) is exactly 16 MiB: accepted.
    let pad = "a".repeat((16 << 20) - 1 - shell.len());
    let header = format!(r#"{{"version":0,"id":"s","createdAt":1,"cwd":"/{pad}"}}"#);
    assert_eq!(header.len() + 1, 16 << 20);
    store
        .create("s", Some(&header), None)
        .unwrap()
        .close()
        .unwrap();
    store.open_session("s").unwrap();
    let child = "c".repeat(64);
    match store.fork("s", Boundary::Last, &child) {
        Err(error) => {
            let names: Vec<_> = std::fs::read_dir(dir.path().join("sessions"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(
                names,
                ["s"],
                "fork refused with {} ({error}) but left the child behind",
                error.code()
            );
        }
        Ok(session) => {
            session.close().unwrap();
            store.open_session(&child).unwrap();
        }
    }
}

/// The same for `Store::import` (DSH import's path into a store): a header over 16 MiB
/// is written and published, and no read takes it back.
#[test]
fn an_import_refuses_a_header_larger_than_a_read_takes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_or_create(dir.path(), StoreOptions::new()).unwrap();
    let pad = "a".repeat(17 << 20);
    let header = format!(r#"{{"version":0,"id":"big","createdAt":1,"cwd":"/{pad}"}}"#);
    match store.import("big", &header) {
        Err(error) => assert_eq!(error.code(), "HEADER_INVALID", "{error}"),
        Ok(import) => {
            import.finish().unwrap();
            store
                .open_session("big")
                .map(|_| ())
                .expect("an imported session opens");
        }
    }
}
