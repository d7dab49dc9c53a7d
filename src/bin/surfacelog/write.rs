//! `surfacelog append`: events as JSON lines on stdin, each appended through the strict
//! entry point (contract §5), its `data` stored byte for byte as given.

use std::io::BufRead;

use surfacelog::internals::json::{Json, Kind};
use surfacelog::{Durability, Error, ErrorKind, Result, StoreOptions};

use crate::Ctx;

/// One input line's envelope: the type and the JSON texts of its members.
struct Line<'a> {
    event_type: String,
    data: &'a str,
    surface_op: Option<&'a str>,
    sources: Option<&'a str>,
}

/// Reads `{"type","data","surfaceOp"?,"sourceEventSeqs"?}`; other members are refused, so
/// that a misspelt key is not dropped in silence.
fn parse_line<'a>(json: &Json<'a>) -> Result<Line<'a>> {
    let invalid = |reason: &str| -> Error {
        ErrorKind::EnvelopeInvalid {
            reason: reason.to_owned(),
        }
        .into()
    };
    let root = json.root();
    if root.kind() != Kind::Object {
        return Err(invalid("an append line must be a JSON object"));
    }
    let mut line = Line {
        event_type: String::new(),
        data: "",
        surface_op: None,
        sources: None,
    };
    let (mut has_type, mut has_data) = (false, false);
    for (key, value) in root.members() {
        match key.as_str().as_deref() {
            Some("type") => {
                line.event_type = value
                    .as_str()
                    .ok_or_else(|| invalid("\"type\" must be a string"))?
                    .into_owned();
                has_type = true;
            }
            Some("data") => {
                line.data = value.raw();
                has_data = true;
            }
            Some("surfaceOp") => line.surface_op = Some(value.raw()),
            Some("sourceEventSeqs") => line.sources = Some(value.raw()),
            _ => {
                return Err(invalid(
                    "unknown member: an append line holds only type, data, surfaceOp and \
                     sourceEventSeqs",
                ));
            }
        }
    }
    if !has_type || !has_data {
        return Err(invalid("an append line needs \"type\" and \"data\""));
    }
    Ok(line)
}

/// The first error `verify` reported, as the `CORRUPT` refusal of an append.
fn first_error(report: &surfacelog::VerifyReport, id: &str) -> Option<Error> {
    let (_, problem) = report
        .problems()
        .find(|(_, p)| p.severity == surfacelog::Severity::Error)?;
    Some(
        ErrorKind::Corrupt {
            location: match problem.offset {
                Some(offset) => format!("{} offset={offset}", problem.file.display()),
                None => problem.file.display().to_string(),
            },
            reason: format!(
                "[{}] {} (surfacelog verify {id})",
                problem.rule, problem.message
            ),
        }
        .into(),
    )
}

/// Whether every error of `report` is in its session's last segment, the only place a
/// torn tail can be (RCV-9).
fn only_in_last_segment(report: &surfacelog::VerifyReport) -> bool {
    let errors: Vec<&std::path::Path> = report
        .problems()
        .filter(|(_, p)| p.severity == surfacelog::Severity::Error)
        .map(|(_, p)| p.file.as_path())
        .collect();
    let Some(log) = errors.first().and_then(|f| f.parent()) else {
        return true;
    };
    let last = std::fs::read_dir(log).ok().and_then(|entries| {
        entries
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .filter(|name| name.to_string_lossy().ends_with(".seg"))
            .max()
    });
    errors
        .iter()
        .all(|f| f.parent() == Some(log) && last.as_deref() == f.file_name())
}

/// A refused `append` leaves no trace: not session `id`, which it created for its events,
/// nor the store, when it made it (`fresh`) and nothing else was stored there meanwhile.
fn take_back(ctx: &Ctx, store: surfacelog::Store, id: &str, fresh: bool) -> Result<()> {
    store.remove(id)?;
    if fresh {
        drop(store);
        crate::interop::remove_unused_store(&ctx.store);
    }
    Ok(())
}

