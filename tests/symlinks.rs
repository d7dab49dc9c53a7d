//! STORE-1: the store never follows a symbolic link it did not create. Every path of the
//! store is replaced in turn by a link to a copy outside the store, every operation that
//! touches it is run, and each must be refused with `UNSAFE_PATH` naming the link while
//! the outside copy stays byte for byte as it was. Import refuses anything but a regular
//! file, at once (a FIFO, `/dev/zero`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
#[cfg(feature = "cli")]
use std::time::{Duration, Instant};

use surfacelog::Result;
use surfacelog::internals::log::Durability;
use surfacelog::internals::session::{NoSurface, kinds};
use surfacelog::internals::store::{Store, StoreOptions};

mod common;

fn options() -> StoreOptions {
    common::store_options(Durability::Manual, 64 << 10)
}

/// Every file and directory under `dir`, with each file's bytes and each link's target:
/// what must not change.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut found = BTreeMap::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let what = if meta.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                pending.push(path.clone());
                "dir".to_owned()
            } else {
                format!("file {:?}", std::fs::read(&path).unwrap())
            };
            found.insert(path.strip_prefix(dir).unwrap().to_owned(), what);
        }
    }
    found
}

/// A store in `dir` holding session `s`: one closed turn, flushed and closed, so it has
/// a header, a log with its `LOCK`, a segment and a checkpoint.
fn store_with_session(dir: &Path) -> Store {
    let store = Store::open_or_create(dir, options()).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    common::numbered_turn(&mut session, 1);
    session.flush().unwrap();
    session.close().unwrap();
    store
}

/// The last segment of session `s`, relative to the store.
fn last_segment(dir: &Path) -> PathBuf {
    let log = dir.join("sessions/s/log");
    let last = common::files_ending(&log, ".seg").pop().unwrap();
    last.strip_prefix(dir).unwrap().to_owned()
}

/// Replaces `rel` (under `dir`) by a symbolic link to a copy in `outside`: the real file or
/// directory moved there (a link that would work if followed), or, for a path that does
/// not exist, a file of other bytes. Returns the link's path.
fn plant(dir: &Path, rel: &Path, outside: &Path) -> PathBuf {
    let link = dir.join(rel);
    let name = rel.to_string_lossy().replace('/', "_");
    let target = outside.join(name);
    if std::fs::symlink_metadata(&link).is_ok() {
        std::fs::rename(&link, &target).unwrap();
    } else {
        std::fs::write(&target, b"outside bytes, not the store's").unwrap();
    }
    std::os::unix::fs::symlink(&target, &link).unwrap();
    link
}

/// The operations run against a store whose path was replaced by a link.
const OPS: [&str; 8] = [
    "create", "import", "open", "inspect", "list", "delete", "purge", "at",
];

fn run(op: &str, store: &Store, dir: &Path) -> Result<()> {
    match op {
        "create" => store.create("t", None, None)?.close(),
        "import" => {
            let header = r#"{"version":0,"id":"u","createdAt":0}"#;
            store.import("u", header)?.finish().map(|_| ())
        }
        "open" => {
            let (mut session, _) = store.open_session("s")?;
            session.append::<kinds::TurnStart>(r#"{"turn":2}"#, NoSurface)?;
            session.flush()?;
            session.close()
        }
        "inspect" => store.inspect("s").map(|_| ()),
        "list" => match store.list()?.damaged.into_iter().next() {
            Some(error) => Err(error),
            None => Ok(()),
        },
        "delete" => store.delete("s"),
        "purge" => store.purge().map(|_| ()),
        "at" => Store::open_or_create(dir, options()).map(|_| ()),
        _ => unreachable!("{op}"),
    }
}

/// Plants a link at `rel` and runs every operation: the ones in `refused` must fail with
/// `UNSAFE_PATH` naming the link; none may change anything outside the store.
fn check(name: &str, rel: impl Into<PathBuf>, refused: &[&str]) {
    let scratch = common::scratch("symlinks", name);
    let outside = common::scratch("symlinks", &format!("{name}-outside"));
    let dir = scratch.join("store");
    let store = store_with_session(&dir);
    let rel = rel.into();
    let link = plant(&dir, &rel, &outside);
    let before = snapshot(&outside);
    for op in OPS {
        let outcome = run(op, &store, &dir);
        if refused.contains(&op) {
            let error = outcome.expect_err(&format!("{name}: {op} must be refused"));
            assert_eq!(error.code(), "UNSAFE_PATH", "{name}: {op}: {error}");
            let shown = error.to_string();
            assert!(
                shown.contains(&*link.to_string_lossy()),
                "{name}: {op}: the error names the link {}: {shown}",
                link.display()
            );
        }
        assert_eq!(
            snapshot(&outside),
            before,
            "{name}: {op} changed the link's target outside the store"
        );
    }
    // Verify is read-only: it may read through nothing it changes.
    let vocabulary = options().get_session_options().vocabulary.clone();
    let _ = surfacelog::internals::store::verify(&dir, &vocabulary, None);
    assert_eq!(snapshot(&outside), before, "{name}: verify");
    // The link is still the store's path: nothing replaced or removed it by following it.
    assert!(
        std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink())
            || !refused.contains(&"delete"),
        "{name}: the link is kept"
    );
}

