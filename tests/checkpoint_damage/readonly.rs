//! read-only paths write nothing beside a log whose caches are stale or damaged.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use surfacelog::{Durability, Store};

fn tree(dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            tree(&p, out);
        } else {
            out.insert(p.display().to_string(), std::fs::read(&p).unwrap());
        }
    }
}

#[test]
fn read_only_paths_change_nothing_over_damaged_caches() {
    let dir = common::scratch("rev", "ro");
    let options = common::store_options(Durability::Sync, 1 << 20).message_pack(1);
    let store = Store::open_or_create(dir.as_ref(), options).unwrap();
    let mut s = store.create("s", None, None).unwrap();
    for turn in 1..=6 {
        common::numbered_turn(&mut s, turn);
    }
    s.close().unwrap();
    let sdir = dir.join("sessions/s");
    let ck = std::fs::read(sdir.join("checkpoint")).unwrap();
    let pk = std::fs::read(sdir.join("messages")).unwrap();
    let mut stale_pack = pk.clone();
    stale_pack[12] ^= 1; // last_text_crc: stale (crc no longer checks either)
    let mut ck_nodes = ck.clone();
    ck_nodes[48] ^= 1; // nodes fail: refold
    let cases: Vec<(&str, Vec<u8>, Vec<u8>)> = vec![
        ("good", ck.clone(), pk.clone()),
        ("nodes", ck_nodes, pk.clone()),
        ("pack", ck.clone(), stale_pack),
    ];
    for (what, c, p) in cases {
        std::fs::write(sdir.join("checkpoint"), &c).unwrap();
        std::fs::write(sdir.join("messages"), &p).unwrap();
        let mut before = BTreeMap::new();
        tree(&sdir, &mut before);
        {
            let i = store.inspect("s").unwrap();
            let _ = i.messages().unwrap();
            let _ = i.message_texts();
            let _ = i.transcript().unwrap();
            let _ = i.as_of(3).unwrap();
        }
        let _ = store.verify(None).unwrap();
        let _ = store.follow("s").unwrap();
        let _ = store.list().unwrap();
        let mut after = BTreeMap::new();
        tree(&sdir, &mut after);
        assert_eq!(
            before.keys().collect::<Vec<_>>(),
            after.keys().collect::<Vec<_>>(),
            "{what}"
        );
        assert!(before == after, "{what}: a file changed");
    }
}
