//! The `surfacelog` command line. It uses only the crate's public API.
//!
//! Errors print as `error[CODE]: message` on stderr and exit with status 3.

mod demo;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// surfacelog: store, inspect and repair LLM agent sessions.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a session in memory and print what the engine derives: appends, a nested
    /// compaction, a tool-output prune, the messages, the transcript and an as-of view.
    Demo,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Demo => demo::run(&mut std::io::stdout().lock()),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error[{}]: {error}", error.code());
            ExitCode::from(3)
        }
    }
}
