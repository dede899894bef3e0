//! Fetching a task's artifacts (Nomad's go-getter, for the sources its client supports by
//! default that work here): `http` and `https` downloads, checked against the artifact's
//! `checksum` while they stream, within the client's size and time limits, then placed by
//! `mode` and unpacked when they are archives (tar, tar.gz/tgz, tar.bz2/tbz2, tar.xz/txz,
//! zip, and the single-file gz, bz2 and xz) unless `archive = "false"`.
//!
//! Other schemes (`git::`, `s3::`, `gcs::`, `hg::`, local paths) fail the download with a
//! message naming the scheme. Nothing an artifact holds is written outside its destination:
//! archive entries that would leave it are refused, and the destination itself must stay
//! inside the allocation's directory.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::Digest;
use teamster_storage::model::TaskArtifact;

/// Where the host keeps its trusted certificate authorities (Debian's bundle).
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The client's limits on artifacts (`client.artifact`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArtifactLimits {
    /// The longest a download may take.
    pub http_read_timeout: Duration,
    /// The largest download, bytes.
    pub http_max_size: u64,
    /// The most an archive may unpack to, bytes.
    pub decompression_size_limit: u64,
    /// The most files an archive may hold.
    pub decompression_file_count_limit: u64,
}

impl ArtifactLimits {
    /// The limits `config` sets, once the client's configuration has been validated
    /// (sizes that do not parse count as none).
    pub fn of(config: &crate::client::config::ArtifactConfig) -> ArtifactLimits {
        let size = |text: &str| crate::client::config::parse_bytes(text).unwrap_or(u64::MAX);
        ArtifactLimits {
            http_read_timeout: config.http_read_timeout,
            http_max_size: size(&config.http_max_size),
            decompression_size_limit: size(&config.decompression_size_limit),
            decompression_file_count_limit: config.decompression_file_count_limit,
        }
    }
}

/// The kinds of archive an artifact can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Archive {
    /// `.tar`
    Tar,
    /// `.tar.gz`, `.tgz`
    TarGz,
    /// `.tar.bz2`, `.tbz2`
    TarBz2,
    /// `.tar.xz`, `.txz`
    TarXz,
    /// `.zip`
    Zip,
    /// `.gz`: one file.
    Gz,
    /// `.bz2`: one file.
    Bz2,
    /// `.xz`: one file.
    Xz,
}

/// Extensions, longest first (go-getter's decompressor names).
const ARCHIVES: &[(&str, Archive)] = &[
    ("tar.gz", Archive::TarGz),
    ("tar.bz2", Archive::TarBz2),
    ("tar.xz", Archive::TarXz),
    ("tgz", Archive::TarGz),
    ("tbz2", Archive::TarBz2),
    ("txz", Archive::TarXz),
    ("zip", Archive::Zip),
    ("tar", Archive::Tar),
    ("gz", Archive::Gz),
    ("bz2", Archive::Bz2),
    ("xz", Archive::Xz),
];

impl Archive {
    /// The archive `name` is by its extension, if any.
    pub fn of_name(name: &str) -> Option<(Archive, &str)> {
        ARCHIVES.iter().find_map(|(ext, kind)| {
            let stem = name.strip_suffix(ext)?.strip_suffix('.')?;
            Some((*kind, stem))
        })
    }

    /// The archive an `archive = "…"` option names.
    fn named(option: &str) -> Option<Archive> {
        ARCHIVES
            .iter()
            .find(|(ext, _)| *ext == option)
            .map(|(_, kind)| *kind)
    }

    fn single_file(self) -> bool {
        matches!(self, Archive::Gz | Archive::Bz2 | Archive::Xz)
    }
}

/// What fetching one artifact needs besides the artifact.
#[derive(Debug, Clone)]
pub struct FetchPlace {
    /// The task's directory (destinations are relative to it).
    pub task_dir: PathBuf,
    /// Where the download is kept while it is checked (the task's `tmp/`).
    pub scratch: PathBuf,
    /// Who the fetched files belong to with `chown` (the task's user).
    pub owner: Option<(u32, u32)>,
}

