//! The built `tidemark` binary: its path and one way to run it.

use std::path::Path;
use std::process::{Command, Output};

/// Path of the `tidemark` binary Cargo built for this test run.
pub const PATH: &str = env!("CARGO_BIN_EXE_tidemark");

/// A command running the built binary, without `DATABASE_URL` (each test names its database)
/// and with `NO_COLOR=1`. Add the arguments, the folder and any environment.
pub fn command() -> Command {
    let mut cmd = Command::new(PATH);
    cmd.env_remove("DATABASE_URL").env("NO_COLOR", "1");
    cmd
}

/// What one run of the binary left behind.
#[derive(Debug)]
pub struct Run {
    /// The exit code (None: killed by a signal).
    pub code: Option<i32>,
    /// Standard output (lossy UTF-8).
    pub stdout: String,
    /// Standard error (lossy UTF-8).
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(out: Output) -> Run {
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Run {
    /// Panics (showing both streams) unless the exit code is `want`.
    #[track_caller]
    pub fn expect_code(&self, want: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(want),
            "exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout,
            self.stderr
        );
        self
    }
}

/// Runs `tidemark args…` in `dir` (see [`command`]) with the extra environment `env`.
///
/// # Panics
///
/// When the binary cannot be started.
pub fn run_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = command();
    cmd.args(args).current_dir(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("running the tidemark binary").into()
}

/// Runs `tidemark args…` in `dir` (see [`command`]).
pub fn run(dir: &Path, args: &[&str]) -> Run {
    run_env(dir, args, &[])
}