const SESSION_OPS: [&str; 4] = ["open", "inspect", "list", "delete"];

#[test]
fn store_1_a_linked_identity_file_is_refused() {
    check("store", "STORE", &["at"]);
}

#[test]
fn store_1_a_linked_sessions_directory_is_refused() {
    check(
        "sessions",
        "sessions",
        &[
            "create", "import", "open", "inspect", "list", "delete", "at",
        ],
    );
}

#[test]
fn store_1_a_linked_trash_is_refused() {
    check(
        "trash",
        "trash",
        &["create", "import", "delete", "purge", "at"],
    );
}

#[test]
fn store_1_a_linked_tmp_is_refused() {
    check("tmp", "tmp", &["create", "import", "delete", "at"]);
}

#[test]
fn store_1_a_linked_tmp_lock_is_refused() {
    check("tmp-lock", "tmp.lock", &["create", "import", "at"]);
}

#[test]
fn store_1_a_linked_session_directory_is_refused() {
    check("session-dir", "sessions/s", &SESSION_OPS);
}

#[test]
fn store_1_a_linked_log_directory_is_refused() {
    check("log-dir", "sessions/s/log", &SESSION_OPS);
}

#[test]
fn store_1_a_linked_lock_is_refused() {
    check("lock", "sessions/s/log/LOCK", &SESSION_OPS);
}

#[test]
fn store_1_a_linked_header_is_refused() {
    check("header", "sessions/s/header.json", &SESSION_OPS);
}

#[test]
fn store_1_a_linked_checkpoint_is_refused() {
    check("checkpoint", "sessions/s/checkpoint", &SESSION_OPS);
}

#[test]
fn store_1_a_linked_checkpoint_tmp_is_refused() {
    check("checkpoint-tmp", "sessions/s/checkpoint.tmp", &SESSION_OPS);
}

#[test]
fn store_1_a_linked_message_pack_is_refused() {
    check("pack", "sessions/s/messages", &SESSION_OPS);
}

#[test]
fn store_1_a_linked_message_pack_tmp_is_refused() {
    check("pack-tmp", "sessions/s/messages.tmp", &SESSION_OPS);
}

/// The last segment is opened for writing by recovery (which would zero a torn tail
/// through the link) and read by readers; delete moves the link itself, and purge removes
/// it without touching its target.
#[test]
fn store_1_a_linked_last_segment_is_refused() {
    let scratch = common::scratch("symlinks", "seg-name");
    let dir = scratch.join("store");
    drop(store_with_session(&dir));
    let rel = last_segment(&dir);
    drop(scratch);
    check("segment", rel, &["open", "inspect"]);
}

/// A `<cache>.tmp` link planted while a writer has the session open (its store packing
/// messages at every chance): the `<cache>` file written at flush replaces the link, never
/// writes through it. Returns the store, to check what was written, and its scratch.
fn flush_past_a_planted_tmp(cache: &str) -> (Store, common::Scratch) {
    let scratch = common::scratch("symlinks", &format!("{cache}-tmp-live"));
    let outside = common::scratch("symlinks", &format!("{cache}-tmp-live-outside"));
    let dir = scratch.join("store");
    drop(store_with_session(&dir));
    let store = Store::open_or_create(&dir, options().message_pack(1)).unwrap();
    let (mut session, _) = store.open_session("s").unwrap();
    let link = plant(
        &dir,
        &Path::new("sessions/s").join(format!("{cache}.tmp")),
        &outside,
    );
    let before = snapshot(&outside);
    common::numbered_turn(&mut session, 2);
    session.flush().unwrap();
    session.close().unwrap();
    assert_eq!(snapshot(&outside), before);
    assert!(
        std::fs::symlink_metadata(&link).is_err(),
        "renamed into place"
    );
    let written = dir.join("sessions/s").join(cache);
    assert!(std::fs::symlink_metadata(&written).unwrap().is_file());
    (store, scratch)
}

