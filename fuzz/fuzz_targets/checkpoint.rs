//! Checkpoint decoder (checkpoint.md CKP-1 to CKP-3): arbitrary bytes are refused or
//! decoded against a log, never a panic; the checkpoint of a session built by random
//! operations encodes and decodes back to itself, and any one changed byte of it is refused.
#![no_main]

#[path = "common/ops.rs"]
mod ops;

use libfuzzer_sys::fuzz_target;
use surfacelog::internals::session::repair::RepairState;
use surfacelog::internals::session::{Options, Session};
use surfacelog::internals::store::checkpoint::Checkpoint;

fuzz_target!(|bytes: &[u8]| {
    // The first byte splits the input: operations building a session, then the rest.
    let Some((&split, bytes)) = bytes.split_first() else {
        return;
    };
    let (program, rest) = bytes.split_at((usize::from(split) * 2).min(bytes.len()));
    let mut session = Session::create("f", None, None, Options::default()).unwrap();
    let mut model = ops::Model::default();
    for op in ops::ops(program, 64) {
        ops::apply(&mut session, &mut model, op);
    }
    let _ = Checkpoint::decode(rest, session.log());

    let mut repair = RepairState::default();
    repair.observe_from(session.log(), 0).unwrap();
    let checkpoint = Checkpoint::of(session.surface(), &repair, session.log()).unwrap();
    let encoded = checkpoint.encode();
    // The repair state compares by its layout (free slots included), which its encoding
    // does not keep: the round trip is checked on the encoding and on the meaning.
    let decoded = Checkpoint::decode(&encoded, session.log()).expect("its own checkpoint");
    assert_eq!(decoded.encode(), encoded);
    assert_eq!(decoded.surface, checkpoint.surface);
    assert_eq!(
        (decoded.last_text_crc, &decoded.chain),
        (checkpoint.last_text_crc, &checkpoint.chain)
    );
    assert_eq!(
        decoded.repair.closers(session.log()).unwrap(),
        repair.closers(session.log()).unwrap()
    );
    for change in rest.chunks_exact(3) {
        let mut damaged = encoded.clone();
        let at = usize::from(u16::from_le_bytes([change[0], change[1]])) % damaged.len();
        damaged[at] ^= change[2];
        if change[2] != 0 {
            assert!(
                Checkpoint::decode(&damaged, session.log()).is_err(),
                "byte {at} ^ {:#x}",
                change[2]
            );
        }
    }
    // Any shortening is refused.
    if let Some(&cut) = rest.first() {
        let cut = encoded.len().saturating_sub(usize::from(cut) + 1);
        assert!(
            Checkpoint::decode(&encoded[..cut], session.log()).is_err(),
            "cut at {cut}"
        );
    }
});
