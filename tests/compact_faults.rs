//! Compaction (CMP-3, CZ-5, MSP-8) failing at every storage call, of every kind, with a
//! reader and a follower holding the session: the store then holds the same events and
//! messages, opens, verifies, and a second compaction finishes.
#![cfg(feature = "compress")]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use surfacelog::internals::event::EventSource;
use surfacelog::internals::storage::{FsStorage, Storage};
use surfacelog::internals::store::{Store, StoreOptions};
use surfacelog::{CompactOptions, NoSurface, SurfaceIntent, kinds};

mod common;

/// The file system's storage, failing its `fail`-th call (of any kind) with EIO.
#[derive(Debug, Default)]
struct FailNth {
    calls: AtomicU64,
    fail: AtomicU64,
    failed: std::sync::Mutex<Option<String>>,
}

impl FailNth {
    fn call(&self, what: &str) -> std::io::Result<()> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.fail.load(Ordering::SeqCst) {
            *self.failed.lock().unwrap() = Some(what.to_owned());
            return Err(std::io::Error::from_raw_os_error(5));
        }
        Ok(())
    }
}

impl Storage for FailNth {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.call(&format!("create_dir_all {}", dir.display()))?;
        FsStorage.create_dir_all(dir)
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        self.call(&format!("list {}", dir.display()))?;
        FsStorage.list_dir(dir)
    }
    fn create_file(&self, path: &Path, len: u64) -> std::io::Result<std::fs::File> {
        self.call(&format!("create {}", path.display()))?;
        FsStorage.create_file(path, len)
    }
    fn open_file(&self, path: &Path, write: bool) -> std::io::Result<std::fs::File> {
        self.call(&format!("open {}", path.display()))?;
        FsStorage.open_file(path, write)
    }
    fn write_at(&self, file: &std::fs::File, offset: u64, bytes: &[u8]) -> std::io::Result<()> {
        self.call(&format!("write {}", fd_path(file)))?;
        FsStorage.write_at(file, offset, bytes)
    }
    fn set_len(&self, file: &std::fs::File, len: u64) -> std::io::Result<()> {
        self.call(&format!("set_len {}", fd_path(file)))?;
        FsStorage.set_len(file, len)
    }
    fn sync_data(&self, file: &std::fs::File) -> std::io::Result<()> {
        self.call(&format!("sync_data {}", fd_path(file)))?;
        FsStorage.sync_data(file)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.call(&format!("sync_dir {}", dir.display()))?;
        FsStorage.sync_dir(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.call(&format!("rename {} {}", from.display(), to.display()))?;
        FsStorage.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.call(&format!("remove {}", path.display()))?;
        FsStorage.remove_file(path)
    }
    fn remove_dir_all(&self, path: &Path) -> std::io::Result<()> {
        self.call(&format!("remove_dir_all {}", path.display()))?;
        FsStorage.remove_dir_all(path)
    }
}

/// The path `file` was opened at (Linux), for the messages.
fn fd_path(file: &std::fs::File) -> String {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map(|path| path.display().to_string())
        .unwrap_or_default()
}

fn options() -> StoreOptions {
    StoreOptions::new()
        .segment_bytes(2048)
        .chunk_records(false)
        .message_pack(1)
}

fn fill(store: &Store) {
    let mut session = store.create("s", None, None).unwrap();
    append_turns(&mut session);
    session.close().unwrap();
}

