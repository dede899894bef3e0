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

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
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
    /// Who the fetched files belong to with `chown` (the task's user).
    pub owner: Option<(u32, u32)>,
}

/// Fetches `artifact` (already interpolated) into its destination under `place`.
pub async fn fetch(
    artifact: &TaskArtifact,
    place: &FetchPlace,
    limits: &ArtifactLimits,
) -> Result<(), String> {
    let url = with_options(http_url(&artifact.getter_source)?, &artifact.getter_options);
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
    // An anonymous file of the agent's: nothing a task does can reach or replace it.
    let mut download = tempfile::tempfile().map_err(|e| format!("scratch file: {e}"))?;
    let digest = download_to(
        artifact,
        url,
        &download,
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
    {
        use std::io::Seek;
        download
            .rewind()
            .map_err(|e| format!("reading the download: {e}"))?;
    }
    // Lexically inside the allocation's directory (checked above), relative to it.
    let alloc_root = place
        .task_dir
        .parent()
        .unwrap_or(&place.task_dir)
        .to_path_buf();
    let task_name = place.task_dir.file_name().unwrap_or_default();
    let dest = lexical_rel(Path::new(task_name), &artifact.relative_dest);
    let mode = match artifact.getter_mode.as_str() {
        "" => "any".to_owned(),
        m => m.to_owned(),
    };
    let limits = *limits;
    let owner = place.owner.filter(|_| artifact.chown);
    tokio::task::spawn_blocking(move || {
        let target = Target {
            limits: &limits,
            owner,
        };
        target.place(download, &file_name, &alloc_root, &dest, &mode, archive)
    })
    .await
    .map_err(|e| format!("unpacking: {e}"))?
}

/// `base` joined with `rel` (an absolute `rel` counts as relative), `.` and `..` resolved
/// without looking at the filesystem (never above `base`'s parent: the caller checked).
fn lexical_rel(base: &Path, rel: &str) -> PathBuf {
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

/// `url` with the artifact's options other than `checksum` and `archive` (which the
/// client acts on) as query parameters, as Nomad's getter passes them to the server.
fn with_options(
    mut url: reqwest::Url,
    options: &std::collections::BTreeMap<String, String>,
) -> reqwest::Url {
    let rest: Vec<_> = options
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "checksum" | "archive"))
        .collect();
    if !rest.is_empty() {
        url.query_pairs_mut().extend_pairs(rest);
    }
    url
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

/// Where fetched files go: every path is resolved through open directories, never by
/// name from the root. The destination is reached from the allocation's directory one
/// component at a time through no symlink; inside it, archive entries are resolved with
/// `openat2(RESOLVE_IN_ROOT)`, so no symlink (planted by a task, or made by the archive
/// itself) leads out of the destination, however the tree changes meanwhile. Files are
/// made new (`O_EXCL`, whatever stood there removed first), set-id bits dropped, and
/// given to `owner` through their descriptors.
pub struct Target<'a> {
    /// The client's limits.
    pub limits: &'a ArtifactLimits,
    /// Who the files belong to (`chown = true` with a task `user`).
    pub owner: Option<(u32, u32)>,
}

/// The most a tar's long name, long link or PAX header may hold.
const MAX_EXTENSION: u64 = 64 * 1024;

