//! Contract §11, "every refusal carries one stable code plus context: session id, seq":
//! `SESSION_NOT_FOUND`, `SESSION_EXISTS` and `INVALID_BOUNDARY` name their session in
//! `Error::session()`, as the same codes from `delete` did.
use surfacelog::{Boundary, Store, StoreOptions};

#[test]
fn refusals_name_their_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_or_create(dir.path(), StoreOptions::new()).unwrap();
    let s = store.create("s", None, None).unwrap();
    let cases = [
        (
            "delete missing",
            store.delete("missing").unwrap_err(),
            "missing",
        ),
        (
            "open missing",
            store.open_session("missing").map(|_| ()).unwrap_err(),
            "missing",
        ),
        (
            "follow missing",
            store.follow("missing").map(|_| ()).unwrap_err(),
            "missing",
        ),
        (
            "inspect missing",
            store.inspect("missing").map(|_| ()).unwrap_err(),
            "missing",
        ),
        (
            "fork missing source",
            store
                .fork("missing", Boundary::Last, "c")
                .map(|_| ())
                .unwrap_err(),
            "missing",
        ),
        (
            "create existing",
            store.create("s", None, None).map(|_| ()).unwrap_err(),
            "s",
        ),
        (
            "fork onto existing",
            store
                .fork("s", Boundary::Last, "s")
                .map(|_| ())
                .unwrap_err(),
            "s",
        ),
        (
            "as_of past the end",
            s.as_of(5).map(|_| ()).unwrap_err(),
            "s",
        ),
    ];
    let missing: Vec<String> = cases
        .iter()
        .filter(|(_, error, id)| error.session() != Some(id))
        .map(|(what, error, _)| format!("{what}: {error:?} session()={:?}", error.session()))
        .collect();
    assert!(
        missing.is_empty(),
        "refusals without their session:\n{}",
        missing.join("\n")
    );
}
