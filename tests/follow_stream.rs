//! Issue 14, item 5: a follower as an async stream (feature `tokio`). A writer in another
//! thread appends with `Sync` durability while a tokio task consumes the stream: every
//! committed event arrives once, in seq order, byte for byte; a dropped stream holds nothing
//! of the session (its thread's exit within 50 ms is not observed here); a stream whose
//! thread panics ends with an error, never as if it were done.
#![cfg(feature = "tokio")]

use std::pin::Pin;
use std::time::Duration;

use futures_core::Stream;
use surfacelog::internals::log::Durability;
use surfacelog::internals::store::Store;

mod common;

use common::{closed_turn, scratch, store_options};

/// The next item of `stream`, or `None` after 10 s (the test fails then, never hangs).
async fn next<S: Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
    let item = std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx));
    tokio::time::timeout(Duration::from_secs(10), item)
        .await
        .ok()
        .flatten()
}

#[test]
fn a_stream_yields_each_committed_event_once_in_order() {
    let dir = scratch("follow_stream", "order");
    let store = Store::open_or_create(&dir, store_options(Durability::Sync, 64 << 10)).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    closed_turn(&mut session, 1, "before the stream", "out 1");
    let from = session.seq_next();
    let stream = store.follow("s").unwrap().into_stream(from).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut stream = stream;
    let mut received = Vec::new();
    let session = std::thread::scope(|scope| {
        let writer = scope.spawn(move || {
            for turn in 2..=6 {
                std::thread::sleep(Duration::from_millis(5));
                closed_turn(&mut session, turn, &format!("turn {turn}"), "out");
            }
            session
        });
        // While the writer appends: the first event of its first turn arrives.
        let first = runtime
            .block_on(next(&mut stream))
            .expect("an event within 10 s");
        received.push(first.unwrap());
        writer.join().unwrap()
    });
    let total = usize::try_from(session.seq_next() - from).unwrap();
    runtime.block_on(async {
        while received.len() < total {
            let event = next(&mut stream).await.expect("an event within 10 s");
            received.push(event.unwrap());
        }
    });
    for (i, event) in received.iter().enumerate() {
        let seq = from + i as u64;
        let stored = session.event(seq).unwrap().unwrap();
        assert_eq!(event.text(), stored.text(), "seq {seq}");
    }
    session.close().unwrap();
}

#[test]
fn a_dropped_stream_holds_nothing_of_the_session() {
    let dir = scratch("follow_stream", "drop");
    let store = Store::open_or_create(&dir, store_options(Durability::Sync, 64 << 10)).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    let stream = store.follow("s").unwrap().into_stream(0).unwrap();
    drop(stream);
    // Whether or not its thread has noticed yet, the writer is never held back by it.
    std::thread::sleep(Duration::from_millis(120));
    closed_turn(&mut session, 1, "after the drop", "out");
    session.close().unwrap();
    assert!(store.open_session("s").is_ok());
}

/// A stream whose thread panics (here its storage, as the follower opens the next segment)
/// ends with an error naming the log directory. Before, the thread's end closed the
/// channel and the stream ended with `None`, as if nothing more would ever be committed.
#[test]
fn a_stream_whose_thread_panics_ends_with_an_error() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use common::{HookedStorage, Op};

    let dir = scratch("follow_stream", "panic");
    let plain = Store::open_or_create(&dir, store_options(Durability::Sync, 4096)).unwrap();
    let armed = Arc::new(AtomicBool::new(false));
    let hook = {
        let armed = Arc::clone(&armed);
        move |op: Op<'_>| {
            if let Op::Opened(path) = op
                && path.extension().is_some_and(|e| e == "seg")
                && armed.load(Ordering::SeqCst)
            {
                panic!("the storage fails");
            }
            Ok(())
        }
    };
    let options =
        store_options(Durability::Sync, 4096).storage(Arc::new(HookedStorage(Box::new(hook))));
    let hooked = Store::open(&dir, options).unwrap();
    let mut session = plain.create("s", None, None).unwrap();
    closed_turn(&mut session, 1, "before the stream", "out 1");
    let mut stream = hooked.follow("s").unwrap().into_stream(0).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let first = runtime
        .block_on(next(&mut stream))
        .expect("an event within 10 s");
    assert_eq!(first.unwrap().seq(), 0);
    armed.store(true, Ordering::SeqCst);
    // Turns until the log rolls into a segment the follower has not opened.
    let segments = |dir: &std::path::Path| {
        walk(dir)
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "seg"))
            .count()
    };
    let before = segments(&dir);
    let mut turn = 2;
    while segments(&dir) == before {
        closed_turn(&mut session, turn, &format!("turn {turn}"), "out");
        turn += 1;
    }
    let error = runtime.block_on(async {
        loop {
            match next(&mut stream).await {
                Some(Ok(_)) => {}
                Some(Err(error)) => break error,
                None => panic!("the stream ended without an error (or none within 10 s)"),
            }
        }
    });
    assert_eq!(error.code(), "IO", "{error}");
    assert!(error.to_string().contains("panicked"), "{error}");
    session.close().unwrap();
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}
