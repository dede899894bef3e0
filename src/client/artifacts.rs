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
    let dest = place
        .task_dir
        .join(artifact.relative_dest.trim_start_matches('/'));
    let mode = artifact.getter_mode.clone();
    let limits = *limits;
    let owner = place.owner.filter(|_| artifact.chown);
    let path = download.path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        let placed = place_download(&path, &file_name, &dest, &mode, archive, &limits)?;
        if let Some((uid, gid)) = owner {
            chown_all(&placed, uid, gid).map_err(|e| format!("chown: {e}"))?;
        }
        drop(download);
        Ok(())
    })
    .await
    .map_err(|e| format!("unpacking: {e}"))?
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
    let mut hasher = Hasher::new(checksum_kind);
    let mut written: u64 = 0;
    let mut out = std::io::BufWriter::new(file);
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
            .map_err(|e| format!("writing the download: {e}"))?;
    }
    out.flush()
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

/// Puts the downloaded `file` (named `name` at its source) at `dest` as `mode` says:
/// unpacked when it is an archive, else as a file (in `any` mode into the directory
/// `dest`). Returns what it wrote (for `chown`).
pub fn place_download(
    file: &Path,
    name: &str,
    dest: &Path,
    mode: &str,
    archive: Option<Archive>,
    limits: &ArtifactLimits,
) -> Result<PathBuf, String> {
    let io = |what: &Path| {
        let what = what.display().to_string();
        move |e: std::io::Error| format!("{what}: {e}")
    };
    let open = || std::fs::File::open(file).map_err(io(file));
    match (archive, mode) {
        (Some(kind), "any" | "dir") if !kind.single_file() => {
            std::fs::create_dir_all(dest).map_err(io(dest))?;
            let input = open()?;
            match kind {
                Archive::Zip => unzip(input, dest, limits)?,
                Archive::Tar => untar(input, dest, limits)?,
                Archive::TarGz => untar(flate2::read::GzDecoder::new(input), dest, limits)?,
                Archive::TarBz2 => untar(bzip2::read::BzDecoder::new(input), dest, limits)?,
                Archive::TarXz => untar(xz_reader(input)?, dest, limits)?,
                _ => unreachable!("single-file archives are handled below"),
            }
            Ok(dest.to_path_buf())
        }
        (Some(kind), "file") if !kind.single_file() => Err(format!(
            "{name} is an archive of many files: it cannot be unpacked in file mode"
        )),
        (Some(kind), _) => {
            // One compressed file: `any` puts it in `dest` without its extension.
            let target = if mode == "file" {
                dest.to_path_buf()
            } else {
                let stem = Archive::of_name(name).map_or(name, |(_, stem)| stem);
                dest.join(stem)
            };
            let input = open()?;
            let reader: Box<dyn Read> = match kind {
                Archive::Gz => Box::new(flate2::read::GzDecoder::new(input)),
                Archive::Bz2 => Box::new(bzip2::read::BzDecoder::new(input)),
                _ => Box::new(xz_reader(input)?),
            };
            write_limited(reader, &target, limits.decompression_size_limit)?;
            Ok(target)
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
            // Copied as a new file (the download is private to the agent; the copy takes
            // the usual mode, as go-getter's does).
            write_limited(open()?, &target, u64::MAX - 1)?;
            Ok(target)
        }
    }
}

/// An `.xz` stream, decompressed whole into memory within lzma-rs (it has no streaming
/// reader); bounded by the download's own size limit times the usual ratio.
fn xz_reader(mut input: std::fs::File) -> Result<std::io::Cursor<Vec<u8>>, String> {
    let mut reader = std::io::BufReader::new(&mut input);
    let mut out = Vec::new();
    lzma_rs::xz_decompress(&mut reader, &mut out).map_err(|e| format!("xz: {e}"))?;
    Ok(std::io::Cursor::new(out))
}

/// Copies `reader` to `target` (parents made), failing past `limit` bytes.
fn write_limited(reader: impl Read, target: &Path, limit: u64) -> Result<u64, String> {
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    let mut out =
        std::fs::File::create(target).map_err(|e| format!("{}: {e}", target.display()))?;
    let copied = std::io::copy(&mut reader.take(limit.saturating_add(1)), &mut out)
        .map_err(|e| format!("{}: {e}", target.display()))?;
    if copied > limit {
        return Err(format!(
            "the archive unpacks to more than client.artifact.decompression_size_limit ({limit} bytes)"
        ));
    }
    Ok(copied)
}

/// Unpacks a tar stream into `dest`: entries that would leave it are refused (the tar
/// crate's own check), and the limits hold.
fn untar(reader: impl Read, dest: &Path, limits: &ArtifactLimits) -> Result<(), String> {
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(true);
    let (mut files, mut bytes) = (0u64, 0u64);
    for entry in archive.entries().map_err(|e| format!("tar: {e}"))? {
        let mut entry = entry.map_err(|e| format!("tar: {e}"))?;
        files += 1;
        bytes = bytes.saturating_add(entry.size());
        check_limits(files, bytes, limits)?;
        let path = entry.path().map_err(|e| format!("tar: {e}"))?.into_owned();
        let inside = entry
            .unpack_in(dest)
            .map_err(|e| format!("tar: {}: {e}", path.display()))?;
        if !inside {
            return Err(format!("tar: {} leaves the destination", path.display()));
        }
    }
    Ok(())
}

