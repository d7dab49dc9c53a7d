//! The optional invariants mode (contract §9): turn and step bracketing, checked before
//! commit. [`InvariantState::next`] is pure: it returns the state after the event, so a
//! refused event leaves the old state in place.

use crate::error::Invariant;
use crate::json::{Kind, Value};

/// Per-session invariant state (contract §9).
#[derive(Debug, Clone, PartialEq)]
pub struct InvariantState {
    last_seq: Option<u64>,
    open_turn: Option<f64>,
    open_step: Option<f64>,
    next_turn: f64,
    next_step: f64,
    /// Call ids (decoded) of `tool/call` events of the open step not yet answered.
    pending: Vec<Vec<u8>>,
}

impl Default for InvariantState {
    fn default() -> Self {
        Self {
            last_seq: None,
            open_turn: None,
            open_step: None,
            next_turn: 1.0,
            next_step: 1.0,
            pending: Vec::new(),
        }
    }
}

impl InvariantState {
    /// The state after accepting event `seq`, or the violated invariant.
    ///
    /// # Errors
    /// The first violated `INV_*` rule of contract §9.
    pub fn next(
        &self,
        seq: u64,
        event_type: &str,
        data: Value<'_, '_>,
        replacement: bool,
    ) -> Result<Self, Invariant> {
        if self.last_seq.is_some_and(|last| seq <= last) {
            return Err(Invariant::SeqOrder);
        }
        let mut next = self.clone();
        next.last_seq = Some(seq);
        let turn = number(data.get("turn"));
        let step = number(data.get("step"));
        let names_turn = self.open_turn.is_some() && turn == self.open_turn;
        let names_step = names_turn && self.open_step.is_some() && step == self.open_step;
        match event_type {
            "turn/start" => {
                if self.open_turn.is_some() {
                    return Err(Invariant::TurnAlreadyOpen);
                }
                if turn != Some(self.next_turn) {
                    return Err(Invariant::TurnNumber);
                }
                next.open_turn = turn;
                next.next_step = 1.0;
            }
            "turn/end" => {
                if !names_turn {
                    return Err(Invariant::TurnEndMismatch);
                }
                if self.open_step.is_some() {
                    return Err(Invariant::TurnEndStepOpen);
                }
                next.open_turn = None;
                next.next_turn += 1.0;
            }
            "step/start" => {
                if !names_turn {
                    return Err(Invariant::StepTurn);
                }
                if self.open_step.is_some() {
                    return Err(Invariant::StepAlreadyOpen);
                }
                if step != Some(self.next_step) {
                    return Err(Invariant::StepNumber);
                }
                next.open_step = step;
            }
            "step/end" | "assistant/chunk" | "assistant/message" | "tool/call" if !names_step => {
                return Err(Invariant::OutsideStep);
            }
            "step/end" => {
                next.open_step = None;
                next.pending.clear();
                next.next_step += 1.0;
            }
            "tool/call" => {
                if let Some(id) = data.get("callId").and_then(|c| c.as_wtf8()) {
                    next.pending.push(id.into_owned());
                }
            }
            "tool/result" if replacement && self.open_turn.is_none() => {
                return Err(Invariant::ReplacementOutsideTurn);
            }
            "tool/result" if replacement => {}
            "tool/result" => {
                if !names_step {
                    return Err(Invariant::OutsideStep);
                }
                let call_id = data
                    .get("message")
                    .and_then(|m| m.get("source"))
                    .and_then(|s| s.get("callId"));
                let call_id = call_id.and_then(|c| c.as_wtf8());
                match call_id.and_then(|id| next.pending.iter().position(|p| *p == *id)) {
                    Some(at) => {
                        next.pending.remove(at);
                    }
                    None if is_not_started_closer(data) => {}
                    None => return Err(Invariant::ToolResultUnmatched),
                }
            }
            "todo/write" | "request/header" | "request/context" if self.open_turn.is_none() => {
                return Err(Invariant::OutsideTurn);
            }
            _ => {}
        }
        Ok(next)
    }
}

/// The shape of a repair closer for a call that never started (contract §9 exemption).
fn is_not_started_closer(data: Value<'_, '_>) -> bool {
    let first_block = data
        .get("message")
        .and_then(|m| m.get("content"))
        .and_then(|c| c.elements().next());
    let is_error = first_block
        .and_then(|b| b.get("isError"))
        .is_some_and(|e| e.is_true());
    let code = data.get("error").and_then(|e| e.get("code"));
    is_error && code.is_some_and(|c| c.is_str("TOOL_NOT_STARTED"))
}

fn number(value: Option<Value<'_, '_>>) -> Option<f64> {
    value
        .filter(|v| v.kind() == Kind::Number)
        .and_then(|v| v.as_f64())
}
