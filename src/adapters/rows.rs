//! Packed chunk rows (contract §12, `dsh-formats.md` §4, ROW-1 to ROW-13): runs of three
//! or more streaming-delta `assistant/chunk` events stored as one record, and back.
//!
//! Both directions write JSON exactly as the reference's `JSON.stringify` does, so packed
//! lines and expanded events are byte-exact.

use crate::error::{ErrorKind, Result};
use crate::json::{
    Built, Json, JsonError, JsonErrorKind, Kind, TapeWriter, Value, number_value, push_js_int,
    push_js_number, push_js_string,
};

/// The fewest members a row this writer produces has (ROW-4).
pub const ROW_MEMBERS_MIN: usize = 3;

use crate::limits::SAFE_INTEGER_MAX as SAFE_MAX;

/// The three delta kinds and their row tags (ROW-6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeltaKind {
    Text,
    Reasoning,
    ToolCall,
}

impl DeltaKind {
    fn from_chunk_type(chunk_type: Value<'_, '_>) -> Option<Self> {
        [Self::Text, Self::Reasoning, Self::ToolCall]
            .into_iter()
            .find(|k| chunk_type.is_str(k.chunk_type()))
    }

    fn from_row_tag(tag: Value<'_, '_>) -> Option<Self> {
        [Self::Text, Self::Reasoning, Self::ToolCall]
            .into_iter()
            .find(|k| tag.is_str(k.row_tag()))
    }

    fn chunk_type(self) -> &'static str {
        match self {
            Self::Text => "text-delta",
            Self::Reasoning => "reasoning-delta",
            Self::ToolCall => "tool-call-delta",
        }
    }

    fn row_tag(self) -> &'static str {
        match self {
            Self::Text => "text-chunks",
            Self::Reasoning => "reasoning-chunks",
            Self::ToolCall => "tool-call-chunks",
        }
    }
}

/// A packable event (ROW-2): its numbers and strings as their exact JSON tokens, slices of
/// the event's text (a string token includes its quotes).
#[derive(Debug, Clone, Copy)]
struct Delta<'a> {
    kind: DeltaKind,
    seq: i64,
    time: i64,
    turn: &'a str,
    step: &'a str,
    index: &'a str,
    /// `id` of a tool-call delta.
    id: Option<&'a str>,
    /// `name` of a tool-call delta, when present.
    name: Option<&'a str>,
    /// `text` or `argumentsDelta`.
    payload: &'a str,
}

/// Packs one write batch of events (JSON texts) into storage records (ROW-3 to ROW-7,
/// ROW-12): every run of three or more packable deltas becomes one row; every other
/// event keeps its exact text (contract §2.1).
///
/// # Errors
/// A text that is not JSON.
///
/// # Panics
/// Never: run members are packable by construction.
pub fn pack(events: &[&str]) -> Result<Vec<String>> {
    let parsed: Vec<Json<'_>> = events
        .iter()
        .map(|t| Json::parse(t))
        .collect::<Result<_, _>>()?;
    let deltas: Vec<Option<Delta<'_>>> = parsed.iter().map(|j| delta(j.root())).collect();
    let texts: Vec<&str> = parsed.iter().map(|j| j.root().raw()).collect();
    Ok(pack_deltas(&texts, &deltas))
}

/// [`pack`] of events read back from a log, whose texts are valid JSON objects without
/// surrounding whitespace: a delta in the reference's canonical layout is recognized
/// without parsing it (the result is the same, see `canonical_delta`).
pub(crate) fn pack_stored(events: &[&str]) -> Vec<String> {
    pack_deltas(events, &stored_deltas(events))
}

/// The delta of each stored event, `None` for an event that is not one.
fn stored_deltas<'t>(events: &[&'t str]) -> Vec<Option<Delta<'t>>> {
    events
        .iter()
        .map(|text| match canonical_delta(text) {
            Some(delta) => Some(delta),
            None => Json::parse(text).ok().and_then(|json| delta(json.root())),
        })
        .collect()
}

