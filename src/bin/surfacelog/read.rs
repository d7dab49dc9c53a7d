//! The read-only commands on one session: `show`, `tail` (and `-f`), `wait`, `log`.
//! None of them takes a lock, repairs or writes anything.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use surfacelog::{Error, EventRef, Result};

use crate::Ctx;
use crate::out::{self, Raw};

/// `surfacelog show`'s arguments.
#[derive(Debug, clap::Args)]
#[expect(clippy::struct_excessive_bools, reason = "command-line flags")]
pub struct ShowArgs {
    /// The session id.
    id: String,
    /// The events, in log order.
    #[arg(long, group = "view")]
    events: bool,
    /// With `--events`: the first seq shown.
    #[arg(long, requires = "events", default_value_t = 0)]
    from: u64,
    /// With `--events`: at most this many.
    #[arg(long, requires = "events")]
    limit: Option<u64>,
    /// The messages the surface derives (what the model sees next).
    #[arg(long, group = "view")]
    messages: bool,
    /// The transcript: the seqs of every event appended to the surface.
    #[arg(long, group = "view")]
    transcript: bool,
    /// Every replacement: the replacing seq, its range and what it shadowed.
    #[arg(long, group = "view")]
    replacements: bool,
    /// The state after event SEQ (time travel): for the summary, `--messages` and
    /// `--transcript`.
    #[arg(long, value_name = "SEQ", conflicts_with_all = ["events", "replacements"])]
    as_of: Option<u64>,
    /// Print large data whole on a terminal too (it is elided there by default).
    #[arg(long)]
    full: bool,
}

/// One replace applied: `{"seq","start","end","shadowed"}` (contract §4).
#[derive(Serialize)]
struct Replacement<'a> {
    seq: u64,
    start: u64,
    end: u64,
    shadowed: &'a [u64],
}

/// The replaces of `history` (a recording fold) made by events before seq `end`, in log
/// order.
fn replacements_before(history: &surfacelog::Surface, end: u64) -> Vec<Replacement<'_>> {
    history
        .replacements()
        .filter(|r| r.seq < end)
        .map(|r| Replacement {
            seq: r.seq,
            start: r.start,
            end: r.end,
            shadowed: r.shadowed,
        })
        .collect()
}

/// The longest data shown on a terminal without `--full`, in characters.
const ELIDE_AT: usize = 160;

