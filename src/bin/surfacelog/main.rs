//! The `surfacelog` command line, for people and scripts.
//!
//! Conventions (README "Command line"): `--store DIR` is global (else `SURFACELOG_STORE`,
//! else `./surfacelog-data`); commands that only read never create anything; human output
//! by default, `--json` on every command; errors on stderr as `error[CODE]: message`;
//! exit codes 0 ok, 1 a check failed, 2 usage, 3 refused input, 4 I/O or timeout, 5 not
//! found.

#![allow(
    clippy::items_after_statements,
    reason = "each JSON document's serde type is declared beside its only use"
)]

mod demo;
mod interop;
mod out;
mod read;
mod sessions;
mod write;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// surfacelog: the storage engine for LLM agent sessions. List, read, follow, write,
/// fork, delete, inspect, import and export the sessions of a store.
#[derive(Debug, Parser)]
#[command(version, about, propagate_version = true, after_help = EXAMPLES_MAIN)]
struct Cli {
    /// The store directory.
    #[arg(
        long,
        global = true,
        env = "SURFACELOG_STORE",
        default_value = "./surfacelog-data",
        value_name = "DIR"
    )]
    store: PathBuf,
    /// Machine-readable output: one JSON document, or JSON lines for streams (schemas in
    /// the README).
    #[arg(long, global = true)]
    json: bool,
    /// When to colour human output (`auto`: on a terminal, unless `NO_COLOR` is set).
    #[arg(long, global = true, value_enum, default_value_t = out::ColorWhen::Auto)]
    color: out::ColorWhen,
    #[command(subcommand)]
    command: Command,
}