/// Fetches `artifact` (already interpolated) into its destination under `place`.
pub async fn fetch(
    artifact: &TaskArtifact,
    place: &FetchPlace,
    limits: &ArtifactLimits,
) -> Result<(), String> {
    let url = http_url(&artifact.getter_source)?;
    if teamster_storage::model::dest_escapes_alloc_dir(&artifact.relative_dest) {
        return Err("destination escapes allocation directory".to_owned());
    }
    let checksum = match artifact.getter_options.get("checksum") {
        Some(c) => Some(teamster_storage::model::parse_checksum(c)?),
        None => None,
    };
    let file_name = url
        .path_segments()
        .and_then(|mut s| s.next_back())
        .filter(|n| !n.is_empty())
        .unwrap_or("download")
        .to_string();
    let archive = match artifact.getter_options.get("archive").map(String::as_str) {
        Some("false") => None,
        Some(named) => Some(
            Archive::named(named).ok_or_else(|| format!("unsupported archive type {named:?}"))?,
        ),
        None => Archive::of_name(&file_name).map(|(kind, _)| kind),
    };
    std::fs::create_dir_all(&place.scratch)
        .map_err(|e| format!("{}: {e}", place.scratch.display()))?;
    let download = tempfile::NamedTempFile::new_in(&place.scratch)
        .map_err(|e| format!("{}: {e}", place.scratch.display()))?;
    let digest = download_to(
        artifact,
        url,
        download.as_file(),
        checksum.as_ref().map(|c| c.0.as_str()),
        limits,
    )
    .await?;
    if let Some((kind, want)) = &checksum {
        if &digest != want {
            return Err(format!(
                "checksums did not match: expected {kind}:{}, got {kind}:{}",
                hex(want),
                hex(&digest)
            ));
        }
    }
    // Lexically inside the allocation's directory (checked above); symlinks on the way
    // are checked as the files are written.
    let alloc_root = place
        .task_dir
        .parent()
        .unwrap_or(&place.task_dir)
        .to_path_buf();
    let dest = lexical_join(&place.task_dir, &artifact.relative_dest);
    let mode = match artifact.getter_mode.as_str() {
        "" => "any".to_owned(),
        m => m.to_owned(),
    };
    let limits = *limits;
    let owner = place.owner.filter(|_| artifact.chown);
    let path = download.path().to_path_buf();
    let scratch = place.scratch.clone();
    tokio::task::spawn_blocking(move || {
        let root = alloc_root
            .canonicalize()
            .map_err(|e| format!("{}: {e}", alloc_root.display()))?;
        let target = Target {
            root: &root,
            scratch: &scratch,
            limits: &limits,
        };
        let placed = target.place(&path, &file_name, &dest, &mode, archive)?;
        if let Some((uid, gid)) = owner {
            chown_all(&placed, uid, gid).map_err(|e| format!("chown: {e}"))?;
        }
        drop(download);
        Ok(())
    })
    .await
    .map_err(|e| format!("unpacking: {e}"))?
}

/// `base` joined with `rel` (an absolute `rel` counts as relative), `.` and `..` resolved
/// without looking at the filesystem.
fn lexical_join(base: &Path, rel: &str) -> PathBuf {
    let mut out = base.to_path_buf();
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            p => out.push(p),
        }
    }
    out
}

/// The URL of an `http`/`https` source; anything else is refused naming its scheme.
fn http_url(source: &str) -> Result<reqwest::Url, String> {
    let unsupported = |scheme: &str| {
        format!("unsupported artifact source scheme {scheme:?}: teamster fetches http and https")
    };
    // go-getter's forced getters: `git::https://…`.
    if let Some((forced, _)) = source.split_once("::") {
        if !forced.contains('/') {
            return Err(unsupported(forced));
        }
    }
    match reqwest::Url::parse(source) {
        Ok(url) if matches!(url.scheme(), "http" | "https") => Ok(url),
        Ok(url) => Err(unsupported(url.scheme())),
        Err(_) => Err(format!(
            "artifact source {source:?} is not a URL: teamster fetches http and https"
        )),
    }
}

