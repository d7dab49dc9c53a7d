//! JSON data decoder: any text either fails to parse or parses, writes back as
//! `JSON.stringify` would, and re-parses to an equal value whose writing is a fixed point.
#![no_main]

use libfuzzer_sys::fuzz_target;
use surfacelog::json::{Json, equal, write_js};

fuzz_target!(|bytes: &[u8]| {
    let text = String::from_utf8_lossy(bytes);
    let Ok(json) = Json::parse(&text) else { return };
    let mut once = String::new();
    write_js(&mut once, json.root());
    let again = Json::parse(&once).expect("the writer's output is JSON");
    assert!(equal(json.root(), again.root()), "value changed: {text:?} -> {once:?}");
    let mut twice = String::new();
    write_js(&mut twice, again.root());
    assert_eq!(once, twice, "writing is not a fixed point");
});