/// Four turns of streamed text and a message each.
fn append_turns(session: &mut surfacelog::StoredSession) {
    for turn in 1..=4 {
        let step = common::streamed_step(
            session,
            turn,
            &format!("hi {turn}"),
            (0..5)
                .map(|index| format!(r#"{{"type":"text-delta","index":0,"text":"part {index}"}}"#)),
        );
        session
            .append::<kinds::AssistantMessage>(
                &common::assistant(turn, r#"{"type":"text","text":"done"}"#),
                SurfaceIntent::append(),
            )
            .unwrap();
        session.append::<kinds::StepEnd>(&step, NoSurface).unwrap();
        common::turn_end(session, turn);
    }
}

fn texts(store: &Store) -> (Vec<String>, Vec<String>) {
    let session = store.inspect("s").unwrap();
    let events = (0..session.seq_next())
        .map(|seq| session.event(seq).unwrap().unwrap().text().into_owned())
        .collect();
    let messages = session
        .messages()
        .unwrap()
        .iter()
        .map(|m| m.json.to_owned())
        .collect();
    (events, messages)
}

/// CMP-3, CZ-5, MSP-8: compaction (with and without compression) whose `n`-th storage call
/// fails, for every `n`: with a follower and a reader opened before, the session then
/// reads the same events and messages for them and for a fresh look, opens, verifies, and
/// compacts again. The compaction returns `IO` unless the failed call was one whose
/// failure costs nothing: a `.tmp` file's removal, or the message pack's compression (a
/// cache, MSP-8). An I/O error never becomes success: in particular a failed open or
/// `fdatasync` of the last segment (checked before anything is compressed, CZ-6) is not
/// taken for a header that does not check out.
#[test]
fn cmp_3_a_compaction_failing_at_any_storage_call_leaves_the_same_session() {
    let root = tempfile::tempdir().unwrap();
    let source = root.path().join("source");
    let store = Store::open_or_create(&source, options()).unwrap();
    fill(&store);
    let (events, messages) = texts(&store);
    assert!(source.join("sessions/s/messages").exists(), "a pack");
    drop(store);
    for compress in [false, true] {
        let compaction = CompactOptions::new().compress(compress);
        let mut n = 1;
        loop {
            let scratch = tempfile::tempdir().unwrap();
            let dir = scratch.path().join("store");
            common::copy_tree(&source, &dir);
            let plain = Store::open_or_create(&dir, options()).unwrap();
            let mut follower = plain.follow("s").unwrap();
            let reader = plain.inspect("s").unwrap();
            let storage = Arc::new(FailNth::default());
            let store = Store::open_or_create(&dir, options().storage(storage.clone())).unwrap();
            storage.calls.store(0, Ordering::SeqCst);
            storage.fail.store(n, Ordering::SeqCst);
            let result = store.compact_log_with("s", compaction);
            let failed = storage.failed.lock().unwrap().clone();
            let Some(failed) = failed else {
                assert!(!result.unwrap().rewritten.is_empty());
                break;
            };
            let at = format!("compress {compress}, call {n} ({failed})");
            match &result {
                Err(error) => assert_eq!(error.code(), "IO", "{at}: {error}"),
                Ok(report) => assert!(
                    // A `.tmp` file's removal, an index (IDX-1) or the pack (MSP-8):
                    // caches, whose failure is not the compaction's.
                    failed
                        .strip_prefix("remove ")
                        .is_some_and(|path| Path::new(path)
                            .extension()
                            .is_some_and(|e| e == "tmp"))
                        || failed.contains("messages")
                        || failed.contains(".idx"),
                    "{at}: the compaction succeeded: {report:?}"
                ),
            }
            // Readers opened before read the same events; a fresh look does too.
            let last = events.len() as u64 - 1;
            assert!(follower.wait_for(last, std::time::Duration::ZERO).unwrap());
            for seq in 0..events.len() as u64 {
                let expected = &events[usize::try_from(seq).unwrap()];
                let followed = follower.log().event(seq).unwrap().unwrap();
                assert_eq!(&followed.text(), expected, "{at}: follower at {seq}");
                let read = reader.event(seq).unwrap().unwrap();
                assert_eq!(&read.text(), expected, "{at}: reader at {seq}");
            }
            assert_eq!(texts(&plain), (events.clone(), messages.clone()), "{at}");
            let report = plain.verify(None).unwrap();
            assert!(report.ok(), "{at}: {:?}", report.lines());
            let (session, _) = plain.open_session("s").unwrap();
            session.close().unwrap();
            plain.compact_log_with("s", compaction).unwrap();
            assert_eq!(
                texts(&plain),
                (events.clone(), messages.clone()),
                "{at}: again"
            );
            n += 1;
        }
    }
}

/// MSP-8: a store writing compact records writes its message pack compressed, built in
/// memory, at each close. A close whose `n`-th storage call fails, for every `n`, either
/// succeeds (the pack is a cache: its failure is not the close's) or fails with `IO`; either
/// way no `messages.tmp` is left, and the session then reads the same events and messages
/// as one closed without failure, and verifies.
#[cfg(feature = "compress")]
#[test]
fn msp_8_a_compact_close_failing_at_any_storage_call_leaves_the_same_session() {
    let compact = || options().compact_records(true);
    let reference = tempfile::tempdir().unwrap();
    let store = Store::open_or_create(reference.path(), compact()).unwrap();
    fill(&store);
    let expected = texts(&store);
    let pack = std::fs::read(reference.path().join("sessions/s/messages")).unwrap();
    assert_eq!(pack.get(8..12), Some(&2u32.to_le_bytes()[..]), "compressed");
    drop(store);
    let mut n = 1;
    loop {
        let scratch = tempfile::tempdir().unwrap();
        let storage = Arc::new(FailNth::default());
        let store =
            Store::open_or_create(scratch.path(), compact().storage(storage.clone())).unwrap();
        let mut session = store.create("s", None, None).unwrap();
        append_turns(&mut session);
        storage.calls.store(0, Ordering::SeqCst);
        storage.fail.store(n, Ordering::SeqCst);
        let closed = session.close();
        let failed = storage.failed.lock().unwrap().clone();
        let Some(failed) = failed else {
            closed.unwrap();
            break;
        };
        let at = format!("call {n} ({failed})");
        if let Err(error) = &closed {
            assert_eq!(error.code(), "IO", "{at}: {error}");
        }
        drop(store);
        let sessions = scratch.path().join("sessions/s");
        assert!(
            !sessions.join("messages.tmp").exists(),
            "{at}: a temporary pack left"
        );
        let plain = Store::open_or_create(scratch.path(), compact()).unwrap();
        assert_eq!(timeless(texts(&plain)), timeless(expected.clone()), "{at}");
        let report = plain.verify(None).unwrap();
        assert!(report.ok(), "{at}: {:?}", report.lines());
        n += 1;
    }
    assert!(n > 5, "the close made {n} storage calls");
}

/// `texts` with the events' times taken out: two sessions written at different moments.
fn timeless((events, messages): (Vec<String>, Vec<String>)) -> (Vec<String>, Vec<String>) {
    let events = events
        .into_iter()
        .map(|text| {
            let Some(at) = text.find(r#""time":"#) else {
                return text;
            };
            let digits = text[at + 7..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(text.len(), |n| at + 7 + n);
            format!("{}{}", &text[..at + 7], &text[digits..])
        })
        .collect();
    (events, messages)
}
