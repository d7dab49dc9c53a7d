//! Taking a log's lock opens `LOCK` once: the check that the lock is on the file still
//! named `LOCK` (LOG-1) looks the path up, not through the log's `Storage`. Each `Storage`
//! call is an I/O point of the simulated disk and an open draws from its seeded faults, so
//! an extra open shifted every later fault and the regression seeds of
//! `tests/simulation.rs` (1038, 200,084) stopped reaching the faults they catch their bugs
//! at.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use surfacelog::internals::log::{LogOptions, LogWriter};

use crate::common::{HookedStorage, Op};

#[test]
fn taking_the_lock_of_a_log_opens_lock_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let (writer, _) = LogWriter::open(&log, LogOptions::default()).unwrap();
    writer.close().unwrap();
    let opens = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&opens);
    let options = LogOptions {
        storage: Arc::new(HookedStorage(Box::new(move |op| {
            if let Op::Open(path) = op
                && path.ends_with("LOCK")
            {
                counted.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        }))),
        ..LogOptions::default()
    };
    let (writer, _) = LogWriter::open(&log, options).unwrap();
    writer.close().unwrap();
    assert_eq!(
        opens.load(Ordering::SeqCst),
        1,
        "the identity check of LOCK is a Storage call: an extra I/O point and fault draw of \
         the simulated disk"
    );
}
