//! The `tidemark` binary: parse, run, print the error, exit with the documented code. Every
//! ending, an error included, becomes a [`Outcome`] here, and its code comes from the one table
//! of exit codes, [`Outcome::code`].

use clap::Parser;
use std::process::ExitCode;
use tidemark::cli::Outcome;

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
                Outcome::BadInput.code()
            } else {
                Outcome::Done.code()
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
            return ExitCode::from(Outcome::Failed.code());
        }
    };
    match runtime.block_on(tidemark::cli::run(cli)) {
        Ok(outcome) => ExitCode::from(outcome.code()),
        Err(e) => {
            eprintln!("tidemark: error: {}", tidemark::error::describe(&e));
            ExitCode::from(Outcome::of_error(&e).code())
        }
    }
}