/// Unpacks a zip file into `dest`, refusing entries that would leave it.
fn unzip(input: std::fs::File, dest: &Path, limits: &ArtifactLimits) -> Result<(), String> {
    let mut zip = zip::ZipArchive::new(input).map_err(|e| format!("zip: {e}"))?;
    let mut bytes = 0u64;
    check_limits(zip.len() as u64, 0, limits)?;
    for i in 0..zip.len() {
        let mut file = zip.by_index(i).map_err(|e| format!("zip: {e}"))?;
        let Some(rel) = file.enclosed_name() else {
            return Err(format!("zip: {} leaves the destination", file.name()));
        };
        let target = dest.join(rel);
        if file.is_dir() {
            std::fs::create_dir_all(&target).map_err(|e| format!("{}: {e}", target.display()))?;
            continue;
        }
        let left = limits.decompression_size_limit.saturating_sub(bytes);
        bytes = bytes.saturating_add(write_limited(&mut file, &target, left)?);
        if let Some(mode) = file.unix_mode() {
            use std::os::unix::fs::PermissionsExt;
            let perms = std::fs::Permissions::from_mode(mode & 0o7777);
            std::fs::set_permissions(&target, perms)
                .map_err(|e| format!("{}: {e}", target.display()))?;
        }
    }
    Ok(())
}

fn check_limits(files: u64, bytes: u64, limits: &ArtifactLimits) -> Result<(), String> {
    if files > limits.decompression_file_count_limit {
        return Err(format!(
            "the archive holds more than client.artifact.decompression_file_count_limit ({}) files",
            limits.decompression_file_count_limit
        ));
    }
    if bytes > limits.decompression_size_limit {
        return Err(format!(
            "the archive unpacks to more than client.artifact.decompression_size_limit ({} bytes)",
            limits.decompression_size_limit
        ));
    }
    Ok(())
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
    use super::*;

    const LIMITS: ArtifactLimits = ArtifactLimits {
        http_read_timeout: Duration::from_secs(5),
        http_max_size: 1 << 20,
        decompression_size_limit: 1 << 20,
        decompression_file_count_limit: 16,
    };

    fn tar_gz(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut builder = tar::Builder::new(gz);
        for (path, data) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o755);
            header.set_cksum();
            builder.append_data(&mut header, path, *data).unwrap();
        }
        builder.into_inner().unwrap().finish().unwrap()
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
        let dir = tempfile::tempdir().unwrap();
        let download = dir.path().join("dl");
        std::fs::write(
            &download,
            tar_gz(&[("bin/run.sh", b"echo hi\n"), ("README", b"r")]),
        )
        .unwrap();
        let dest = dir.path().join("local");
        place_download(
            &download,
            "app.tar.gz",
            &dest,
            "any",
            Some(Archive::TarGz),
            &LIMITS,
        )
        .unwrap();
        assert_eq!(
            std::fs::read(dest.join("bin/run.sh")).unwrap(),
            b"echo hi\n"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dest.join("bin/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        // Not unpacked: the file itself, by name in `any` mode, at the path in `file` mode,
        // readable by others although the download is private to the agent.
        std::fs::set_permissions(&download, std::fs::Permissions::from_mode(0o600)).unwrap();
        place_download(&download, "app.tar.gz", &dest, "any", None, &LIMITS).unwrap();
        let mode = std::fs::metadata(dest.join("app.tar.gz"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o044, 0o044, "{mode:o}");
        let file = dir.path().join("local/renamed.bin");
        place_download(&download, "app.tar.gz", &file, "file", None, &LIMITS).unwrap();
        assert!(file.is_file());
        assert!(place_download(&download, "x", &dest, "dir", None, &LIMITS).is_err());
        assert!(place_download(
            &download,
            "x.tgz",
            &file,
            "file",
            Some(Archive::TarGz),
            &LIMITS
        )
        .is_err());
    }

    #[test]
    fn a_gz_file_is_decompressed_without_its_extension() {
        let dir = tempfile::tempdir().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"hello").unwrap();
        let download = dir.path().join("dl");
        std::fs::write(&download, gz.finish().unwrap()).unwrap();
        let dest = dir.path().join("local");
        place_download(
            &download,
            "notes.txt.gz",
            &dest,
            "any",
            Some(Archive::Gz),
            &LIMITS,
        )
        .unwrap();
        assert_eq!(std::fs::read(dest.join("notes.txt")).unwrap(), b"hello");
    }

    #[test]
    fn archives_past_the_limits_or_leaving_the_destination_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let download = dir.path().join("dl");
        let dest = dir.path().join("local");
        let many: Vec<(String, &[u8])> = (0..20).map(|i| (format!("f{i}"), &b"x"[..])).collect();
        let refs: Vec<(&str, &[u8])> = many.iter().map(|(p, d)| (p.as_str(), *d)).collect();
        std::fs::write(&download, tar_gz(&refs)).unwrap();
        let e = place_download(
            &download,
            "a.tgz",
            &dest,
            "any",
            Some(Archive::TarGz),
            &LIMITS,
        )
        .unwrap_err();
        assert!(e.contains("decompression_file_count_limit"), "{e}");
        let big = vec![0u8; (LIMITS.decompression_size_limit + 1) as usize];
        std::fs::write(&download, tar_gz(&[("big", &big)])).unwrap();
        let e = place_download(
            &download,
            "a.tgz",
            &dest,
            "any",
            Some(Archive::TarGz),
            &LIMITS,
        )
        .unwrap_err();
        assert!(e.contains("decompression_size_limit"), "{e}");

        // A zip entry naming a path outside.
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        zip.start_file("../escape", zip::write::SimpleFileOptions::default())
            .unwrap();
        zip.write_all(b"x").unwrap();
        std::fs::write(&download, zip.finish().unwrap().into_inner()).unwrap();
        let e = place_download(
            &download,
            "a.zip",
            &dest,
            "any",
            Some(Archive::Zip),
            &LIMITS,
        )
        .unwrap_err();
        assert!(e.contains("leaves the destination"), "{e}");
        assert!(!dir.path().join("escape").exists());
    }
}
