//! The commands on a store's sessions as wholes: `ls`, `stats`, `fork`, `rm`, `restore`,
//! `purge`, `verify`, `salvage`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use serde::Serialize;
use surfacelog::{Boundary, Error, Result, Severity, VerifyReport};

use crate::Ctx;
use crate::out;

/// `ls --sort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SortBy {
    /// By id.
    Id,
    /// Oldest first.
    Created,
    /// Largest on disk first.
    Size,
    /// Most events first.
    Events,
}

/// One row of `ls --json`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Row {
    id: String,
    created_at: u64,
    events: Option<u64>,
    surface: Option<u64>,
    bytes: u64,
    apparent_bytes: u64,
    parent: Option<String>,
}

/// A refusal in a JSON document: `{"code","message"}`.
#[derive(Debug, Serialize)]
struct Refusal {
    code: &'static str,
    message: String,
}

impl From<&Error> for Refusal {
    fn from(error: &Error) -> Self {
        Self {
            code: error.code(),
            message: error.to_string(),
        }
    }
}

/// `surfacelog ls`.
pub fn ls(ctx: &Ctx, sort: SortBy) -> Result<()> {
    let store = ctx.open_read_only()?;
    let listing = store.list_summaries()?;
    let mut rows: Vec<Row> = listing
        .sessions
        .into_iter()
        .map(|s| Row {
            id: s.header.id().to_owned(),
            created_at: s.header.created_at(),
            events: s.summary.events,
            surface: s.summary.surface,
            bytes: s.summary.bytes,
            apparent_bytes: s.summary.apparent_bytes,
            parent: crate::read::parent_of(&s.header),
        })
        .collect();
    let damaged = listing.damaged;
    match sort {
        SortBy::Id => {}
        SortBy::Created => rows.sort_by_key(|r| (r.created_at, r.id.clone())),
        SortBy::Size => rows.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.id.cmp(&b.id))),
        SortBy::Events => rows.sort_by(|a, b| b.events.cmp(&a.events).then(a.id.cmp(&b.id))),
    }
    if ctx.json {
        #[derive(Serialize)]
        struct Ls<'a> {
            sessions: &'a [Row],
            damaged: Vec<Refusal>,
        }
        return out::json(&Ls {
            sessions: &rows,
            damaged: damaged.iter().map(Refusal::from).collect(),
        });
    }
    let dash = || "-".to_owned();
    let mut table: Vec<[String; 6]> = vec![[
        "ID".into(),
        "CREATED".into(),
        "EVENTS".into(),
        "SURFACE".into(),
        "SIZE".into(),
        "PARENT".into(),
    ]];
    for r in &rows {
        table.push([
            r.id.clone(),
            out::time(r.created_at),
            r.events.map_or_else(dash, |n| n.to_string()),
            r.surface.map_or_else(dash, |n| n.to_string()),
            out::size(r.bytes),
            r.parent.clone().unwrap_or_else(dash),
        ]);
    }
    let mut widths = [0; 6];
    for row in &table {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    for (i, row) in table.iter().enumerate() {
        let mut line = String::new();
        for (c, (cell, w)) in row.iter().zip(widths).enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            // Numbers right-aligned, text left-aligned; the last column unpadded.
            if (2..=4).contains(&c) {
                let _ = write!(line, "{cell:>w$}");
            } else if c == 5 {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}");
            }
        }
        let line = if i == 0 {
            out::bold(line.trim_end(), ctx.color)
        } else {
            line
        };
        out::line(&mut stdout, &line)?;
    }
    for error in &damaged {
        out::print_error(error);
    }
    stdout.flush().map_err(|e| Error::io("write", "stdout", &e))
}

/// `surfacelog fork ID --at SEQ|last --as NEW`.
pub fn fork(ctx: &Ctx, id: &str, at: &str, new: &str) -> Result<()> {
    let boundary = if at == "last" {
        Boundary::Last
    } else {
        Boundary::from_json(at)?
    };
    let store = ctx.open()?;
    let child = store.fork(id, boundary, new)?;
    let seed_length = child.header().seed_length();
    child.close()?;
    if ctx.json {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Forked<'a> {
            id: &'a str,
            parent: &'a str,
            seed_length: Option<u64>,
        }
        return out::json(&Forked {
            id: new,
            parent: id,
            seed_length,
        });
    }
    out::say!(
        "forked {id} into {new} ({} events of {id})",
        seed_length.unwrap_or(0)
    )?;
    Ok(())
}

