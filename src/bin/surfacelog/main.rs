//! The `surfacelog` command line. It uses only the crate's public API.
//!
//! Errors print as `error[CODE]: message` on stderr and exit with status 3.

mod demo;
mod interop;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// surfacelog: the storage engine for LLM agent sessions (demo, DSH import and export,
/// inspection).
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a session in the store and print what the engine derives: appends, a nested
    /// compaction, a tool-output prune, the messages, the transcript, an as-of view, a
    /// reopen, a fork and a crash repair.
    Demo {
        /// The store directory.
        #[arg(long, default_value = "./surfacelog-data")]
        store: std::path::PathBuf,
    },
    /// Follow a stored session until event SEQ is committed (exit 0), or the timeout
    /// passes (exit 4). Takes no lock: the writer may be another process.
    Wait {
        /// The session id.
        id: String,
        /// The seq to wait for.
        seq: u64,
        /// The store directory.
        #[arg(long, default_value = "./surfacelog-data")]
        store: std::path::PathBuf,
        /// How long to wait, in milliseconds.
        #[arg(long, default_value_t = 5000)]
        timeout_ms: u64,
    },
    /// Import a DSH session log (JSONL, Zstandard JSONL) or every session of a DSH `SQLite`
    /// database into the store. Prints one JSON line per imported session:
    /// `{"id":…,"events":N,"repaired":bool,"closers":K}`. The file is only read; a refused
    /// import stores nothing.
    Import {
        /// The file's format.
        #[arg(long, value_enum)]
        format: interop::Format,
        /// The file to import.
        file: std::path::PathBuf,
        /// JSONL: the id the header must name. `SQLite`: the one session to import.
        #[arg(long)]
        id: Option<String>,
        /// Refuse event types DSH's loader does not know and that are not `ignorable`
        /// (`UNKNOWN_EVENT_TYPE`), as the reference does; by default every type is kept.
        #[arg(long)]
        strict: bool,
        /// The store directory.
        #[arg(long, default_value = "./surfacelog-data")]
        store: std::path::PathBuf,
    },
    /// Export a stored session to a DSH format. The target is published atomically and
    /// never overwritten (JSONL); a `SQLite` target may be an existing schema-17 database.
    Export {
        /// The session id.
        id: String,
        /// The target format.
        #[arg(long, value_enum)]
        format: interop::Format,
        /// Write every event as its own record instead of packing delta runs into rows.
        #[arg(long)]
        no_pack: bool,
        /// The file to write.
        #[arg(long)]
        out: std::path::PathBuf,
        /// Export a session whose writer is live: the events it has committed when the
        /// export reads the log, exactly as stored. Without it a live session is refused
        /// with `LOCKED`.
        #[arg(long)]
        committed_prefix: bool,
        /// The store directory.
        #[arg(long, default_value = "./surfacelog-data")]
        store: std::path::PathBuf,
    },
    /// Show a stored session read-only: header, event count, surface, messages and
    /// replacements (with `--json`, as one JSON document).
    Show {
        /// The session id.
        id: String,
        /// Print one JSON document:
        /// `{"header","events","surface","messages":[{"seq","message"}],"replacements"}`.
        #[arg(long)]
        json: bool,
        /// The store directory.
        #[arg(long, default_value = "./surfacelog-data")]
        store: std::path::PathBuf,
    },
    /// Check stored sessions in full, read-only (every record, index, limit, the checkpoint
    /// against a fresh fold, the header). Prints `<id>: ok` or one line per problem,
    /// `<id>: <file> offset=<n> [RULE] message`. Exit 0 when everything checks out, 1 when
    /// a problem is found, 3 for a refused input (an unknown id), 4 for I/O (a store
    /// directory that does not exist).
    Verify {
        /// The sessions to check; all of them when none is given.
        ids: Vec<String>,
        /// Print one JSON document:
        /// `{"store":[…],"sessions":[{"id","ok","problems":[{"file","offset","rule","severity","message"}]}],"ok"}`.
        #[arg(long)]
        json: bool,
        /// The store directory (never created by verify).
        #[arg(long, default_value = "./surfacelog-data")]
        store: std::path::PathBuf,
    },
    /// Salvage a damaged session: keep the longest valid prefix of its log, move the
    /// rest into quarantine files beside the log (never deleted), and print what was set
    /// aside. Takes the session's lock (`LOCKED` while a writer has it open). Never done
    /// automatically.
    Salvage {
        /// The session id.
        id: String,
        /// Print one JSON document:
        /// `{"id","kept","first_lost_seq","reason","set_aside":[{"from","offset","bytes","quarantine"}],"checkpoint_removed"}`.
        #[arg(long)]
        json: bool,
        /// The store directory.
        #[arg(long, default_value = "./surfacelog-data")]
        store: std::path::PathBuf,
    },
    /// Read a log directory (no lock needed) and print its length as JSON.
    Log {
        /// The log directory.
        dir: std::path::PathBuf,
        /// Also check that no writer holds the log (exit 3 with `LOCKED` if one does).
        #[arg(long)]
        check_writer: bool,
    },
}

