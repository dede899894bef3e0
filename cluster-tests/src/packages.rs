//! Debian packages a test needs (Chromium for the UI, Prometheus for the metrics), installed
//! with `apt-get` when their files are missing and this process may (root). A test that
//! cannot have them skips loudly, and fails under `CI=true`.

use std::path::Path;
use std::process::{Command, Stdio};

/// Make sure every one of `files` exists, installing `packages` when one does not. `Err`
/// names why they are not there.
pub fn find_or_install(files: &[&str], packages: &[&str]) -> Result<(), String> {
    // Tests of one binary run at once: one installs while the others wait, then find it.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let present = || files.iter().all(|f| Path::new(f).exists());
    if present() {
        return Ok(());
    }
    let wanted = packages.join(" ");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(format!(
            "{} missing and installing them needs root (apt-get install {wanted})",
            files.join(" or ")
        ));
    }
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
    };
    // Another process's apt-get (or unattended upgrades) may hold dpkg's lock for a while.
    let mut install = vec!["-o", "DPkg::Lock::Timeout=300", "install", "-y", "-q"];
    install.extend_from_slice(packages);
    for args in [
        &["-o", "DPkg::Lock::Timeout=300", "update", "-q"][..],
        &install[..],
    ] {
        match apt(args) {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                return Err(format!(
                    "apt-get {} failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&o.stderr)
                ))
            }
            Err(e) => return Err(format!("apt-get is not available ({e})")),
        }
    }
    if present() {
        Ok(())
    } else {
        Err(format!(
            "apt-get installed {wanted} but {} is still missing",
            files.join(" or ")
        ))
    }
}

/// What a test does without its packages: `Err` under `CI=true`, else a loud skip (`Ok`).
pub fn skip_or_fail(test: &str, why: &str) -> anyhow::Result<()> {
    let msg = format!("SKIP {test}: {why}");
    if std::env::var("CI").as_deref() == Ok("true") {
        anyhow::bail!("{msg}; CI=true requires it");
    }
    eprintln!("{msg}");
    Ok(())
}
