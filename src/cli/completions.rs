//! `tidemark completions SHELL` and `tidemark man`: generated from the clap definitions (the
//! caller passes in `Cli::command()`: [`super::args`] names this file's own arguments, so this
//! file does not import it back), so they always list the commands and options this binary
//! has. The book (docs/src/install.md, "Shell completions and man page") says where to install them.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::PathBuf;

use super::outcome::Outcome;

/// `tidemark completions` options.
#[derive(Debug, Clone, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `tidemark man` options.
#[derive(Debug, Clone, clap::Args)]
pub struct ManArgs {
    /// Write tidemark.1 and one page per command (tidemark-audit.1, …) into this folder
    /// instead of printing tidemark.1 on stdout.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Writes the completion script for `shell` of the command line `cmd` (`Cli::command()`) to
/// `out`.
pub fn completions(
    shell: clap_complete::Shell,
    mut cmd: clap::Command,
    out: &mut dyn Write,
) -> Result<()> {
    clap_complete::generate(shell, &mut cmd, "tidemark", out);
    Ok(())
}

/// Renders one page: the command's own sections, then EXIT STATUS.
fn page(cmd: clap::Command, out: &mut dyn Write) -> Result<()> {
    let man = clap_mangen::Man::new(cmd);
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    man.render_subcommands_section(out)?;
    let mut roff = clap_mangen::roff::Roff::new();
    roff.control("SH", ["EXIT STATUS"]);
    for (outcome, meaning) in Outcome::MEANINGS {
        let code = outcome.code().to_string();
        roff.control("TP", []);
        roff.text([clap_mangen::roff::bold(code.as_str())]);
        roff.text([clap_mangen::roff::roman(*meaning)]);
    }
    roff.to_writer(out)?;
    man.render_version_section(out)?;
    Ok(())
}

/// `tidemark man`: tidemark.1 of the command line `cmd` (`Cli::command()`) on `out`, or with
/// `--out DIR` one page per command in DIR (the file names are printed on `out`).
pub fn man(args: &ManArgs, cmd: clap::Command, out: &mut dyn Write) -> Result<()> {
    let Some(dir) = &args.out else {
        return page(cmd, out);
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut pages = vec![("tidemark".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands() {
        // A page per command, named as man(1) looks it up; clap keeps names as &'static str
        // (no `string` feature), and this process ends right after writing the pages.
        let name: &'static str = Box::leak(format!("tidemark-{}", sub.get_name()).into_boxed_str());
        pages.push((
            name.to_string(),
            sub.clone().name(name).version(env!("CARGO_PKG_VERSION")),
        ));
    }
    for (name, cmd) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        page(cmd, &mut buf)?;
        std::fs::write(&path, buf).with_context(|| format!("cannot write {}", path.display()))?;
        writeln!(out, "{}", path.display())?;
    }
    Ok(())
}