impl Target<'_> {
    /// Puts the downloaded `file` (named `name` at its source) at `dest` (relative to the
    /// allocation's directory `root`, `.` and `..` already resolved) as `mode` says:
    /// unpacked when it is an archive, else as a file (in `any` mode into the directory
    /// `dest`).
    pub fn place(
        &self,
        file: std::fs::File,
        name: &str,
        root: &Path,
        dest: &Path,
        mode: &str,
        archive: Option<Archive>,
    ) -> Result<(), String> {
        let root_fd = std::fs::File::open(root)
            .map(OwnedFd::from)
            .map_err(|e| format!("{}: {e}", root.display()))?;
        // The tar stream itself, bounded: entries and their headers within the limit.
        let bounded = |r: Box<dyn Read>| -> Box<dyn Read> {
            let limit = self.limits.decompression_size_limit.saturating_add(1 << 20);
            Box::new(r.take(limit))
        };
        match (archive, mode) {
            (Some(kind), "any" | "dir") if !kind.single_file() => {
                let dest_fd = self.walk(&root_fd, dest)?;
                match kind {
                    Archive::Zip => self.unzip(file, &dest_fd),
                    Archive::Tar => self.untar(bounded(Box::new(file)), &dest_fd),
                    Archive::TarGz => self.untar(
                        bounded(Box::new(flate2::read::GzDecoder::new(file))),
                        &dest_fd,
                    ),
                    Archive::TarBz2 => self.untar(
                        bounded(Box::new(bzip2::read::BzDecoder::new(file))),
                        &dest_fd,
                    ),
                    _ => {
                        let unpacked = self.unxz(file)?;
                        self.untar(Box::new(unpacked), &dest_fd)
                    }
                }
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
                let reader: Box<dyn Read> = match kind {
                    Archive::Gz => Box::new(flate2::read::GzDecoder::new(file)),
                    Archive::Bz2 => Box::new(bzip2::read::BzDecoder::new(file)),
                    _ => Box::new(self.unxz(file)?),
                };
                let (dir, leaf) = self.parent_of(&root_fd, &target)?;
                let limit = self.limits.decompression_size_limit;
                self.write_file(&dir, &leaf, reader, 0o644, limit).map(drop)
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
                let (dir, leaf) = self.parent_of(&root_fd, &target)?;
                self.write_file(&dir, &leaf, file, 0o644, u64::MAX - 1)
                    .map(drop)
            }
        }
    }

    /// The directory holding `path` (relative to `root`), walked to through no symlink,
    /// and the last name.
    fn parent_of(&self, root: &OwnedFd, path: &Path) -> Result<(OwnedFd, CString), String> {
        let leaf = path
            .file_name()
            .ok_or_else(|| format!("{}: not a file name", path.display()))?;
        let dir = self.walk(root, path.parent().unwrap_or(Path::new("")))?;
        Ok((dir, cstring(leaf.as_encoded_bytes())?))
    }

    /// `rel` under `root`, one component at a time, each opened without following a
    /// symlink and made (for the owner) when missing.
    fn walk(&self, root: &OwnedFd, rel: &Path) -> Result<OwnedFd, String> {
        let mut dir = dup(root)?;
        for part in rel.components() {
            let std::path::Component::Normal(name) = part else {
                continue;
            };
            let c = cstring(name.as_encoded_bytes())?;
            dir = self.subdir(&dir, &c).map_err(|e| {
                if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::ENOTDIR)
                {
                    format!(
                        "{}: the destination passes a symlink or a file at {:?}",
                        rel.display(),
                        name
                    )
                } else {
                    format!("{}: {e}", rel.display())
                }
            })?;
        }
        Ok(dir)
    }

    /// The directory `name` in `parent`, made when missing (owned by the owner).
    fn subdir(&self, parent: &OwnedFd, name: &CString) -> std::io::Result<OwnedFd> {
        // SAFETY: `name` is NUL-terminated and `parent` an open directory.
        let made = unsafe { libc::mkdirat(parent.as_raw_fd(), name.as_ptr(), 0o755) } == 0;
        if !made {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(e);
            }
        }
        let dir = openat(
            parent,
            name,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )?;
        if made {
            self.give(&dir)?;
        }
        Ok(dir)
    }

    /// `rel`'s directory inside `dest` (symlinks followed, but never out of `dest`), made
    /// when missing.
    fn dir_beneath(&self, dest: &OwnedFd, rel: &Path) -> Result<OwnedFd, String> {
        if rel.as_os_str().is_empty() {
            return dup(dest);
        }
        let c = cstring(rel.as_os_str().as_encoded_bytes())?;
        match openat_beneath(dest, &c, libc::O_RDONLY | libc::O_DIRECTORY) {
            Ok(fd) => Ok(fd),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                let parent = self.dir_beneath(dest, rel.parent().unwrap_or(Path::new("")))?;
                let leaf = cstring(rel.file_name().unwrap_or_default().as_encoded_bytes())?;
                self.subdir(&parent, &leaf)
                    .map_err(|e| format!("{}: {e}", rel.display()))
            }
            Err(e) => Err(format!("{}: {e}", rel.display())),
        }
    }

    /// Writes `reader` to a new file `name` in `dir` (what stood there removed first; a
    /// directory stays and fails the write), mode `mode` without set-id bits, failing past
    /// `limit` bytes.
    fn write_file(
        &self,
        dir: &OwnedFd,
        name: &CString,
        reader: impl Read,
        mode: u32,
        limit: u64,
    ) -> Result<u64, String> {
        let shown = name.to_string_lossy().to_string();
        unlink(dir, name).map_err(|e| format!("{shown}: {e}"))?;
        let fd = openat(
            dir,
            name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            0o600,
        )
        .map_err(|e| format!("{shown}: {e}"))?;
        let mut out = std::fs::File::from(fd);
        let copied = std::io::copy(&mut reader.take(limit.saturating_add(1)), &mut out)
            .map_err(|e| format!("{shown}: {e}"))?;
        if copied > limit {
            return Err(format!(
                "the archive unpacks to more than client.artifact.decompression_size_limit \
                 ({limit} bytes)"
            ));
        }
        let out = OwnedFd::from(out);
        // SAFETY: `out` is an open descriptor this function owns.
        if unsafe { libc::fchmod(out.as_raw_fd(), (mode & 0o777) as libc::mode_t) } != 0 {
            return Err(format!("{shown}: {}", std::io::Error::last_os_error()));
        }
        self.give(&out).map_err(|e| format!("{shown}: {e}"))?;
        Ok(copied)
    }

    /// A symlink `rel` in `dest` to `to`, which must stay inside `dest` as written.
    fn symlink(&self, dest: &OwnedFd, rel: &Path, to: &Path) -> Result<(), String> {
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
        let dir = self.dir_beneath(dest, rel.parent().unwrap_or(Path::new("")))?;
        let name = cstring(rel.file_name().unwrap_or_default().as_encoded_bytes())?;
        let target = cstring(to.as_os_str().as_encoded_bytes())?;
        let shown = rel.display();
        unlink(&dir, &name).map_err(|e| format!("{shown}: {e}"))?;
        // SAFETY: both strings are NUL-terminated and `dir` is an open directory.
        if unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) } != 0 {
            return Err(format!("{shown}: {}", std::io::Error::last_os_error()));
        }
        if let Some((uid, gid)) = self.owner {
            // SAFETY: as above; the link itself is changed, never its target.
            let r = unsafe {
                libc::fchownat(
                    dir.as_raw_fd(),
                    name.as_ptr(),
                    uid,
                    gid,
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            };
            if r != 0 {
                return Err(format!("{shown}: {}", std::io::Error::last_os_error()));
            }
        }
        Ok(())
    }

    /// Gives `fd` to the owner, if there is one.
    fn give(&self, fd: &OwnedFd) -> std::io::Result<()> {
        match self.owner {
            Some((uid, gid)) => std::os::unix::fs::fchown(fd, Some(uid), Some(gid)),
            None => Ok(()),
        }
    }

    /// An `.xz` stream decompressed into an anonymous scratch file of the agent's (lzma-rs
    /// has no streaming reader), bounded by the decompression limit as it is written.
    fn unxz(&self, input: std::fs::File) -> Result<std::fs::File, String> {
        let mut out = tempfile::tempfile().map_err(|e| format!("scratch file: {e}"))?;
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

    /// Unpacks a tar stream into `dest`, entry by entry (raw entries: GNU long names and
    /// PAX paths read here, each within [`MAX_EXTENSION`]).
    fn untar(&self, reader: Box<dyn Read + '_>, dest: &OwnedFd) -> Result<(), String> {
        use tar::EntryType;
        let mut archive = tar::Archive::new(reader);
        let (mut files, mut bytes) = (0u64, 0u64);
        let (mut long_name, mut long_link): (Option<Vec<u8>>, Option<Vec<u8>>) = (None, None);
        let entries = archive
            .entries()
            .map_err(|e| format!("tar: {e}"))?
            .raw(true);
        for entry in entries {
            let mut entry = entry.map_err(|e| format!("tar: {e}"))?;
            let kind = entry.header().entry_type();
            let extension = |entry: &mut tar::Entry<'_, _>| -> Result<Vec<u8>, String> {
                if entry.size() > MAX_EXTENSION {
                    return Err(format!("tar: a {kind:?} header over {MAX_EXTENSION} bytes"));
                }
                let mut data = Vec::new();
                entry
                    .take(MAX_EXTENSION)
                    .read_to_end(&mut data)
                    .map_err(|e| format!("tar: {e}"))?;
                Ok(data)
            };
            match kind {
                EntryType::GNULongName => {
                    let mut name = extension(&mut entry)?;
                    name.retain(|b| *b != 0);
                    long_name = Some(name);
                    continue;
                }
                EntryType::GNULongLink => {
                    let mut link = extension(&mut entry)?;
                    link.retain(|b| *b != 0);
                    long_link = Some(link);
                    continue;
                }
                EntryType::XHeader => {
                    let data = extension(&mut entry)?;
                    for (key, value) in pax_records(&data) {
                        match key {
                            b"path" => long_name = Some(value.to_vec()),
                            b"linkpath" => long_link = Some(value.to_vec()),
                            _ => {}
                        }
                    }
                    continue;
                }
                EntryType::XGlobalHeader => {
                    extension(&mut entry)?;
                    continue;
                }
                _ => {}
            }
            let path = match long_name.take() {
                Some(name) => PathBuf::from(std::ffi::OsString::from_vec(name)),
                None => entry.path().map_err(|e| format!("tar: {e}"))?.into_owned(),
            };
            let link = match long_link.take() {
                Some(link) => Some(PathBuf::from(std::ffi::OsString::from_vec(link))),
                None => entry
                    .link_name()
                    .map_err(|e| format!("tar: {e}"))?
                    .map(|l| l.into_owned()),
            };
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
            let limit = self.limits.decompression_size_limit;
            match kind {
                EntryType::Directory => {
                    let dir = self.dir_beneath(dest, &rel)?;
                    let mode = ((mode & 0o777) | 0o700) as libc::mode_t;
                    // SAFETY: `dir` is an open descriptor.
                    if unsafe { libc::fchmod(dir.as_raw_fd(), mode) } != 0 {
                        let e = std::io::Error::last_os_error();
                        return Err(format!("{}: {e}", rel.display()));
                    }
                    self.give(&dir)
                        .map_err(|e| format!("{}: {e}", rel.display()))?;
                }
                EntryType::Regular | EntryType::Continuous => {
                    let (dir, name) = self.beneath_parent(dest, &rel)?;
                    self.write_file(&dir, &name, &mut entry, mode, limit)?;
                }
                EntryType::Symlink => {
                    let to =
                        link.ok_or_else(|| format!("tar: {} links to nothing", rel.display()))?;
                    self.symlink(dest, &rel, &to)?;
                }
                EntryType::Link => {
                    // A hard link: a copy of the file it names, found inside the
                    // destination.
                    let to = link
                        .and_then(|l| enclosed(&l))
                        .ok_or_else(|| format!("tar: {} links outside", rel.display()))?;
                    let c = cstring(to.as_os_str().as_encoded_bytes())?;
                    let source = openat_beneath(dest, &c, libc::O_RDONLY)
                        .map(std::fs::File::from)
                        .map_err(|e| format!("tar: {}: {e}", to.display()))?;
                    let regular = source.metadata().is_ok_and(|m| m.is_file());
                    if !regular {
                        return Err(format!("tar: {} links to a non-file", rel.display()));
                    }
                    let (dir, name) = self.beneath_parent(dest, &rel)?;
                    self.write_file(&dir, &name, source, mode, limit)?;
                }
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

    /// The directory (inside `dest`) holding `rel`, and its last name.
    fn beneath_parent(&self, dest: &OwnedFd, rel: &Path) -> Result<(OwnedFd, CString), String> {
        let dir = self.dir_beneath(dest, rel.parent().unwrap_or(Path::new("")))?;
        let name = cstring(rel.file_name().unwrap_or_default().as_encoded_bytes())?;
        Ok((dir, name))
    }

    /// Unpacks a zip file into `dest`, entry by entry.
    fn unzip(&self, input: std::fs::File, dest: &OwnedFd) -> Result<(), String> {
        let mut zip = zip::ZipArchive::new(input).map_err(|e| format!("zip: {e}"))?;
        let mut bytes = 0u64;
        self.check_limits(zip.len() as u64, 0)?;
        for i in 0..zip.len() {
            let mut file = zip.by_index(i).map_err(|e| format!("zip: {e}"))?;
            let Some(rel) = file.enclosed_name() else {
                return Err(format!("zip: {} leaves the destination", file.name()));
            };
            if file.is_dir() {
                self.dir_beneath(dest, &rel)?;
                continue;
            }
            let mode = file.unix_mode().unwrap_or(0o644);
            if file.is_symlink() {
                let mut to = String::new();
                (&mut file)
                    .take(4096)
                    .read_to_string(&mut to)
                    .map_err(|e| format!("zip: {e}"))?;
                self.symlink(dest, &rel, Path::new(&to))?;
                continue;
            }
            let left = self.limits.decompression_size_limit.saturating_sub(bytes);
            let (dir, name) = self.beneath_parent(dest, &rel)?;
            let written = self.write_file(&dir, &name, &mut file, mode, left)?;
            bytes = bytes.saturating_add(written);
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

/// The `key=value` records of a PAX extended header (`"<len> key=value\n"` each).
fn pax_records(mut data: &[u8]) -> Vec<(&[u8], &[u8])> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let Some(space) = data.iter().position(|b| *b == b' ') else {
            break;
        };
        let Some(len) = std::str::from_utf8(&data[..space])
            .ok()
            .and_then(|l| l.parse::<usize>().ok())
            .filter(|l| *l > space && *l <= data.len())
        else {
            break;
        };
        let record = &data[space + 1..len];
        let record = record.strip_suffix(b"\n").unwrap_or(record);
        if let Some(eq) = record.iter().position(|b| *b == b'=') {
            out.push((&record[..eq], &record[eq + 1..]));
        }
        data = &data[len..];
    }
    out
}

fn cstring(bytes: &[u8]) -> Result<CString, String> {
    CString::new(bytes).map_err(|_| "a path holds a NUL byte".to_owned())
}

fn dup(fd: &OwnedFd) -> Result<OwnedFd, String> {
    fd.try_clone().map_err(|e| format!("dup: {e}"))
}

/// `openat(dir, name, flags | O_CLOEXEC, mode)`.
fn openat(dir: &OwnedFd, name: &CString, flags: i32, mode: u32) -> std::io::Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated, `dir` open; the result is checked and owned.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `path` opened beneath `root` with `openat2(RESOLVE_IN_ROOT)`: `..` and symlinks (even
/// absolute ones) resolve as if `root` were `/`, so nothing outside it is reached.
fn openat_beneath(root: &OwnedFd, path: &CString, flags: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: an all-zero `open_how` is valid; its fields are set below.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: the arguments are a valid directory, a NUL-terminated path and a
    // correctly sized `open_how`; the result is checked and owned.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Removes `name` from `dir` if it is there and not a directory (a directory stays).
fn unlink(dir: &OwnedFd, name: &CString) -> std::io::Result<()> {
    // SAFETY: `name` is NUL-terminated and `dir` open; unlinkat removes a link itself.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOENT) => Ok(()),
        Some(libc::EISDIR) => Err(std::io::Error::other("a directory is in the way")),
        _ => Err(e),
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
    /// `->`. Paths are written raw into the header, so a test can name one with `..`.
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

    /// An allocation directory `alloc/` with a task `t` (`local/`, `secrets/`).
    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(dir.path().join("alloc/t/local")).unwrap();
            std::fs::create_dir_all(dir.path().join("alloc/t/secrets")).unwrap();
            Fixture { dir }
        }
        fn root(&self) -> PathBuf {
            self.dir.path().join("alloc")
        }
        /// Places `bytes` (downloaded as `name`) at `dest`, relative to the allocation.
        fn place(
            &self,
            bytes: &[u8],
            name: &str,
            dest: &str,
            mode: &str,
            archive: Option<Archive>,
        ) -> Result<(), String> {
            let mut file = tempfile::tempfile().unwrap();
            file.write_all(bytes).unwrap();
            use std::io::Seek;
            file.rewind().unwrap();
            let target = Target {
                limits: &LIMITS,
                owner: None,
            };
            target.place(file, name, &self.root(), Path::new(dest), mode, archive)
        }
        fn read(&self, rel: &str) -> Vec<u8> {
            std::fs::read(self.root().join(rel)).unwrap()
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
    fn other_options_go_to_the_server_as_query_parameters() {
        let options = std::collections::BTreeMap::from([
            ("checksum".to_string(), "sha256:00".to_string()),
            ("archive".to_string(), "false".to_string()),
            ("token".to_string(), "a b".to_string()),
        ]);
        let url = http_url("https://example.com/a.tgz?v=1").unwrap();
        assert_eq!(
            with_options(url, &options).as_str(),
            "https://example.com/a.tgz?v=1&token=a+b"
        );
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
        f.place(
            &tarball,
            "app.tar.gz",
            "t/local",
            "any",
            Some(Archive::TarGz),
        )
        .unwrap();
        let local = f.root().join("t/local");
        assert_eq!(f.read("t/local/bin/run.sh"), b"echo hi\n");
        assert_eq!(mode_of(&local.join("bin/run.sh")), 0o755);
        // No set-id bit survives.
        assert_eq!(mode_of(&local.join("bin/setuid")), 0o755);
        // A link inside the archive's own tree is kept.
        assert_eq!(f.read("t/local/bin/current"), b"echo hi\n");
        // Unpacking again over the same tree works (a retried fetch).
        f.place(
            &tarball,
            "app.tar.gz",
            "t/local",
            "any",
            Some(Archive::TarGz),
        )
        .unwrap();
        // A long name (a GNU long-name entry) is read.
        let long = format!("deep/{}/file.txt", "d".repeat(150));
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(4);
        header.set_mode(0o644);
        builder
            .append_data(&mut header, &long, &b"long"[..])
            .unwrap();
        let plain_tar = builder.into_inner().unwrap();
        f.place(&plain_tar, "long.tar", "t/local", "any", Some(Archive::Tar))
            .unwrap();
        assert_eq!(f.read(&format!("t/local/{long}")), b"long");
        // Not unpacked: the file itself, by name in `any` mode, at the path in `file` mode.
        f.place(&tarball, "app.tar.gz", "t/local", "any", None)
            .unwrap();
        assert_eq!(mode_of(&local.join("app.tar.gz")), 0o644);
        f.place(&tarball, "app.tar.gz", "t/local/renamed.bin", "file", None)
            .unwrap();
        assert!(local.join("renamed.bin").is_file());
        assert!(f.place(&tarball, "x", "t/local", "dir", None).is_err());
        let many = f.place(&tarball, "x.tgz", "t/local/f", "file", Some(Archive::TarGz));
        assert!(many.unwrap_err().contains("file mode"));
    }

    #[test]
    fn single_compressed_files_lose_their_extension_and_xz_bombs_stop_at_the_limit() {
        let f = Fixture::new();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"hello").unwrap();
        let gz = gz.finish().unwrap();
        f.place(&gz, "notes.txt.gz", "t/local", "any", Some(Archive::Gz))
            .unwrap();
        assert_eq!(f.read("t/local/notes.txt"), b"hello");

        let mut xz = Vec::new();
        let text = b"small\n".to_vec();
        lzma_rs::xz_compress(&mut &text[..], &mut xz).unwrap();
        f.place(&xz, "small.txt.xz", "t/local", "any", Some(Archive::Xz))
            .unwrap();
        assert_eq!(f.read("t/local/small.txt"), text);
        let zeros = vec![0u8; (LIMITS.decompression_size_limit * 2) as usize];
        let mut bomb = Vec::new();
        lzma_rs::xz_compress(&mut &zeros[..], &mut bomb).unwrap();
        let e = f
            .place(&bomb, "big.xz", "t/local", "any", Some(Archive::Xz))
            .unwrap_err();
        assert!(e.contains("decompression_size_limit"), "{e}");
        // A gz bomb of one file stops at the limit as well.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&zeros).unwrap();
        let e = f
            .place(
                &gz.finish().unwrap(),
                "big.gz",
                "t/local",
                "any",
                Some(Archive::Gz),
            )
            .unwrap_err();
        assert!(e.contains("decompression_size_limit"), "{e}");
    }

    #[test]
    fn archives_past_the_limits_or_leaving_the_destination_are_refused() {
        let f = Fixture::new();
        let refused = |bytes: Vec<u8>| {
            f.place(&bytes, "a.tgz", "t/local", "any", Some(Archive::TarGz))
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
            .place(&bytes, "a.zip", "t/local", "any", Some(Archive::Zip))
            .unwrap_err();
        assert!(e.contains("leaves the destination"), "{e}");
    }

    /// A chain of links the archive makes itself (`a -> .`, `a/b -> ..`, `a/b/c -> ..`)
    /// resolves inside the destination: the task's `secrets/` beside it is not reached.
    #[test]
    fn links_an_archive_makes_never_lead_out_of_its_destination() {
        let f = Fixture::new();
        std::fs::write(f.root().join("t/secrets/token"), "keep").unwrap();
        let chain = tar_gz(&[
            ("a", b"->.", 0o777),
            ("a/b", b"->..", 0o777),
            ("a/b/c", b"->..", 0o777),
            ("a/b/c/secrets/token", b"stolen", 0o644),
        ]);
        f.place(&chain, "a.tgz", "t/local", "any", Some(Archive::TarGz))
            .unwrap();
        assert_eq!(f.read("t/secrets/token"), b"keep");
        assert_eq!(f.read("t/local/secrets/token"), b"stolen");
    }

    /// A task (or a container, whose links resolve on the host) that planted a symlink
    /// to a host directory on a destination's path cannot make the client write there.
    #[test]
    fn a_symlink_planted_on_the_destination_leads_nowhere_outside() {
        let f = Fixture::new();
        let host = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(host.path(), f.root().join("t/local/planted")).unwrap();
        let tarball = tar_gz(&[("file", b"x", 0o644)]);
        let e = f
            .place(
                &tarball,
                "a.tgz",
                "t/local/planted",
                "any",
                Some(Archive::TarGz),
            )
            .unwrap_err();
        assert!(e.contains("passes a symlink"), "{e}");
        let e = f
            .place(b"x", "notes.txt", "t/local/planted", "any", None)
            .unwrap_err();
        assert!(e.contains("passes a symlink"), "{e}");
        // A file-mode target that is itself a link is replaced, never written through.
        let secret = host.path().join("secret");
        std::fs::write(&secret, "keep").unwrap();
        std::os::unix::fs::symlink(&secret, f.root().join("t/local/out.bin")).unwrap();
        f.place(b"new", "x", "t/local/out.bin", "file", None)
            .unwrap();
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "keep");
        assert_eq!(f.read("t/local/out.bin"), b"new");
        assert_eq!(std::fs::read_dir(host.path()).unwrap().count(), 1);
    }
}
