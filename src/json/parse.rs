//! The iterative RFC 8259 parser that builds the tape.

use super::{JSON_TEXT_BYTES_MAX, Json, JsonError, JsonErrorKind, Kind, Node, decode_string};

/// Objects with more keys than this are checked for duplicates by sorting, smaller ones
/// pairwise.
const DUPLICATE_SCAN_KEYS_MAX: usize = 8;

pub(super) fn parse(text: &str) -> Result<Json<'_>, JsonError> {
    parse_checking(text, true)
}

/// [`parse`], checking repeated keys only when `check_keys` (JavaScript's `JSON.parse`
/// takes them, keeping the last value).
pub(super) fn parse_checking(text: &str, check_keys: bool) -> Result<Json<'_>, JsonError> {
    if text.len() > JSON_TEXT_BYTES_MAX {
        return Err(JsonError {
            offset: text.len(),
            kind: JsonErrorKind::TooLarge,
        });
    }
    let mut parser = Parser {
        bytes: text.as_bytes(),
        pos: 0,
        // Roughly one node per 8 bytes of compact JSON; capped so that a huge text does
        // not reserve its whole tape up front.
        nodes: Vec::with_capacity((text.len() / 8 + 4).min(NODES_RESERVE_MAX)),
        neg_zero: None,
        check_keys,
    };
    parser.document()?;
    Ok(Json {
        text,
        nodes: parser.nodes,
        negative_zero: parser.neg_zero,
        repeated_keys: !check_keys,
    })
}

/// The binary64 value of a number token (correctly rounded, like `JSON.parse`).
pub(crate) fn number_value(token: &str) -> f64 {
    if let Some(value) = small_integer(token) {
        #[expect(clippy::cast_precision_loss, reason = "below 10^15: exact")]
        let magnitude = value.unsigned_abs() as f64;
        // `-0` keeps its sign (JSON-3).
        return if token.starts_with('-') {
            -magnitude
        } else {
            magnitude
        };
    }
    // The token passed the grammar check, which Rust's float syntax accepts; the fallback
    // is unreachable but keeps this function total.
    token.parse::<f64>().unwrap_or(f64::NAN)
}

/// The value of an integer token of at most 15 digits (so exact in binary64, and a safe
/// integer), read eight digits at a time; `None` for any other token. `-0` gives 0.
pub(crate) fn small_integer(token: &str) -> Option<i64> {
    let bytes = token.as_bytes();
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 15 {
        return None;
    }
    let mut magnitude: i64 = 0;
    let mut rest = digits;
    if let Some((eight, tail)) = rest.split_first_chunk::<8>() {
        magnitude = eight_digits(u64::from_le_bytes(*eight))?;
        rest = tail;
    }
    for &byte in rest {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        magnitude = magnitude * 10 + i64::from(digit);
    }
    Some(if negative { -magnitude } else { magnitude })
}

/// The value of eight ASCII digits read as a little-endian word (the first digit in the
/// low byte); `None` when a byte is not a digit. Pairs, then quads, then the eight are
/// combined with one multiplication each (SWAR).
fn eight_digits(word: u64) -> Option<i64> {
    const HIGH_NIBBLES: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const ZEROS: u64 = 0x3030_3030_3030_3030;
    // Every byte is 0x30..=0x3F, and still is with 6 added (no byte carries: at most 0x45).
    if word & HIGH_NIBBLES != ZEROS
        || word.wrapping_add(0x0606_0606_0606_0606) & HIGH_NIBBLES != ZEROS
    {
        return None;
    }
    let digits = word - ZEROS;
    let pairs = (digits.wrapping_mul(10) + (digits >> 8)) & 0x00FF_00FF_00FF_00FF;
    let quads = (pairs.wrapping_mul(100) + (pairs >> 16)) & 0x0000_FFFF_0000_FFFF;
    let eight = (quads.wrapping_mul(10_000) + (quads >> 32)) & 0xFFFF_FFFF;
    i64::try_from(eight).ok()
}

