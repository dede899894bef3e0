//! `teamster job init [-short] [-driver raw_exec] [FILE]`: writes the example job Nomad's
//! `job init` writes (a Redis cache run by the docker driver), its short form, or the same
//! job with a `raw_exec` task that runs on any node without pulling an image. The file
//! (default `example.nomad.hcl`) must not exist yet.

use std::path::PathBuf;

use clap::Args;

/// The example job: a docker task (`redis:7`).
pub const EXAMPLE: &str = include_str!("assets/example.nomad.hcl");
/// The example job, short: the blocks that differ from their defaults only.
pub const EXAMPLE_SHORT: &str = include_str!("assets/example-short.nomad.hcl");
/// The example job with a `raw_exec` task (a shell loop).
pub const EXAMPLE_RAW_EXEC: &str = include_str!("assets/example-raw-exec.nomad.hcl");

/// The file written when none is named.
pub const DEFAULT_FILE: &str = "example.nomad.hcl";

/// `job init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Write the short example (no comments, only what differs from the defaults).
    #[arg(long)]
    short: bool,
    /// The example's driver: `docker` (Nomad's example) or `raw_exec` (runs on any node).
    #[arg(long, default_value = "docker", value_parser = ["docker", "raw_exec"])]
    driver: String,
    /// Where to write it.
    #[arg(default_value = DEFAULT_FILE)]
    file: PathBuf,
}

/// The example `args` asks for.
pub fn example(short: bool, driver: &str) -> anyhow::Result<&'static str> {
    match (driver, short) {
        ("docker", false) => Ok(EXAMPLE),
        ("docker", true) => Ok(EXAMPLE_SHORT),
        ("raw_exec", false) => Ok(EXAMPLE_RAW_EXEC),
        ("raw_exec", true) => anyhow::bail!("-short is only written for the docker example"),
        (other, _) => anyhow::bail!("no example for driver {other:?}"),
    }
}

/// Write the example.
pub fn run(args: InitArgs) -> anyhow::Result<()> {
    let text = example(args.short, &args.driver)?;
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&args.file)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            anyhow::bail!("Job '{}' already exists", args.file.display())
        }
        Err(e) => anyhow::bail!("Failed to write '{}': {e}", args.file.display()),
    };
    std::io::Write::write_all(&mut file, text.as_bytes())
        .map_err(|e| anyhow::anyhow!("Failed to write '{}': {e}", args.file.display()))?;
    println!("Example job file written to {}", args.file.display());
    Ok(())
}
