//! Message pack reader (message-pack.md MSP-1, MSP-4): arbitrary bytes are refused or
//! read, never a panic; a pack that is accepted lists its entries in increasing seq order
//! below its `seq_next`, and looking each one up gives back the text its entry lists.
#![no_main]

use libfuzzer_sys::fuzz_target;
use surfacelog::internals::store::pack::{Lookup, Pack};

fuzz_target!(|bytes: &[u8]| {
    let Ok(pack) = Pack::from_bytes(bytes.to_vec()) else {
        return;
    };
    let mut before = None;
    for (seq, text) in pack.entries() {
        assert!(seq < pack.seq_next());
        assert!(before.is_none_or(|b| b < seq));
        before = Some(seq);
        match pack.message(seq) {
            Lookup::Packed(found) => assert_eq!(found, text),
            // Text that is not UTF-8 is left to the log (MSP-3).
            Lookup::NotPacked => assert!(text.is_none()),
        }
    }
    let last = pack.seq_next().saturating_sub(1);
    for seq in [0, 1, last, pack.seq_next(), u64::MAX] {
        let _ = pack.message(seq);
    }
});
