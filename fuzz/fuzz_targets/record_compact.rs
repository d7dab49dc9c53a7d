//! Compact record decoder (log-format.md §4.2): arbitrary bytes are refused or decoded,
//! never a panic; a decoded record re-encodes to exactly the bytes it was decoded from
//! (REC-20: `encode ∘ decode` is the identity on every accepted byte string). An event
//! record also re-encodes to the same bytes through the writer's own choice of kind
//! (`choose`, REC-17), from the event as the engine holds it, and a run's members rebuild
//! JSON texts (REC-13). Each input is checked as given and again with its `crc` made to
//! match (as a writer would have computed it), so mutations reach the body's rules rather
//! than stopping at the checksum. Seeds (`cargo run --example fuzz_seeds`): a stored session's
//! events encoded as compact records, chunk runs among them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use surfacelog::internals::json::Json;
use surfacelog::internals::record::compact::{Record, decode, encode};

/// Texts longer than this are not rebuilt here: a few bytes of runs of sources can stand
/// for a text of up to 4 GiB (REC-20 bounds it there).
const TEXT_CHECKED_MAX: u64 = 1 << 20;

fuzz_target!(|bytes: &[u8]| {
    check(bytes);
    if let Some(resealed) = resealed(bytes) {
        check(&resealed);
    }
});

/// `bytes` with the `crc` of the frame they start with recomputed, when `len` reads.
fn resealed(bytes: &[u8]) -> Option<Vec<u8>> {
    let n = bytes.iter().take(5).position(|b| b & 0x80 == 0)? + 1;
    let len = bytes[..n]
        .iter()
        .enumerate()
        .fold(0_usize, |v, (i, b)| v | usize::from(b & 0x7f) << (7 * i));
    let body = bytes.get(n + 4..n + 4 + len)?;
    let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[..n]), body);
    let mut out = bytes.to_vec();
    out[n..n + 4].copy_from_slice(&crc.to_le_bytes());
    Some(out)
}

fn check(bytes: &[u8]) {
    let Ok((record, len)) = decode(bytes) else {
        return;
    };
    let mut again = Vec::new();
    record.encode(&mut again);
    assert_eq!(
        &again[..],
        &bytes[..len],
        "a decoded record re-encodes to its bytes"
    );
    match record {
        Record::Event(e) => {
            if e.text_len() <= TEXT_CHECKED_MAX {
                let text = e.text();
                assert_eq!(e.text_len(), text.len() as u64);
                assert_eq!(&text[e.data_span()], e.data());
                let event = e.to_event();
                let mut written = Vec::new();
                encode(&event.as_ref(), &mut written).expect("a decoded event encodes");
                assert_eq!(
                    &written[..],
                    &bytes[..len],
                    "the writer chooses the same kind"
                );
            }
        }
        Record::Chunks(run) => {
            for member in run.members().take(64) {
                let event = member.event();
                let text = event.text();
                Json::parse(&text).expect("a run member's text is JSON");
                assert_eq!(event.text_len(), text.len());
            }
        }
    }
}