/// [`delta`] of an event in exactly the layout the reference writes (and [`expand`]
/// writes): `{"type":"assistant/chunk","seq":…,"time":…,"data":{"turn":…,"step":…,
/// "chunk":{"type":…,"index":…,` then `"text":…` or `"id":…[,"name":…],"argumentsDelta":…`
/// `}}}`, without parsing the text. `text` must be valid JSON; any other layout gives
/// `None`, and the caller parses it. The checks on the values are those of [`delta`].
fn canonical_delta(text: &str) -> Option<Delta<'_>> {
    let rest = text.strip_prefix(r#"{"type":"assistant/chunk","seq":"#)?;
    let (seq, rest) = number_token(rest)?;
    let (time, rest) = number_token(rest.strip_prefix(r#","time":"#)?)?;
    let (turn, rest) = number_token(rest.strip_prefix(r#","data":{"turn":"#)?)?;
    let (step, rest) = number_token(rest.strip_prefix(r#","step":"#)?)?;
    let rest = rest.strip_prefix(r#","chunk":{"type":""#)?;
    let (kind, rest) = [DeltaKind::Text, DeltaKind::Reasoning, DeltaKind::ToolCall]
        .into_iter()
        .find_map(|kind| {
            let rest = rest.strip_prefix(kind.chunk_type())?.strip_prefix('"')?;
            Some((kind, rest))
        })?;
    let (index, rest) = number_token(rest.strip_prefix(r#","index":"#)?)?;
    let (id, name, payload, rest) = if kind == DeltaKind::ToolCall {
        let (id, rest) = string_token(rest.strip_prefix(r#","id":"#)?)?;
        let (name, rest) = match rest.strip_prefix(r#","name":"#) {
            Some(rest) => {
                let (name, rest) = string_token(rest)?;
                (Some(name), rest)
            }
            None => (None, rest),
        };
        let (arguments, rest) = string_token(rest.strip_prefix(r#","argumentsDelta":"#)?)?;
        (Some(id), name, arguments, rest)
    } else {
        let (text, rest) = string_token(rest.strip_prefix(r#","text":"#)?)?;
        (None, None, text, rest)
    };
    if rest != "}}}" {
        return None;
    }
    let safe = |token: &str| crate::json::safe_int(number_value(token));
    let finite = |token: &'_ str| number_value(token).is_finite();
    if !(finite(turn) && finite(step) && finite(index)) {
        return None;
    }
    Some(Delta {
        kind,
        seq: safe(seq).filter(|s| *s >= 0)?,
        time: safe(time)?,
        turn,
        step,
        index,
        id,
        name,
        payload,
    })
}

/// A number token at the start of `text` (valid JSON), and the text after it.
fn number_token(text: &str) -> Option<(&str, &str)> {
    let end = text
        .bytes()
        .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
        .unwrap_or(text.len());
    (end > 0).then(|| text.split_at(end))
}

/// A string token (quotes included) at the start of `text` (valid JSON), and the text
/// after it.
fn string_token(text: &str) -> Option<(&str, &str)> {
    let bytes = text.as_bytes();
    if bytes.first() != Some(&b'"') {
        return None;
    }
    let mut at = 1;
    loop {
        match bytes.get(at)? {
            b'"' => return Some(text.split_at(at + 1)),
            b'\\' => at += 2,
            _ => at += 1,
        }
    }
}

/// ROW-3 to ROW-7 over events already classified: runs of three or more become rows,
/// every other event keeps its text.
/// [`pack_stored`] of the events read so far of a log that goes on: the records of all
/// but the last run of deltas, which more events may continue (ROW-4: in JSONL a run is
/// one row however long), and how many events at the end that run holds back.
pub(crate) fn pack_stored_open(events: &[&str]) -> (Vec<String>, usize) {
    let deltas = stored_deltas(events);
    // Where the last run starts: the runs are found from the front, as `pack_deltas` does.
    let mut at = 0;
    let mut last = events.len();
    while at < events.len() {
        let end = run_end(&deltas, at);
        if deltas[at].is_some() && end == events.len() {
            last = at;
        }
        at = end;
    }
    (
        pack_deltas(&events[..last], &deltas[..last]),
        events.len() - last,
    )
}

/// The end of the run that starts at `at`: the deltas that continue the one there (ROW-3),
/// or `at + 1` for an event that is not a delta.
fn run_end(deltas: &[Option<Delta<'_>>], at: usize) -> usize {
    let mut end = at + 1;
    if let Some(first) = deltas[at] {
        while let Some(Some(next)) = deltas.get(end) {
            let Some(prev) = deltas[end - 1] else { break };
            if !continues(&first, &prev, next) {
                break;
            }
            end += 1;
        }
    }
    end
}

fn pack_deltas(texts: &[&str], deltas: &[Option<Delta<'_>>]) -> Vec<String> {
    let mut records = Vec::with_capacity(texts.len());
    let mut at = 0;
    while at < texts.len() {
        let end = run_end(deltas, at);
        if end - at >= ROW_MEMBERS_MIN {
            let run: Vec<Delta<'_>> = deltas[at..end].iter().flatten().copied().collect();
            records.push(row(&run));
        } else {
            // Unpacked events keep their exact text (contract §2.1).
            records.extend(texts[at..end].iter().map(|t| (*t).to_owned()));
        }
        at = end;
    }
    records
}

/// Decodes storage records (JSON texts) into event texts (ROW-8 to ROW-10): rows expand
/// to their members, every other record passes through unchanged and unchecked.
///
/// # Errors
/// `CORRUPT` for the whole batch when any row is malformed (ROW-9), including a row whose
/// member seqs or times leave the safe-integer range (contract §12); a JSON code for a
/// record that is not JSON.
pub fn unpack(records: &[&str]) -> Result<Vec<String>> {
    let mut events = Vec::with_capacity(records.len());
    for (index, text) in records.iter().enumerate() {
        let json = Json::parse(text)?;
        let root = json.root();
        let tag = root.get("type").filter(|_| root.kind() == Kind::Object);
        match tag.and_then(DeltaKind::from_row_tag) {
            Some(kind) => {
                let mut members = Members::default();
                expand(kind, root, &mut members).map_err(|reason| ErrorKind::Corrupt {
                    location: format!("record {index}"),
                    reason: format!("malformed packed row: {reason}"),
                })?;
                events.extend(members.into_texts());
            }
            None => events.push((*text).to_owned()),
        }
    }
    Ok(events)
}

/// Checks one packed row already parsed (ROW-9): `None` when `row` is not a row (its
/// `type` is no row tag), else how many members it has or why it is malformed. Nothing is
/// built: [`each_member`] builds the members of a row that passed, one at a time.
pub(crate) fn check_row(row: Value<'_, '_>) -> Option<Result<usize, &'static str>> {
    let tag = row.get("type").filter(|_| row.kind() == Kind::Object)?;
    let kind = DeltaKind::from_row_tag(tag)?;
    Some(check(kind, row).map(|checked| checked.count))
}

/// Builds the members of `row`, a row [`check_row`] passed (ROW-10), one at a time into
/// `slot`, and hands each to `each`: memory is one member, however many the row holds (a
/// JSONL row has no bound on its members, ROW-9). Stops at the first error of `each`.
///
/// # Errors
/// What `each` returns; a malformed row (a bug of the caller) is `CORRUPT`.
pub(crate) fn each_member(
    row: Value<'_, '_>,
    slot: &mut Built,
    each: &mut dyn FnMut(&mut Built) -> Result<()>,
) -> Result<()> {
    let checked = row
        .get("type")
        .and_then(DeltaKind::from_row_tag)
        .ok_or("not a packed row")
        .and_then(|kind| check(kind, row))
        .map_err(|reason| ErrorKind::Corrupt {
            location: "packed row".to_owned(),
            reason: format!("malformed packed row: {reason}"),
        })?;
    let mut result = Ok(());
    checked.for_each(|member| {
        if result.is_ok() {
            *slot = member_event(&member, std::mem::take(slot));
            result = each(slot);
        }
    });
    result
}

/// The members a row expands to, each written with its tape (ROW-10), all of them: for a
/// caller that returns them all (`unpack`, a `SQLite` row of at most 1,024). A JSONL scan
/// builds one at a time instead ([`each_member`]).
#[derive(Debug, Default)]
pub(crate) struct Members {
    built: Vec<Built>,
    len: usize,
}

impl Members {
    /// The member texts, without their tapes.
    fn into_texts(mut self) -> Vec<String> {
        self.built.truncate(self.len);
        self.built.into_iter().map(Built::into_text).collect()
    }

    /// Appends a member written by `write` into the buffers of the slot it takes.
    fn push_with(&mut self, write: impl FnOnce(Built) -> Built) {
        if self.len == self.built.len() {
            self.built.push(Built::default());
        }
        let slot = &mut self.built[self.len];
        *slot = write(std::mem::take(slot));
        self.len += 1;
    }
}

/// ROW-2: the event is an `assistant/chunk` of exactly `type, seq, time, data`, with
/// `data` exactly `turn, step, chunk` and a delta chunk of an exact key set.
fn delta<'a>(event: Value<'_, 'a>) -> Option<Delta<'a>> {
    let [Some(event_type), Some(seq), Some(time), Some(data)] =
        fields(event, ["type", "seq", "time", "data"])?
    else {
        return None;
    };
    if !event_type.is_str("assistant/chunk") {
        return None;
    }
    let seq = seq.as_safe_int().filter(|s| *s >= 0)?;
    let time = time.as_safe_int()?;
    let [Some(turn), Some(step), Some(chunk)] = fields(data, ["turn", "step", "chunk"])? else {
        return None;
    };
    let (turn, step) = (finite_number(turn)?.raw(), finite_number(step)?.raw());
    let [Some(chunk_type), Some(index), text, id, arguments, name] = fields(
        chunk,
        ["type", "index", "text", "id", "argumentsDelta", "name"],
    )?
    else {
        return None;
    };
    let kind = DeltaKind::from_chunk_type(chunk_type)?;
    let index = finite_number(index)?.raw();
    let (id, name, payload) = match (kind, text, id, arguments) {
        (DeltaKind::ToolCall, None, Some(id), Some(arguments)) => {
            let name = match name {
                None => None,
                Some(name) => Some(string(name)?.raw()),
            };
            (Some(string(id)?.raw()), name, string(arguments)?.raw())
        }
        (DeltaKind::Text | DeltaKind::Reasoning, Some(text), None, None) if name.is_none() => {
            (None, None, string(text)?.raw())
        }
        _ => return None,
    };
    Some(Delta {
        kind,
        seq,
        time,
        turn,
        step,
        index,
        id,
        name,
        payload,
    })
}

/// One pass over `object`'s members: the value of each of `keys`, or `None` (not an
/// object, or a key not in `keys`). Which keys must be present is the caller's rule.
fn fields<'j, 'a, const N: usize>(
    object: Value<'j, 'a>,
    keys: [&str; N],
) -> Option<[Option<Value<'j, 'a>>; N]> {
    if object.kind() != Kind::Object {
        return None;
    }
    let mut found = [None; N];
    for (key, value) in object.members() {
        let slot = keys.iter().position(|k| key.is_str(k))?;
        found[slot] = Some(value);
    }
    Some(found)
}

/// ROW-3: `next` continues a run that started at `first` and last reached `prev`.
fn continues(first: &Delta<'_>, prev: &Delta<'_>, next: &Delta<'_>) -> bool {
    #[expect(
        clippy::float_cmp,
        reason = "ROW-3: numerically equal, as JavaScript's ==="
    )]
    let same_number = |a: &str, b: &str| a == b || number_value(a) == number_value(b);
    let same_string = |a: Option<&str>, b: Option<&str>| match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a == b || string_bytes(a) == string_bytes(b),
        _ => false,
    };
    next.kind == first.kind
        && next.seq == prev.seq + 1
        && (next.time - prev.time).abs() <= SAFE_MAX
        && same_number(next.turn, prev.turn)
        && same_number(next.step, prev.step)
        && same_number(next.index, prev.index)
        && same_string(next.id, prev.id)
        && same_string(next.name, prev.name)
}

/// ROW-6: the row record of a run.
fn row(run: &[Delta<'_>]) -> String {
    let first = run[0];
    let mut out = format!(
        "{{\"type\":\"{}\",\"seq0\":{},\"time0\":{},\"data\":{{\"turn\":",
        first.kind.row_tag(),
        first.seq,
        first.time
    );
    push_number(&mut out, first.turn);
    out.push_str(",\"step\":");
    push_number(&mut out, first.step);
    out.push_str(",\"index\":");
    push_number(&mut out, first.index);
    out.push_str(",\"dt\":[");
    for (i, pair) in run.windows(2).enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&(pair[1].time - pair[0].time).to_string());
    }
    out.push(']');
    push_call(&mut out, &first);
    out.push_str(if first.kind == DeltaKind::ToolCall {
        ",\"args\":["
    } else {
        ",\"texts\":["
    });
    for (i, member) in run.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_string(&mut out, member.payload);
    }
    out.push_str("]}}");
    out
}

/// ROW-9 and ROW-10: validates a row and appends its members.
fn expand(kind: DeltaKind, row: Value<'_, '_>, events: &mut Members) -> Result<(), &'static str> {
    check(kind, row)?.for_each(|member| events.push_with(|buffers| member_event(&member, buffers)));
    Ok(())
}

/// A packed row that passed ROW-9: what its members are built from (ROW-7, ROW-10), the
/// member strings and `dt` left in the parsed row, so that checking holds nothing per
/// member.
struct Checked<'j, 'a> {
    first: Delta<'a>,
    members: Value<'j, 'a>,
    dt: Value<'j, 'a>,
    count: usize,
}

impl<'a> Checked<'_, 'a> {
    /// Each member in order, as ROW-7 builds it (its seq and its time).
    fn for_each(&self, mut each: impl FnMut(Delta<'a>)) {
        let mut gaps = self.dt.elements();
        let mut member = self.first;
        for (k, payload) in self.members.elements().enumerate() {
            if k > 0 {
                let gap = gaps.next().and_then(|d| d.as_safe_int()).unwrap_or(0);
                member.seq += 1;
                member.time += gap;
            }
            member.payload = payload.raw();
            each(member);
        }
    }
}

/// ROW-9: checks a row without building its members.
fn check<'j, 'a>(kind: DeltaKind, row: Value<'j, 'a>) -> Result<Checked<'j, 'a>, &'static str> {
    exact_keys(row, &["type", "seq0", "time0", "data"], &[])
        .ok_or("row keys are not type, seq0, time0, data")?;
    let seq0 = row
        .get("seq0")
        .and_then(|s| s.as_safe_int())
        .filter(|s| *s >= 0)
        .ok_or("seq0 is not a non-negative safe integer")?;
    let time0 = row
        .get("time0")
        .and_then(|t| t.as_safe_int())
        .ok_or("time0 is not a safe integer")?;
    let data = row.get("data").ok_or("data is missing")?;
    let (id, name, members) = if kind == DeltaKind::ToolCall {
        exact_keys(
            data,
            &["turn", "step", "index", "id", "dt", "args"],
            &["name"],
        )
        .ok_or("data keys do not match the tag")?;
        let id = data
            .get("id")
            .and_then(string)
            .ok_or("id is not a string")?;
        let name = data
            .get("name")
            .map(|n| string(n).ok_or("name is not a string"))
            .transpose()?;
        (Some(id), name, data.get("args"))
    } else {
        exact_keys(data, &["turn", "step", "index", "dt", "texts"], &[])
            .ok_or("data keys do not match the tag")?;
        (None, None, data.get("texts"))
    };
    let numbers = ["turn", "step", "index"].map(|k| data.get(k).and_then(number));
    let [Some(turn), Some(step), Some(index)] = numbers.map(|n| n.map(|v| v.raw())) else {
        return Err("turn, step or index is not a number");
    };
    let (id, name) = (id.map(|v| v.raw()), name.map(|v| v.raw()));
    let members = members
        .filter(|m| m.kind() == Kind::Array)
        .ok_or("members are not an array")?;
    let mut count = 0;
    for member in members.elements() {
        if member.kind() != Kind::String {
            return Err("members are not a non-empty array of strings");
        }
        count += 1;
    }
    if count == 0 {
        return Err("members are not a non-empty array of strings");
    }
    let dt = data
        .get("dt")
        .filter(|d| d.kind() == Kind::Array)
        .ok_or("dt is not an array")?;
    let mut gaps = 0;
    for gap in dt.elements() {
        gap.as_safe_int()
            .ok_or("dt holds a value that is not a safe integer")?;
        gaps += 1;
    }
    if gaps + 1 != count {
        return Err("dt length is not the member count minus one");
    }
    let mut time = time0;
    for gap in dt.elements() {
        time = time
            .checked_add(gap.as_safe_int().unwrap_or(0))
            .filter(|t| t.abs() <= SAFE_MAX)
            .ok_or("a member time leaves the safe-integer range")?;
    }
    if seq0 + i64::try_from(count - 1).unwrap_or(i64::MAX) > SAFE_MAX {
        return Err("a member seq leaves the safe-integer range");
    }
    Ok(Checked {
        first: Delta {
            kind,
            seq: seq0,
            time: time0,
            turn,
            step,
            index,
            id,
            name,
            payload: "",
        },
        members,
        dt,
        count,
    })
}

/// ROW-10: one member as an `assistant/chunk` event, key orders of `dsh-formats.md` §2.3,
/// written with its tape (every part is valid JSON already, so it is not parsed again).
fn member_event(member: &Delta<'_>, buffers: Built) -> Built {
    // The fixed keys and numbers take up to about 200 bytes.
    let call = member.id.map_or(0, str::len) + member.name.map_or(0, str::len);
    let mut out = TapeWriter::reusing(buffers, member.payload.len() + call + 256);
    out.open_object();
    out.key("type");
    out.string(|text| text.push_str("\"assistant/chunk\""));
    // Safe integers (checked by `expand`): their digits are their JS-JSON.
    out.key("seq");
    out.number(|text| push_js_int(text, member.seq));
    out.key("time");
    out.number(|text| push_js_int(text, member.time));
    out.key("data");
    out.open_object();
    out.key("turn");
    out.number(|text| push_number(text, member.turn));
    out.key("step");
    out.number(|text| push_number(text, member.step));
    out.key("chunk");
    out.open_object();
    out.key("type");
    out.string(|text| {
        text.push('"');
        text.push_str(member.kind.chunk_type());
        text.push('"');
    });
    out.key("index");
    out.number(|text| push_number(text, member.index));
    if let Some(id) = member.id {
        out.key("id");
        out.string(|text| push_string(text, id));
    }
    if let Some(name) = member.name {
        out.key("name");
        out.string(|text| push_string(text, name));
    }
    out.key(if member.kind == DeltaKind::ToolCall {
        "argumentsDelta"
    } else {
        "text"
    });
    out.string(|text| push_string(text, member.payload));
    out.close_object();
    out.close_object();
    out.close_object();
    out.finish()
}

/// `Some(())` when `object` is an object whose keys are all of `required` plus any of
/// `optional`, and nothing else.
/// Keys are judged as names, not members: a repeated key (in a text parsed keeping
/// them, as the reference reads it) is one key.
fn exact_keys(object: Value<'_, '_>, required: &[&str], optional: &[&str]) -> Option<()> {
    if object.kind() != Kind::Object {
        return None;
    }
    let known = object
        .members()
        .all(|(key, _)| required.iter().chain(optional).any(|name| key.is_str(name)));
    let complete = required.iter().all(|name| object.get(name).is_some());
    (known && complete).then_some(())
}

fn number<'j, 'a>(value: Value<'j, 'a>) -> Option<Value<'j, 'a>> {
    (value.kind() == Kind::Number).then_some(value)
}

/// A number a row can carry back unchanged: finite (JavaScript writes the infinities as
/// `null`, which would make the row unreadable).
fn finite_number<'j, 'a>(value: Value<'j, 'a>) -> Option<Value<'j, 'a>> {
    number(value).filter(|v| v.as_f64().is_some_and(f64::is_finite))
}

fn string<'j, 'a>(value: Value<'j, 'a>) -> Option<Value<'j, 'a>> {
    (value.kind() == Kind::String).then_some(value)
}

/// `,"id":…` and, when present, `,"name":…` of a tool-call delta (ROW-6, ROW-10).
fn push_call(out: &mut String, delta: &Delta<'_>) {
    if let Some(id) = delta.id {
        out.push_str(",\"id\":");
        push_string(out, id);
    }
    if let Some(name) = delta.name {
        out.push_str(",\"name\":");
        push_string(out, name);
    }
}

/// The JS-JSON of a number token (JSON-12): a plain integer of at most 15 digits is
/// already in that form; any other spelling is read and written again.
fn push_number(out: &mut String, token: &str) {
    let digits = token.strip_prefix('-').unwrap_or(token);
    let plain = !digits.is_empty()
        && digits.len() <= 15
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && token != "-0";
    if plain {
        out.push_str(token);
    } else {
        push_js_number(out, number_value(token));
    }
}

/// The JS-JSON of a string token (JSON-13): one without escapes is already in that form
/// (see `json::push_js_string_value`); one with escapes is decoded and written again.
fn push_string(out: &mut String, token: &str) {
    if token.contains('\\') {
        push_js_string(out, &string_bytes(token));
    } else {
        out.push_str(token);
    }
}

/// The decoded (WTF-8) content of a string token.
fn string_bytes(token: &str) -> Vec<u8> {
    let inner = token
        .get(1..token.len().saturating_sub(1))
        .unwrap_or_default();
    crate::json::decode_string(inner)
}

/// The most members a packed row of a schema-17 database holds (SQL-22).
pub(crate) const SQL_ROW_MEMBERS_MAX: usize = 1024;

/// The largest JS-JSON text of the `data` object of a packed row in a schema-17 database,
/// in UTF-8 bytes (SQL-22, ROW-9 item 8).
pub(crate) const SQL_ROW_DATA_BYTES_MAX: usize = 1 << 20;

/// A packed row planned for the `events` table of a schema-17 database (SQL-21): the
/// envelope that lives in columns, and the JS-JSON text of the row's `data` object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SqlRow {
    /// The row tag (ROW-6), stored in `type`.
    pub(crate) tag: &'static str,
    /// The first member's seq, stored in `seq`.
    pub(crate) seq0: u64,
    /// The first member's time, stored in `time`.
    pub(crate) time0: i64,
    /// The `data` object's JS-JSON text (ROW-6); at most [`SQL_ROW_DATA_BYTES_MAX`] bytes.
    pub(crate) data: String,
    /// How many events the row stands for: 3 to [`SQL_ROW_MEMBERS_MAX`].
    pub(crate) members: usize,
}

/// One physical row a [`SqlPacker`] decided on, in log order.
#[derive(Debug)]
pub(crate) enum SqlRecord<'a> {
    /// An event stored as its own (scalar) row, handed back parsed.
    Scalar(Json<'a>),
    /// A packed row.
    Packed(SqlRow),
}

/// Packs one batch for a schema-17 database, streaming: runs form as in ROW-3 and are cut
/// into rows by the split rule of SQL-23 (3 to 1,024 members, at most 1 MiB of `data`).
///
/// Memory is bounded by one row: the packer holds at most [`SQL_ROW_MEMBERS_MAX`] parsed
/// members of the current run, because once that many wait, the next cut no longer
/// depends on what follows (`h` of SQL-23 is already 1,024).
#[derive(Debug, Default)]
pub(crate) struct SqlPacker<'a> {
    /// Invariant: every member is packable (ROW-2), each continues the one before
    /// (ROW-3), and there are fewer than [`SQL_ROW_MEMBERS_MAX`] between calls.
    run: std::collections::VecDeque<Json<'a>>,
}

impl<'a> SqlPacker<'a> {
    /// Adds the next event of the batch; pushes the rows that became final onto `out`.
    pub(crate) fn push(&mut self, event: Json<'a>, out: &mut Vec<SqlRecord<'a>>) {
        let (packable, continues_run) = {
            let next = delta(event.root());
            let run_ends = self.run.front().zip(self.run.back());
            let continues_run = match (next, run_ends) {
                (Some(next), Some((first, last))) => {
                    let first = delta(first.root()).expect("run members are packable");
                    let last = delta(last.root()).expect("run members are packable");
                    continues(&first, &last, &next)
                }
                _ => false,
            };
            (next.is_some(), continues_run)
        };
        if continues_run {
            self.run.push_back(event);
            if self.run.len() == SQL_ROW_MEMBERS_MAX {
                self.cut(out);
            }
            return;
        }
        self.finish(out);
        if packable {
            self.run.push_back(event);
        } else {
            out.push(SqlRecord::Scalar(event));
        }
    }

    /// How many events the run in progress holds: the last ones pushed.
    pub(crate) fn pending(&self) -> usize {
        self.run.len()
    }

    /// Ends the batch: the run in progress is cut into its last rows (SQL-23 step 2).
    pub(crate) fn finish(&mut self, out: &mut Vec<SqlRecord<'a>>) {
        while self.run.len() >= ROW_MEMBERS_MIN {
            self.cut(out);
        }
        out.extend(self.run.drain(..).map(SqlRecord::Scalar));
    }

    /// One step of SQL-23 step 1: the longest prefix of 3 to `h` members whose `data`
    /// fits becomes a row; when not even 3 fit, the first member stays scalar.
    fn cut(&mut self, out: &mut Vec<SqlRecord<'a>>) {
        let row = {
            let run: Vec<Delta<'a>> = self
                .run
                .iter()
                .map(|json| delta(json.root()).expect("run members are packable"))
                .collect();
            let h = run.len().min(SQL_ROW_MEMBERS_MAX);
            let fits = |k: usize| row_data(&run[..k]).len() <= SQL_ROW_DATA_BYTES_MAX;
            // `size(k)` grows strictly with `k` (SQL-23), so the largest fitting `k` is
            // found by bisection; `lo` always fits.
            fits(ROW_MEMBERS_MIN).then(|| {
                let (mut lo, mut hi) = (ROW_MEMBERS_MIN, h);
                while lo < hi {
                    let mid = lo + (hi - lo).div_ceil(2);
                    if fits(mid) { lo = mid } else { hi = mid - 1 }
                }
                let first = run[0];
                SqlRow {
                    tag: first.kind.row_tag(),
                    seq0: u64::try_from(first.seq).expect("packable seqs are non-negative"),
                    time0: first.time,
                    data: row_data(&run[..lo]),
                    members: lo,
                }
            })
        };
        if let Some(row) = row {
            self.run.drain(..row.members);
            out.push(SqlRecord::Packed(row));
        } else {
            let first = self.run.pop_front().expect("cut needs three members");
            out.push(SqlRecord::Scalar(first));
        }
    }
}

/// `true` when `event_type` is one of the three row tags (ROW-6).
pub(crate) fn is_row_tag(event_type: &str) -> bool {
    [DeltaKind::Text, DeltaKind::Reasoning, DeltaKind::ToolCall]
        .into_iter()
        .any(|k| k.row_tag() == event_type)
}

/// Why a row of a schema-17 database gives no events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RowFault {
    /// The row is malformed (SQL-26, ROW-9): the reference does not decode it either, so
    /// it is damage before the last committed `turn/end`, a torn tail after it (SQL-27).
    Malformed(String),
    /// A JSON text of the row repeats a key. The reference decodes it (the last value
    /// wins, JSON-4); the contract refuses it (§2.1), wherever the row is: it is never
    /// taken for a torn tail, which would drop a row the reference keeps.
    RepeatedKey(JsonError),
}

/// Parses `text`, a JSON text of a row (`what` names it), as the reference does: a
/// repeated key is JSON to `JSON.parse`, which keeps its last value. The first repeated
/// key is noted in `repeated`, so that the row is refused (`RowFault::RepeatedKey`) only
/// once everything else about it checks out as the reference checks it.
///
/// # Errors
/// `Malformed` for a text that is not JSON even so.
pub(crate) fn parse_row_json<'t>(
    text: &'t str,
    what: &'static str,
    repeated: &mut Option<JsonError>,
) -> Result<Json<'t>, RowFault> {
    let not_json = |error: JsonError| {
        RowFault::Malformed(format!("{what} is not JSON at offset {}", error.offset))
    };
    match Json::parse(text) {
        Err(error) if matches!(error.kind, JsonErrorKind::DuplicateKey(_)) => {
            repeated.get_or_insert(error);
            Json::parse_keeping_repeated_keys(text).map_err(not_json)
        }
        parsed => parsed.map_err(not_json),
    }
}

impl From<String> for RowFault {
    fn from(reason: String) -> Self {
        Self::Malformed(reason)
    }
}

impl From<&str> for RowFault {
    fn from(reason: &str) -> Self {
        Self::Malformed(reason.to_owned())
    }
}

/// Expands a packed row of a schema-17 database, whose envelope lives in columns (SQL-26):
/// `tag` from `type`, `seq0` from `seq`, `time0` from `time`, and the `data` text.
/// Validates ROW-9 with that format's limits (3 to 1,024 members, at most 1 MiB of
/// `data`) and returns the member events as JS-JSON texts (ROW-10).
///
/// # Errors
/// The reason the row is malformed, or the repeated key of its `data`.
pub(crate) fn expand_sql_row(
    tag: &str,
    seq0: u64,
    time0: i64,
    data: &str,
) -> Result<Vec<String>, RowFault> {
    let kind = [DeltaKind::Text, DeltaKind::Reasoning, DeltaKind::ToolCall]
        .into_iter()
        .find(|k| k.row_tag() == tag)
        .ok_or("packed discriminator requires a chunk tag")?;
    // ROW-9 item 8: measured before parsing.
    if data.len() > SQL_ROW_DATA_BYTES_MAX {
        return Err(format!("data exceeds {SQL_ROW_DATA_BYTES_MAX} UTF-8 bytes").into());
    }
    // Parsed alone first, so that the row text built below holds exactly this value.
    let mut repeated = None;
    let parsed = parse_row_json(data, "data", &mut repeated)?;
    let members_key = if kind == DeltaKind::ToolCall {
        "args"
    } else {
        "texts"
    };
    let members = parsed
        .root()
        .get(members_key)
        .filter(|m| m.kind() == Kind::Array);
    // ROW-9 item 6, SQLite: 3 to 1,024 entries; checked before anything is expanded.
    if members.is_some_and(|m| !(ROW_MEMBERS_MIN..=SQL_ROW_MEMBERS_MAX).contains(&m.len())) {
        return Err(format!("{members_key} must contain 3..1024 strings").into());
    }
    let text = format!("{{\"type\":\"{tag}\",\"seq0\":{seq0},\"time0\":{time0},\"data\":{data}}}");
    let row = if repeated.is_some() {
        Json::parse_keeping_repeated_keys(&text)
    } else {
        Json::parse(&text)
    };
    let row = row.map_err(|_| "data is not a single JSON value")?;
    let mut events = Members::default();
    expand(kind, row.root(), &mut events)?;
    match repeated {
        Some(error) => Err(RowFault::RepeatedKey(error)),
        None => Ok(events.into_texts()),
    }
}

/// The JS-JSON text of the `data` object of the row of `run` (ROW-6).
fn row_data(run: &[Delta<'_>]) -> String {
    let mut text = row(run);
    let start = text.find(",\"data\":").expect("row() writes data") + ",\"data\":".len();
    text.pop();
    text.split_off(start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn number_tokens() -> impl Strategy<Value = String> {
        prop_oneof![
            (0u64..5).prop_map(|n| n.to_string()),
            Just("1.5".to_owned()),
            Just("1e2".to_owned()),
            Just("-0".to_owned()),
            Just("1.0".to_owned()),
            Just("9007199254740993".to_owned()),
            Just("-3".to_owned()),
            Just("1e400".to_owned()),
        ]
    }

    fn string_tokens() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-c]{0,3}".prop_map(|s| format!("\"{s}\"")),
            Just(r#""a\"b""#.to_owned()),
            Just(r#""\u0061""#.to_owned()),
            Just(r#""\\""#.to_owned()),
            Just(r#""\ud800x""#.to_owned()),
        ]
    }

    /// A chunk event in the canonical layout, or in another key order.
    fn chunk_events() -> impl Strategy<Value = String> {
        let kinds = prop_oneof![
            Just("text-delta"),
            Just("reasoning-delta"),
            Just("tool-call-delta"),
            Just("block-end"),
        ];
        (
            (number_tokens(), number_tokens(), number_tokens(), number_tokens(), number_tokens()),
            kinds,
            (string_tokens(), string_tokens(), proptest::option::of(string_tokens())),
            any::<bool>(),
        )
            .prop_map(|((seq, time, turn, step, index), kind, (a, b, name), reorder)| {
                let fields = if kind == "tool-call-delta" {
                    let name = name.map(|n| format!(r#","name":{n}"#)).unwrap_or_default();
                    format!(r#","id":{a}{name},"argumentsDelta":{b}"#)
                } else {
                    format!(r#","text":{a}"#)
                };
                let chunk = format!(r#"{{"type":"{kind}","index":{index}{fields}}}"#);
                if reorder {
                    format!(
                        r#"{{"seq":{seq},"type":"assistant/chunk","time":{time},"data":{{"step":{step},"turn":{turn},"chunk":{chunk}}}}}"#
                    )
                } else {
                    format!(
                        r#"{{"type":"assistant/chunk","seq":{seq},"time":{time},"data":{{"turn":{turn},"step":{step},"chunk":{chunk}}}}}"#
                    )
                }
            })
    }

    /// Chunk events with contiguous seqs, so that runs form: each a delta or a block end,
    /// at one of two indexes.
    fn contiguous_chunks() -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec((0u8..3, 0u8..2), 0..40).prop_map(|picks| {
            picks
                .iter()
                .enumerate()
                .map(|(seq, (kind, index))| {
                    let chunk = match kind {
                        0 => format!(r#"{{"type":"text-delta","index":{index},"text":"t"}}"#),
                        1 => format!(r#"{{"type":"reasoning-delta","index":{index},"text":"r"}}"#),
                        _ => format!(r#"{{"type":"block-end","index":{index}}}"#),
                    };
                    format!(
                        r#"{{"type":"assistant/chunk","seq":{seq},"time":{seq},"data":{{"turn":1,"step":1,"chunk":{chunk}}}}}"#
                    )
                })
                .collect()
        })
    }

    proptest! {
        /// Packing a log in pieces, each holding back the run it ends with, gives what
        /// packing it whole gives (ROW-4: a JSONL export never cuts a run).
        #[test]
        fn packing_in_pieces_holds_back_the_open_run(events in contiguous_chunks()) {
            let refs: Vec<&str> = events.iter().map(String::as_str).collect();
            let whole = pack_stored(&refs);
            for cut in 0..=refs.len() {
                let (mut records, held) = pack_stored_open(&refs[..cut]);
                prop_assert!(held <= cut);
                records.extend(pack_stored(&refs[cut - held..]));
                prop_assert_eq!(&records, &whole, "cut at {}", cut);
            }
        }

        /// The canonical-layout reader agrees with the parser on every event it accepts,
        /// and packing stored events gives what packing parsed ones gives.
        #[test]
        fn canonical_deltas_match_parsed_ones(events in prop::collection::vec(chunk_events(), 1..8)) {
            for text in &events {
                let json = Json::parse(text).unwrap();
                let parsed = delta(json.root());
                if let Some(fast) = canonical_delta(text) {
                    let slow = parsed.expect("the parser accepts what the fast path accepts");
                    prop_assert_eq!(format!("{fast:?}"), format!("{slow:?}"));
                }
            }
            let refs: Vec<&str> = events.iter().map(String::as_str).collect();
            prop_assert_eq!(pack_stored(&refs), pack(&refs).unwrap());
        }

        /// A row's members come with the tape a parse of their text gives, so the import
        /// may navigate them without parsing them.
        #[test]
        fn expanded_members_carry_their_parsed_tape(
            payloads in prop::collection::vec(string_tokens(), 3..8),
            (turn, step, index) in (number_tokens(), number_tokens(), number_tokens()),
            call in proptest::option::of((string_tokens(), proptest::option::of(string_tokens()))),
            seq0 in 0u64..1000,
        ) {
            // One packable run: contiguous seqs, one kind, the same turn, step and index.
            let events: Vec<String> = payloads
                .iter()
                .enumerate()
                .map(|(k, payload)| {
                    let seq = seq0 + k as u64;
                    let chunk = match &call {
                        Some((id, name)) => {
                            let name = name.as_ref().map(|n| format!(r#","name":{n}"#));
                            format!(
                                r#"{{"type":"tool-call-delta","index":{index},"id":{id}{},"argumentsDelta":{payload}}}"#,
                                name.unwrap_or_default()
                            )
                        }
                        None => format!(r#"{{"type":"text-delta","index":{index},"text":{payload}}}"#),
                    };
                    format!(
                        r#"{{"type":"assistant/chunk","seq":{seq},"time":{},"data":{{"turn":{turn},"step":{step},"chunk":{chunk}}}}}"#,
                        1_700_000_000_000 + seq
                    )
                })
                .collect();
            let refs: Vec<&str> = events.iter().map(String::as_str).collect();
            let mut rows = 0;
            for record in pack(&refs).unwrap() {
                let row = Json::parse(&record).unwrap();
                let Some(checked) = check_row(row.root()) else { continue };
                checked.unwrap();
                rows += 1;
                let mut slot = Built::default();
                let mut differs = Vec::new();
                each_member(row.root(), &mut slot, &mut |member| {
                    member.with_json(|json| {
                        if *json != Json::parse(json.text()).unwrap() {
                            differs.push(json.text().to_owned());
                        }
                    });
                    Ok(())
                })
                .unwrap();
                prop_assert!(differs.is_empty(), "tapes differ from a parse: {:?}", differs);
            }
            let finite = |t: &str| t != "1e400";
            if finite(&turn) && finite(&step) && finite(&index) {
                prop_assert_eq!(rows, 1, "the run is packed into one row");
            }
        }
    }

    fn chunk(seq: u64, turn: &str) -> String {
        format!(
            r#"{{"type":"assistant/chunk","seq":{seq},"time":1,"data":{{"turn":{turn},"step":1,"chunk":{{"type":"text-delta","index":0,"text":"t"}}}}}}"#
        )
    }

    #[test]
    fn non_finite_numbers_are_not_packed_and_unpacked_events_keep_their_text() {
        let events: Vec<String> = (0..3).map(|seq| chunk(seq, "1e400")).collect();
        let refs: Vec<&str> = events.iter().map(String::as_str).collect();
        assert_eq!(
            pack(&refs).unwrap(),
            events,
            "found in review: 1e400 packed as null"
        );
        let odd = r#"{"type":"x","seq":0,"time":1.0,"data":{"b":1.0,"1":2,"d":"\u0041"}}"#;
        assert_eq!(pack(&[odd]).unwrap(), vec![odd.to_owned()]);
        let packable: Vec<String> = (0..3).map(|seq| chunk(seq, "1")).collect();
        let refs: Vec<&str> = packable.iter().map(String::as_str).collect();
        let rows = pack(&refs).unwrap();
        assert_eq!(rows.len(), 1);
        let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
        assert_eq!(unpack(&rows).unwrap(), packable);
    }
}