/// `surfacelog show`.
#[expect(
    clippy::too_many_lines,
    reason = "one view after the other, read top to bottom"
)]
pub fn show(ctx: &Ctx, args: &ShowArgs) -> Result<()> {
    let store = ctx.open_read_only()?;
    let session = store.inspect(&args.id)?;
    let elide = !args.full && std::io::stdout().is_terminal();
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let flush = |mut w: std::io::BufWriter<std::io::StdoutLock<'_>>| {
        w.flush().map_err(|e| Error::io("write", "stdout", &e))
    };
    if args.events {
        let end = session.seq_next();
        let last = args
            .limit
            .map_or(end, |n| args.from.saturating_add(n).min(end));
        if ctx.json {
            // Every event is read and checked before the first byte is written: damage is
            // an error, never half a document.
            for seq in args.from.min(last)..last {
                event(&session, seq)?;
            }
            let texts =
                (args.from.min(last)..last).map(|seq| Ok((seq, event(&session, seq)?.text())));
            return out::stored_texts("events", None, texts);
        }
        for seq in args.from.min(last)..last {
            out::line(
                &mut stdout,
                &human_event(&event(&session, seq)?, elide, ctx.color),
            )?;
        }
        return flush(stdout);
    }
    if args.replacements {
        let history = session.replacements()?;
        let list = replacements_before(&history, u64::MAX);
        if ctx.json {
            #[derive(Serialize)]
            struct Replacements<'a> {
                replacements: Vec<Replacement<'a>>,
            }
            return out::json(&Replacements { replacements: list });
        }
        for r in &list {
            out::line(
                &mut stdout,
                &format!(
                    "{:>8}  replaces {}..={}  shadowing {:?}",
                    r.seq, r.start, r.end, r.shadowed
                ),
            )?;
        }
        return flush(stdout);
    }
    let snapshot = args.as_of.map(|seq| session.as_of(seq)).transpose()?;
    if args.messages {
        let messages = match &snapshot {
            Some(s) => s.messages.clone(),
            None => session.messages()?,
        };
        if ctx.json {
            let items = messages.iter().map(|m| Ok((m.seq, m.json)));
            return out::stored_texts("messages", Some("message"), items);
        }
        for m in &messages {
            let seq = out::dim(&format!("{:>8}", m.seq), ctx.color);
            out::line(
                &mut stdout,
                &format!("{seq}  {}", out::elide(m.json, ELIDE_AT, elide)),
            )?;
        }
        return flush(stdout);
    }
    if args.transcript {
        let transcript = match &snapshot {
            Some(s) => s.transcript.clone(),
            None => session.transcript()?,
        };
        if ctx.json {
            #[derive(Serialize)]
            struct Transcript {
                transcript: Vec<u64>,
            }
            return out::json(&Transcript { transcript });
        }
        for seq in transcript {
            out::line(
                &mut stdout,
                &human_event(&event(&session, seq)?, elide, ctx.color),
            )?;
        }
        return flush(stdout);
    }
    // The summary: of the session, or as of a seq.
    let events = args.as_of.map_or(session.seq_next(), |seq| seq + 1);
    let surface: Vec<u64> = match &snapshot {
        Some(s) => s.surface.nodes().to_vec(),
        None => session.surface().nodes().to_vec(),
    };
    let messages = match &snapshot {
        Some(s) => s.messages.clone(),
        None => session.messages()?,
    };
    let last_event_time = match events.checked_sub(1) {
        Some(seq) => Some(event(&session, seq)?.time),
        None => None,
    };
    // Every replace applied up to the last event shown (contract §4).
    let history = session.replacements()?;
    let replacements = replacements_before(&history, events);
    let header = session.header();
    let parent = parent_of(header);
    if ctx.json {
        #[derive(Serialize)]
        struct Message<'a> {
            seq: u64,
            message: Raw<'a>,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Summary<'a> {
            id: &'a str,
            created_at: u64,
            parent: Option<String>,
            seed_length: Option<u64>,
            /// The logical header, as DSH's loader reports it (`dsh-formats.md` HDR-8).
            header: Raw<'a>,
            events: u64,
            surface: Vec<u64>,
            messages: Vec<Message<'a>>,
            replacements: Vec<Replacement<'a>>,
            last_event_time: Option<i64>,
        }
        let logical = surfacelog::internals::adapters::jsonl::logical_header(header);
        return out::json(&Summary {
            id: header.id(),
            created_at: header.created_at(),
            parent,
            seed_length: header.seed_length(),
            header: Raw(&logical),
            events,
            surface,
            messages: messages
                .iter()
                .map(|m| Message {
                    seq: m.seq,
                    message: Raw(m.json),
                })
                .collect(),
            replacements,
            last_event_time,
        });
    }
    let key = |k: &str| out::bold(&format!("{k:<13}"), ctx.color);
    let surface_text = format!("{} nodes {:?}", surface.len(), surface);
    for (k, v) in [
        ("id", header.id().to_owned()),
        ("created", out::time(header.created_at())),
        ("parent", parent.unwrap_or_else(|| "-".to_owned())),
        ("events", events.to_string()),
        (
            "surface",
            out::elide(&surface_text, ELIDE_AT, elide).into_owned(),
        ),
        ("messages", messages.len().to_string()),
        ("replacements", replacements.len().to_string()),
        (
            "last event",
            last_event_time.map_or_else(
                || "-".to_owned(),
                |t| out::time(u64::try_from(t).unwrap_or(0)),
            ),
        ),
    ] {
        out::line(&mut stdout, &format!("{}  {v}", key(k)))?;
    }
    flush(stdout)
}

/// The `parentSession` of a header (contract §7).
pub fn parent_of(header: &surfacelog::Header) -> Option<String> {
    header.parent_session().map(str::to_owned)
}

/// Event `seq` of `session`, which exists (below `seq_next`): damage is an error.
pub fn event<L: surfacelog::internals::session::SessionLog>(
    session: &surfacelog::Session<L>,
    seq: u64,
) -> Result<EventRef<'_>> {
    session
        .event(seq)?
        .ok_or_else(|| surfacelog::internals::event::missing_event(seq, session.seq_next()))
}

