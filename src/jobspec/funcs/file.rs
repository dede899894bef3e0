//! The functions of the local file system: `file(path)`, `filebase64(path)`,
//! `fileexists(path)` and `templatefile(path, vars)`, paths relative to the working
//! directory, and the path functions `abspath`, `basename`, `dirname` and `pathexpand`. As in
//! Nomad, only a parse on the user's machine (the CLI) may use them: a job parsed by the
//! servers (`/v1/jobs/parse`) gets functions that fail with a message saying so.

use hcl::eval::{Context, Evaluate, FuncArgs};
use hcl::Value;

use super::{obj, s, Out};
use crate::gotemplate::sprig::{path_base, path_clean, path_dir};

/// The largest file these functions read (a job file's own limit).
const MAX_BYTES: u64 = crate::jobspec::budget::MAX_SOURCE_BYTES as u64;

fn read(fname: &str, path: &str) -> Result<String, String> {
    let bytes = read_bytes(fname, path)?;
    String::from_utf8(bytes).map_err(|_| format!("{fname}: {path:?} is not UTF-8 text"))
}

fn read_bytes(fname: &str, path: &str) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{fname}: {path:?}: {e}"))?;
    if meta.len() > MAX_BYTES {
        return Err(format!(
            "{fname}: {path:?} is {} bytes; the limit is {MAX_BYTES}",
            meta.len()
        ));
    }
    std::fs::read(path).map_err(|e| format!("{fname}: {path:?}: {e}"))
}

pub(super) fn file(a: FuncArgs) -> Out {
    read("file", s(&a[0])).map(Value::from)
}

/// The file's bytes, base64-encoded (any content, text or not).
pub(super) fn filebase64(a: FuncArgs) -> Out {
    use base64::Engine;
    let bytes = read_bytes("filebase64", s(&a[0]))?;
    Ok(base64::engine::general_purpose::STANDARD
        .encode(bytes)
        .into())
}

/// The path made absolute against the working directory, and cleaned.
pub(super) fn abspath(a: FuncArgs) -> Out {
    let path = s(&a[0]);
    if path.starts_with('/') {
        return Ok(path_clean(path).into());
    }
    let cwd = std::env::current_dir().map_err(|e| format!("abspath: {e}"))?;
    let cwd = cwd
        .to_str()
        .ok_or_else(|| "abspath: the working directory is not UTF-8".to_string())?;
    Ok(path_clean(&format!("{cwd}/{path}")).into())
}

/// The last element of the path (Go's `filepath.Base`): "." for an empty path, "/" for the
/// root, trailing slashes ignored.
pub(super) fn basename(a: FuncArgs) -> Out {
    Ok(path_base(s(&a[0])).into())
}

/// All but the last element of the path, cleaned (Go's `filepath.Dir`).
pub(super) fn dirname(a: FuncArgs) -> Out {
    Ok(path_dir(s(&a[0])).into())
}

/// A leading `~` replaced by the home directory (`$HOME`); `~user` is refused, as Nomad's
/// `pathexpand` refuses it; any other path is returned as it is.
pub(super) fn pathexpand(a: FuncArgs) -> Out {
    let path = s(&a[0]);
    let Some(rest) = path.strip_prefix('~') else {
        return Ok(path.into());
    };
    if !rest.is_empty() && !rest.starts_with('/') {
        return Err(format!(
            "pathexpand: cannot expand user-specific home dir in {path:?}"
        ));
    }
    let home = std::env::var("HOME")
        .ok()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| "pathexpand: HOME is not set".to_string())?;
    Ok(format!("{home}{rest}").into())
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
        "file(), filebase64(), fileexists(), templatefile() and the path functions read the \
         machine the job is parsed on: they work in the CLI, not in a job parsed by the servers"
            .into(),
    )
}