/// `surfacelog log DIR`: the committed length of a log, read without a lock.
fn log_info(dir: &std::path::Path, check_writer: bool) -> Result<(), surfacelog::Error> {
    use surfacelog::internals::event::EventSource;
    if check_writer {
        surfacelog::internals::log::LogWriter::check_lock(dir)?;
    }
    let reader = surfacelog::internals::log::LogReader::open(dir)?;
    let mut path = String::new();
    surfacelog::internals::json::push_js_string(&mut path, dir.to_string_lossy().as_bytes());
    println!("{{\"dir\":{path},\"events\":{}}}", reader.seq_next());
    Ok(())
}

/// `surfacelog verify`: exit 0 when all checks out, 1 on a problem, 3 for a refused input,
/// 4 for I/O.
fn verify(store: &std::path::Path, ids: &[String], json: bool) -> ExitCode {
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let vocabulary = surfacelog::internals::store::StoreOptions::default()
        .get_session_options()
        .vocabulary
        .clone();
    let report = surfacelog::internals::store::verify(
        store,
        &vocabulary,
        (!ids.is_empty()).then_some(&ids[..]),
    );
    match report {
        Ok(report) => {
            if json {
                println!("{}", report.to_json());
            } else {
                for line in report.lines() {
                    println!("{line}");
                }
            }
            if report.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(error) => {
            eprintln!("error[{}]: {error}", error.code());
            ExitCode::from(if error.code() == "IO" { 4 } else { 3 })
        }
    }
}

/// `surfacelog salvage ID`: what [`surfacelog::internals::store::Store::salvage`] kept and set aside.
fn salvage(store: &std::path::Path, id: &str, json: bool) -> Result<(), surfacelog::Error> {
    use std::fmt::Write as _;
    use surfacelog::internals::json::push_js_string;
    let store = surfacelog::internals::store::Store::open_or_create(
        store,
        surfacelog::internals::store::StoreOptions::default(),
    )?;
    let report = store.salvage(id)?;
    let log = &report.log;
    let path = |p: &std::path::Path| {
        let mut out = String::new();
        push_js_string(&mut out, p.to_string_lossy().as_bytes());
        out
    };
    if !json {
        println!(
            "kept     {} events (seqs 0..{})",
            log.seq_next, log.seq_next
        );
        if let Some(reason) = &log.reason {
            println!("damage   {reason}");
        }
        for aside in &log.set_aside {
            println!(
                "set aside {} bytes of {} from offset {} -> {}",
                aside.bytes,
                aside.from.display(),
                aside.offset,
                aside.quarantine.display()
            );
        }
        match log.first_lost_seq {
            Some(seq) => println!("first lost seq {seq}"),
            None => println!("nothing set aside"),
        }
        if report.checkpoint_removed {
            println!("checkpoint removed (it covered more than what remains)");
        }
        return Ok(());
    }
    let mut out = String::from("{\"id\":");
    push_js_string(&mut out, id.as_bytes());
    let _ = write!(out, ",\"kept\":{},\"first_lost_seq\":", log.seq_next);
    out.push_str(
        &log.first_lost_seq
            .map_or("null".to_owned(), |s| s.to_string()),
    );
    out.push_str(",\"reason\":");
    match &log.reason {
        Some(reason) => push_js_string(&mut out, reason.as_bytes()),
        None => out.push_str("null"),
    }
    out.push_str(",\"set_aside\":[");
    for (i, aside) in log.set_aside.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "{{\"from\":{},\"offset\":{},\"bytes\":{},\"quarantine\":{}}}",
            path(&aside.from),
            aside.offset,
            aside.bytes,
            path(&aside.quarantine)
        );
    }
    let _ = write!(
        out,
        "],\"checkpoint_removed\":{}}}",
        report.checkpoint_removed
    );
    println!("{out}");
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Verify { ids, json, store } => return verify(&store, &ids, json),
        Command::Demo { store } => demo::run(&store, &mut std::io::stdout().lock()),
        Command::Log { dir, check_writer } => log_info(&dir, check_writer),
        Command::Import {
            format,
            file,
            id,
            strict,
            store,
        } => interop::import(&store, format, &file, id.as_deref(), strict),
        Command::Export {
            id,
            format,
            no_pack,
            out,
            committed_prefix,
            store,
        } => interop::export(&store, &id, format, !no_pack, &out, committed_prefix),
        Command::Show { id, json, store } => interop::show(&store, &id, json),
        Command::Salvage { id, json, store } => salvage(&store, &id, json),
        Command::Wait {
            id,
            seq,
            store,
            timeout_ms,
        } => {
            let waited = surfacelog::internals::store::Store::open_or_create(
                &store,
                surfacelog::internals::store::StoreOptions::default(),
            )
            .and_then(|store| store.follow(&id))
            .and_then(|mut follower| {
                follower.wait_for(seq, std::time::Duration::from_millis(timeout_ms))
            });
            match waited {
                Ok(true) => Ok(()),
                Ok(false) => {
                    eprintln!("timed out waiting for seq {seq}");
                    return ExitCode::from(4);
                }
                Err(error) => Err(error),
            }
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error[{}]: {error}", error.code());
            ExitCode::from(3)
        }
    }
}
