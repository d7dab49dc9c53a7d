//! `surfacelog import`, `export` and `show`: moving sessions between the store and the
//! DSH interchange formats (`dsh-formats.md`), and looking at one.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use surfacelog::Result;
use surfacelog::internals::adapters::jsonl::{self, Compression};
use surfacelog::internals::event::EventSource;
use surfacelog::internals::json::push_js_string;
use surfacelog::internals::store::{Imported, Store, StoreOptions};

/// The interchange formats the command line reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[expect(
    clippy::enum_variant_names,
    reason = "the names are the command line's values: dsh-jsonl, dsh-jsonl-zstd, dsh-sqlite"
)]
pub enum Format {
    /// Raw DSH JSONL (`session.jsonl`).
    DshJsonl,
    /// DSH JSONL in Zstandard frames (`session.jsonl.zstd`).
    DshJsonlZstd,
    /// A DSH `SQLite` database, schema 17.
    DshSqlite,
}

impl Format {
    /// How a JSONL format is framed (`dsh-formats.md` §5, §6).
    fn compression(self) -> Compression {
        if self == Format::DshJsonlZstd {
            Compression::Zstd
        } else {
            Compression::None
        }
    }
}

/// A progress bar on a terminal's stderr; hidden when stderr is piped.
fn progress_bar(total: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template(&format!(
        "{what} {{bar:40}} {{bytes}}/{{total_bytes}} {{bytes_per_sec}} {{eta}}"
    ))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

fn print_imported(out: &mut impl Write, imported: &Imported, torn: bool) {
    let mut id = String::new();
    push_js_string(&mut id, imported.id.as_bytes());
    let closers = imported.closers.len();
    let repaired = torn || closers > 0;
    let _ = writeln!(
        out,
        "{{\"id\":{id},\"events\":{},\"repaired\":{repaired},\"closers\":{closers}}}",
        imported.events
    );
}

/// `surfacelog import`: one JSON line per imported session.
pub fn import(
    store: &Path,
    format: Format,
    file: &Path,
    id: Option<&str>,
    strict: bool,
) -> Result<()> {
    let options = StoreOptions::new().strict_vocabulary(strict);
    let store = Store::open_or_create(store, options)?;
    let stdout = &mut std::io::stdout().lock();
    match format {
        Format::DshJsonl | Format::DshJsonlZstd => {
            let compression = format.compression();
            let size = std::fs::metadata(file).map_or(0, |m| m.len());
            let bar = progress_bar(size, "import");
            let outcome = jsonl::import_jsonl(&store, file, compression, id, &mut |at| {
                bar.set_position(at);
            });
            bar.finish_and_clear();
            let (imported, scan) = outcome?;
            print_imported(stdout, &imported, scan.torn.is_some());
        }
        Format::DshSqlite => {
            for (imported, torn) in sqlite_import(&store, file, id)? {
                print_imported(stdout, &imported, torn);
            }
        }
    }
    Ok(())
}

/// `surfacelog export`: writes session `id` to `out`, published atomically: exactly the
/// stored events (no closers are invented for an interrupted turn: the reference's
/// loader repairs on load). A session whose writer is live is refused with `LOCKED`
/// unless `committed_prefix`.
pub fn export(
    store: &Path,
    id: &str,
    format: Format,
    pack: bool,
    out: &Path,
    committed_prefix: bool,
) -> Result<()> {
    let store = Store::open_or_create(store, StoreOptions::default())?;
    if !committed_prefix {
        store.check_no_writer(id)?;
    }
    let session = store.inspect(id)?;
    let events = session.log().seq_next();
    let summary = match format {
        Format::DshJsonl | Format::DshJsonlZstd => {
            let compression = format.compression();
            let exported =
                jsonl::export_file(out, session.header(), session.log(), pack, compression)?;
            format!(
                "\"records\":{},\"packedRows\":{},\"textBytes\":{}",
                exported.records, exported.packed_rows, exported.text_bytes
            )
        }
        Format::DshSqlite => sqlite_export(out, &session, pack)?,
    };
    let mut quoted = String::new();
    push_js_string(&mut quoted, id.as_bytes());
    println!("{{\"id\":{quoted},\"events\":{events},{summary}}}");
    Ok(())
}

/// `surfacelog show`: the session as one JSON document, or a short listing.
pub fn show(store: &Path, id: &str, json: bool) -> Result<()> {
    let store = Store::open_or_create(store, StoreOptions::default())?;
    let session = store.inspect(id)?;
    let header = jsonl::logical_header(session.header());
    let stdout = &mut std::io::stdout().lock();
    if !json {
        let _ = writeln!(stdout, "header   {header}");
        let _ = writeln!(stdout, "events   {}", session.log().seq_next());
        let _ = writeln!(stdout, "surface  {:?}", session.surface().nodes());
        for message in session.messages()? {
            let text: String = message.json.chars().take(100).collect();
            let _ = writeln!(stdout, "  {:>6}  {text}", message.seq);
        }
        return Ok(());
    }
    let mut out = String::with_capacity(1 << 16);
    out.push_str("{\"header\":");
    out.push_str(&header);
    let _ = write!(out, ",\"events\":{}", session.log().seq_next());
    out.push_str(",\"surface\":");
    push_seqs(&mut out, session.surface().nodes());
    out.push_str(",\"messages\":[");
    for (i, message) in session.messages()?.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "{{\"seq\":{},\"message\":{}}}",
            message.seq, message.json
        );
    }
    out.push_str("],\"replacements\":[");
    let history = session.replacements()?;
    for (i, r) in history.replacements().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "{{\"seq\":{},\"start\":{},\"end\":{},\"shadowed\":",
            r.seq, r.start, r.end
        );
        push_seqs(&mut out, r.shadowed);
        out.push('}');
    }
    out.push_str("]}");
    let _ = writeln!(stdout, "{out}");
    Ok(())
}

fn push_seqs(out: &mut String, seqs: &[u64]) {
    out.push('[');
    for (i, seq) in seqs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&seq.to_string());
    }
    out.push(']');
}

/// `SQLite` import through the adapter: each session with whether rows were dropped.
fn sqlite_import(store: &Store, file: &Path, id: Option<&str>) -> Result<Vec<(Imported, bool)>> {
    let imported = surfacelog::internals::adapters::sqlite_import::import_sqlite(store, file, id)?;
    Ok(imported
        .into_iter()
        .map(|(session, torn)| (session, torn.is_some()))
        .collect())
}

/// `SQLite` export through the adapter: the summary fields of the printed line.
fn sqlite_export(
    out: &Path,
    session: &surfacelog::internals::session::Session<surfacelog::internals::store::ReadOnlyLog>,
    pack: bool,
) -> Result<String> {
    let report = surfacelog::internals::adapters::sqlite::export_session(
        out,
        session.header(),
        session.log(),
        pack,
    )?;
    Ok(format!(
        "\"rows\":{},\"packedRows\":{}",
        report.rows, report.packed_rows
    ))
}
