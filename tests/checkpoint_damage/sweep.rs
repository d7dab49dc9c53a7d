//! Damaged checkpoint and pack bytes (bit flips and cuts, plain and compressed packs),
//! compared with a fresh read without either: equal, or `CORRUPT`; `verify` reports each.

use std::path::Path;

use crate::common;

use surfacelog::internals::session::Session;
use surfacelog::internals::session::SessionLog;
use surfacelog::{Durability, Store, StoreOptions};

type State = (
    Vec<u64>,
    Vec<(u64, String)>,
    Vec<u64>,
    Vec<(u64, String)>,
    u64,
);

fn options() -> StoreOptions {
    common::store_options(Durability::Sync, 1 << 20)
        .checkpoint_every(1000)
        .message_pack(1)
}

/// The two ways a store writes its pack, and so the pack swept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pack {
    /// Written by a store of compact records (§4.2): compressed as it is written in a build
    /// with `compress` (MSP-8), plain otherwise.
    OfCompactRecords,
    /// Plain (MSP-1): written by a store of version 1 records.
    Plain,
    /// Plain, then compressed by a compaction (MSP-8, `CompactOptions::compress`).
    #[cfg(feature = "compress")]
    CompressedByCompaction,
}

fn state<L: SessionLog>(s: &Session<L>) -> Result<State, String> {
    let e = |e: surfacelog::Error| e.to_string();
    let messages = s.messages().map_err(e)?;
    let messages = messages
        .iter()
        .map(|m| (m.seq, m.json.to_owned()))
        .collect();
    let transcript = s.transcript().map_err(e)?;
    let as_of = s.as_of(s.seq_next() / 2).map_err(e)?;
    let old = as_of
        .messages
        .iter()
        .map(|m| (m.seq, m.json.to_owned()))
        .collect();
    Ok((
        s.surface().nodes().to_vec(),
        messages,
        transcript,
        old,
        s.seq_next(),
    ))
}

fn build(dir: &Path, pack: Pack) -> Store {
    let options = match pack {
        Pack::OfCompactRecords => options().compact_records(true),
        Pack::Plain => options().compact_records(false),
        #[cfg(feature = "compress")]
        Pack::CompressedByCompaction => options().compact_records(false),
    };
    let store = Store::open_or_create(dir, options).unwrap();
    let mut s = store.create("s", None, None).unwrap();
    for turn in 1..=8 {
        common::numbered_turn(&mut s, turn);
    }
    common::compact(&mut s, 1, 11, "early");
    common::prune_to_empty(&mut s, 32);
    for turn in 9..=10 {
        common::numbered_turn(&mut s, turn);
    }
    s.close().unwrap();
    store
}

/// The offsets tried in a file of `len` bytes: every one of its first 256 bytes (the
/// headers and tables) and its last 64 (the ends of the texts and the checksums), and
/// every 5th in between, so that a run stays within seconds in a debug build.
fn places(len: usize) -> impl Iterator<Item = usize> {
    (0..len).filter(move |&at| at < 256 || at + 64 >= len || at % 5 == 0)
}

fn sweep(file: &str) {
    sweep_with(file, Pack::OfCompactRecords);
}

fn sweep_with(file: &str, pack: Pack) {
    let dir = common::scratch("rev", file);
    let store = build(dir.as_ref(), pack);
    #[cfg(feature = "compress")]
    if pack == Pack::CompressedByCompaction {
        let report = store
            .compact_log_with("s", surfacelog::CompactOptions::new().compress(true))
            .unwrap();
        assert!(report.pack_bytes.is_some(), "pack compressed");
    }
    // MSP-1's version: 1 plain, 2 compressed (MSP-8).
    let version = std::fs::read(dir.join("sessions/s/messages")).unwrap()[8];
    let compressed = cfg!(feature = "compress") && pack != Pack::Plain;
    assert_eq!(version, if compressed { 2 } else { 1 }, "{pack:?}");
    let sdir = dir.join("sessions/s");
    let path = sdir.join(file);
    let good = std::fs::read(&path).unwrap();
    let ck = std::fs::read(sdir.join("checkpoint")).unwrap();
    let pk = std::fs::read(sdir.join("messages")).unwrap();
    // truth: no checkpoint, no pack
    std::fs::remove_file(sdir.join("checkpoint")).unwrap();
    std::fs::remove_file(sdir.join("messages")).unwrap();
    let truth = state(&store.inspect("s").unwrap()).unwrap();
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for at in places(good.len()) {
        for bit in [0u8, 7] {
            let mut b = good.clone();
            b[at] ^= 1 << bit;
            cases.push((format!("flip {at}.{bit}"), b));
        }
    }
    for len in places(good.len()) {
        cases.push((format!("cut {len}"), good[..len].to_vec()));
    }
    let mut bad = Vec::new();
    for (what, bytes) in cases {
        std::fs::write(sdir.join("checkpoint"), &ck).unwrap();
        std::fs::write(sdir.join("messages"), &pk).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        let inspected = store
            .inspect("s")
            .map_err(|e| e.to_string())
            .and_then(|s| state(&s));
        if inspected.as_ref() != Ok(&truth) {
            // a refusal is acceptable when it's a CORRUPT naming the file (seq_next ahead)
            let ok = matches!(&inspected, Err(e) if e.contains("CORRUPT") || e.contains("corrupt") || e.contains("RCV-14"));
            if !ok {
                bad.push(format!("inspect {what}: {inspected:?}"));
            }
        }
        let report = store.verify(None).unwrap();
        let problems = &report.sessions[0].problems;
        if problems.is_empty() {
            bad.push(format!("verify silent {what}"));
        }
        let opened = store
            .open_session("s")
            .map_err(|e| e.to_string())
            .and_then(|(s, _)| state(&s));
        if opened.as_ref() != Ok(&truth) {
            let ok = matches!(&opened, Err(e) if e.contains("CORRUPT") || e.contains("RCV-14"));
            if !ok {
                bad.push(format!("open {what}: {opened:?}"));
            }
        }
        // after the open, another open must be the truth
        std::fs::write(sdir.join("checkpoint"), &ck).unwrap();
        std::fs::write(sdir.join("messages"), &pk).unwrap();
    }
    assert!(
        bad.is_empty(),
        "{} bad:\n{}",
        bad.len(),
        bad.iter().take(30).cloned().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn sweep_checkpoint() {
    sweep("checkpoint");
}

#[test]
fn sweep_pack() {
    sweep("messages");
}

#[test]
fn sweep_plain_pack() {
    sweep_with("messages", Pack::Plain);
}

#[cfg(feature = "compress")]
#[test]
fn sweep_compressed_pack() {
    sweep_with("messages", Pack::CompressedByCompaction);
}