#[test]
fn store_1_a_checkpoint_tmp_planted_under_a_writer_is_not_followed() {
    let (store, _scratch) = flush_past_a_planted_tmp("checkpoint");
    let (session, opened) = store.open_session("s").unwrap();
    assert!(opened.checkpoint.is_ok(), "{:?}", opened.checkpoint);
    drop(session);
}

/// The message pack is written at flush (MSP-6) like the checkpoint, and read back.
#[test]
fn store_1_a_message_pack_tmp_planted_under_a_writer_is_not_followed() {
    let (store, _scratch) = flush_past_a_planted_tmp("messages");
    let (session, _) = store.open_session("s").unwrap();
    let texts: Vec<&str> = session.messages().unwrap().iter().map(|m| m.json).collect();
    assert_eq!(texts.len(), 6, "two turns of three messages");
    assert!(texts[5].contains("output of c2"), "{texts:?}");
}

/// A store directory given as a link is the caller's path, not one inside the store.
#[test]
fn store_1_the_store_directory_itself_may_be_a_link() {
    let scratch = common::scratch("symlinks", "root-link");
    let real = scratch.join("real");
    std::fs::create_dir(&real).unwrap();
    let link = scratch.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let store = Store::open_or_create(&link, options()).unwrap();
    drop(store.create("s", None, None).unwrap());
    assert!(real.join("STORE").is_file());
    assert!(real.join("sessions/s/header.json").is_file());
    assert_eq!(store.list().unwrap().len(), 1);
}

/// Runs `surfacelog import` of `file` as a child, which must exit by itself within 10 s;
/// returns its exit code and stderr.
#[cfg(feature = "cli")]
fn import_promptly(format: &str, file: &Path, store: &Path) -> (Option<i32>, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_surfacelog"))
        .args(["import", "--format", format])
        .arg(file)
        .arg("--store")
        .arg(store)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("import of {} did not return within 10 s", file.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.code(), stderr)
}

#[cfg(feature = "cli")]
fn assert_unsafe(outcome: &(Option<i32>, String), file: &Path) {
    let (code, stderr) = outcome;
    assert_eq!(*code, Some(3), "{stderr}");
    assert!(stderr.starts_with("error[UNSAFE_PATH]: "), "{stderr}");
    assert!(stderr.contains(&*file.to_string_lossy()), "{stderr}");
}

