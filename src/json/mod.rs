//! Lossless JSON: an iterative validator that indexes a text without copying it.
//!
//! The engine keeps every event's JSON exactly as it arrived (contract §2.1), so it never
//! builds a value tree that owns data. Parsing produces a [`Json`]: the borrowed text plus
//! a flat preorder tape of nodes, each knowing its byte span and where its subtree ends.
//! Derived messages are then slices of the original text, and nothing here recurses, so a
//! document nested 100,000 levels deep is parsed, compared, written and dropped with a
//! constant-depth stack.
//!
//! What the parser enforces (RFC 8259, strict): the grammar, no duplicate key in an object
//! (`DATA_DUPLICATE_KEY`, compared on decoded keys), and the size bound of the text.
//! What it only reports: whether a negative zero occurs ([`Json::negative_zero`]), because
//! the contract refuses `-0` on some entry points and accepts it on others.
//! Escaped lone surrogates (`"\ud800"`) are accepted and kept (JSON-5).

mod batch;
// The tape writer builds the adapters' derived documents (packed rows, exported lines).
#[cfg(feature = "dsh")]
mod build;
mod equal;
mod parse;
mod string;
mod write;

pub use batch::Batch;
#[cfg(feature = "dsh")]
pub(crate) use build::{Built, TapeWriter};
pub use equal::{equal, equal_except};
pub use string::{decode_string, encode_js_string, push_js_string};
#[cfg(feature = "dsh")]
pub(crate) use write::push_js_int;
pub use write::{push_js_number, push_js_string_value, write_js};

/// `value` when it is a *safe integer* (contract §2): integral, of magnitude at most
/// 2^53−1. `-0` gives 0.
pub(crate) fn safe_int(value: f64) -> Option<i64> {
    #[expect(clippy::cast_precision_loss, reason = "2^53 - 1 is exact in binary64")]
    let limit = crate::limits::SAFE_INTEGER_MAX as f64;
    #[expect(
        clippy::cast_possible_truncation,
        reason = "checked integral and in range"
    )]
    (value.fract() == 0.0 && value.abs() <= limit).then_some(value as i64)
}

/// The binary64 value of a JSON number token, correctly rounded (JSON-3).
#[cfg(feature = "dsh")]
pub(crate) use parse::{find_byte, number_value};

use std::borrow::Cow;
use std::ops::Range;

/// The largest text a tape can index: spans are 32-bit.
pub const JSON_TEXT_BYTES_MAX: usize = u32::MAX as usize;

/// A parse failure: the byte offset into the text and what was wrong there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// Byte offset of the failure in the parsed text.
    pub offset: usize,
    /// What was wrong.
    pub kind: JsonErrorKind,
}

/// The reason a text is not accepted as JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonErrorKind {
    /// The text breaks the RFC 8259 grammar; the string says which rule.
    Syntax(&'static str),
    /// An object repeats a key (after decoding escapes).
    DuplicateKey(String),
    /// The text is longer than [`JSON_TEXT_BYTES_MAX`]; the offset is the text's length.
    TooLarge,
}

/// The type of one JSON value on the tape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool,
    /// A number, kept as its text.
    Number,
    /// A string, kept as its escaped text.
    String,
    /// An array.
    Array,
    /// An object; its children alternate key string, value.
    Object,
}

/// One tape entry. Invariant: `next` is the index just past this node's subtree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Node {
    kind: Kind,
    /// For strings: the literal contains a backslash. For bools: the value is `true`.
    flag: bool,
    start: u32,
    end: u32,
    next: u32,
}

/// A validated JSON text with its tape. Cheap to navigate through [`Value`]. Two are
/// equal when they hold the same text with the same tape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Json<'a> {
    text: &'a str,
    nodes: Vec<Node>,
    negative_zero: Option<usize>,
    /// Parsed keeping repeated keys ([`Json::parse_keeping_repeated_keys`]): a member
    /// read by name is the last of that name, as in JavaScript.
    repeated_keys: bool,
}

/// A cursor on one value of a [`Json`].
#[derive(Debug, Clone, Copy)]
pub struct Value<'j, 'a> {
    json: &'j Json<'a>,
    index: u32,
}