/// `surfacelog rm ID`.
pub fn rm(ctx: &Ctx, id: &str) -> Result<()> {
    ctx.open()?.delete(id)?;
    if ctx.json {
        #[derive(Serialize)]
        struct Trashed<'a> {
            id: &'a str,
            trashed: bool,
        }
        return out::json(&Trashed { id, trashed: true });
    }
    out::say!("moved {id} to the trash (surfacelog restore {id} brings it back)")?;
    Ok(())
}

/// `surfacelog restore ID`.
pub fn restore(ctx: &Ctx, id: &str) -> Result<()> {
    ctx.open()?.restore(id)?;
    if ctx.json {
        #[derive(Serialize)]
        struct Restored<'a> {
            id: &'a str,
            restored: bool,
        }
        return out::json(&Restored { id, restored: true });
    }
    out::say!("restored {id}")?;
    Ok(())
}

/// `surfacelog purge [--older-than DURATION]`.
pub fn purge(ctx: &Ctx, older_than: Option<Duration>) -> Result<()> {
    let store = ctx.open()?;
    let removed = match older_than {
        Some(age) => store.purge_older_than(age)?,
        None => store.purge()?,
    };
    if ctx.json {
        #[derive(Serialize)]
        struct Purged {
            removed: u64,
        }
        return out::json(&Purged { removed });
    }
    out::say!("removed {removed} trashed sessions")?;
    Ok(())
}

/// `--older-than`: a number and a unit, `s`, `m`, `h` or `d`.
pub fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let unit = text
        .char_indices()
        .find(|(_, c)| !c.is_ascii_digit())
        .map_or(text.len(), |(i, _)| i);
    let (digits, suffix) = text.split_at(unit);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: expected a number and a unit, as 30s, 15m, 12h, 7d"))?;
    let seconds = match suffix {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{text:?}: the unit must be s, m, h or d")),
    };
    n.checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{text:?}: too long"))
}

/// Events and bytes of one type.
#[derive(Debug, Default, Serialize)]
struct TypeStats {
    events: u64,
    bytes: u64,
}

/// `surfacelog stats --json`.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Stats {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    sessions: u64,
    events: u64,
    by_type: BTreeMap<String, TypeStats>,
    segments: u64,
    bytes: u64,
    apparent_bytes: u64,
    surface: u64,
    replacements: u64,
    last_event_time: Option<i64>,
}

impl Stats {
    /// Adds session `id` of `store`: every event read once (read-only, `Store::inspect`).
    fn add(&mut self, store: &surfacelog::Store, id: &str) -> Result<()> {
        let session = store.inspect(id)?;
        let summary = store.summarize(id)?;
        self.sessions += 1;
        self.segments += summary.segments;
        self.bytes += summary.bytes;
        self.apparent_bytes += summary.apparent_bytes;
        self.surface += session.surface().nodes().len() as u64;
        for seq in 0..session.seq_next() {
            let event = crate::read::event(&session, seq)?;
            let by_type = self.by_type.entry(event.event_type.to_owned()).or_default();
            by_type.events += 1;
            by_type.bytes += event.text().len() as u64;
            self.events += 1;
            if event
                .surface_op
                .is_some_and(|op| op != surfacelog::SurfaceOp::Append)
            {
                self.replacements += 1;
            }
            self.last_event_time = self.last_event_time.max(Some(event.time));
        }
        Ok(())
    }
}