/// `SEQ  TYPE  data` for people.
fn human_event(event: &EventRef<'_>, elide: bool, color: bool) -> String {
    let seq = out::dim(&format!("{:>8}", event.seq), color);
    let kind = out::bold(&format!("{:<20}", event.event_type), color);
    let op = match event.surface_op {
        None => String::new(),
        Some(surfacelog::SurfaceOp::Append) => "append ".to_owned(),
        Some(surfacelog::SurfaceOp::Replace { start, end }) => format!("replace {start}..={end} "),
    };
    format!(
        "{seq}  {kind}  {op}{}",
        out::elide(&event.data(), ELIDE_AT, elide)
    )
}

/// `surfacelog tail ID [-n N] [-f]`.
pub fn tail(ctx: &Ctx, id: &str, lines: u64, follow: bool) -> Result<()> {
    let store = ctx.open_read_only()?;
    let mut follower = store.follow(id)?;
    let elide = std::io::stdout().is_terminal();
    let mut stdout = std::io::stdout().lock();
    let print = |stdout: &mut std::io::StdoutLock<'_>, event: &EventRef<'_>| -> Result<()> {
        let line = if ctx.json {
            // The stored text, verbatim, one per line: a line break between its tokens
            // (stored as given, contract §2.1) is written as a space, which JSON reads
            // the same (no string holds a raw line break).
            event.text().replace(['\n', '\r'], " ")
        } else {
            human_event(event, elide, ctx.color)
        };
        writeln!(stdout, "{line}")
            .and_then(|()| stdout.flush())
            .map_err(|e| Error::io("write", "stdout", &e))
    };
    // The events committed now: the last `lines` of them.
    let session = store.inspect(id)?;
    let end = session.seq_next();
    for seq in end.saturating_sub(lines)..end {
        print(&mut stdout, &event(&session, seq)?)?;
    }
    drop(session);
    if !follow {
        return Ok(());
    }
    // Then each event as soon as it is committed (the follower's inotify wake-up). A
    // deleted session ends the command: it is looked for after each quiet second.
    let mut next = end;
    loop {
        if follower.wait_for(next, Duration::from_secs(1))? {
            let reader = follower.log();
            while let Some(event) = surfacelog::internals::event::EventSource::event(reader, next)?
            {
                print(&mut stdout, &event)?;
                next += 1;
            }
        } else {
            store.summarize(id)?;
        }
    }
}

/// `surfacelog wait ID SEQ`: exit 0 when committed, 4 (`TIMEOUT`) otherwise.
pub fn wait(ctx: &Ctx, id: &str, seq: u64, timeout_ms: u64) -> Result<()> {
    let mut follower = ctx.open_read_only()?.follow(id)?;
    if follower.wait_for(seq, Duration::from_millis(timeout_ms))? {
        return Ok(());
    }
    eprintln!("error[TIMEOUT]: seq {seq} of {id:?} was not committed within {timeout_ms} ms");
    std::process::exit(4);
}

/// `surfacelog log DIR`: the committed length of a log, read without a lock.
pub fn log_info(ctx: &Ctx, dir: &Path, check_writer: bool) -> Result<()> {
    use surfacelog::internals::event::EventSource;
    // The directory first, then whether it is a log: the same refusal (and exit code)
    // with or without `--check-writer`.
    std::fs::metadata(dir).map_err(|e| surfacelog::Error::io("open", dir, &e))?;
    let reader = surfacelog::internals::log::LogReader::open(dir)?;
    if check_writer {
        surfacelog::internals::log::LogWriter::check_lock(dir)?;
    }
    let events = reader.seq_next();
    if ctx.json || !std::io::stdout().is_terminal() {
        // JSON by default too: scripts have read this line since the first release.
        #[derive(Serialize)]
        struct Log {
            dir: String,
            events: u64,
        }
        return out::json(&Log {
            dir: dir.to_string_lossy().into_owned(),
            events,
        });
    }
    out::say!("{}: {events} events", dir.display())?;
    Ok(())
}
