//! A header larger than a read takes back (16 MiB, `store.md` STORE-4) is refused by
//! `create` (`HEADER_INVALID`) before anything is written; it was published, and every
//! later read of it was `CORRUPT` (found in review).
use surfacelog::{Store, StoreOptions};

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