impl<'a> Json<'a> {
    /// Parses and validates `text`, which must hold exactly one JSON value (surrounding
    /// whitespace allowed).
    ///
    /// Cost: one pass over the text plus a sort of the keys of each object with more
    /// than eight keys; memory is 16 bytes per value.
    ///
    /// # Errors
    /// [`JsonError`] with the offset of the first grammar violation, a duplicate key, or a
    /// text longer than [`JSON_TEXT_BYTES_MAX`].
    pub fn parse(text: &'a str) -> Result<Self, JsonError> {
        parse::parse(text)
    }

    /// [`Json::parse`], taking an object that repeats a key as JavaScript's `JSON.parse`
    /// does instead of refusing it: [`Value::get`] then finds the last member of a name,
    /// the value JavaScript keeps. Only to judge a text the way DSH's readers do (RAW-4,
    /// SQL-26); [`Value::members`] still gives every member as written.
    ///
    /// # Errors
    /// As [`Json::parse`], except for duplicate keys.
    #[cfg_attr(not(feature = "dsh"), expect(dead_code, reason = "the DSH scanner's"))]
    pub(crate) fn parse_keeping_repeated_keys(text: &'a str) -> Result<Self, JsonError> {
        parse::parse_checking(text, false)
    }

    /// The root value.
    pub fn root(&self) -> Value<'_, 'a> {
        Value {
            json: self,
            index: 0,
        }
    }

    /// The whole text as given.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// The offset of the first number whose value is negative zero, if any (`-0`,
    /// `-0.0e5`, or a negative number too small for binary64, as JavaScript reads it).
    pub fn negative_zero(&self) -> Option<usize> {
        self.negative_zero
    }

    fn node(&self, index: u32) -> Node {
        self.nodes[index as usize]
    }
}

impl<'j, 'a> Value<'j, 'a> {
    /// The value's type.
    pub fn kind(&self) -> Kind {
        self.node().kind
    }