/// The most tape nodes reserved before parsing starts.
const NODES_RESERVE_MAX: usize = 4096;

struct Parser<'t> {
    bytes: &'t [u8],
    pos: usize,
    nodes: Vec<Node>,
    neg_zero: Option<usize>,
    /// Whether an object that repeats a key is refused.
    check_keys: bool,
}

/// Open containers, innermost last: (tape index, is object).
type Stack = Vec<(u32, bool)>;

impl Parser<'_> {
    fn document(&mut self) -> Result<(), JsonError> {
        let mut stack: Stack = Vec::new();
        'value: loop {
            self.skip_ws();
            match self.peek() {
                Some(b'{') => {
                    stack.push((self.open(Kind::Object), true));
                    self.skip_ws();
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                        self.close(&mut stack)?;
                    } else {
                        self.key()?;
                        continue 'value;
                    }
                }
                Some(b'[') => {
                    stack.push((self.open(Kind::Array), false));
                    self.skip_ws();
                    if self.peek() == Some(b']') {
                        self.pos += 1;
                        self.close(&mut stack)?;
                    } else {
                        continue 'value;
                    }
                }
                _ => self.scalar()?,
            }
            // A value just ended: continue the innermost open container, or finish.
            loop {
                let Some(&(_, is_object)) = stack.last() else {
                    self.skip_ws();
                    if self.pos != self.bytes.len() {
                        return Err(self.error("unexpected text after the value"));
                    }
                    return Ok(());
                };
                self.skip_ws();
                match (self.peek(), is_object) {
                    (Some(b','), true) => {
                        self.pos += 1;
                        self.skip_ws();
                        self.key()?;
                        continue 'value;
                    }
                    (Some(b','), false) => {
                        self.pos += 1;
                        continue 'value;
                    }
                    (Some(b'}'), true) | (Some(b']'), false) => {
                        self.pos += 1;
                        self.close(&mut stack)?;
                    }
                    _ => return Err(self.error("expected ',' or the end of the container")),
                }
            }
        }
    }

    /// Parses `"key" :` inside an object.
    fn key(&mut self) -> Result<(), JsonError> {
        if self.peek() != Some(b'"') {
            return Err(self.error("expected a string key"));
        }
        self.string()?;
        self.skip_ws();
        if self.peek() != Some(b':') {
            return Err(self.error("expected ':' after a key"));
        }
        self.pos += 1;
        Ok(())
    }

    fn scalar(&mut self) -> Result<(), JsonError> {
        match self.peek() {
            Some(b'"') => self.string(),
            Some(b't') => self.literal("true", Kind::Bool, true),
            Some(b'f') => self.literal("false", Kind::Bool, false),
            Some(b'n') => self.literal("null", Kind::Null, false),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.error("expected a value")),
            None => Err(self.error("unexpected end of text")),
        }
    }

    fn open(&mut self, kind: Kind) -> u32 {
        let index = self.push(kind, false, self.pos, self.pos + 1);
        self.pos += 1;
        index
    }

    /// Ends the innermost container: fixes its span and subtree end, checks its keys.
    fn close(&mut self, stack: &mut Stack) -> Result<(), JsonError> {
        let (index, is_object) = stack.pop().expect("close is called with an open container");
        let next = to_u32(self.nodes.len());
        let node = &mut self.nodes[index as usize];
        node.end = to_u32(self.pos);
        node.next = next;
        if is_object && self.check_keys {
            self.check_duplicate_keys(index)?;
        }
        Ok(())
    }

    fn literal(&mut self, word: &str, kind: Kind, flag: bool) -> Result<(), JsonError> {
        if !self.bytes[self.pos..].starts_with(word.as_bytes()) {
            return Err(self.error("invalid literal"));
        }
        let start = self.pos;
        self.pos += word.len();
        self.push(kind, flag, start, self.pos);
        Ok(())
    }

    fn number(&mut self) -> Result<(), JsonError> {
        let start = self.pos;
        let negative = self.eat(b'-');
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.error("expected a digit")),
        }
        if self.eat(b'.') {
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.error("expected a digit after '.'"));
            }
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.error("expected a digit in the exponent"));
            }
            self.digits();
        }
        if negative && self.neg_zero.is_none() {
            let token = std::str::from_utf8(&self.bytes[start..self.pos]).unwrap_or("");
            if number_value(token) == 0.0 {
                self.neg_zero = Some(start);
            }
        }
        self.push(Kind::Number, false, start, self.pos);
        Ok(())
    }

    fn string(&mut self) -> Result<(), JsonError> {
        let start = self.pos;
        self.pos += 1;
        let mut escaped = false;
        loop {
            // Skip the plain run in one pass: most strings hold no escape.
            self.pos += plain_run(&self.bytes[self.pos..]);
            let Some(&byte) = self.bytes.get(self.pos) else {
                return Err(self.error("unterminated string"));
            };
            match byte {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    self.escape()?;
                }
                0x00..=0x1f => return Err(self.error("control character in a string")),
                _ => self.pos += 1,
            }
        }
        self.pos += 1;
        self.push(Kind::String, escaped, start, self.pos);
        Ok(())
    }

    fn escape(&mut self) -> Result<(), JsonError> {
        self.pos += 1;
        match self.peek() {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.pos += 1,
            Some(b'u') => {
                let hex = self.bytes.get(self.pos + 1..self.pos + 5);
                if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                    return Err(self.error("invalid \\u escape"));
                }
                self.pos += 5;
            }
            _ => return Err(self.error("invalid escape")),
        }
        Ok(())
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let hit = self.peek() == Some(byte);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn push(&mut self, kind: Kind, flag: bool, start: usize, end: usize) -> u32 {
        let index = to_u32(self.nodes.len());
        let next = index + 1;
        self.nodes.push(Node {
            kind,
            flag,
            start: to_u32(start),
            end: to_u32(end),
            next,
        });
        index
    }

    fn error(&self, what: &'static str) -> JsonError {
        JsonError {
            offset: self.pos,
            kind: JsonErrorKind::Syntax(what),
        }
    }

    /// Refuses an object that repeats a key (contract §2.1: `DATA_DUPLICATE_KEY`).
    fn check_duplicate_keys(&self, object: u32) -> Result<(), JsonError> {
        if self.small_object_unique(object) {
            return Ok(());
        }
        let mut keys: Vec<(&[u8], u32)> = Vec::new();
        let mut owned: Vec<(Vec<u8>, u32)> = Vec::new();
        let mut at = object + 1;
        let end = self.nodes[object as usize].next;
        while at < end {
            let key = self.nodes[at as usize];
            let inner = &self.bytes[key.start as usize + 1..key.end as usize - 1];
            if key.flag {
                let text = std::str::from_utf8(inner).unwrap_or("");
                owned.push((decode_string(text), key.start));
            } else {
                keys.push((inner, key.start));
            }
            at = self.nodes[at as usize + 1].next;
        }
        keys.extend(owned.iter().map(|(k, at)| (k.as_slice(), *at)));
        if keys.len() <= DUPLICATE_SCAN_KEYS_MAX {
            for (i, (a, at_a)) in keys.iter().enumerate() {
                if let Some((_, at_b)) = keys[i + 1..].iter().find(|(b, _)| a == b) {
                    return Err(duplicate(a, (*at_a).max(*at_b)));
                }
            }
            return Ok(());
        }
        keys.sort_unstable();
        match keys.windows(2).find(|w| w[0].0 == w[1].0) {
            Some(pair) => Err(duplicate(pair[1].0, pair[0].1.max(pair[1].1))),
            None => Ok(()),
        }
    }
}

