//! Record and segment decoders (log-format.md §2–§4): arbitrary bytes are refused or
//! decoded, never a panic; a decoded record re-encodes to exactly the bytes it was decoded
//! from (REC-9: `encode ∘ decode` is the identity on every accepted byte string, so the
//! decoder refuses every reserved or implied field the encoder would not write). Good seeds
//! (`fuzz/corpus/` is not committed) are the three records of
//! `format-spec/vectors/segment-v1.seg`, at offsets 64, 216 and 472, and a stored
//! session's records, chunk records among them (`cargo run --example fuzz_seeds`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use surfacelog::internals::log::segment::SegmentHeader;
use surfacelog::internals::record::{decode, encode};

fuzz_target!(|bytes: &[u8]| {
    let _ = SegmentHeader::decode(bytes);
    let Ok((event, len)) = decode(bytes) else {
        return;
    };
    // REC-12: what a chunk record holds always rebuilds to a JSON text (REC-13).
    if event.chunk().is_some() {
        let text = event.text();
        surfacelog::internals::json::Json::parse(&text).expect("a chunk record's text is JSON");
        assert_eq!(event.text_len(), text.len());
    }
    let mut again = Vec::new();
    encode(&event, &mut again);
    assert_eq!(
        &again[..],
        &bytes[..len],
        "a decoded record re-encodes to its bytes"
    );
});
