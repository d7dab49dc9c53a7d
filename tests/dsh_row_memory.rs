//! Memory of the JSONL reader on a packed row of many members: a JSONL row has no bound on
//! its members (ROW-9), so its members are built and handed out one at a time. Before the
//! fix, every member of a row was built (text and tape) before the first was handed out:
//! a 5 MiB file of one row of a million empty deltas took some 900 MiB, and a row at the
//! record limit (64 MiB) gigabytes. Alone in its file, because it reads the process's
//! peak resident size (`VmHWM`), reset before the read.

#![cfg(all(feature = "dsh", target_os = "linux"))]

use surfacelog::internals::adapters::jsonl::{Compression, JsonlReader};

const MIB: u64 = 1 << 20;

#[path = "common/peak.rs"]
mod peak;
use peak::{peak_rss, reset_peak};

#[test]
fn a_row_of_a_million_members_is_not_built_whole() {
    const MEMBERS: usize = 1_000_000;
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from(
        "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0}\n",
    );
    text.push_str(
        r#"{"type":"text-chunks","seq0":0,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":["#,
    );
    text.push_str(&vec!["0"; MEMBERS - 1].join(","));
    text.push_str(r#"],"texts":["#);
    text.push_str(&vec!["\"\""; MEMBERS].join(","));
    text.push_str("]}}\n");
    let path = dir.path().join("session.jsonl");
    std::fs::write(&path, &text).unwrap();
    let file_bytes = text.len() as u64;
    drop(text);
    let before = reset_peak();
    let reader = JsonlReader::open(&path, Compression::None).unwrap();
    let (mut events, mut last) = (0, String::new());
    let scan = reader
        .read_events(
            &mut |event| {
                events += 1;
                if events == MEMBERS {
                    event.text().clone_into(&mut last);
                }
                Ok(())
            },
            &mut |_| {},
        )
        .unwrap();
    let grown = peak_rss().saturating_sub(before);
    assert_eq!(
        (events, scan.events, scan.torn),
        (MEMBERS, MEMBERS as u64, None)
    );
    assert_eq!(
        last,
        r#"{"type":"assistant/chunk","seq":999999,"time":0,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":""}}}"#
    );
    // The record and its parse (a tape of two values per member) stay: some 40 MiB here.
    assert!(
        grown < 200 * MIB,
        "reading a {} MiB row grew the peak by {} MiB",
        file_bytes / MIB,
        grown / MIB
    );
}
