//! Parsed texts that move between threads: a pipeline parses on one thread and hands the
//! texts with their tapes to another, which uses them without parsing again.

use std::ops::Range;

use super::{Json, Node};

/// Copies of parsed JSON texts with their tapes, in the order they were pushed. Owns its
/// bytes, so it can be sent to another thread; [`Batch::for_each`] gives each text back as
/// a [`Json`] equal to the one pushed. Cleared batches keep their buffers for reuse.
#[derive(Debug, Default)]
pub struct Batch {
    /// The texts, back to back.
    text: String,
    /// The tapes, back to back; each node's span is relative to its own text.
    nodes: Vec<Node>,
    items: Vec<Item>,
}

#[derive(Debug)]
struct Item {
    text: Range<usize>,
    nodes: Range<usize>,
    negative_zero: Option<usize>,
    repeated_keys: bool,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a copy of `json`: its text and its tape.
    pub fn push(&mut self, json: &Json<'_>) {
        let text = self.text.len()..self.text.len() + json.text.len();
        let nodes = self.nodes.len()..self.nodes.len() + json.nodes.len();
        self.text.push_str(json.text);
        self.nodes.extend_from_slice(&json.nodes);
        self.items.push(Item {
            text,
            nodes,
            negative_zero: json.negative_zero,
            repeated_keys: json.repeated_keys,
        });
    }

    /// The number of texts.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// `true` when the batch holds no text.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The bytes of text held.
    pub fn text_bytes(&self) -> usize {
        self.text.len()
    }

    /// Calls `each` with every text, in order, as parsed; stops at the first error.
    ///
    /// # Errors
    /// The first error `each` returns.
    pub fn for_each<E>(&self, mut each: impl FnMut(&Json<'_>) -> Result<(), E>) -> Result<(), E> {
        // One tape buffer serves every text: each is a copy of a tape already checked.
        let mut nodes = Vec::new();
        for item in &self.items {
            nodes.clear();
            nodes.extend_from_slice(&self.nodes[item.nodes.clone()]);
            let json = Json {
                text: &self.text[item.text.clone()],
                nodes,
                negative_zero: item.negative_zero,
                repeated_keys: item.repeated_keys,
            };
            let outcome = each(&json);
            nodes = json.nodes;
            outcome?;
        }
        Ok(())
    }

    /// Empties the batch, keeping its buffers.
    pub fn clear(&mut self) {
        self.text.clear();
        self.nodes.clear();
        self.items.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every text comes back as parsed: same text, same tape, same negative zero,
        /// and so equal under every accessor.
        #[test]
        fn texts_come_back_as_parsed(texts in prop::collection::vec(
            prop_oneof![
                Just(r#"{"a":[1,-0,{"b":"\u00e9"}],"c":true}"#.to_owned()),
                Just("[]".to_owned()),
                Just(r#"  "x\ny" "#.to_owned()),
                Just("-0.0e5".to_owned()),
                "-?[1-9][0-9]{0,4}",
            ],
            0..20,
        )) {
            let parsed: Vec<Json<'_>> = texts.iter().map(|t| Json::parse(t).unwrap()).collect();
            let mut batch = Batch::new();
            batch.push(&Json::parse("[1,2,3]").unwrap());
            batch.clear();
            for json in &parsed {
                batch.push(json);
            }
            prop_assert_eq!(batch.len(), parsed.len());
            let mut seen = 0;
            batch.for_each(|json| {
                let original = &parsed[seen];
                seen += 1;
                prop_assert_eq!(json.text(), original.text());
                prop_assert_eq!(&json.nodes, &original.nodes);
                prop_assert_eq!(json.negative_zero(), original.negative_zero());
                prop_assert!(super::super::equal(json.root(), original.root()));
                Ok(())
            })?;
            prop_assert_eq!(seen, parsed.len());
        }
    }
}