    /// The exact text of the value (for strings, including the quotes).
    pub fn raw(&self) -> &'a str {
        &self.json.text[self.span()]
    }

    /// The byte range of [`Value::raw`] in the parsed text.
    pub fn span(&self) -> Range<usize> {
        let node = self.node();
        node.start as usize..node.end as usize
    }

    /// The decoded string (WTF-8 bytes: lone surrogates are kept as 3-byte sequences),
    /// or `None` for other kinds.
    pub fn as_wtf8(&self) -> Option<Cow<'a, [u8]>> {
        let node = self.node();
        (node.kind == Kind::String).then(|| self.decode(node))
    }

    /// The decoded string when it is valid Unicode; `None` for other kinds and for
    /// strings holding a lone surrogate.
    pub fn as_str(&self) -> Option<Cow<'a, str>> {
        let node = self.node();
        if node.kind == Kind::String && !node.flag {
            // Without escapes the content is a slice of the text between its quotes (ASCII,
            // so on character boundaries): valid Unicode already.
            return Some(Cow::Borrowed(
                &self.json.text[node.start as usize + 1..node.end as usize - 1],
            ));
        }
        match self.as_wtf8()? {
            Cow::Borrowed(bytes) => std::str::from_utf8(bytes).ok().map(Cow::Borrowed),
            Cow::Owned(bytes) => String::from_utf8(bytes).ok().map(Cow::Owned),
        }
    }

    /// The content of a string written without escapes (its text between the quotes);
    /// `None` for other strings and other kinds.
    pub fn plain_str(&self) -> Option<&'a str> {
        let node = self.node();
        (node.kind == Kind::String && !node.flag)
            .then(|| &self.json.text[node.start as usize + 1..node.end as usize - 1])
    }

    /// `true` when this is a string equal to `s`.
    pub fn is_str(&self, s: &str) -> bool {
        let node = self.node();
        if node.kind != Kind::String {
            return false;
        }
        // An unescaped literal is its quotes around the content: compare lengths first.
        if !node.flag && (node.end - node.start) as usize != s.len() + 2 {
            return false;
        }
        self.decode(node).as_ref() == s.as_bytes()
    }

    /// The value of a number as binary64 (correctly rounded, as `JSON.parse` reads it).
    pub fn as_f64(&self) -> Option<f64> {
        (self.kind() == Kind::Number).then(|| parse::number_value(self.raw()))
    }

    /// The value when it is a *safe integer* (contract §2): an integer, judged by value,
    /// of magnitude at most 2^53−1. `-0` reads as 0.
    pub fn as_safe_int(&self) -> Option<i64> {
        if self.kind() != Kind::Number {
            return None;
        }
        let token = self.raw();
        parse::small_integer(token).or_else(|| safe_int(parse::number_value(token)))
    }

    /// The value when it is a non-negative safe integer.
    pub fn as_safe_u64(&self) -> Option<u64> {
        self.as_safe_int().and_then(|v| u64::try_from(v).ok())
    }

    /// `Some(b)` for `true` and `false`.
    pub fn as_bool(&self) -> Option<bool> {
        let node = self.node();
        (node.kind == Kind::Bool).then_some(node.flag)
    }

    /// `true` for the literal `true`.
    pub fn is_true(&self) -> bool {
        self.as_bool() == Some(true)
    }

    /// The member `key` of an object (decoded comparison); `None` when absent or when
    /// this is not an object. Of a text parsed keeping repeated keys, the last member of
    /// that name. Cost: linear in the number of members.
    pub fn get(&self, key: &str) -> Option<Value<'j, 'a>> {
        if self.json.repeated_keys {
            // Only a text parsed keeping repeated keys can hold more than one.
            return self
                .members()
                .filter(|(k, _)| k.is_str(key))
                .last()
                .map(|(_, v)| v);
        }
        self.members().find(|(k, _)| k.is_str(key)).map(|(_, v)| v)
    }

    /// The object's members in text order (empty for other kinds).
    pub fn members(&self) -> Members<'j, 'a> {
        let node = self.node();
        let (next, end) = if node.kind == Kind::Object {
            (self.index + 1, node.next)
        } else {
            (0, 0)
        };
        Members {
            json: self.json,
            next,
            end,
        }
    }

    /// The array's elements in order (empty for other kinds).
    pub fn elements(&self) -> Elements<'j, 'a> {
        let node = self.node();
        let (next, end) = if node.kind == Kind::Array {
            (self.index + 1, node.next)
        } else {
            (0, 0)
        };
        Elements {
            json: self.json,
            next,
            end,
        }
    }

    /// The number of elements of an array or members of an object; 0 for scalars.
    pub fn len(&self) -> usize {
        match self.kind() {
            Kind::Array => self.elements().count(),
            Kind::Object => self.members().count(),
            _ => 0,
        }
    }

    /// `true` for an empty array or object, and for every scalar. Cost: O(1).
    pub fn is_empty(&self) -> bool {
        let node = self.node();
        !matches!(node.kind, Kind::Array | Kind::Object) || node.next == self.index + 1
    }

    /// `true` when both cursors point at the same node of the same document.
    pub fn same_node(&self, other: &Value<'_, '_>) -> bool {
        std::ptr::eq(
            std::ptr::from_ref(self.json).cast::<()>(),
            std::ptr::from_ref(other.json).cast::<()>(),
        ) && self.index == other.index
    }

    fn node(&self) -> Node {
        self.json.node(self.index)
    }

    fn decode(&self, node: Node) -> Cow<'a, [u8]> {
        let inner = &self.json.text[node.start as usize + 1..node.end as usize - 1];
        if node.flag {
            Cow::Owned(decode_string(inner))
        } else {
            Cow::Borrowed(inner.as_bytes())
        }
    }
}

/// Iterator over an object's `(key, value)` pairs.
#[derive(Debug, Clone)]
pub struct Members<'j, 'a> {
    json: &'j Json<'a>,
    next: u32,
    end: u32,
}

impl<'j, 'a> Iterator for Members<'j, 'a> {
    type Item = (Value<'j, 'a>, Value<'j, 'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.end {
            return None;
        }
        let key = Value {
            json: self.json,
            index: self.next,
        };
        let value_index = self.next + 1;
        self.next = self.json.node(value_index).next;
        Some((
            key,
            Value {
                json: self.json,
                index: value_index,
            },
        ))
    }
}

/// Iterator over an array's elements.
#[derive(Debug, Clone)]
pub struct Elements<'j, 'a> {
    json: &'j Json<'a>,
    next: u32,
    end: u32,
}

impl<'j, 'a> Iterator for Elements<'j, 'a> {
    type Item = Value<'j, 'a>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.end {
            return None;
        }
        let value = Value {
            json: self.json,
            index: self.next,
        };
        self.next = self.json.node(self.next).next;
        Some(value)
    }
}

#[cfg(test)]
mod tests;
