//! Admission: every check an entry point runs before an event is committed, in the order
//! of contract §5 (JSON rules, envelope, legacy events, shapes, surface, invariants).
//!
//! Admission never mutates the session; it checks against a [`Ctx`] (the session's own
//! state; for a batch, the session's surface with the batch's earlier steps applied, which
//! are taken back if the batch is refused) and returns an [`Admitted`] that
//! [`super::Session`] commits, so a refused event leaves no trace.

use std::borrow::Cow;

use super::invariants::{Effect, InvariantState};
use super::{Session, SessionLog};
use crate::error::{ErrorKind, Result};
use crate::event::envelope::{Envelope, check_event_type_str, read_sources, read_surface_op};
use crate::event::vocabulary::{check_legacy, check_request_header};
use crate::event::{Candidate, Event, EventFields, EventSource, Field, SurfaceOp};
use crate::json::{Json, Value, push_js_string};
use crate::surface::{Step, Surface};

/// How an entry point treats `-0` (contract §2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lossless {
    /// `append` and seeds: refused with `DATA_NOT_LOSSLESS`.
    Strict,
    /// Import and reopen: accepted and read as `0`.
    Lenient,
    /// A fork's copies of its source's stored events: admitted once already, so a `-0`
    /// an import or reopen accepted is kept (read as `0`), as the on-disk fork, which
    /// links the stored records, keeps it (contract §7, README "Deviations").
    Inherited,
    /// Repair closers: built by the engine (no `-0`) and exempt from `max_event_bytes`,
    /// since a call id the log already holds must not make the log impossible to reopen.
    Closer,
}

/// What an event is checked against: the surface, the invariant state and the events
/// before it.
pub(crate) struct Ctx<'a> {
    pub surface: &'a Surface,
    pub invariants: Option<&'a InvariantState>,
    pub source: &'a dyn EventSource,
}

/// An event that passed every check, with the state changes it implies.
#[derive(Debug)]
pub(crate) struct Admitted {
    pub event: Event,
    pub step: Step,
    pub invariants: Option<Effect>,
}

/// The surface intent of an append: the two surface fields as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SurfaceFields<'a> {
    pub surface_op: Field<SurfaceOp>,
    pub sources: Field<Cow<'a, [u64]>>,
}

impl<L: SessionLog> Session<L> {
    /// Admits one event given as a JSON object (seed, import and reopen paths).
    pub(crate) fn admit_json(
        &self,
        ctx: &Ctx<'_>,
        text: &str,
        lossless: Lossless,
    ) -> Result<Admitted> {
        if lossless != Lossless::Closer {
            self.check_size(text.len())?;
        }
        let json = Json::parse(text)?;
        self.admit_parsed(ctx, &json, lossless)
    }

    /// [`Session::admit_json`] of an event already parsed (an importer parses each record
    /// once to classify it).
    pub(crate) fn admit_parsed(
        &self,
        ctx: &Ctx<'_>,
        json: &Json<'_>,
        lossless: Lossless,
    ) -> Result<Admitted> {
        if lossless != Lossless::Closer {
            self.check_size(json.root().raw().len())?;
        }
        if let (Lossless::Strict | Lossless::Closer, Some(offset)) =
            (lossless, json.negative_zero())
        {
            return Err(ErrorKind::DataNotLossless { offset }.into());
        }
        let root = json.root();
        let envelope = Envelope::read(root)?;
        let (seq, time) = envelope.check()?;
        let candidate = envelope.candidate_at(Ok(seq));
        if lossless == Lossless::Lenient && self.options.strict_vocabulary {
            let ignorable = envelope.ignorable.is_some_and(|i| i.is_true());
            crate::event::vocabulary::check_dsh_known(&candidate.event_type, ignorable)?;
        }
        let data = envelope.data.expect("checked: data is present");
        let (step, invariants) = self.check_event(ctx, &candidate, data)?;
        let base = root.span().start;
        let message = self.message_span(&candidate.event_type, data);
        let fields = fields_of(&candidate, &envelope, time);
        let local = |span: std::ops::Range<usize>| span.start - base..span.end - base;
        let event = Event::new(
            root.raw().to_owned(),
            local(data.span()),
            message.map(local),
            fields,
        );
        Ok(Admitted {
            event,
            step,
            invariants,
        })
    }

