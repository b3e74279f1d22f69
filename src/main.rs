//! The `tidemark` binary: parse, run, print the error, exit with the documented code. This is
//! the only place where an outcome or an error becomes an exit code.

use clap::Parser;
use std::process::ExitCode;
use tidemark::cli::Outcome;
use tidemark::error::{EXIT_DRIFT, EXIT_INCOMPLETE, EXIT_OK};

/// The exit code of a command that ended without an error (`shared/spec/interface.md`).
fn exit_code(outcome: Outcome) -> u8 {
    match outcome {
        Outcome::Done => EXIT_OK,
        Outcome::DriftAboveTolerance | Outcome::GateClosed | Outcome::MappingIncomplete => {
            EXIT_DRIFT
        }
        Outcome::Incomplete => EXIT_INCOMPLETE,
    }
}

fn main() -> ExitCode {
    // Output piped into `head` ends quietly, as in other Unix tools, instead of panicking.
    #[cfg(unix)]
    #[allow(unsafe_code)] // libc::signal has no safe wrapper; this is the only unsafe block.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match tidemark::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // clap exits 0 for --help/--version and 2 for usage errors, as interface.md wants.
            return ExitCode::from(if e.use_stderr() {
                tidemark::error::EXIT_USAGE
            } else {
                0
            });
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tidemark: cannot start the async runtime: {e}");
            return ExitCode::from(tidemark::error::EXIT_FAILURE);
        }
    };
    match runtime.block_on(tidemark::cli::run(cli)) {
        Ok(outcome) => ExitCode::from(exit_code(outcome)),
        Err(e) => {
            eprintln!("tidemark: error: {}", tidemark::error::describe(&e));
            ExitCode::from(tidemark::error::exit_code(&e))
        }
    }
}
