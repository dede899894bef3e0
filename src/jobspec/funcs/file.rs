//! The functions that read local files: `file(path)`, `fileexists(path)` and
//! `templatefile(path, vars)`, paths relative to the working directory. As in Nomad, only a
//! parse on the user's machine (the CLI) may read files: a job parsed by the servers
//! (`/v1/jobs/parse`) gets functions that fail with a message saying so.

use hcl::eval::{Context, Evaluate, FuncArgs};
use hcl::Value;

use super::{obj, s, Out};

/// The largest file these functions read (a job file's own limit).
const MAX_BYTES: u64 = crate::jobspec::budget::MAX_SOURCE_BYTES as u64;

fn read(fname: &str, path: &str) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{fname}: {path:?}: {e}"))?;
    if meta.len() > MAX_BYTES {
        return Err(format!(
            "{fname}: {path:?} is {} bytes; the limit is {MAX_BYTES}",
            meta.len()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("{fname}: {path:?}: {e}"))?;
    String::from_utf8(bytes).map_err(|_| format!("{fname}: {path:?} is not UTF-8 text"))
}

pub(super) fn file(a: FuncArgs) -> Out {
    read("file", s(&a[0])).map(Value::from)
}

pub(super) fn fileexists(a: FuncArgs) -> Out {
    let path = s(&a[0]);
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(true.into()),
        Ok(_) => Err(format!("fileexists: {path:?} is not a regular file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false.into()),
        Err(e) => Err(format!("fileexists: {path:?}: {e}")),
    }
}

/// The file rendered as an HCL template with `vars` (a map) as its variables and the
/// functions of a job file.
pub(super) fn templatefile(a: FuncArgs) -> Out {
    let path = s(&a[0]);
    let text = read("templatefile", path)?;
    let template: hcl::Template = text
        .parse()
        .map_err(|e| format!("templatefile: {path:?}: {e}"))?;
    let mut ctx: Context = super::context(true);
    for (k, v) in obj(&a[1]) {
        ctx.declare_var(k.as_str(), v.clone());
    }
    template
        .evaluate(&ctx)
        .map(Value::from)
        .map_err(|e| format!("templatefile: {path:?}: {e}"))
}

/// What the file functions answer where files may not be read.
pub(super) fn disabled(_: FuncArgs) -> Out {
    Err(
        "file(), fileexists() and templatefile() read the machine the job is parsed on: \
         they work in the CLI, not in a job parsed by the servers"
            .into(),
    )
}