/// `surfacelog stats [ID]`.
pub fn stats(ctx: &Ctx, id: Option<&str>) -> Result<()> {
    let store = ctx.open_read_only()?;
    let mut stats = Stats::default();
    if let Some(id) = id {
        stats.id = Some(id.to_owned());
        stats.add(&store, id)?;
    } else {
        let mut listing = store.list()?;
        // The store's totals count every session: one that cannot be read (its header
        // damaged, STORE-4; a link, STORE-1) refuses them, as a damaged log does, rather
        // than being left out of totals printed as the store's. Each is named.
        if !listing.damaged.is_empty() {
            let first = listing.damaged.remove(0);
            for error in &listing.damaged {
                out::print_error(error);
            }
            return Err(first);
        }
        for header in listing.iter() {
            match stats.add(&store, header.id()) {
                Err(e) if e.code() == "SESSION_NOT_FOUND" => {}
                other => other?,
            }
        }
    }
    if ctx.json {
        return out::json(&stats);
    }
    let mut stdout = std::io::stdout().lock();
    let mut put = |key: &str, value: String| {
        out::line(
            &mut stdout,
            &format!("{}  {value}", out::bold(&format!("{key:<13}"), ctx.color)),
        )
    };
    if let Some(id) = &stats.id {
        put("session", id.clone())?;
    } else {
        put("sessions", stats.sessions.to_string())?;
    }
    put("events", stats.events.to_string())?;
    put("surface", stats.surface.to_string())?;
    put("replacements", stats.replacements.to_string())?;
    put("segments", stats.segments.to_string())?;
    put(
        "size",
        format!(
            "{} on disk, {} apparent",
            out::size(stats.bytes),
            out::size(stats.apparent_bytes)
        ),
    )?;
    put(
        "last event",
        stats.last_event_time.map_or_else(
            || "-".to_owned(),
            |t| out::time(u64::try_from(t).unwrap_or(0)),
        ),
    )?;
    let mut types: Vec<(&String, &TypeStats)> = stats.by_type.iter().collect();
    types.sort_by(|a, b| b.1.events.cmp(&a.1.events).then(a.0.cmp(b.0)));
    for (name, t) in types {
        out::line(
            &mut stdout,
            &format!(
                "  {name:<24} {:>10} events  {:>10}",
                t.events,
                out::size(t.bytes)
            ),
        )?;
    }
    Ok(())
}

/// `surfacelog verify [IDS]`: whether everything checks out.
pub fn verify(ctx: &Ctx, ids: &[String]) -> Result<bool> {
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let store = ctx.open_read_only()?;
    let report = store.verify((!ids.is_empty()).then_some(&ids[..]))?;
    if ctx.json {
        out::json(&VerifyJson::new(&report))?;
    } else {
        for line in report.lines() {
            out::say!("{line}")?;
        }
    }
    Ok(report.ok())
}

/// `verify --json`: `{"store":[problem],"sessions":[{"id","ok","problems":[problem]}],"ok"}`.
#[derive(Serialize)]
struct VerifyJson<'a> {
    store: Vec<ProblemJson<'a>>,
    sessions: Vec<SessionJson<'a>>,
    ok: bool,
}

#[derive(Serialize)]
struct SessionJson<'a> {
    id: &'a str,
    ok: bool,
    problems: Vec<ProblemJson<'a>>,
}

#[derive(Serialize)]
struct ProblemJson<'a> {
    file: String,
    offset: Option<u64>,
    rule: &'a str,
    severity: &'static str,
    message: &'a str,
}

impl<'a> VerifyJson<'a> {
    fn new(report: &'a VerifyReport) -> Self {
        let problems = |list: &'a [surfacelog::Problem]| {
            list.iter()
                .map(|p| ProblemJson {
                    file: report.relative(&p.file).to_string_lossy().into_owned(),
                    offset: p.offset,
                    rule: p.rule,
                    severity: match p.severity {
                        Severity::Error => "error",
                        Severity::Warning => "warning",
                    },
                    message: &p.message,
                })
                .collect()
        };
        Self {
            store: problems(&report.store),
            sessions: report
                .sessions
                .iter()
                .map(|s| SessionJson {
                    id: &s.id,
                    ok: s.ok(),
                    problems: problems(&s.problems),
                })
                .collect(),
            ok: report.ok(),
        }
    }
}

