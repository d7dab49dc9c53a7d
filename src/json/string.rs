//! JSON string literals: decoding escapes to WTF-8 and writing them as `JSON.stringify`.
//!
//! JavaScript strings are UTF-16 and may hold unpaired surrogates (`dsh-formats.md` §1.3),
//! which a Rust `str` cannot. Decoded strings are therefore WTF-8: UTF-8, plus a lone
//! surrogate as its 3-byte generalized UTF-8 form. Two decoded strings are equal exactly
//! when their JavaScript values are.

/// Decodes the inside of a string literal (without quotes) that passed the parser.
pub fn decode_string(inner: &str) -> Vec<u8> {
    let bytes = inner.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            let run = bytes[i..]
                .iter()
                .position(|&b| b == b'\\')
                .unwrap_or(bytes.len() - i);
            out.extend_from_slice(&bytes[i..i + run]);
            i += run;
            continue;
        }
        let escape = bytes.get(i + 1).copied().unwrap_or(b'\\');
        i += 2;
        let simple = match escape {
            b'b' => Some(0x08),
            b'f' => Some(0x0c),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'u' => None,
            other => Some(other),
        };
        if let Some(byte) = simple {
            out.push(byte);
            continue;
        }
        let unit = hex4(bytes, i);
        i += 4;
        let pairs = (0xD800..0xDC00).contains(&unit)
            && bytes.get(i) == Some(&b'\\')
            && bytes.get(i + 1) == Some(&b'u');
        let low = if pairs { hex4(bytes, i + 2) } else { 0 };
        if (0xDC00..0xE000).contains(&low) {
            let scalar = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
            push_code_point(&mut out, scalar);
            i += 6;
            continue;
        }
        push_code_point(&mut out, unit);
    }
    out
}

/// Writes a decoded (WTF-8) string as a JSON literal the way `JSON.stringify` does
/// (JSON-13): minimal escapes, lowercase hex, lone surrogates escaped.
pub fn push_js_string(out: &mut String, wtf8: &[u8]) {
    out.push('"');
    let mut i = 0;
    while i < wtf8.len() {
        let byte = wtf8[i];
        let escape = match byte {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            0x08 => Some("\\b"),
            b'\t' => Some("\\t"),
            b'\n' => Some("\\n"),
            0x0c => Some("\\f"),
            b'\r' => Some("\\r"),
            _ => None,
        };
        if let Some(text) = escape {
            out.push_str(text);
            i += 1;
        } else if byte < 0x20 {
            push_unit_escape(out, u32::from(byte));
            i += 1;
        } else if byte == 0xED && wtf8.get(i + 1).is_some_and(|b| *b >= 0xA0) {
            // A surrogate in WTF-8 (ED A0..BF xx) is always unpaired: escape it.
            let unit = 0xD000
                | (u32::from(wtf8[i + 1] & 0x3F) << 6)
                | u32::from(wtf8.get(i + 2).copied().unwrap_or(0x80) & 0x3F);
            push_unit_escape(out, unit);
            i += 3;
        } else if byte == 0xED {
            // U+D000..U+D7FF: an ordinary 3-byte character.
            let end = (i + 3).min(wtf8.len());
            out.push_str(&String::from_utf8_lossy(&wtf8[i..end]));
            i = end;
        } else {
            // Stops only at ASCII or at 0xED, never inside a multi-byte character.
            let run = wtf8[i..]
                .iter()
                .position(|&b| b < 0x20 || b == b'"' || b == b'\\' || b == 0xED)
                .unwrap_or(wtf8.len() - i);
            // The run is UTF-8: WTF-8 differs from it only in surrogates, handled above.
            out.push_str(&String::from_utf8_lossy(&wtf8[i..i + run]));
            i += run;
        }
    }
    out.push('"');
}

/// [`push_js_string`] into a new string.
pub fn encode_js_string(wtf8: &[u8]) -> String {
    let mut out = String::with_capacity(wtf8.len() + 2);
    push_js_string(&mut out, wtf8);
    out
}

fn push_unit_escape(out: &mut String, unit: u32) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(char::from(HEX[((unit >> shift) & 0xF) as usize]));
    }
}

fn hex4(bytes: &[u8], at: usize) -> u32 {
    let digits = bytes.get(at..at + 4).unwrap_or(b"0000");
    digits.iter().fold(0, |acc, &d| {
        acc * 16 + char::from(d).to_digit(16).unwrap_or(0)
    })
}

/// Appends a code point (a lone surrogate included) in generalized UTF-8.
fn push_code_point(out: &mut Vec<u8>, cp: u32) {
    #[expect(
        clippy::cast_possible_truncation,
        reason = "each byte is masked to 8 bits"
    )]
    match cp {
        0..=0x7F => out.push(cp as u8),
        0x80..=0x7FF => out.extend_from_slice(&[0xC0 | (cp >> 6) as u8, 0x80 | (cp & 0x3F) as u8]),
        0x800..=0xFFFF => out.extend_from_slice(&[
            0xE0 | (cp >> 12) as u8,
            0x80 | ((cp >> 6) & 0x3F) as u8,
            0x80 | (cp & 0x3F) as u8,
        ]),
        _ => out.extend_from_slice(&[
            0xF0 | (cp >> 18) as u8,
            0x80 | ((cp >> 12) & 0x3F) as u8,
            0x80 | ((cp >> 6) & 0x3F) as u8,
            0x80 | (cp & 0x3F) as u8,
        ]),
    }
}
