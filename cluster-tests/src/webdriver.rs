//! A small W3C WebDriver client over `reqwest`, for the web UI test: it starts Debian's
//! `chromedriver` on a free loopback port, opens one headless Chromium session, and offers
//! what the test needs — open a URL, run a script, wait on a script's answer, take a
//! screenshot. Chromium and its driver are installed with `apt-get` when missing and the
//! test runs as root ([`Browser::start`] answers `Ok(None)` with the reason when it cannot).
//!
//! ```text
//! test ──HTTP/JSON──> chromedriver ──DevTools──> chromium --headless ──HTTP──> agent /ui/
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use base64::Engine;
use serde_json::{json, Value};

/// Where Debian's packages put the browser and its driver.
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A headless Chromium session driven through `chromedriver`.
pub struct Browser {
    http: reqwest::Client,
    base: String,
    session: String,
    driver: Option<Child>,
}

/// The browser and driver binaries, installing Debian's `chromium` and `chromium-driver`
/// when they are missing and this process may (root with `apt-get`). `Err` names why not.
pub fn find_or_install() -> Result<(PathBuf, PathBuf), String> {
    crate::packages::find_or_install(&[CHROMIUM, CHROMEDRIVER], &["chromium", "chromium-driver"])?;
    Ok((CHROMIUM.into(), CHROMEDRIVER.into()))
}

fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

impl Browser {
    /// Start `chromedriver` and a headless session with a `width`×`height` window.
    pub async fn start(
        chromium: &Path,
        chromedriver: &Path,
        width: u32,
        height: u32,
    ) -> anyhow::Result<Browser> {
        let port = free_port()?;
        use std::os::unix::process::CommandExt;
        // Its own process group, so that the browser it starts goes with it.
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("spawning {}", chromedriver.display()))?;
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        let mut b = Browser {
            http,
            base,
            session: String::new(),
            driver: Some(driver),
        };
        crate::wait_for(Duration::from_secs(20), "chromedriver to listen", || {
            let req = b.http.get(format!("{}/status", b.base));
            async move {
                let v: Value = req.send().await.ok()?.json().await.ok()?;
                (v["value"]["ready"] == true).then_some(())
            }
        })
        .await?;
        let caps = json!({
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": chromium.display().to_string(),
                        "args": [
                            "--headless=new", "--no-sandbox", "--disable-gpu",
                            "--disable-dev-shm-usage", "--hide-scrollbars",
                            format!("--window-size={width},{height}"),
                        ],
                    }
                }
            }
        });
        let v = b
            .call(reqwest::Method::POST, "/session", Some(caps))
            .await?;
        b.session = v["sessionId"]
            .as_str()
            .context("no sessionId in the new session's answer")?
            .to_string();
        Ok(b)
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.context("calling chromedriver")?;
        let status = resp.status();
        let v: Value = resp.json().await.context("chromedriver's answer")?;
        if !status.is_success() {
            bail!(
                "chromedriver {path}: {status}: {} {}",
                v["value"]["error"],
                v["value"]["message"]
            );
        }
        Ok(v["value"].clone())
    }

    fn session_path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    /// Load `url` (a full page load).
    pub async fn goto(&self, url: &str) -> anyhow::Result<()> {
        self.call(
            reqwest::Method::POST,
            &self.session_path("/url"),
            Some(json!({ "url": url })),
        )
        .await?;
        Ok(())
    }

    /// Run `script` (a function body; `arguments` holds `args`) in the page; its return value.
    pub async fn execute(&self, script: &str, args: Value) -> anyhow::Result<Value> {
        self.call(
            reqwest::Method::POST,
            &self.session_path("/execute/sync"),
            Some(json!({ "script": script, "args": args })),
        )
        .await
    }

    /// Run `script` every 50 ms until it returns something other than `null` or `false`
    /// (that value), or fail after `timeout` naming `what` and the page's text.
    pub async fn wait_script(
        &self,
        timeout: Duration,
        what: &str,
        script: &str,
    ) -> anyhow::Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.execute(script, json!([])).await?;
            if !v.is_null() && v != Value::Bool(false) {
                return Ok(v);
            }
            if Instant::now() >= deadline {
                let text = self
                    .execute("return document.body.innerText.slice(0, 3000)", json!([]))
                    .await
                    .unwrap_or_default();
                bail!("timed out after {timeout:?} waiting for {what}; the page says:\n{text}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A PNG screenshot of the viewport, written to `path`.
    pub async fn screenshot(&self, path: &Path) -> anyhow::Result<()> {
        let v = self
            .call(
                reqwest::Method::GET,
                &self.session_path("/screenshot"),
                None,
            )
            .await?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().context("the screenshot is not a string")?)
            .context("decoding the screenshot")?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, png).with_context(|| format!("writing {}", path.display()))
    }

    /// Resize the window (screenshots of long pages).
    pub async fn set_window(&self, width: u32, height: u32) -> anyhow::Result<()> {
        self.call(
            reqwest::Method::POST,
            &self.session_path("/window/rect"),
            Some(json!({ "width": width, "height": height })),
        )
        .await?;
        Ok(())
    }

    /// End the session and the driver.
    pub async fn close(mut self) {
        let path = self.session_path("");
        let _ = self.call(reqwest::Method::DELETE, &path, None).await;
        self.kill();
    }

    /// SIGKILL the driver's process group (the driver and the browser it started).
    fn kill(&mut self) {
        if let Some(mut c) = self.driver.take() {
            // SAFETY: kill(2) on the process group of a child we own and have not reaped.
            unsafe {
                libc::kill(-(c.id() as libc::pid_t), libc::SIGKILL);
            }
            let _ = c.wait();
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.kill();
    }
}
