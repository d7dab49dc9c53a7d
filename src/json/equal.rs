//! Equality of JSON values, as the contract compares them ("as JSON values").
//!
//! Numbers compare by binary64 value (`1 == 1.0`, `-0 == 0`), strings by decoded content,
//! objects as maps (member order is ignored; keys are unique after parsing), arrays
//! element by element. Iterative, like everything in this module.

use super::{Kind, Value};

/// `true` when `a` and `b` are equal JSON values.
pub fn equal(a: Value<'_, '_>, b: Value<'_, '_>) -> bool {
    equal_except(a, None, b, None)
}

/// Equality where the member whose value is `skip_a` (inside `a`) and the member whose
/// value is `skip_b` (inside `b`) are treated as absent. Used by the tool-result rewrite
/// rule (contract §4), which removes `message.content[0].content` from both sides.
pub fn equal_except(
    a: Value<'_, '_>,
    skip_a: Option<Value<'_, '_>>,
    b: Value<'_, '_>,
    skip_b: Option<Value<'_, '_>>,
) -> bool {
    let skipped = |value: &Value<'_, '_>, skip: &Option<Value<'_, '_>>| {
        skip.as_ref().is_some_and(|s| s.same_node(value))
    };
    let mut pending = vec![(a, b)];
    while let Some((a, b)) = pending.pop() {
        if a.kind() != b.kind() {
            return false;
        }
        match a.kind() {
            Kind::Null => {}
            Kind::Bool => {
                if a.as_bool() != b.as_bool() {
                    return false;
                }
            }
            Kind::Number => {
                if a.as_f64() != b.as_f64() {
                    return false;
                }
            }
            Kind::String => {
                if a.raw() != b.raw() && a.as_wtf8() != b.as_wtf8() {
                    return false;
                }
            }
            Kind::Array => {
                if a.len() != b.len() {
                    return false;
                }
                pending.extend(a.elements().zip(b.elements()));
            }
            Kind::Object => {
                let kept_a: Vec<_> = a.members().filter(|(_, v)| !skipped(v, &skip_a)).collect();
                let kept_b: Vec<_> = b.members().filter(|(_, v)| !skipped(v, &skip_b)).collect();
                if kept_a.len() != kept_b.len() {
                    return false;
                }
                let mut keyed_b: Vec<_> = kept_b
                    .into_iter()
                    .map(|(k, v)| (k.as_wtf8().unwrap_or_default(), v))
                    .collect();
                keyed_b.sort_unstable_by(|x, y| x.0.cmp(&y.0));
                for (key, value_a) in kept_a {
                    let key = key.as_wtf8().unwrap_or_default();
                    match keyed_b.binary_search_by(|(k, _)| k.as_ref().cmp(key.as_ref())) {
                        Ok(at) => pending.push((value_a, keyed_b[at].1)),
                        Err(_) => return false,
                    }
                }
            }
        }
    }
    true
}
