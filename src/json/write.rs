//! Writing a value exactly as ECMAScript `JSON.stringify` would (`dsh-formats.md` §2.2).
//!
//! Used wherever the engine builds JSON text itself from parsed values (repair closers,
//! packed rows and their expansion), so that its output matches the reference writer
//! byte for byte. Iterative: depth costs heap, never stack.

use super::{Kind, Value, push_js_string};

/// Appends the `JSON.stringify` text of `value` to `out`: no whitespace (JSON-10),
/// array-index keys first (JSON-11), ECMAScript number text (JSON-12), minimal string
/// escapes (JSON-13).
pub fn write_js(out: &mut String, value: Value<'_, '_>) {
    enum Work<'j, 'a> {
        Value(Value<'j, 'a>),
        Text(&'static str),
    }
    let mut work = vec![Work::Value(value)];
    while let Some(item) = work.pop() {
        let value = match item {
            Work::Text(text) => {
                out.push_str(text);
                continue;
            }
            Work::Value(value) => value,
        };
        match value.kind() {
            Kind::Null => out.push_str("null"),
            Kind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            Kind::Number => push_js_number(out, value.as_f64().unwrap_or(f64::NAN)),
            Kind::String => push_js_string_value(out, value),
            Kind::Array => {
                out.push('[');
                work.push(Work::Text("]"));
                let elements: Vec<_> = value.elements().collect();
                for (i, element) in elements.into_iter().enumerate().rev() {
                    work.push(Work::Value(element));
                    if i > 0 {
                        work.push(Work::Text(","));
                    }
                }
            }
            Kind::Object => {
                out.push('{');
                work.push(Work::Text("}"));
                let members = js_member_order(value);
                for (i, (key, member)) in members.into_iter().enumerate().rev() {
                    work.push(Work::Value(member));
                    work.push(Work::Text(":"));
                    work.push(Work::Value(key));
                    if i > 0 {
                        work.push(Work::Text(","));
                    }
                }
            }
        }
    }
}

/// Appends the JS-JSON of a string value (JSON-13). A string written without escapes is
/// already in that form (valid UTF-8 holds no surrogate, and JSON forbids raw control
/// characters), so its text is copied; an escaped one is decoded and written again.
pub fn push_js_string_value(out: &mut String, value: Value<'_, '_>) {
    let node = value.node();
    if node.kind == Kind::String && !node.flag {
        out.push_str(value.raw());
    } else {
        push_js_string(out, &value.as_wtf8().unwrap_or_default());
    }
}

/// Appends ECMAScript `Number::toString` of `value`; NaN and the infinities are `null`
/// and both zeros are `0` (JSON-12).
pub fn push_js_number(out: &mut String, value: f64) {
    if !value.is_finite() {
        out.push_str("null");
    } else if value == 0.0 {
        out.push('0');
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        // Integers below 10^15 print as their decimal digits, which is what
        // Number::toString gives for them (JSON-12 with n = k <= 21).
        #[expect(clippy::cast_possible_truncation, reason = "integral and below 1e15")]
        let integer = value as i64;
        out.push_str(itoa_i64(integer, &mut [0; 20]));
    } else {
        out.push_str(ryu_js::Buffer::new().format_finite(value));
    }
}

type Member<'j, 'a> = (Value<'j, 'a>, Value<'j, 'a>);

/// Members in the order JavaScript enumerates them: canonical array-index keys
/// (`0..=4294967294`) ascending, then the rest in insertion order (JSON-11).
fn js_member_order<'j, 'a>(object: Value<'j, 'a>) -> Vec<Member<'j, 'a>> {
    let mut members: Vec<(Option<u32>, Member<'j, 'a>)> = object
        .members()
        .map(|(k, v)| (array_index(k), (k, v)))
        .collect();
    if members.iter().any(|(index, _)| index.is_some()) {
        // Stable: keys that are not indices keep their insertion order.
        members.sort_by_key(|(index, _)| index.map_or((1, 0), |i| (0, i)));
    }
    members.into_iter().map(|(_, member)| member).collect()
}

fn array_index(key: Value<'_, '_>) -> Option<u32> {
    let decoded = key.as_wtf8()?;
    let digits = decoded.as_ref();
    let canonical = !digits.is_empty()
        && digits.len() <= 10
        && digits.iter().all(u8::is_ascii_digit)
        && (digits[0] != b'0' || digits.len() == 1);
    if !canonical {
        return None;
    }
    let value: u64 = digits
        .iter()
        .fold(0, |acc, d| acc * 10 + u64::from(d - b'0'));
    u32::try_from(value).ok().filter(|v| *v != u32::MAX)
}

/// The decimal digits of `value`, written into `buf` from its end.
/// Writes a safe integer (contract §2) as `Number::toString` does: its decimal digits,
/// what [`push_js_number`] writes for it, without going through binary64. Only the
/// adapters write integers this way (and the tests compare it with [`push_js_number`]).
#[cfg(any(feature = "dsh", test))]
pub(crate) fn push_js_int(out: &mut String, value: i64) {
    debug_assert!(value.unsigned_abs() <= crate::limits::SAFE_INTEGER_MAX.unsigned_abs());
    out.push_str(itoa_i64(value, &mut [0; 20]));
}

fn itoa_i64(value: i64, buf: &mut [u8; 20]) -> &str {
    let mut n = value.unsigned_abs();
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + u8::try_from(n % 10).unwrap_or(0);
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if value < 0 {
        at -= 1;
        buf[at] = b'-';
    }
    std::str::from_utf8(&buf[at..]).unwrap_or("0")
}