/// `surfacelog salvage ID`.
pub fn salvage(ctx: &Ctx, id: &str) -> Result<()> {
    let report = ctx.open()?.salvage(id)?;
    let log = &report.log;
    if ctx.json {
        #[derive(Serialize)]
        struct SetAside {
            from: String,
            offset: u64,
            bytes: u64,
            quarantine: String,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Salvaged<'a> {
            id: &'a str,
            kept: u64,
            first_lost_seq: Option<u64>,
            reason: Option<&'a str>,
            set_aside: Vec<SetAside>,
            resized: Vec<String>,
            checkpoint_removed: bool,
        }
        return out::json(&Salvaged {
            id,
            kept: log.seq_next,
            first_lost_seq: log.first_lost_seq,
            reason: log.reason.as_deref(),
            set_aside: log
                .set_aside
                .iter()
                .map(|a| SetAside {
                    from: a.from.to_string_lossy().into_owned(),
                    offset: a.offset,
                    bytes: a.bytes,
                    quarantine: a.quarantine.to_string_lossy().into_owned(),
                })
                .collect(),
            resized: log
                .resized
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect(),
            checkpoint_removed: report.checkpoint_removed,
        });
    }
    out::say!(
        "kept     {} events (seqs 0..{})",
        log.seq_next,
        log.seq_next
    )?;
    if let Some(reason) = &log.reason {
        out::say!("damage   {reason}")?;
    }
    for aside in &log.set_aside {
        out::say!(
            "set aside {} bytes of {} from offset {} -> {}",
            aside.bytes,
            aside.from.display(),
            aside.offset,
            aside.quarantine.display()
        )?;
    }
    for path in &log.resized {
        out::say!(
            "resized  {} to a length SEG-6 allows (its records unchanged)",
            path.display()
        )?;
    }
    match log.first_lost_seq {
        Some(seq) => out::say!("first lost seq {seq}")?,
        None => out::say!("nothing set aside")?,
    }
    if report.checkpoint_removed {
        out::say!("checkpoint removed (it covered more than what remains)")?;
    }
    Ok(())
}

/// `surfacelog compact [--compress] ID`: the log's sealed segments of version 1 records
/// rewritten into compact records (log-format.md §4.2, §13: what a store of the default
/// options does, `--compact-records` or not), and compressed (§14).
pub fn compact(
    ctx: &Ctx,
    id: &str,
    compact_records: bool,
    compress: bool,
    level: Option<i32>,
) -> Result<()> {
    let options = surfacelog::CompactOptions::new().compact_records(compact_records);
    let options = match level {
        Some(level) if compress => options.compression_level(level),
        _ => options.compress(compress),
    };
    let report = ctx.open()?.compact_log_with(id, options)?;
    let reason = |why: surfacelog::KeptReason| match why {
        surfacelog::KeptReason::Last => "last",
        surfacelog::KeptReason::Limited => "limited",
        surfacelog::KeptReason::Shared => "shared",
        surfacelog::KeptReason::AlreadyCompact => "already-compact",
        surfacelog::KeptReason::NoGain => "no-gain",
        surfacelog::KeptReason::Compressed => "compressed",
        surfacelog::KeptReason::BeforeUnbornLast => "before-unborn-last",
        surfacelog::KeptReason::NoCompactRecord => "no-compact-record",
        _ => "other",
    };
    if ctx.json {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Rewritten {
            first_seq: u64,
            events: u64,
            chunk_records: u64,
            bytes_before: u64,
            bytes_after: u64,
            compressed: bool,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Kept {
            first_seq: u64,
            reason: &'static str,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Compacted<'a> {
            id: &'a str,
            rewritten: Vec<Rewritten>,
            kept: Vec<Kept>,
            bytes_saved: u64,
            /// The message pack's length before and after compression (MSP-8).
            pack_bytes: Option<[u64; 2]>,
        }
        return out::json(&Compacted {
            id,
            rewritten: report
                .rewritten
                .iter()
                .map(|s| Rewritten {
                    first_seq: s.first_seq,
                    events: s.events,
                    chunk_records: s.chunk_records,
                    bytes_before: s.bytes_before,
                    bytes_after: s.bytes_after,
                    compressed: s.compressed,
                })
                .collect(),
            kept: report
                .kept
                .iter()
                .map(|&(first_seq, why)| Kept {
                    first_seq,
                    reason: reason(why),
                })
                .collect(),
            bytes_saved: report.bytes_saved(),
            pack_bytes: report.pack_bytes.map(|(before, after)| [before, after]),
        });
    }
    for s in &report.rewritten {
        out::say!(
            "rewrote  segment {}: {} events, {} as chunk records, {} -> {} bytes{}",
            s.first_seq,
            s.events,
            s.chunk_records,
            s.bytes_before,
            s.bytes_after,
            if s.compressed { ", compressed" } else { "" }
        )?;
    }
    for &(first_seq, why) in &report.kept {
        out::say!("kept     segment {first_seq} as it is ({})", reason(why))?;
    }
    if let Some((before, after)) = report.pack_bytes {
        out::say!("compressed the message pack: {before} -> {after} bytes")?;
    }
    out::say!("saved    {} bytes", report.bytes_saved())?;
    Ok(())
}
