//! JSON data decoder: any text either fails to parse or parses, writes back as
//! `JSON.stringify` would, and re-parses to an equal value (unless it holds a number
//! outside binary64's range, which JavaScript writes as `null`) whose writing is a fixed
//! point.
#![no_main]

use libfuzzer_sys::fuzz_target;
use surfacelog::internals::json::{Json, Kind, Value, equal, write_js};

fuzz_target!(|bytes: &[u8]| {
    let text = String::from_utf8_lossy(bytes);
    let Ok(json) = Json::parse(&text) else { return };
    let mut once = String::new();
    write_js(&mut once, json.root());
    let again = Json::parse(&once).expect("the writer's output is JSON");
    if !has_infinite_number(json.root()) {
        assert!(
            equal(json.root(), again.root()),
            "value changed: {text:?} -> {once:?}"
        );
    }
    let mut twice = String::new();
    write_js(&mut twice, again.root());
    assert_eq!(once, twice, "writing is not a fixed point");
});

fn has_infinite_number(root: Value<'_, '_>) -> bool {
    let mut pending = vec![root];
    while let Some(value) = pending.pop() {
        match value.kind() {
            Kind::Number if value.as_f64().is_some_and(|f| !f.is_finite()) => return true,
            Kind::Array => pending.extend(value.elements()),
            Kind::Object => pending.extend(value.members().map(|(_, v)| v)),
            _ => {}
        }
    }
    false
}
