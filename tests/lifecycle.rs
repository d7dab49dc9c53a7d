//! The store's lifecycle without races (issue 12, item 3): delete holds the session's lock
//! across its rename (STORE-9), directories are synced after renames and removals, a
//! create race gives `SESSION_EXISTS` and leaves nothing in `tmp/` (STORE-6), several
//! creators of a new store all succeed (STORE-5), stale build directories are cleaned at
//! open but a live build is not (STORE-17), and the demo touches only its own sessions.
//! The races are driven deterministically by the store's test hook (`Store::with_hook`).

mod common;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier, Mutex};

#[cfg(feature = "cli")]
use common::surfacelog;
use common::{scratch, store_options, user_message};
use surfacelog::internals::log::Durability;
use surfacelog::internals::storage::{FsStorage, Storage};
use surfacelog::internals::store::{Step, Store, StoreOptions};

fn options() -> StoreOptions {
    store_options(Durability::Sync, 1 << 20)
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// The build directories in `tmp/`.
fn builds(store: &Path) -> Vec<String> {
    names(&store.join("tmp"))
}

#[test]
fn delete_holds_the_lock_until_the_session_is_in_the_trash() {
    let dir = scratch("lifecycle", "delete-race");
    let store = Store::open_or_create(&dir, options()).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    user_message(&mut session, "before");
    let before = session.seq_next();
    drop(session);

    // In the window between the steps of delete, another writer tries to open the session
    // and, if it can, appends durably (Sync) and closes it.
    let other = Store::open_or_create(&dir, options()).unwrap();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen_in_hook = Arc::clone(&seen);
    let store = store.with_hook(move |step| {
        if let Step::DeleteLocked(id) = step {
            let outcome = match other.open_session(id) {
                Ok((mut session, _)) => {
                    user_message(&mut session, "acknowledged");
                    "OPENED AND APPENDED".to_owned()
                }
                Err(error) => error.code().to_owned(),
            };
            seen_in_hook.lock().unwrap().push(outcome);
        }
    });
    store.delete("s").unwrap();
    assert_eq!(*seen.lock().unwrap(), ["LOCKED"]);
    assert_eq!(
        store.open_session("s").unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );

    // The trash holds exactly the events stored before the delete: nothing acknowledged
    // after it landed there.
    let trashed = names(&dir.join("trash"));
    assert_eq!(trashed.len(), 1, "{trashed:?}");
    let reader = surfacelog::internals::log::LogReader::open(
        &dir.join("trash").join(&trashed[0]).join("log"),
    )
    .unwrap();
    assert_eq!(
        surfacelog::internals::event::EventSource::seq_next(&reader),
        before
    );
}

/// A storage that records its renames and directory syncs, in order.
#[derive(Debug, Default)]
struct Recording {
    calls: Mutex<Vec<String>>,
    /// A name `list_dir` adds to every listing of `sessions/`, as if a session there had
    /// been deleted right after the directory was read.
    ghost: Option<String>,
}

impl Recording {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

fn name_of(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

impl Storage for Recording {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        FsStorage.create_dir_all(dir)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = FsStorage.list_dir(dir)?;
        if let Some(ghost) = self.ghost.as_ref().filter(|_| dir.ends_with("sessions")) {
            names.push(ghost.clone());
        }
        Ok(names)
    }
    fn create_file(&self, path: &Path, len: u64) -> io::Result<std::fs::File> {
        FsStorage.create_file(path, len)
    }
    fn open_file(&self, path: &Path, write: bool) -> io::Result<std::fs::File> {
        FsStorage.open_file(path, write)
    }
    fn write_at(&self, file: &std::fs::File, offset: u64, bytes: &[u8]) -> io::Result<()> {
        FsStorage.write_at(file, offset, bytes)
    }
    fn set_len(&self, file: &std::fs::File, len: u64) -> io::Result<()> {
        FsStorage.set_len(file, len)
    }
    fn sync_data(&self, file: &std::fs::File) -> io::Result<()> {
        FsStorage.sync_data(file)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("sync {}", name_of(dir)));
        FsStorage.sync_dir(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("rename {}", name_of(&parent(from))));
        FsStorage.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        FsStorage.remove_file(path)
    }
}

fn parent(path: &Path) -> PathBuf {
    path.parent().unwrap().to_owned()
}

#[test]
fn delete_and_purge_sync_the_directories_they_change() {
    let dir = scratch("lifecycle", "dir-sync");
    let recording = Arc::new(Recording::default());
    let options = options().storage(Arc::clone(&recording) as Arc<dyn Storage>);
    let store = Store::open_or_create(&dir, options).unwrap();
    drop(store.create("s", None, None).unwrap());
    recording.take();

    store.delete("s").unwrap();
    let calls = recording.take();
    let rename = calls.iter().position(|c| c == "rename sessions").unwrap();
    for synced in ["sync sessions", "sync trash"] {
        assert!(
            calls[rename..].iter().any(|c| c == synced),
            "delete: {synced} missing after the rename in {calls:?}"
        );
    }

    store.purge().unwrap();
    assert!(names(&dir.join("trash")).is_empty());
    // STORE-24: renamed out of a restore's reach, durably, before it is removed.
    assert_eq!(
        recording.take(),
        ["rename trash", "sync trash", "sync trash"],
        "purge"
    );
}

#[test]
fn the_loser_of_a_create_race_gets_session_exists_and_leaves_no_build() {
    let dir = scratch("lifecycle", "create-race");
    let other = Store::open_or_create(&dir, options()).unwrap();
    // The other creator publishes the same id between this one's check and its rename.
    let store = Store::open_or_create(&dir, options())
        .unwrap()
        .with_hook(move |step| {
            if step == Step::BeforePublish("s") {
                drop(
                    other
                        .create("s", None, None)
                        .expect("the other creator publishes"),
                );
            }
        });
    let error = store.create("s", None, None).unwrap_err();
    assert_eq!(error.code(), "SESSION_EXISTS", "{error}");
    assert!(builds(&dir).is_empty(), "{:?}", builds(&dir));
    // The winner's session is whole.
    drop(store.open_session("s").unwrap());
}

#[test]
fn concurrent_creators_of_one_session_one_wins_the_others_get_session_exists() {
    let dir = scratch("lifecycle", "create-threads");
    Store::open_or_create(&dir, options()).unwrap();
    for round in 0..5 {
        let id = format!("s{round}");
        let barrier = Arc::new(Barrier::new(4));
        let outcomes: Vec<String> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let (barrier, dir, id) = (Arc::clone(&barrier), &dir, &id);
                    scope.spawn(move || {
                        let store = Store::open_or_create(dir, options()).unwrap();
                        barrier.wait();
                        match store.create(id, None, None) {
                            Ok(_) => "OK".to_owned(),
                            Err(e) => format!("{}: {e}", e.code()),
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won = outcomes.iter().filter(|o| *o == "OK").count();
        let lost = outcomes
            .iter()
            .filter(|o| o.starts_with("SESSION_EXISTS"))
            .count();
        assert_eq!((won, lost), (1, 3), "{outcomes:?}");
        assert!(builds(&dir).is_empty(), "{:?}", builds(&dir));
    }
}

#[test]
fn concurrent_creators_of_a_new_store_all_succeed() {
    let root = scratch("lifecycle", "store-threads");
    for round in 0..20 {
        let dir = root.join(format!("store{round}"));
        let barrier = Arc::new(Barrier::new(6));
        let outcomes: Vec<String> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..6)
                .map(|_| {
                    let (barrier, dir) = (Arc::clone(&barrier), &dir);
                    scope.spawn(move || {
                        barrier.wait();
                        match Store::open_or_create(dir, options()) {
                            Ok(_) => "OK".to_owned(),
                            Err(e) => format!("{}: {e}", e.code()),
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(outcomes.iter().all(|o| o == "OK"), "{outcomes:?}");
        assert_eq!(
            names(&dir),
            ["STORE", "sessions", "tmp", "tmp.lock", "trash"]
        );
    }
}

#[test]
fn stale_builds_are_cleaned_at_open_but_not_a_live_one() {
    let dir = scratch("lifecycle", "tmp-clean");
    let store = Store::open_or_create(&dir, options()).unwrap();
    // The leftover of an interrupted import: a build directory of a dead process.
    let stale = dir.join("tmp").join("gone-4194305-0");
    std::fs::create_dir_all(stale.join("log")).unwrap();
    std::fs::write(stale.join("header.json"), "{}\n").unwrap();
    std::fs::write(stale.join("log").join("LOCK"), "").unwrap();
    // A live import, in progress in this store.
    let import = store
        .import(
            "live",
            r#"{"version":0,"id":"live","createdAt":5,"cwd":"/w"}"#,
        )
        .unwrap();
    let live = builds(&dir);
    assert_eq!(live.len(), 2, "{live:?}");

    // While the import is live, an open cleans nothing: the live build must survive.
    drop(Store::open_or_create(&dir, options()).unwrap());
    assert_eq!(builds(&dir), live);
    drop(import);
    assert_eq!(builds(&dir), ["gone-4194305-0"]);

    // With no build in progress, the next open removes the leftover.
    drop(Store::open_or_create(&dir, options()).unwrap());
    assert!(builds(&dir).is_empty(), "{:?}", builds(&dir));
}

#[test]
fn an_open_does_not_remove_a_build_that_is_finished_meanwhile() {
    let dir = scratch("lifecycle", "tmp-finish");
    let store = Store::open_or_create(&dir, options()).unwrap();
    let import = store
        .import(
            "live",
            r#"{"version":0,"id":"live","createdAt":5,"cwd":"/w"}"#,
        )
        .unwrap();
    drop(Store::open_or_create(&dir, options()).unwrap());
    import.finish().unwrap();
    drop(store.open_session("live").unwrap());
    assert!(builds(&dir).is_empty(), "{:?}", builds(&dir));
}

#[cfg(feature = "cli")]
#[test]
fn the_demo_touches_only_its_own_sessions() {
    let dir = scratch("lifecycle", "demo");
    let store = Store::open_or_create(&dir, options()).unwrap();
    drop(store.create("mine", None, None).unwrap());
    drop(store.create("trashed", None, None).unwrap());
    store.delete("trashed").unwrap();
    let trash = names(&dir.join("trash"));
    assert_eq!(trash.len(), 1);

    let store_arg = dir.to_str().unwrap();
    for run in 0..2 {
        let output = surfacelog(&["demo", "--store", store_arg]);
        assert!(
            output.status.success(),
            "run {run}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(names(&dir.join("trash")), trash, "run {run}");
        let ids: Vec<String> = store
            .list()
            .unwrap()
            .iter()
            .map(|h| h.id().to_owned())
            .collect();
        assert!(ids.contains(&"mine".to_owned()), "run {run}: {ids:?}");
    }
}

/// LOG-1: a session's lock is released when its writer closes, even while another thread
/// of the process spawns child processes, which hold copies of every descriptor between
/// their fork and exec: a reopen right after a close is never refused `LOCKED`.
#[test]
fn a_closed_session_reopens_at_once_while_another_thread_spawns_children() {
    let dir = scratch("lifecycle", "fork-lock");
    let store = Store::open_or_create(&dir, options()).unwrap();
    drop(store.create("s", None, None).unwrap());
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let spawner = scope.spawn(|| {
            let mut spawned = 0_u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let status = std::process::Command::new("true").status().unwrap();
                assert!(status.success());
                spawned += 1;
            }
            spawned
        });
        let mut refused = 0;
        for _ in 0..400 {
            match store.open_session("s") {
                Ok((session, _)) => session.close().unwrap(),
                Err(error) if error.code() == "LOCKED" => refused += 1,
                Err(error) => panic!("{error}"),
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let spawned = spawner.join().unwrap();
        assert!(spawned > 0, "no child was spawned meanwhile");
        assert_eq!(
            refused, 0,
            "reopens refused LOCKED among 400 ({spawned} children)"
        );
    });
}

/// STORE-8: a session deleted while a listing runs (listed by name, gone by the time its
/// header is read) is neither listed nor reported damaged; the others are listed.
#[test]
fn a_session_deleted_during_a_listing_is_not_damage() {
    let dir = scratch("lifecycle", "list-ghost");
    let recording = Arc::new(Recording {
        ghost: Some("deleted-meanwhile".to_owned()),
        ..Recording::default()
    });
    let options = options().storage(Arc::clone(&recording) as Arc<dyn Storage>);
    let store = Store::open_or_create(&dir, options).unwrap();
    drop(store.create("kept", None, None).unwrap());
    let listing = store.list().unwrap();
    let ids: Vec<_> = listing.headers.iter().map(|h| h.id().to_owned()).collect();
    assert_eq!(ids, ["kept"]);
    assert!(listing.damaged.is_empty(), "{:?}", listing.damaged);
}

/// STORE-18: creating a store makes its directory's entry durable: the parent is synced.
#[test]
fn a_new_store_syncs_its_parent_directory() {
    let dir = scratch("lifecycle", "new-store");
    let recording = Arc::new(Recording::default());
    let options = options().storage(Arc::clone(&recording) as Arc<dyn Storage>);
    Store::open_or_create(dir.join("parent").join("store"), options.clone()).unwrap();
    let calls = recording.take();
    assert!(calls.iter().any(|c| c == "sync parent"), "{calls:?}");
    // Opening it again creates nothing and syncs no parent.
    Store::open_or_create(dir.join("parent").join("store"), options).unwrap();
    let calls = recording.take();
    assert!(!calls.iter().any(|c| c == "sync parent"), "{calls:?}");
}

/// The environment variable that makes [`concurrent_processes_creating_a_new_store_all_succeed`]
/// a child: the store directory to open, and the moment (Unix ms) to open it at.
const CREATOR_CHILD: &str = "SURFACELOG_LIFECYCLE_CREATOR";

/// STORE-2, STORE-19 (issue 12, item 3): several processes creating the same new store at
/// once all succeed (3 of 6 failed when they shared `STORE.tmp`), and the store is whole.
#[test]
fn concurrent_processes_creating_a_new_store_all_succeed() {
    if let Some(spec) = std::env::var_os(CREATOR_CHILD) {
        let spec = spec.into_string().unwrap();
        let (at, dir) = spec.split_once(':').unwrap();
        let at: u128 = at.parse().unwrap();
        // Start together: wait for the agreed moment.
        while std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            < at
        {
            std::hint::spin_loop();
        }
        match Store::open_or_create(Path::new(dir), options()) {
            Ok(_) => println!("creator: OK"),
            Err(error) => println!("creator: {}: {error}", error.code()),
        }
        return;
    }
    let root = scratch("lifecycle", "store-processes");
    for round in 0..5 {
        let dir = root.join(format!("store{round}"));
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            + 400;
        let children: Vec<_> = (0..6)
            .map(|_| {
                std::process::Command::new(std::env::current_exe().unwrap())
                    .args([
                        "--exact",
                        "concurrent_processes_creating_a_new_store_all_succeed",
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .env(CREATOR_CHILD, format!("{at}:{}", dir.display()))
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let outcomes: Vec<String> = children
            .into_iter()
            .map(|child| {
                let output = child.wait_with_output().unwrap();
                assert!(output.status.success(), "{output:?}");
                String::from_utf8_lossy(&output.stdout)
                    .lines()
                    .find_map(|l| l.split_once("creator: ").map(|(_, o)| o.to_owned()))
                    .unwrap_or_else(|| "no outcome printed".to_owned())
            })
            .collect();
        assert!(
            outcomes.iter().all(|o| o == "OK"),
            "round {round}: {outcomes:?}"
        );
        assert_eq!(
            names(&dir),
            ["STORE", "sessions", "tmp", "tmp.lock", "trash"]
        );
        drop(
            Store::open_or_create(&dir, options())
                .unwrap()
                .create("s", None, None)
                .unwrap(),
        );
    }
}