/// `surfacelog append ID [--create] [--durable]`: prints `{"seq":N}` per appended event;
/// with `durable`, each once its event is durable. A refused line stops the command
/// (exit 3): nothing after the last good line is written.
pub fn append(ctx: &Ctx, id: &str, create: bool, durable: bool) -> Result<()> {
    // Each printed seq is written to the OS (a follower sees it, a killed process keeps
    // it); with `--durable`, durable. `Batch` syncs in the background meanwhile.
    let options = StoreOptions::new().durability(if durable {
        Durability::Sync
    } else {
        Durability::Batch {
            max_delay: std::time::Duration::from_millis(100),
        }
    });
    // Whether this run makes the store (then a refused run that stored nothing removes it).
    let fresh = create && std::fs::symlink_metadata(&ctx.store).is_err();
    let store = if create {
        surfacelog::Store::open_or_create(&ctx.store, options)?
    } else {
        surfacelog::Store::open(&ctx.store, options)?
    };
    // Opening checks the log's tail only (reads are lazy): appending after damage further
    // back would bury it, so the whole session is checked first, read-only (STORE-16).
    // Damage outside the last segment refuses the append before anything changes; what
    // is wrong in the last segment may be a torn tail, which opening recovers (RCV-9), so
    // the session is opened, then checked again.
    // `None`: no such session; `Some(true)`: damage that opening may recover.
    let tail_damaged = match store.verify(Some(&[id])) {
        Ok(report) => match first_error(&report, id) {
            Some(error) if !only_in_last_segment(&report) => return Err(error),
            found => Some(found.is_some()),
        },
        Err(e) if create && e.code() == "SESSION_NOT_FOUND" => None,
        Err(e) => return Err(e),
    };
    // Whether this run created the session (then a run that appends nothing and is
    // refused removes it again).
    let mut created = false;
    let mut appended = false;
    let mut session = if let Some(tail_damaged) = tail_damaged {
        let (session, _) = store.open_session(id)?;
        // Checked again only when the first check found something to recover.
        if tail_damaged && let Some(error) = first_error(&store.verify(Some(&[id]))?, id) {
            drop(session);
            return Err(error);
        }
        session
    } else {
        match store.open_session(id) {
            Err(e) if e.code() == "SESSION_NOT_FOUND" => {
                created = true;
                store.create(id, None, None)?
            }
            other => other?.0,
        }
    };
    let mut stdin = std::io::stdin().lock();
    let mut refused = None;
    let mut raw = Vec::new();
    for n in 1.. {
        raw.clear();
        if stdin
            .read_until(b'\n', &mut raw)
            .map_err(|e| Error::io("read", "stdin", &e))?
            == 0
        {
            break;
        }
        let seq = std::str::from_utf8(&raw)
            .map_err(|e| {
                Error::from(ErrorKind::DataInvalidJson {
                    offset: e.valid_up_to(),
                    reason: "the line is not UTF-8",
                })
            })
            .and_then(|text| {
                if text.trim().is_empty() {
                    return Ok(None);
                }
                let json = Json::parse(text)?;
                let line = parse_line(&json)?;
                let seq = session.append_json(
                    &line.event_type,
                    line.data,
                    line.surface_op,
                    line.sources,
                )?;
                // Printed once written to the OS (with `--durable`, once durable).
                if !durable {
                    session.write_out()?;
                }
                Ok(Some(seq))
            });
        match seq {
            Ok(None) => {}
            Ok(Some(seq)) => {
                appended = true;
                #[derive(serde::Serialize)]
                struct Appended {
                    seq: u64,
                }
                crate::out::json(&Appended { seq })?;
            }
            Err(error) => {
                refused = Some((n, error));
                break;
            }
        }
    }
    // What was appended before a refused line is kept, and made durable.
    session.close()?;
    if let Some((line, error)) = refused {
        if created && !appended {
            take_back(ctx, store, id, fresh)?;
        }
        crate::out::print_error_at(&error, &format!("stdin line {line}"));
        std::process::exit(i32::from(crate::exit_code(&error)));
    }
    Ok(())
}