/// Streams the artifact into `file`, within the limits; the digest of `checksum_kind` of
/// what came (empty without one).
async fn download_to(
    artifact: &TaskArtifact,
    url: reqwest::Url,
    file: &std::fs::File,
    checksum_kind: Option<&str>,
    limits: &ArtifactLimits,
) -> Result<Vec<u8>, String> {
    let mut builder = reqwest::Client::builder()
        .timeout(limits.http_read_timeout)
        .danger_accept_invalid_certs(artifact.getter_insecure);
    if let Ok(pem) = std::fs::read(CA_BUNDLE) {
        for cert in reqwest::Certificate::from_pem_bundle(&pem).unwrap_or_default() {
            builder = builder.add_root_certificate(cert);
        }
    }
    let client = builder.build().map_err(|e| format!("http client: {e}"))?;
    let mut request = client.get(url);
    for (k, v) in &artifact.getter_headers {
        request = request.header(k, v);
    }
    let mut response = request
        .send()
        .await
        .map_err(|e| e.without_url().to_string())?;
    if !response.status().is_success() {
        return Err(format!("bad response code: {}", response.status().as_u16()));
    }
    use tokio::io::AsyncWriteExt as _;
    let mut hasher = Hasher::new(checksum_kind);
    let mut written: u64 = 0;
    let file = file
        .try_clone()
        .map_err(|e| format!("writing the download: {e}"))?;
    let mut out = tokio::io::BufWriter::new(tokio::fs::File::from_std(file));
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| e.without_url().to_string())?
    {
        written = written.saturating_add(chunk.len() as u64);
        if written > limits.http_max_size {
            return Err(format!(
                "the download exceeds client.artifact.http_max_size ({} bytes)",
                limits.http_max_size
            ));
        }
        hasher.update(&chunk);
        out.write_all(&chunk)
            .await
            .map_err(|e| format!("writing the download: {e}"))?;
    }
    out.flush()
        .await
        .map_err(|e| format!("writing the download: {e}"))?;
    Ok(hasher.finish())
}

/// The digest of one checksum kind, fed as the download streams.
enum Hasher {
    None,
    Md5(md5::Md5),
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
}

impl Hasher {
    fn new(kind: Option<&str>) -> Hasher {
        match kind {
            Some("md5") => Hasher::Md5(md5::Md5::new()),
            Some("sha1") => Hasher::Sha1(sha1::Sha1::new()),
            Some("sha256") => Hasher::Sha256(sha2::Sha256::new()),
            Some("sha512") => Hasher::Sha512(sha2::Sha512::new()),
            _ => Hasher::None,
        }
    }

    fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::None => {}
            Hasher::Md5(h) => h.update(data),
            Hasher::Sha1(h) => h.update(data),
            Hasher::Sha256(h) => h.update(data),
            Hasher::Sha512(h) => h.update(data),
        }
    }

    fn finish(self) -> Vec<u8> {
        match self {
            Hasher::None => Vec::new(),
            Hasher::Md5(h) => h.finalize().to_vec(),
            Hasher::Sha1(h) => h.finalize().to_vec(),
            Hasher::Sha256(h) => h.finalize().to_vec(),
            Hasher::Sha512(h) => h.finalize().to_vec(),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where fetched files may go: inside `root` (the allocation's directory, canonical),
/// with `scratch` for an xz stream's decompressed bytes, within `limits`.
pub struct Target<'a> {
    /// The allocation's directory, canonical.
    pub root: &'a Path,
    /// Where intermediate files go.
    pub scratch: &'a Path,
    /// The client's limits.
    pub limits: &'a ArtifactLimits,
}

impl Target<'_> {
    /// Puts the downloaded `file` (named `name` at its source) at `dest` as `mode` says:
    /// unpacked when it is an archive, else as a file (in `any` mode into the directory
    /// `dest`). Nothing is written through a symlink that leads out of the allocation's
    /// directory, no archive entry leaves `dest`, and no set-id bit survives. Returns what
    /// it wrote (for `chown`).
    pub fn place(
        &self,
        file: &Path,
        name: &str,
        dest: &Path,
        mode: &str,
        archive: Option<Archive>,
    ) -> Result<PathBuf, String> {
        let open = || std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()));
        match (archive, mode) {
            (Some(kind), "any" | "dir") if !kind.single_file() => {
                let dest = self.dir(dest)?;
                let input = open()?;
                match kind {
                    Archive::Zip => self.unzip(input, &dest)?,
                    Archive::Tar => self.untar(input, &dest)?,
                    Archive::TarGz => self.untar(flate2::read::GzDecoder::new(input), &dest)?,
                    Archive::TarBz2 => self.untar(bzip2::read::BzDecoder::new(input), &dest)?,
                    _ => {
                        let unpacked = self.unxz(input)?;
                        self.untar(unpacked, &dest)?
                    }
                }
                Ok(dest)
            }
            (Some(kind), "file") if !kind.single_file() => Err(format!(
                "{name} is an archive of many files: it cannot be unpacked in file mode"
            )),
            (Some(kind), _) => {
                // One compressed file: `any` puts it in `dest` without its extension.
                let target = if mode == "file" {
                    dest.to_path_buf()
                } else {
                    dest.join(Archive::of_name(name).map_or(name, |(_, stem)| stem))
                };
                let input = open()?;
                let reader: Box<dyn Read> = match kind {
                    Archive::Gz => Box::new(flate2::read::GzDecoder::new(input)),
                    Archive::Bz2 => Box::new(bzip2::read::BzDecoder::new(input)),
                    _ => Box::new(self.unxz(input)?),
                };
                self.write_file(&target, reader, 0o644, self.limits.decompression_size_limit)
            }
            (None, "dir") => Err(format!(
                "{name} is not an archive: a single file cannot be fetched in dir mode"
            )),
            (None, _) => {
                let target = if mode == "file" {
                    dest.to_path_buf()
                } else {
                    dest.join(name)
                };
                self.write_file(&target, open()?, 0o644, u64::MAX - 1)
            }
        }
    }

    /// The directory `dir` made (parents too) and checked: its real path, inside the
    /// allocation's directory.
    fn dir(&self, dir: &Path) -> Result<PathBuf, String> {
        let io = |p: &Path| {
            let p = p.display().to_string();
            move |e: std::io::Error| format!("{p}: {e}")
        };
        let mut existing = dir.to_path_buf();
        let mut missing = Vec::new();
        while std::fs::symlink_metadata(&existing).is_err() {
            let Some(name) = existing.file_name() else {
                break;
            };
            missing.push(name.to_os_string());
            existing.pop();
        }
        let mut real = existing.canonicalize().map_err(io(&existing))?;
        if !real.starts_with(self.root) {
            return Err(format!(
                "{} leads outside the allocation directory",
                dir.display()
            ));
        }
        if !real.is_dir() {
            return Err(format!("{} is not a directory", dir.display()));
        }
        for name in missing.iter().rev() {
            real.push(name);
            std::fs::create_dir(&real).map_err(io(&real))?;
        }
        Ok(real)
    }

    /// Writes `reader` to the new file `target` (its directory made and checked), mode
    /// `mode` without set-id bits, failing past `limit` bytes and on a symlink in its
    /// place.
    fn write_file(
        &self,
        target: &Path,
        reader: impl Read,
        mode: u32,
        limit: u64,
    ) -> Result<PathBuf, String> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let name = target
            .file_name()
            .ok_or_else(|| format!("{}: not a file name", target.display()))?;
        let dir = self.dir(target.parent().unwrap_or(Path::new("/")))?;
        let target = dir.join(name);
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&target)
            .map_err(|e| format!("{}: {e}", target.display()))?;
        let copied = std::io::copy(&mut reader.take(limit.saturating_add(1)), &mut out)
            .map_err(|e| format!("{}: {e}", target.display()))?;
        if copied > limit {
            return Err(format!(
                "the archive unpacks to more than client.artifact.decompression_size_limit \
                 ({limit} bytes)"
            ));
        }
        out.set_permissions(std::fs::Permissions::from_mode(mode & 0o777))
            .map_err(|e| format!("{}: {e}", target.display()))?;
        Ok(target)
    }

    /// A symlink at `rel` in `dest` to `to`, which must stay inside `dest`.
    fn symlink(&self, dest: &Path, rel: &Path, to: &Path) -> Result<(), String> {
        let mut depth = rel.components().count() as i64 - 1;
        let inside = !to.is_absolute()
            && to.components().all(|c| {
                match c {
                    std::path::Component::ParentDir => depth -= 1,
                    std::path::Component::Normal(_) => depth += 1,
                    _ => {}
                }
                depth >= 0
            });
        if !inside {
            return Err(format!(
                "{} links to {}, outside the destination",
                rel.display(),
                to.display()
            ));
        }
        let link = dest.join(rel);
        let dir = self.dir(link.parent().unwrap_or(dest))?;
        let link = dir.join(link.file_name().unwrap_or_default());
        std::os::unix::fs::symlink(to, &link).map_err(|e| format!("{}: {e}", link.display()))
    }

    /// An `.xz` stream decompressed into a scratch file (lzma-rs has no streaming reader),
    /// bounded by the decompression limit as it is written.
    fn unxz(&self, input: std::fs::File) -> Result<std::fs::File, String> {
        let mut out = tempfile::tempfile_in(self.scratch)
            .map_err(|e| format!("{}: {e}", self.scratch.display()))?;
        let mut bounded = Bounded {
            out: &mut out,
            left: self.limits.decompression_size_limit,
            over: false,
        };
        let result = lzma_rs::xz_decompress(&mut std::io::BufReader::new(input), &mut bounded);
        if bounded.over {
            return Err(format!(
                "the archive unpacks to more than client.artifact.decompression_size_limit \
                 ({} bytes)",
                self.limits.decompression_size_limit
            ));
        }
        result.map_err(|e| format!("xz: {e}"))?;
        use std::io::Seek;
        out.rewind().map_err(|e| format!("xz: {e}"))?;
        Ok(out)
    }

    /// Unpacks a tar stream into `dest`, entry by entry.
    fn untar(&self, reader: impl Read, dest: &Path) -> Result<(), String> {
        use tar::EntryType;
        let mut archive = tar::Archive::new(reader);
        let (mut files, mut bytes) = (0u64, 0u64);
        for entry in archive.entries().map_err(|e| format!("tar: {e}"))? {
            let mut entry = entry.map_err(|e| format!("tar: {e}"))?;
            let path = entry.path().map_err(|e| format!("tar: {e}"))?.into_owned();
            let Some(rel) = enclosed(&path) else {
                if path
                    .components()
                    .all(|c| matches!(c, std::path::Component::CurDir))
                {
                    continue;
                }
                return Err(format!("tar: {} leaves the destination", path.display()));
            };
            files += 1;
            bytes = bytes.saturating_add(entry.size());
            self.check_limits(files, bytes)?;
            let mode = entry.header().mode().unwrap_or(0o644);
            match entry.header().entry_type() {
                EntryType::Directory => {
                    use std::os::unix::fs::PermissionsExt;
                    let dir = self.dir(&dest.join(&rel))?;
                    let perms = std::fs::Permissions::from_mode((mode & 0o777) | 0o700);
                    std::fs::set_permissions(&dir, perms)
                        .map_err(|e| format!("{}: {e}", dir.display()))?;
                }
                EntryType::Regular | EntryType::Continuous => {
                    let limit = self.limits.decompression_size_limit;
                    self.write_file(&dest.join(&rel), &mut entry, mode, limit)?;
                }
                EntryType::Symlink => {
                    let to = entry
                        .link_name()
                        .map_err(|e| format!("tar: {e}"))?
                        .ok_or_else(|| format!("tar: {} links to nothing", rel.display()))?
                        .into_owned();
                    self.symlink(dest, &rel, &to)?;
                }
                EntryType::XGlobalHeader | EntryType::XHeader => {}
                other => {
                    return Err(format!(
                        "tar: {} is a {other:?} entry, which artifacts may not hold",
                        rel.display()
                    ))
                }
            }
        }
        Ok(())
    }

    /// Unpacks a zip file into `dest`, entry by entry.
    fn unzip(&self, input: std::fs::File, dest: &Path) -> Result<(), String> {
        let mut zip = zip::ZipArchive::new(input).map_err(|e| format!("zip: {e}"))?;
        let mut bytes = 0u64;
        self.check_limits(zip.len() as u64, 0)?;
        for i in 0..zip.len() {
            let mut file = zip.by_index(i).map_err(|e| format!("zip: {e}"))?;
            let Some(rel) = file.enclosed_name() else {
                return Err(format!("zip: {} leaves the destination", file.name()));
            };
            if file.is_dir() {
                self.dir(&dest.join(rel))?;
                continue;
            }
            let mode = file.unix_mode().unwrap_or(0o644);
            if file.is_symlink() {
                let mut to = String::new();
                file.read_to_string(&mut to)
                    .map_err(|e| format!("zip: {e}"))?;
                self.symlink(dest, &rel, Path::new(&to))?;
                continue;
            }
            let left = self.limits.decompression_size_limit.saturating_sub(bytes);
            let written = self.write_file(&dest.join(&rel), &mut file, mode, left)?;
            let size = std::fs::metadata(&written).map_or(0, |m| m.len());
            bytes = bytes.saturating_add(size);
        }
        Ok(())
    }

    fn check_limits(&self, files: u64, bytes: u64) -> Result<(), String> {
        let limits = self.limits;
        if files > limits.decompression_file_count_limit {
            return Err(format!(
                "the archive holds more than client.artifact.decompression_file_count_limit \
                 ({}) files",
                limits.decompression_file_count_limit
            ));
        }
        if bytes > limits.decompression_size_limit {
            return Err(format!(
                "the archive unpacks to more than client.artifact.decompression_size_limit \
                 ({} bytes)",
                limits.decompression_size_limit
            ));
        }
        Ok(())
    }
}