const EXAMPLES_MAIN: &str = "Examples:
  surfacelog demo
  surfacelog --store ./data ls
  surfacelog show s1 --messages
  surfacelog tail s1 -f --json";

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the demo session in the store (created when missing) and print each stage:
    /// appends, a nested compaction, a tool-output prune, the views, a reopen, a fork and
    /// a crash repair. The demo's own sessions are replaced on each run.
    #[command(after_help = "Examples:\n  surfacelog demo\n  surfacelog --store /tmp/s demo")]
    Demo,
    /// List the sessions: id, created, events, surface length, size on disk, parent. Reads
    /// each session's header and checkpoint only, never its log.
    #[command(after_help = "Examples:\n  surfacelog ls\n  surfacelog ls --sort size --json")]
    Ls {
        /// The order of the rows.
        #[arg(long, value_enum, default_value_t = sessions::SortBy::Id)]
        sort: sessions::SortBy,
    },
    /// Show a session read-only: a summary, or one view of it.
    #[command(after_help = "Examples:
  surfacelog show s1
  surfacelog show s1 --events --from 100 --limit 20
  surfacelog show s1 --messages --as-of 42 --json")]
    Show(read::ShowArgs),
    /// Print the last events of a session; with `-f`, follow it like `tail -f` (the writer
    /// may be another process) until interrupted.
    #[command(after_help = "Examples:\n  surfacelog tail s1 -n 20\n  surfacelog tail s1 -f --json")]
    Tail {
        /// The session id.
        id: String,
        /// How many of the last events to print first.
        #[arg(short = 'n', long = "lines", default_value_t = 10)]
        lines: u64,
        /// Then follow: print each event as soon as it is committed.
        #[arg(short = 'f', long)]
        follow: bool,
    },
    /// Append events read as JSON lines on stdin,
    /// `{"type","data","surfaceOp"?,"sourceEventSeqs"?}`; print `{"seq":N}` for each once
    /// it is written (with `--durable`, once durable). The session is checked in full
    /// first (as `verify`): a damaged one is refused with `CORRUPT`, before anything
    /// changes unless the damage is in its last segment (a torn tail, which opening
    /// recovers, then the check runs again). Each run is one
    /// writer: a turn it leaves open is closed (contract §8) when the next run opens the
    /// session, so append a turn within one run.
    #[command(after_help = r#"Examples:
  echo '{"type":"turn/start","data":{"turn":1}}' | surfacelog append s1 --create
  surfacelog append s1 --durable < events.jsonl"#)]
    Append {
        /// The session id.
        id: String,
        /// Create the session when it does not exist.
        #[arg(long)]
        create: bool,
        /// Print each seq only once its event is durable.
        #[arg(long)]
        durable: bool,
    },
    /// Fork a session at a seq (or its last event) into a new session.
    #[command(
        after_help = "Examples:\n  surfacelog fork s1 --at last --as s1-sub\n  surfacelog fork s1 --at 41 --as s1-retry"
    )]
    Fork {
        /// The source session.
        id: String,
        /// The boundary: a seq (inclusive) or `last`.
        #[arg(long, allow_hyphen_values = true)]
        at: String,
        /// The new session's id.
        #[arg(long = "as", value_name = "NEW")]
        new: String,
    },
    /// Move a session to the trash (`restore` brings it back, `purge` removes it).
    #[command(after_help = "Examples:\n  surfacelog rm s1")]
    Rm {
        /// The session id.
        id: String,
    },
    /// Bring a session back from the trash (its most recently deleted copy).
    #[command(after_help = "Examples:\n  surfacelog restore s1")]
    Restore {
        /// The session id.
        id: String,
    },
    /// Remove trashed sessions for good: all, or those trashed longer ago than a duration.
    #[command(after_help = "Examples:\n  surfacelog purge\n  surfacelog purge --older-than 7d")]
    Purge {
        /// Only those trashed longer ago than this (`30s`, `15m`, `12h`, `7d`).
        #[arg(long, value_parser = sessions::parse_duration)]
        older_than: Option<std::time::Duration>,
    },
    /// Statistics of one session, or of the whole store: events and bytes by type,
    /// segments, real and apparent size, surface length, replacements, last activity.
    #[command(after_help = "Examples:\n  surfacelog stats\n  surfacelog stats s1 --json")]
    Stats {
        /// The session; the whole store when omitted.
        id: Option<String>,
    },
    /// Import a DSH session log (JSONL, Zstandard JSONL) or every session of a DSH `SQLite`
    /// database. Prints one JSON line per imported session,
    /// `{"id","events","repaired","closers"}`. The file is only read; a refused import
    /// stores nothing.
    #[command(after_help = "Examples:
  surfacelog import session.jsonl
  surfacelog import sessions.db --id s1 --strict")]
    Import {
        /// The file to import.
        file: PathBuf,
        /// The file's format; `auto` detects it from the first bytes.
        #[arg(long, value_enum, default_value_t = interop::FormatArg::Auto)]
        format: interop::FormatArg,
        /// JSONL: the id the header must name. `SQLite`: the one session to import.
        #[arg(long)]
        id: Option<String>,
        /// Refuse event types DSH's loader does not know and that are not `ignorable`
        /// (`UNKNOWN_EVENT_TYPE`), as the reference does; by default every type is kept.
        #[arg(long)]
        strict: bool,
    },
    /// Export a session to a DSH format: exactly its stored events. A file is published
    /// atomically and never overwrites an existing one unless `--force`.
    #[command(after_help = "Examples:
  surfacelog export s1 --format dsh-jsonl --out s1.jsonl
  surfacelog export s1 --format dsh-jsonl --out - | head")]
    Export {
        /// The session id.
        id: String,
        /// The target format.
        #[arg(long, value_enum)]
        format: interop::Format,
        /// Write every event as its own record instead of packing delta runs into rows.
        #[arg(long)]
        no_pack: bool,
        /// The file to write, or `-` for stdout (JSONL formats).
        #[arg(long)]
        out: PathBuf,
        /// Replace an existing file (atomically).
        #[arg(long)]
        force: bool,
        /// Export a session whose writer is live: the events it has committed, exactly as
        /// stored. Without it a live session is refused with `LOCKED`.
        #[arg(long)]
        committed_prefix: bool,
    },
    /// Wait until event SEQ of a session is committed (exit 0), or the timeout passes
    /// (exit 4). Takes no lock: the writer may be another process.
    #[command(after_help = "Examples:\n  surfacelog wait s1 100 --timeout-ms 2000")]
    Wait {
        /// The session id.
        id: String,
        /// The seq to wait for.
        seq: u64,
        /// How long to wait, in milliseconds.
        #[arg(long, default_value_t = 5000)]
        timeout_ms: u64,
    },
    /// Check sessions in full, read-only (every record, index, limit, the checkpoint
    /// against a fresh fold, the header). Exit 0 when everything checks out, 1 when a
    /// problem is found.
    #[command(after_help = "Examples:\n  surfacelog verify\n  surfacelog verify s1 s2 --json")]
    Verify {
        /// The sessions to check; all of them when none is given.
        ids: Vec<String>,
    },
    /// Salvage a damaged session: keep the longest valid prefix of its log, move the rest
    /// into quarantine files beside it (never deleted). Never done automatically.
    #[command(after_help = "Examples:\n  surfacelog salvage s1")]
    Salvage {
        /// The session id.
        id: String,
    },
    /// Rewrite the sealed segments of version 1 records of a session's log into compact
    /// records (log-format.md §4.2, §13): the same events, byte for byte, in fewer bytes.
    /// Not the conversation's compaction.
    #[command(
        after_help = "Examples:\n  surfacelog compact s1\n  surfacelog compact --compress s1\n  surfacelog compact --compress --level 19 s1\n  surfacelog --json compact s1"
    )]
    Compact {
        /// The session id.
        id: String,
        /// Rewrite into compact records: what `compact` does without it too, since compact
        /// records are the store's default (accepted for scripts written before). Builds
        /// from before compact records refuse the rewritten log.
        #[arg(long)]
        compact_records: bool,
        /// Also compress the sealed segments (zstd, log-format.md §14); the segment the
        /// writer appends to stays plain.
        #[arg(long)]
        compress: bool,
        /// The zstd level for --compress, 1 to 22: higher is smaller and slower to write.
        #[arg(long, requires = "compress", value_parser = clap::value_parser!(i32).range(1..=22))]
        level: Option<i32>,
    },
    /// Read a log directory without a lock and print its length.
    #[command(after_help = "Examples:\n  surfacelog log ./surfacelog-data/sessions/s1/log")]
    Log {
        /// The log directory.
        dir: PathBuf,
        /// Also check that no writer holds the log (`LOCKED`, exit 3, if one does).
        #[arg(long)]
        check_writer: bool,
    },
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  surfacelog completions bash > ~/.local/share/bash-completion/completions/surfacelog"
    )]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// The exit status for a refusal: 3 refused input, 4 I/O, 5 not found (`wait` exits 4 on
