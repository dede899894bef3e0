//! The job file a command reads (`job run`, `job plan`, `job validate`): HCL or Nomad's
//! JSON, with the values of an HCL file's variables from `--var`, `--var-file` and
//! `NOMAD_VAR_*`.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use serde_json::Value;

use crate::jobspec;

/// The job file and the values of its variables.
#[derive(Debug, Clone, Args)]
pub struct JobFileArgs {
    /// The job file: HCL (`.hcl`, `.nomad`) or Nomad JSON (`{"Job": {...}}` or a bare job
    /// object); `-` for stdin.
    pub file: PathBuf,
    /// A value for a variable of an HCL job file, `name=value` (repeatable; wins over var
    /// files and `NOMAD_VAR_<name>`).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// A file of `name = value` lines for the job file's variables (repeatable, later files
    /// win).
    #[arg(long = "var-file", value_name = "FILE")]
    pub var_files: Vec<PathBuf>,
}

/// Read a job file: HCL, or JSON (`{"Job": {...}}` or a bare job object); returns the job
/// object as Nomad's JSON. The file is JSON when its name ends in `.json`, or, for stdin and
/// other names, when its first non-blank character is `{`.
pub fn read_job_file(args: &JobFileArgs) -> anyhow::Result<Value> {
    let path = &args.file;
    let (name, text) = if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("reading the job from stdin")?;
        ("<stdin>".to_string(), text)
    } else {
        let size = std::fs::metadata(path)
            .with_context(|| format!("reading the job file {}", path.display()))?
            .len();
        if size > jobspec::MAX_JOB_FILE_BYTES {
            bail!(
                "{}: the job file is {size} bytes; the limit is {} bytes",
                path.display(),
                jobspec::MAX_JOB_FILE_BYTES
            );
        }
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the job file {}", path.display()))?;
        (path.display().to_string(), text)
    };
    let is_json = match path.extension().and_then(|e| e.to_str()) {
        Some("json") => true,
        Some("hcl" | "nomad") => false,
        _ => text.trim_start().starts_with('{'),
    };
    if !is_json {
        let inputs = var_inputs(args)?;
        return jobspec::hcl::parse_job(&name, &text, &inputs).map_err(anyhow::Error::from);
    }
    let value: Value =
        serde_json::from_str(&text).with_context(|| format!("{name} is not valid JSON"))?;
    let job = match value {
        Value::Object(mut map) if map.contains_key("Job") => map.remove("Job").unwrap_or_default(),
        other => other,
    };
    if !job.is_object() {
        bail!("{name}: the job must be a JSON object");
    }
    Ok(job)
}

/// The values of an HCL job file's variables: `NOMAD_VAR_*`, `--var-file`s, `--var`s.
fn var_inputs(args: &JobFileArgs) -> anyhow::Result<jobspec::hcl::VarInputs> {
    let env = std::env::vars()
        .filter_map(|(k, v)| k.strip_prefix("NOMAD_VAR_").map(|n| (n.to_string(), v)))
        .collect();
    let files = args
        .var_files
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .map(|text| (f.display().to_string(), text))
                .with_context(|| format!("reading the var file {}", f.display()))
        })
        .collect::<anyhow::Result<_>>()?;
    let flags = args
        .vars
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| anyhow::anyhow!("--var {kv:?}: expected NAME=VALUE"))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(jobspec::hcl::VarInputs {
        env,
        files,
        flags,
        strict: true,
        allow_fs: true,
        budget: Default::default(),
    })
}