/// `path` as a relative path of plain names (a leading `/` or `./` dropped), or `None`
/// when it climbs with `..` or names nothing.
fn enclosed(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::Normal(p) => out.push(p),
            std::path::Component::CurDir | std::path::Component::RootDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// A writer that refuses to go past `left` bytes (an xz bomb stops there).
struct Bounded<'a, W: Write> {
    out: &'a mut W,
    left: u64,
    over: bool,
}

impl<W: Write> Write for Bounded<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() as u64 > self.left {
            self.over = true;
            return Err(std::io::Error::other("decompression size limit"));
        }
        let n = self.out.write(buf)?;
        self.left -= n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Gives `path` and everything under it (never following a symlink) to `uid:gid`.
fn chown_all(path: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
    if std::fs::symlink_metadata(path)?.is_dir() {
        for entry in std::fs::read_dir(path)? {
            chown_all(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const LIMITS: ArtifactLimits = ArtifactLimits {
        http_read_timeout: Duration::from_secs(5),
        http_max_size: 1 << 20,
        decompression_size_limit: 1 << 20,
        decompression_file_count_limit: 16,
    };

    /// A tar.gz of `entries`: (path, data, mode), or a symlink when the data starts with
    /// `->`. Paths are written raw, so a test can name one with `..`.
    fn tar_gz(entries: &[(&str, &[u8], u32)]) -> Vec<u8> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut builder = tar::Builder::new(gz);
        for (path, data, mode) in entries {
            let mut header = tar::Header::new_gnu();
            header.as_gnu_mut().unwrap().name[..path.len()].copy_from_slice(path.as_bytes());
            header.set_mode(*mode);
            if let Some(to) = data.strip_prefix(b"->") {
                header.set_entry_type(tar::EntryType::Symlink);
                header
                    .set_link_name(std::str::from_utf8(to).unwrap())
                    .unwrap();
                header.set_size(0);
                header.set_cksum();
                builder.append(&header, &[][..]).unwrap();
            } else {
                header.set_size(data.len() as u64);
                header.set_cksum();
                builder.append(&header, *data).unwrap();
            }
        }
        builder.into_inner().unwrap().finish().unwrap()
    }

    /// An allocation directory with its task's `local/` and a download file.
    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(dir.path().join("alloc/t/local")).unwrap();
            std::fs::create_dir_all(dir.path().join("alloc/t/tmp")).unwrap();
            Fixture { dir }
        }
        fn root(&self) -> PathBuf {
            self.dir.path().join("alloc").canonicalize().unwrap()
        }
        fn local(&self) -> PathBuf {
            self.root().join("t/local")
        }
        fn download(&self, bytes: &[u8]) -> PathBuf {
            let path = self.dir.path().join("dl");
            std::fs::write(&path, bytes).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            path
        }
        fn place(
            &self,
            bytes: &[u8],
            name: &str,
            dest: &Path,
            mode: &str,
            archive: Option<Archive>,
        ) -> Result<PathBuf, String> {
            let file = self.download(bytes);
            let (root, scratch) = (self.root(), self.root().join("t/tmp"));
            let target = Target {
                root: &root,
                scratch: &scratch,
                limits: &LIMITS,
            };
            target.place(&file, name, dest, mode, archive)
        }
    }

    fn mode_of(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    #[test]
    fn archives_are_known_by_their_extensions() {
        assert_eq!(
            Archive::of_name("app.tar.gz"),
            Some((Archive::TarGz, "app"))
        );
        assert_eq!(Archive::of_name("app.tgz"), Some((Archive::TarGz, "app")));
        assert_eq!(
            Archive::of_name("notes.txt.gz"),
            Some((Archive::Gz, "notes.txt"))
        );
        assert_eq!(Archive::of_name("a.zip"), Some((Archive::Zip, "a")));
        assert_eq!(Archive::of_name("plain.txt"), None);
        assert_eq!(Archive::of_name("tgz"), None);
    }

    #[test]
    fn only_http_and_https_sources_are_fetched() {
        assert!(http_url("https://example.com/a.tgz").is_ok());
        for (source, scheme) in [
            ("git::https://github.com/x/y", "git"),
            ("s3::https://s3.amazonaws.com/b/k", "s3"),
            ("gcs://bucket/obj", "gcs"),
            ("file:///etc/passwd", "file"),
        ] {
            let e = http_url(source).unwrap_err();
            assert!(e.contains(&format!("scheme {scheme:?}")), "{source}: {e}");
        }
        assert!(http_url("/etc/passwd").unwrap_err().contains("not a URL"));
    }

    #[test]
    fn a_tarball_unpacks_into_its_destination_and_a_file_lands_by_mode() {
        let f = Fixture::new();
        let tarball = tar_gz(&[
            ("bin/run.sh", b"echo hi\n", 0o755),
            ("bin/setuid", b"x", 0o4755),
            ("bin/current", b"->run.sh", 0o777),
            ("README", b"r", 0o644),
        ]);
        let local = f.local();
        f.place(&tarball, "app.tar.gz", &local, "any", Some(Archive::TarGz))
            .unwrap();
        assert_eq!(
            std::fs::read(local.join("bin/run.sh")).unwrap(),
            b"echo hi\n"
        );
        assert_eq!(mode_of(&local.join("bin/run.sh")), 0o755);
        // No set-id bit survives.
        assert_eq!(mode_of(&local.join("bin/setuid")), 0o755);
        // A link inside the archive's own tree is kept.
        assert_eq!(
            std::fs::read(local.join("bin/current")).unwrap(),
            b"echo hi\n"
        );
        // Not unpacked: the file itself, by name in `any` mode, at the path in `file` mode,
        // readable by others although the download is private to the agent.
        f.place(&tarball, "app.tar.gz", &local, "any", None)
            .unwrap();
        assert_eq!(mode_of(&local.join("app.tar.gz")), 0o644);
        let file = local.join("renamed.bin");
        f.place(&tarball, "app.tar.gz", &file, "file", None)
            .unwrap();
        assert!(file.is_file());
        assert!(f.place(&tarball, "x", &local, "dir", None).is_err());
        let many = f.place(&tarball, "x.tgz", &file, "file", Some(Archive::TarGz));
        assert!(many.unwrap_err().contains("file mode"));
    }

    #[test]
    fn single_compressed_files_lose_their_extension_and_xz_bombs_stop_at_the_limit() {
        let f = Fixture::new();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"hello").unwrap();
        let local = f.local();
        f.place(
            &gz.finish().unwrap(),
            "notes.txt.gz",
            &local,
            "any",
            Some(Archive::Gz),
        )
        .unwrap();
        assert_eq!(std::fs::read(local.join("notes.txt")).unwrap(), b"hello");

        let mut xz = Vec::new();
        let text = b"small\n".to_vec();
        lzma_rs::xz_compress(&mut &text[..], &mut xz).unwrap();
        f.place(&xz, "small.txt.xz", &local, "any", Some(Archive::Xz))
            .unwrap();
        assert_eq!(std::fs::read(local.join("small.txt")).unwrap(), text);
        let zeros = vec![0u8; (LIMITS.decompression_size_limit * 2) as usize];
        let mut bomb = Vec::new();
        lzma_rs::xz_compress(&mut &zeros[..], &mut bomb).unwrap();
        let e = f
            .place(&bomb, "big.xz", &local, "any", Some(Archive::Xz))
            .unwrap_err();
        assert!(e.contains("decompression_size_limit"), "{e}");
    }

    #[test]
    fn archives_past_the_limits_or_leaving_the_destination_are_refused() {
        let f = Fixture::new();
        let local = f.local();
        let refused = |bytes: Vec<u8>| {
            f.place(&bytes, "a.tgz", &local, "any", Some(Archive::TarGz))
                .unwrap_err()
        };
        let names: Vec<String> = (0..20).map(|i| format!("f{i}")).collect();
        let many: Vec<(&str, &[u8], u32)> = names
            .iter()
            .map(|n| (n.as_str(), &b"x"[..], 0o644))
            .collect();
        let e = refused(tar_gz(&many));
        assert!(e.contains("decompression_file_count_limit"), "{e}");
        let big = vec![0u8; (LIMITS.decompression_size_limit + 1) as usize];
        let e = refused(tar_gz(&[("big", &big, 0o644)]));
        assert!(e.contains("decompression_size_limit"), "{e}");
        let e = refused(tar_gz(&[("../../escape", b"x", 0o644)]));
        assert!(e.contains("leaves the destination"), "{e}");
        let e = refused(tar_gz(&[("out", b"->../../../etc", 0o777)]));
        assert!(e.contains("outside the destination"), "{e}");
        let e = refused(tar_gz(&[("abs", b"->/etc/passwd", 0o777)]));
        assert!(e.contains("outside the destination"), "{e}");
        assert!(!f.dir.path().join("escape").exists());

        // A zip entry naming a path outside.
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        zip.start_file("../escape", zip::write::SimpleFileOptions::default())
            .unwrap();
        zip.write_all(b"x").unwrap();
        let bytes = zip.finish().unwrap().into_inner();
        let e = f
            .place(&bytes, "a.zip", &local, "any", Some(Archive::Zip))
            .unwrap_err();
        assert!(e.contains("leaves the destination"), "{e}");
    }

    /// A task (or a container, whose links resolve on the host) that planted a symlink
    /// to a host directory in a destination cannot make the client write there.
    #[test]
    fn a_symlink_planted_in_the_destination_leads_nowhere_outside() {
        let f = Fixture::new();
        let host = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(host.path(), f.local().join("planted")).unwrap();
        let tarball = tar_gz(&[("file", b"x", 0o644)]);
        let into = f.local().join("planted");
        let e = f
            .place(&tarball, "a.tgz", &into, "any", Some(Archive::TarGz))
            .unwrap_err();
        assert!(e.contains("outside the allocation directory"), "{e}");
        let e = f.place(b"x", "notes.txt", &into, "any", None).unwrap_err();
        assert!(e.contains("outside the allocation directory"), "{e}");
        // A file-mode target that is itself a link is not written through.
        let secret = host.path().join("secret");
        std::fs::write(&secret, "keep").unwrap();
        std::os::unix::fs::symlink(&secret, f.local().join("out.bin")).unwrap();
        assert!(f
            .place(b"x", "x", &f.local().join("out.bin"), "file", None)
            .is_err());
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "keep");
        assert_eq!(std::fs::read_dir(host.path()).unwrap().count(), 1);
    }
}