impl Parser<'_> {
    /// The common case without allocating: an object of at most
    /// [`DUPLICATE_SCAN_KEYS_MAX`] keys, none escaped, all distinct. `false` means "not
    /// shown here"; the general check then decides.
    fn small_object_unique(&self, object: u32) -> bool {
        let mut keys = [&[][..]; DUPLICATE_SCAN_KEYS_MAX];
        let mut count = 0;
        let mut at = object + 1;
        let end = self.nodes[object as usize].next;
        while at < end {
            let key = self.nodes[at as usize];
            if key.flag || count == DUPLICATE_SCAN_KEYS_MAX {
                return false;
            }
            let inner = &self.bytes[key.start as usize + 1..key.end as usize - 1];
            if keys[..count].contains(&inner) {
                return false;
            }
            keys[count] = inner;
            count += 1;
            at = self.nodes[at as usize + 1].next;
        }
        true
    }
}

/// The length of the prefix of `bytes` free of `"`, `\\` and control characters: the
/// bytes a string copies as they are. Eight bytes at a time (SWAR): for a word `x`,
/// `(x - 0x01..) & !x & 0x80..` flags its zero bytes, and the lowest flag is exact (a
/// borrow can only add flags above a real one), so XOR with `"` or `\\` finds those
/// bytes and subtracting `0x20..` finds bytes below 0x20 (bytes >= 0x80 never match).
pub(super) fn plain_run(bytes: &[u8]) -> usize {
    let special = |b: u8| b == b'"' || b == b'\\' || b < 0x20;
    let hits = |x: u64| {
        zero_bytes(x ^ (ONES * u64::from(b'"')))
            | zero_bytes(x ^ (ONES * u64::from(b'\\')))
            | (x.wrapping_sub(ONES * 0x20) & !x & HIGHS)
    };
    find_by_words(bytes, hits, special).unwrap_or(bytes.len())
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each zero byte of `x`; the lowest one is exact (see [`plain_run`]).
fn zero_bytes(x: u64) -> u64 {
    x.wrapping_sub(ONES) & !x & HIGHS
}

/// The first index whose byte matches, eight bytes at a time: `hits` flags matching bytes
/// of a little-endian word by their high bit (the lowest flag exact), `matches` judges the
/// bytes of the last, partial word.
pub(crate) fn find_by_words(
    bytes: &[u8],
    hits: impl Fn(u64) -> u64,
    matches: impl Fn(u8) -> bool,
) -> Option<usize> {
    let mut at = 0;
    while let Some(word) = bytes.get(at..at + 8) {
        let mut le = [0u8; 8];
        le.copy_from_slice(word);
        let flags = hits(u64::from_le_bytes(le));
        if flags != 0 {
            return Some(at + (flags.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    bytes[at..].iter().position(|&b| matches(b)).map(|i| at + i)
}

/// The first index of `byte` in `bytes` (see [`find_by_words`]). Only the adapters scan
/// for single bytes.
#[cfg(feature = "dsh")]
pub(crate) fn find_byte(bytes: &[u8], byte: u8) -> Option<usize> {
    find_by_words(
        bytes,
        |x| zero_bytes(x ^ (ONES * u64::from(byte))),
        |b| b == byte,
    )
}

fn duplicate(key: &[u8], at: u32) -> JsonError {
    JsonError {
        offset: at as usize,
        kind: JsonErrorKind::DuplicateKey(String::from_utf8_lossy(key).into_owned()),
    }
}

#[inline]
pub(super) fn to_u32(n: usize) -> u32 {
    debug_assert!(u32::try_from(n).is_ok());
    // parse() refuses texts longer than u32::MAX, and there is at most one node per byte,
    // so every offset and index fits; a checked conversion here costs a branch per node.
    #[expect(clippy::cast_possible_truncation, reason = "bounded by the size check")]
    let n = n as u32;
    n
}
