//! The views every session offers (contract §4): messages and transcript.
//!
//! Both borrow from the event source: a message is a slice of stored JSON text.

use super::Surface;
use crate::event::{EventSource, SurfaceOp};

/// One derived message: the JSON text of the message object, tagged with its seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// The surface node the message comes from.
    pub seq: u64,
    /// The message object, exactly as stored.
    pub json: &'a str,
}

/// The messages of the surface, in surface order, skipping nodes that produce none.
/// Cost: one event lookup per node; no JSON is parsed or copied.
pub fn messages<'a>(surface: &Surface, source: &'a impl EventSource) -> Vec<Message<'a>> {
    let mut out = Vec::with_capacity(surface.nodes().len());
    for &seq in surface.nodes() {
        let Some(event) = source.event(seq) else {
            debug_assert!(false, "surface node {seq} is missing from the event source");
            continue;
        };
        if let Some(json) = event.message() {
            out.push(Message { seq, json });
        }
    }
    out
}

/// The transcript: seqs of the events whose `surfaceOp` is `"append"`, in log order.
#[derive(Debug)]
pub struct Transcript<'a, S> {
    source: &'a S,
    next: u64,
    end: u64,
}

/// The transcript of events `0..end` of `source`: what a person saw (replacements are
/// model-only). Cost: a scan of those events' envelopes.
pub fn transcript<S: EventSource>(source: &S, end: u64) -> Transcript<'_, S> {
    Transcript {
        source,
        next: 0,
        end: end.min(source.seq_next()),
    }
}

impl<S: EventSource> Iterator for Transcript<'_, S> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        while self.next < self.end {
            let seq = self.next;
            self.next += 1;
            let event = self.source.event(seq)?;
            if event.surface_op == Some(SurfaceOp::Append) {
                return Some(seq);
            }
        }
        None
    }
}