    /// Admits an event built by `append` from its type, data and surface fields.
    pub(crate) fn admit_append(
        &self,
        ctx: &Ctx<'_>,
        event_type: &str,
        data: &str,
        surface: SurfaceFields<'_>,
        time: i64,
    ) -> Result<Admitted> {
        let seq = ctx.surface.seq_next();
        let candidate = Candidate {
            seq: Ok(seq),
            event_type: event_type.into(),
            surface_op: surface.surface_op,
            sources: surface.sources,
            data: data.trim_matches([' ', '\t', '\n', '\r']),
        };
        // Contract §5, order of checks: the JSON rules (the size of the event included),
        // then the envelope, then the rest.
        let (text, data_span) = build_text(&candidate, seq, time);
        self.check_size(text.len())?;
        let json = Json::parse(data)?;
        if let Some(offset) = json.negative_zero() {
            return Err(ErrorKind::DataNotLossless { offset }.into());
        }
        check_event_type_str(event_type)?;
        let (step, invariants) = self.check_event(ctx, &candidate, json.root())?;
        let message = self.message_span(event_type, json.root());
        // The message's span is relative to `data` as given; the text holds it trimmed.
        let (root_start, data_start) = (json.root().span().start, data_span.start);
        let shift = |span: std::ops::Range<usize>| {
            span.start - root_start + data_start..span.end - root_start + data_start
        };
        let fields = EventFields {
            event_type: crate::event::type_name(event_type),
            seq,
            time,
            surface_op: valid(&candidate.surface_op).copied(),
            sources: valid(&candidate.sources).map(|s| s.to_vec()),
            ignorable: false,
        };
        let event = Event::new(text, data_span, message.map(shift), fields);
        Ok(Admitted {
            event,
            step,
            invariants,
        })
    }

    /// Admits an `append` whose surface fields arrive as JSON texts (`null` included), as
    /// a JSON entry point receives them.
    pub(crate) fn admit_append_json(
        &self,
        ctx: &Ctx<'_>,
        event_type: &str,
        data: &str,
        surface_op: Option<&str>,
        sources: Option<&str>,
        time: i64,
    ) -> Result<Admitted> {
        self.check_size(data.len() + surface_op.map_or(0, str::len) + sources.map_or(0, str::len))?;
        let op_json = surface_op.map(Json::parse).transpose()?;
        let sources_json = sources.map(Json::parse).transpose()?;
        for json in op_json.iter().chain(sources_json.iter()) {
            if let Some(offset) = json.negative_zero() {
                return Err(ErrorKind::DataNotLossless { offset }.into());
            }
        }
        let surface = SurfaceFields {
            surface_op: op_json
                .as_ref()
                .map_or(Field::Absent, |j| read_surface_op(j.root())),
            sources: sources_json
                .as_ref()
                .map_or(Field::Absent, |j| owned(read_sources(j.root()))),
        };
        self.admit_append(ctx, event_type, data, surface, time)
    }

    /// Legacy events, shapes, the surface and the invariants, in that order.
    fn check_event(
        &self,
        ctx: &Ctx<'_>,
        candidate: &Candidate<'_>,
        data: Value<'_, '_>,
    ) -> Result<(Step, Option<Effect>)> {
        let at = |e: crate::Error| match candidate.seq {
            Ok(seq) => e.at_seq(seq),
            Err(_) => e,
        };
        let event_type = candidate.event_type.as_ref();
        check_legacy(event_type, data)
            .map_err(|reason| at(ErrorKind::LegacyEvent { reason }.into()))?;
        if let Some(surface_type) = self.options.vocabulary.surface_type(event_type) {
            surface_type.check_shape(data).map_err(|rule| {
                at(ErrorKind::MessageShape {
                    event_type: event_type.to_owned(),
                    rule,
                }
                .into())
            })?;
        }
        if event_type == "request/header" {
            check_request_header(data)
                .map_err(|rule| at(ErrorKind::RequestHeaderShape { rule }.into()))?;
        }
        let step = ctx
            .surface
            .check(candidate, &self.options.vocabulary, ctx.source)?;
        let invariants = match ctx.invariants {
            Some(state) => {
                let seq = ctx.surface.seq_next();
                let replace = matches!(
                    candidate.surface_op,
                    Field::Valid(SurfaceOp::Replace { .. })
                );
                Some(
                    state
                        .check(seq, event_type, data, replace)
                        .map_err(|e| at(e.into()))?,
                )
            }
            None => None,
        };
        Ok((step, invariants))
    }

