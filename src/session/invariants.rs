//! The optional invariants mode (contract §9): turn and step bracketing, checked before
//! commit. [`InvariantState::check`] is pure and returns the [`Effect`] of the event;
//! [`InvariantState::apply`] performs it at commit, so a refused event leaves the state as
//! it was and an accepted one costs O(1) (no copy of the state).

use std::collections::HashSet;

use crate::error::{Invariant, Result};
use crate::event::{EventSource, SurfaceOp};
use crate::json::{Json, Kind, Value};

/// Per-session invariant state (contract §9).
#[derive(Debug, Clone, PartialEq)]
pub struct InvariantState {
    last_seq: Option<u64>,
    open_turn: Option<f64>,
    open_step: Option<f64>,
    next_turn: f64,
    next_step: f64,
    /// Call ids (decoded) of the open step's `tool/call` events not yet answered: a set
    /// (contract §9: `tool/call` adds its id, an appended `tool/result` removes it).
    pending: HashSet<Vec<u8>>,
}

/// What an accepted event does to the invariant state.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    seq: u64,
    change: Change,
}

#[derive(Debug, Clone, PartialEq)]
enum Change {
    None,
    TurnStart(f64),
    TurnEnd,
    StepStart(f64),
    StepEnd,
    CallStarted(Vec<u8>),
    CallAnswered(Vec<u8>),
}

impl Default for InvariantState {
    fn default() -> Self {
        Self {
            last_seq: None,
            open_turn: None,
            open_step: None,
            next_turn: 1.0,
            next_step: 1.0,
            pending: HashSet::new(),
        }
    }
}

impl InvariantState {
    /// Checks event `seq` against contract §9 and returns what accepting it changes.
    ///
    /// # Errors
    /// The first violated `INV_*` rule.
    pub fn check(
        &self,
        seq: u64,
        event_type: &str,
        data: Value<'_, '_>,
        replacement: bool,
    ) -> Result<Effect, Invariant> {
        if self.last_seq.is_some_and(|last| seq <= last) {
            return Err(Invariant::SeqOrder);
        }
        let turn = number(data.get("turn"));
        let step = number(data.get("step"));
        let names_turn = self.open_turn.is_some() && turn == self.open_turn;
        let names_step = names_turn && self.open_step.is_some() && step == self.open_step;
        let change = match event_type {
            "turn/start" if self.open_turn.is_some() => return Err(Invariant::TurnAlreadyOpen),
            "turn/start" if turn != Some(self.next_turn) => return Err(Invariant::TurnNumber),
            "turn/start" => Change::TurnStart(self.next_turn),
            "turn/end" if !names_turn => return Err(Invariant::TurnEndMismatch),
            "turn/end" if self.open_step.is_some() => return Err(Invariant::TurnEndStepOpen),
            "turn/end" => Change::TurnEnd,
            "step/start" if !names_turn => return Err(Invariant::StepTurn),
            "step/start" if self.open_step.is_some() => return Err(Invariant::StepAlreadyOpen),
            "step/start" if step != Some(self.next_step) => return Err(Invariant::StepNumber),
            "step/start" => Change::StepStart(self.next_step),
            "step/end" | "assistant/chunk" | "assistant/message" | "tool/call" if !names_step => {
                return Err(Invariant::OutsideStep);
            }
            "step/end" => Change::StepEnd,
            "tool/call" => match data.get("callId").and_then(|c| c.as_wtf8()) {
                Some(id) => Change::CallStarted(id.into_owned()),
                None => Change::None,
            },
            "tool/result" if replacement && self.open_turn.is_none() => {
                return Err(Invariant::ReplacementOutsideTurn);
            }
            "tool/result" if replacement => Change::None,
            "tool/result" if !names_step => return Err(Invariant::OutsideStep),
            "tool/result" => self.answer(data)?,
            "todo/write" | "request/header" | "request/context" if self.open_turn.is_none() => {
                return Err(Invariant::OutsideTurn);
            }
            _ => Change::None,
        };
        Ok(Effect { seq, change })
    }

    /// Applies the effect of an accepted event, as returned by [`InvariantState::check`]
    /// on this very state.
    pub fn apply(&mut self, effect: Effect) {
        self.last_seq = Some(effect.seq);
        match effect.change {
            Change::None => {}
            Change::TurnStart(turn) => {
                self.open_turn = Some(turn);
                self.next_step = 1.0;
            }
            Change::TurnEnd => {
                self.open_turn = None;
                self.next_turn += 1.0;
            }
            Change::StepStart(step) => self.open_step = Some(step),
            Change::StepEnd => {
                self.open_step = None;
                self.pending.clear();
                self.next_step += 1.0;
            }
            Change::CallStarted(id) => {
                self.pending.insert(id);
            }
            Change::CallAnswered(id) => {
                self.pending.remove(&id);
            }
        }
    }

    /// Checks and applies events `0..len` of `log`, which were stored earlier: a stored
    /// log opened with invariants on (contract §5, the import/reopen row: every check, the
    /// invariants last), and a fork's prefix (§9: they run over a seed, "fork children
    /// included"). Costs a pass over the events, each one's data parsed once.
    ///
    /// # Errors
    /// The first violation, as its `INV_*` code with its seq; the error reading an event
    /// (`CORRUPT` with its file and offset).
    pub(crate) fn replay(&mut self, log: &impl EventSource, len: u64) -> Result<()> {
        for seq in 0..len {
            let event = log.event_at(seq)?;
            let text = event.data();
            let data = Json::parse(&text).map_err(|e| crate::Error::from(e).at_seq(seq))?;
            let replace = matches!(event.surface_op, Some(SurfaceOp::Replace { .. }));
            let effect = self
                .check(seq, event.event_type, data.root(), replace)
                .map_err(|violation| crate::Error::from(violation).at_seq(seq))?;
            self.apply(effect);
        }
        Ok(())
    }

    /// An appended `tool/result`: it must answer a pending call, unless it has the shape
    /// of a repair closer for a call that never started (the exemption of contract §9).
    fn answer(&self, data: Value<'_, '_>) -> Result<Change, Invariant> {
        let source = data.get("message").and_then(|m| m.get("source"));
        let call_id = source
            .and_then(|s| s.get("callId"))
            .and_then(|c| c.as_wtf8());
        match call_id {
            Some(id) if self.pending.contains(id.as_ref()) => {
                Ok(Change::CallAnswered(id.into_owned()))
            }
            _ if is_not_started_closer(data) => Ok(Change::None),
            _ => Err(Invariant::ToolResultUnmatched),
        }
    }
}

/// The shape of a repair closer for a call that never started (contract §9 exemption).
fn is_not_started_closer(data: Value<'_, '_>) -> bool {
    let content = data.get("message").and_then(|m| m.get("content"));
    let first_block = content.and_then(|c| c.elements().next());
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