/// its timeout itself).
fn exit_code(error: &surfacelog::Error) -> u8 {
    if let surfacelog::ErrorKind::Io { op, kind, .. } = error.kind() {
        // A file the user named that is not there (an import's input) is "not found";
        // any other I/O error (a missing directory to export into, too) is I/O.
        return if *kind == std::io::ErrorKind::NotFound && *op == "open" {
            5
        } else {
            4
        };
    }
    match error.code() {
        "SESSION_NOT_FOUND" | "STORE_NOT_FOUND" => 5,
        _ => 3,
    }
}

/// What every command gets: the global options.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The store directory.
    pub store: PathBuf,
    /// `--json`.
    pub json: bool,
    /// Whether stdout gets colours.
    pub color: bool,
}

impl Ctx {
    /// The existing store, for a command that must not create one.
    fn open(&self) -> surfacelog::Result<surfacelog::Store> {
        surfacelog::Store::open(&self.store, surfacelog::StoreOptions::new())
    }

    /// The store for a read-only command: nothing in it is changed, not even the
    /// leftovers of interrupted builds in `tmp/` (STORE-17), which a writer's open cleans.
    fn open_read_only(&self) -> surfacelog::Result<surfacelog::Store> {
        surfacelog::Store::open_read_only(&self.store, surfacelog::StoreOptions::new())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    out::set_error_color(cli.color);
    let ctx = Ctx {
        store: cli.store,
        json: cli.json,
        color: cli.color.enabled(&std::io::stdout()),
    };
    let outcome = match cli.command {
        Command::Demo => demo::run(&ctx.store, &mut std::io::stdout().lock()),
        Command::Ls { sort } => sessions::ls(&ctx, sort),
        Command::Show(args) => read::show(&ctx, &args),
        Command::Tail { id, lines, follow } => read::tail(&ctx, &id, lines, follow),
        Command::Append {
            id,
            create,
            durable,
        } => write::append(&ctx, &id, create, durable),
        Command::Fork { id, at, new } => sessions::fork(&ctx, &id, &at, &new),
        Command::Rm { id } => sessions::rm(&ctx, &id),
        Command::Restore { id } => sessions::restore(&ctx, &id),
        Command::Purge { older_than } => sessions::purge(&ctx, older_than),
        Command::Stats { id } => sessions::stats(&ctx, id.as_deref()),
        Command::Import {
            file,
            format,
            id,
            strict,
        } => interop::import(&ctx, format, &file, id.as_deref(), strict),
        Command::Export {
            id,
            format,
            no_pack,
            out,
            force,
            committed_prefix,
        } => interop::export(
            &ctx,
            &id,
            format,
            &interop::ExportOptions {
                pack: !no_pack,
                out: &out,
                force,
                committed_prefix,
            },
        ),
        Command::Wait {
            id,
            seq,
            timeout_ms,
        } => read::wait(&ctx, &id, seq, timeout_ms),
        Command::Verify { ids } => match sessions::verify(&ctx, &ids) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(error) => Err(error),
        },
        Command::Salvage { id } => sessions::salvage(&ctx, &id),
        Command::Compact {
            id,
            compact_records,
            compress,
            level,
        } => sessions::compact(&ctx, &id, compact_records, compress, level),
        Command::Log { dir, check_writer } => read::log_info(&ctx, &dir, check_writer),
        Command::Completions { shell } => {
            // Generated into memory, then written: a closed stdout is `IO`, not a panic
            // inside `clap_complete`.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "surfacelog", &mut script);
            std::io::stdout()
                .lock()
                .write_all(&script)
                .and_then(|()| std::io::stdout().lock().flush())
                .map_err(|e| surfacelog::Error::io("write", "stdout", &e))
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            out::print_error(&error);
            ExitCode::from(exit_code(&error))
        }
    }
}