    fn message_span(
        &self,
        event_type: &str,
        data: Value<'_, '_>,
    ) -> Option<std::ops::Range<usize>> {
        let surface_type = self.options.vocabulary.surface_type(event_type)?;
        surface_type.project(data).map(|m| m.span())
    }

    /// `EVENT_TOO_LARGE` past `max_event_bytes`, which is clamped to what a record can
    /// hold (spans are 32-bit, `log-format.md` §4).
    fn check_size(&self, len: usize) -> Result<()> {
        let max = self
            .options
            .max_event_bytes
            .min(crate::limits::EVENT_BYTES_LIMIT);
        if len > max {
            return Err(ErrorKind::EventTooLarge { len, max }.into());
        }
        Ok(())
    }
}

/// The end-seed marker (contract §5) as [`Session::end_seed`] appends it at `seq`, timed by
/// `clock`: a fork writes it into its child's log before publishing the child
/// (`store.md` STORE-10, STORE-13).
pub(crate) fn end_seed_event(seq: u64, clock: &dyn crate::clock::Clock) -> Event {
    let time = super::now_ms(clock);
    let candidate = Candidate {
        seq: Ok(seq),
        event_type: super::END_SEED_TYPE.into(),
        surface_op: Field::Absent,
        sources: Field::Absent,
        data: "{}",
    };
    let (text, data) = build_text(&candidate, seq, time);
    let fields = EventFields {
        event_type: std::borrow::Cow::Borrowed(super::END_SEED_TYPE),
        seq,
        time,
        surface_op: None,
        sources: None,
        ignorable: false,
    };
    Event::new(text, data, None, fields)
}

/// The text of an appended event, keys in the engine's order (contract §2, "Key order"):
/// `type, seq, time, data, sourceEventSeqs, surfaceOp`. Returns the span of `data`.
fn build_text(candidate: &Candidate<'_>, seq: u64, time: i64) -> (String, std::ops::Range<usize>) {
    let mut text = String::with_capacity(candidate.data.len() + 96);
    text.push_str("{\"type\":");
    push_js_string(&mut text, candidate.event_type.as_bytes());
    text.push_str(",\"seq\":");
    text.push_str(&seq.to_string());
    text.push_str(",\"time\":");
    text.push_str(&time.to_string());
    text.push_str(",\"data\":");
    let start = text.len();
    text.push_str(candidate.data);
    let data_span = start..text.len();
    if let Some(sources) = valid(&candidate.sources) {
        text.push_str(",\"sourceEventSeqs\":[");
        for (i, source) in sources.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&source.to_string());
        }
        text.push(']');
    }
    match valid(&candidate.surface_op) {
        Some(SurfaceOp::Append) => text.push_str(",\"surfaceOp\":\"append\""),
        Some(SurfaceOp::Replace { start, end }) => {
            text.push_str(",\"surfaceOp\":{\"op\":\"replace\",\"start\":");
            text.push_str(&start.to_string());
            text.push_str(",\"end\":");
            text.push_str(&end.to_string());
            text.push('}');
        }
        None => {}
    }
    text.push('}');
    (text, data_span)
}

fn fields_of(candidate: &Candidate<'_>, envelope: &Envelope<'_, '_>, time: i64) -> EventFields {
    EventFields {
        event_type: crate::event::type_name(&candidate.event_type),
        seq: *candidate.seq.as_ref().expect("checked: seq is contiguous"),
        time,
        surface_op: valid(&candidate.surface_op).copied(),
        sources: valid(&candidate.sources).map(|s| s.to_vec()),
        ignorable: envelope.ignorable.is_some(),
    }
}

fn valid<T>(field: &Field<T>) -> Option<&T> {
    match field {
        Field::Valid(value) => Some(value),
        Field::Absent | Field::Invalid => None,
    }
}

fn owned(field: Field<Cow<'_, [u64]>>) -> Field<Cow<'static, [u64]>> {
    match field {
        Field::Absent => Field::Absent,
        Field::Invalid => Field::Invalid,
        Field::Valid(seqs) => Field::Valid(Cow::Owned(seqs.into_owned())),
    }
}
