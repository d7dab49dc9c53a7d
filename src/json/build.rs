//! Writing a JSON text and its tape together: for a text assembled from parts that are
//! already valid JSON (a packed row's members, `dsh-formats.md` ROW-10), so that it can be
//! navigated without being parsed again. The tape is the one [`Json::parse`] would give.

use super::parse::{number_value, to_u32};
use super::{Json, Kind, Node};

/// A text being written with its tape. Objects only hold members whose keys are plain
/// (no escapes); scalars are written by the caller's closures, which must write exactly
/// one valid JSON token of the kind they claim.
#[derive(Debug, Default)]
pub(crate) struct TapeWriter {
    text: String,
    nodes: Vec<Node>,
    /// The open objects, innermost last: the node and whether it has a member yet.
    open: Vec<(u32, bool)>,
    negative_zero: Option<usize>,
}

/// A finished text with its tape, detached so that it can be kept or moved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Built {
    text: String,
    nodes: Vec<Node>,
    negative_zero: Option<usize>,
}

impl TapeWriter {
    /// An empty writer that reuses the buffers of `built` (their capacity is kept), with
    /// room for `bytes` of text.
    pub(crate) fn reusing(built: Built, bytes: usize) -> Self {
        let Built {
            mut text,
            mut nodes,
            ..
        } = built;
        text.clear();
        text.reserve(bytes);
        nodes.clear();
        Self {
            text,
            nodes,
            ..Self::default()
        }
    }

    /// Opens an object: the root, or the value of the key just written.
    pub(crate) fn open_object(&mut self) {
        let index = to_u32(self.nodes.len());
        self.push_node(Kind::Object, false, self.text.len());
        self.text.push('{');
        self.open.push((index, false));
    }

    /// Closes the innermost object.
    ///
    /// # Panics
    /// When no object is open (a bug in the caller).
    pub(crate) fn close_object(&mut self) {
        let (index, _) = self.open.pop().expect("an open object to close");
        self.text.push('}');
        let next = to_u32(self.nodes.len());
        let node = &mut self.nodes[index as usize];
        node.end = to_u32(self.text.len());
        node.next = next;
    }

    /// Writes the key of the next member of the innermost object: `key` is written
    /// between quotes as it is, so it must need no escape.
    pub(crate) fn key(&mut self, key: &str) {
        debug_assert!(key.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\'));
        if let Some((_, has_member)) = self.open.last_mut() {
            if *has_member {
                self.text.push(',');
            }
            *has_member = true;
        }
        let start = self.text.len();
        self.text.reserve(key.len() + 3);
        self.text.push('"');
        self.text.push_str(key);
        self.text.push('"');
        self.push_node(Kind::String, false, start);
        self.text.push(':');
    }

    /// A number, written by `write` as one valid JSON number token.
    pub(crate) fn number(&mut self, write: impl FnOnce(&mut String)) {
        let start = self.text.len();
        write(&mut self.text);
        let token = &self.text[start..];
        if self.negative_zero.is_none() && token.starts_with('-') && number_value(token) == 0.0 {
            self.negative_zero = Some(start);
        }
        self.push_node(Kind::Number, false, start);
    }

    /// A string, written by `write` as one valid JSON string literal (quotes included).
    pub(crate) fn string(&mut self, write: impl FnOnce(&mut String)) {
        let start = self.text.len();
        write(&mut self.text);
        let escaped = self.text.as_bytes()[start..].contains(&b'\\');
        self.push_node(Kind::String, escaped, start);
    }

    /// The text and its tape.
    ///
    /// # Panics
    /// When an object is still open (a bug in the caller).
    pub(crate) fn finish(self) -> Built {
        assert!(self.open.is_empty(), "every object is closed");
        Built {
            text: self.text,
            nodes: self.nodes,
            negative_zero: self.negative_zero,
        }
    }

    /// A node for the value starting at `start`: a scalar ending where the text ends now,
    /// or an object, fixed when it closes.
    fn push_node(&mut self, kind: Kind, flag: bool, start: usize) {
        let end = to_u32(self.text.len());
        self.nodes.push(Node {
            kind,
            flag,
            start: to_u32(start),
            end,
            next: to_u32(self.nodes.len() + 1),
        });
    }
}

impl Built {
    /// The text.
    #[cfg(test)]
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The text, without its tape.
    pub(crate) fn into_text(self) -> String {
        self.text
    }

    /// Calls `each` with the text as parsed, without parsing it; returns what it returns.
    pub(crate) fn with_json<R>(&mut self, each: impl FnOnce(&Json<'_>) -> R) -> R {
        let json = Json {
            text: &self.text,
            nodes: std::mem::take(&mut self.nodes),
            negative_zero: self.negative_zero,
            repeated_keys: false,
        };
        let result = each(&json);
        self.nodes = json.nodes;
        result
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::json::{push_js_number, push_js_string};

    /// Writes a member-like object: scalars, nested objects, optional keys.
    fn write(numbers: &[f64], strings: &[String], nest: bool) -> Built {
        let mut writer = TapeWriter::reusing(Built::default(), 16);
        writer.open_object();
        for (k, n) in numbers.iter().enumerate() {
            writer.key(&format!("n{k}"));
            writer.number(|out| push_js_number(out, *n));
        }
        if nest {
            writer.key("inner");
            writer.open_object();
            writer.close_object();
            writer.key("deeper");
            writer.open_object();
            for (k, s) in strings.iter().enumerate() {
                writer.key(&format!("s{k}"));
                writer.string(|out| push_js_string(out, s.as_bytes()));
            }
            writer.close_object();
        }
        writer.key("raw");
        writer.number(|out| out.push_str("-0.0e3"));
        writer.close_object();
        writer.finish()
    }

    proptest! {
        /// The tape written is the one the parser gives for the same text: same nodes,
        /// same negative zero.
        #[test]
        fn the_tape_written_is_the_tape_parsed(
            numbers in prop::collection::vec(
                prop_oneof![any::<i32>().prop_map(f64::from), Just(-0.0), any::<f64>()
                    .prop_filter("finite", |f| f.is_finite())],
                0..6,
            ),
            strings in prop::collection::vec("\\PC{0,8}|[\"\\\\\n\u{1}]{0,3}", 0..6),
            nest in any::<bool>(),
        ) {
            let mut built = write(&numbers, &strings, nest);
            let text = built.text().to_owned();
            let parsed = Json::parse(&text).unwrap();
            built.with_json(|json| {
                prop_assert_eq!(json.text(), text.as_str());
                prop_assert_eq!(&json.nodes, &parsed.nodes);
                prop_assert_eq!(json.negative_zero, parsed.negative_zero);
                Ok(())
            })?;
        }
    }
}
