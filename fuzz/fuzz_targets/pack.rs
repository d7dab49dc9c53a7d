//! Message pack reader (message-pack.md MSP-1, MSP-4): arbitrary bytes are refused or
//! read, never a panic; a pack that is accepted lists its entries in increasing seq order
//! below its `seq_next`, looking each one up gives back the text its entry lists, and
//! that text is a slice of the text area the pack lends (`Pack::texts`, MSP-6), in order;
//! its span (`Pack::span`, what a caller that lends the texts gets) is where that text
//! lies, or for a text that is not UTF-8 a span of the text area all the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use surfacelog::internals::store::pack::{Lookup, Pack};

fuzz_target!(|bytes: &[u8]| {
    let Ok(pack) = Pack::from_bytes(bytes.to_vec()) else {
        return;
    };
    let texts = pack.texts();
    let (mut before, mut end_before) = (None, 0);
    for (seq, text) in pack.entries() {
        assert!(seq < pack.seq_next());
        assert!(before.is_none_or(|b| b < seq));
        before = Some(seq);
        match (pack.message(seq), pack.span(seq)) {
            (Lookup::Packed(found), Lookup::Packed(span)) => {
                assert_eq!(found, text);
                assert_eq!(found.map(str::as_bytes), span.map(|span| &texts[span]));
            }
            // Text that is not UTF-8 is left to the log (MSP-3), and lent as it is.
            (Lookup::NotPacked, Lookup::Packed(Some(span))) => {
                assert!(text.is_none());
                assert!(std::str::from_utf8(&texts[span]).is_err());
            }
            (found, span) => panic!("{seq}: {found:?} and {span:?}"),
        }
        if let Some(text) = text.filter(|t| !t.is_empty()) {
            let span = texts.span_of(text).expect("an entry's text lies in the text area");
            assert!(span.start >= end_before, "entries follow one another");
            assert_eq!(&texts[span.clone()], text.as_bytes());
            end_before = span.end;
        }
    }
    assert_eq!(texts.len(), bytes.len() - (48 + 16 * pack.entries().count()));
    let last = pack.seq_next().saturating_sub(1);
    for seq in [0, 1, last, pack.seq_next(), u64::MAX] {
        let _ = pack.message(seq);
        let _ = pack.span(seq);
    }
});