#[cfg(feature = "cli")]
#[test]
fn import_refuses_a_fifo_at_once() {
    let scratch = common::scratch("symlinks", "fifo");
    let fifo = scratch.join("events.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let store = scratch.join("store");
    for format in ["dsh-jsonl", "dsh-jsonl-zstd", "dsh-sqlite"] {
        assert_unsafe(&import_promptly(format, &fifo, &store), &fifo);
    }
    assert!(
        Store::open_or_create(&store, options())
            .unwrap()
            .list()
            .unwrap()
            .is_empty()
    );
}

#[cfg(feature = "cli")]
#[test]
fn import_refuses_a_device_at_once() {
    let scratch = common::scratch("symlinks", "dev-zero");
    let store = scratch.join("store");
    let zero = Path::new("/dev/zero");
    assert_unsafe(&import_promptly("dsh-jsonl", zero, &store), zero);
    assert_unsafe(&import_promptly("dsh-jsonl-zstd", zero, &store), zero);
}

#[cfg(feature = "dsh")]
#[test]
fn import_refuses_a_linked_file() {
    let scratch = common::scratch("symlinks", "import-link");
    let file = scratch.join("real.jsonl");
    let header = concat!(
        r#"{"type":"session","version":0,"id":"x","createdAt":0,"#,
        r#""cwd":"/w","delegationDepth":0}"#,
        "\n"
    );
    std::fs::write(&file, header).unwrap();
    let link = scratch.join("link.jsonl");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let store = Store::open_or_create(scratch.join("store"), options()).unwrap();
    let compression = surfacelog::internals::adapters::jsonl::Compression::None;
    let error = surfacelog::internals::adapters::jsonl::import_jsonl(
        &store,
        &link,
        compression,
        None,
        &mut |_| {},
    )
    .unwrap_err();
    assert_eq!(error.code(), "UNSAFE_PATH", "{error}");
    // The file itself imports.
    surfacelog::internals::adapters::jsonl::import_jsonl(
        &store,
        &file,
        compression,
        None,
        &mut |_| {},
    )
    .unwrap();
}

/// STORE-1, the race: `rel` (a directory of session `s`) is swapped for a link to an
/// outside copy after `open` has checked the session's paths and before it opens the log
/// (the hook at `Step::SessionChecked`). The open must be refused with `UNSAFE_PATH` and
/// the outside copy stay byte for byte as it was: every path is resolved from the store's
/// handle without following a link, not checked first and opened later.
fn swapped_after_the_check(name: &str, rel: &str) {
    use surfacelog::internals::store::Step;
    let scratch = common::scratch("symlinks", name);
    let outside = common::scratch("symlinks", &format!("{name}-outside"));
    let dir = scratch.join("store");
    drop(store_with_session(&dir));
    // The outside copy as it was when planted, by the hook.
    let planted = std::sync::Arc::new(std::sync::Mutex::new(None));
    let link = dir.join(rel);
    let store = {
        let (dir, outside, planted) = (dir.clone(), outside.to_path_buf(), planted.clone());
        let rel = PathBuf::from(rel);
        Store::open_or_create(dir.clone(), options())
            .unwrap()
            .with_hook(move |step| {
                let mut planted = planted.lock().unwrap();
                if step == Step::SessionChecked("s") && planted.is_none() {
                    plant(&dir, &rel, &outside);
                    *planted = Some(snapshot(&outside));
                }
            })
    };
    let outcome = store.open_session("s").and_then(|(mut session, _)| {
        common::numbered_turn(&mut session, 2);
        session.flush()?;
        session.close()
    });
    let before = planted.lock().unwrap().take().expect("the hook ran");
    assert_eq!(
        snapshot(&outside),
        before,
        "{name}: changed through the link"
    );
    let error = outcome.expect_err(&format!("{name}: the open must be refused"));
    assert_eq!(error.code(), "UNSAFE_PATH", "{name}: {error}");
    let shown = error.to_string();
    assert!(
        shown.contains(&*link.to_string_lossy()),
        "{name}: the error names the link {}: {shown}",
        link.display()
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn store_1_a_log_directory_swapped_for_a_link_after_the_check_is_not_followed() {
    swapped_after_the_check("race-log", "sessions/s/log");
}

#[test]
fn store_1_a_session_directory_swapped_for_a_link_after_the_check_is_not_followed() {
    swapped_after_the_check("race-session", "sessions/s");
}

/// STORE-1: `sessions/` replaced by a link to a directory that does not hold the session
/// (empty, or gone): a session read through it is refused `UNSAFE_PATH` naming the link,
/// as when the directory behind the link holds it, never `SESSION_NOT_FOUND` for what was
/// (not) found behind a link the store must not follow.
#[test]
fn store_1_a_linked_sessions_directory_without_the_session_is_refused() {
    let scratch = common::scratch("symlinks", "sessions-elsewhere");
    let outside = common::scratch("symlinks", "sessions-elsewhere-outside");
    let dir = scratch.join("store");
    let store = store_with_session(&dir);
    let link = dir.join("sessions");
    std::fs::rename(&link, outside.join("moved")).unwrap();
    std::fs::create_dir(outside.join("empty")).unwrap();
    for target in [outside.join("empty"), outside.join("nowhere")] {
        std::os::unix::fs::symlink(&target, &link).unwrap();
        for (op, outcome) in [
            ("inspect", store.inspect("s").map(|_| ())),
            ("follow", store.follow("s").map(|_| ())),
            ("open", store.open_session("s").map(|_| ())),
        ] {
            let error = outcome.expect_err(op);
            assert_eq!(
                error.code(),
                "UNSAFE_PATH",
                "{op} through a link to {target:?}: {error}"
            );
        }
        std::fs::remove_file(&link).unwrap();
    }
}
