//! The root keyring on a server (the shell around the pure [`crate::keyring`]): the
//! key-encryption keys (KEKs) on disk under `<data_dir>/server/keystore/`, one file per KEK
//! named by its fingerprint, fetched from peer servers when this one lacks the KEK a root
//! key was wrapped with; root keys unwrapped once and cached; the leader's duty that
//! creates the first root key, activates prepublished keys and rotates the active key when
//! it is older than `root_key_rotation_threshold`.
//!
//! Root keys live in raft (their material wrapped); KEKs never do. A new server gets a KEK
//! from any member that has it (`Keyring.Kek` on the RPC port, servers only with mutual TLS,
//! and only to raft members). Verifying a workload identity needs no KEK: the public key is
//! in the replicated state. A key is made with a KEK this server has, or a new one when it
//! has none; so a server that could not reach its peers never stops the keyring from
//! working, it only makes one more KEK, and each root key names the KEK that wraps it.
//!
//! May import: `raft`, `write_batcher`, `leader_service`, `leader`, `util`, `rpc` and `keyring`.

use std::collections::{BTreeSet, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use teamster_storage::fsm::{Command, RootKeyDelete, RootKeyUpsert};
use teamster_storage::model::{
    variable_aad, RootKey, RootKeyMeta, RootKeyState, VariableData, VariableEncrypted,
};
use teamster_storage::state::Snapshot;
use tracing::{debug, info, warn};

use crate::keyring::{IdentityClaims, Kek, KeyringError, UnwrappedKey};
use crate::rpc::{RpcRequest, RpcResponse};
use crate::server::leader::LeaderDuty;
use crate::server::leader_service::{run_every, LeaderService};
use crate::server::raft::RaftNode;
use crate::server::write_batcher::WriteError;
use crate::util::{RngSource, SharedClock};

/// Why the keyring could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum ServerKeyringError {
    /// A key or a token could not be used.
    #[error(transparent)]
    Crypto(#[from] KeyringError),
    /// No root key is active yet (the leader creates one when it takes office).
    #[error("the keyring is not initialized yet: no active root key")]
    NotInitialized,
    /// This server lacks the KEK a root key was wrapped with and no peer has it.
    #[error("no server has key-encryption key {kek_id}, which wraps root key {key_id}")]
    NoKek {
        /// The KEK's fingerprint.
        kek_id: String,
        /// The root key.
        key_id: String,
    },
    /// A KEK file could not be read or written.
    #[error("keystore {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Writing the keyring through raft failed.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The state refused the change.
    #[error("{0}")]
    Refused(String),
}

/// The keyring settings of the `[server]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyringSettings {
    /// `server.oidc_issuer` (empty: none).
    pub oidc_issuer: String,
    /// `server.root_key_rotation_threshold`.
    pub rotation_threshold: Duration,
}

/// How often the leader checks for a key to activate or rotate.
const CHECK_INTERVAL: Duration = Duration::from_secs(60);
/// How often every server looks for root keys whose KEK it lacks.
const REPLICATE_INTERVAL: Duration = Duration::from_secs(2);
/// How long a peer is given to answer for a KEK.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);

/// The keyring of one server; cheap to clone.
#[derive(Clone)]
pub struct Keyring {
    inner: Arc<Inner>,
}

struct Inner {
    node: Arc<RaftNode>,
    dir: PathBuf,
    keks: Mutex<HashMap<String, Kek>>,
    /// One peer fetch at a time.
    fetching: tokio::sync::Mutex<()>,
    /// One re-encryption pass at a time.
    rekeying: tokio::sync::Mutex<()>,
    unwrapped: Mutex<HashMap<String, Arc<UnwrappedKey>>>,
    clock: SharedClock,
    rng: RngSource,
    settings: KeyringSettings,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Keyring {
    /// The keyring of the server whose state is under `server_dir`: its KEKs read from
    /// `server_dir/keystore/` (created, mode 0700).
    pub fn open(
        server_dir: &Path,
        node: Arc<RaftNode>,
        clock: SharedClock,
        rng: RngSource,
        settings: KeyringSettings,
    ) -> Result<Keyring, ServerKeyringError> {
        let dir = server_dir.join("keystore");
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ServerKeyringError::Io { path, source }
        };
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        set_mode(&dir, 0o700).map_err(io(&dir))?;
        let mut keks = HashMap::new();
        for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let path = entry.map_err(io(&dir))?.path();
            if path.extension().is_none_or(|e| e != "kek") {
                continue;
            }
            let bytes = std::fs::read(&path).map_err(io(&path))?;
            match Kek::from_bytes(&bytes) {
                Ok(kek) => {
                    keks.insert(kek.id(), kek);
                }
                Err(e) => warn!(path = %path.display(), error = %e, "ignoring a bad KEK file"),
            }
        }
        debug!(keks = keks.len(), "keystore opened");
        Ok(Keyring {
            inner: Arc::new(Inner {
                node,
                dir,
                keks: Mutex::new(keks),
                fetching: tokio::sync::Mutex::new(()),
                rekeying: tokio::sync::Mutex::new(()),
                unwrapped: Mutex::new(HashMap::new()),
                clock,
                rng,
                settings,
            }),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &KeyringSettings {
        &self.inner.settings
    }

    /// The KEK `kek_id`, if this server has it (what a peer is answered).
    pub fn local_kek(&self, kek_id: &str) -> Option<Kek> {
        lock(&self.inner.keks).get(kek_id).cloned()
    }

    fn store_kek(&self, kek: &Kek) -> Result<(), ServerKeyringError> {
        let path = self.inner.dir.join(format!("{}.kek", kek.id()));
        let tmp = self.inner.dir.join(format!(".{}.kek.tmp", kek.id()));
        let io = |source| ServerKeyringError::Io {
            path: path.clone(),
            source,
        };
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(io)?;
            f.write_all(kek.as_bytes()).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, &path).map_err(io)?;
        if let Ok(d) = std::fs::File::open(&self.inner.dir) {
            let _ = d.sync_all();
        }
        lock(&self.inner.keks).insert(kek.id(), kek.clone());
        Ok(())
    }

    /// The KEK `kek_id`: this server's, or fetched from a peer member (and kept).
    async fn kek(&self, kek_id: &str, key_id: &str) -> Result<Kek, ServerKeyringError> {
        if let Some(kek) = self.local_kek(kek_id) {
            return Ok(kek);
        }
        let _one = self.inner.fetching.lock().await;
        if let Some(kek) = self.local_kek(kek_id) {
            return Ok(kek);
        }
        let node = &self.inner.node;
        for (id, addr, _) in node.membership().servers {
            if id == node.id() {
                continue;
            }
            let asked = node
                .pool()
                .call_addr(
                    &addr.rpc_addr,
                    RpcRequest::KeyringKek(kek_id.to_string()),
                    PEER_TIMEOUT,
                )
                .await;
            match asked {
                Ok(RpcResponse::KeyringKek(Some(bytes))) => match Kek::from_bytes(&bytes) {
                    Ok(kek) if kek.id() == kek_id => {
                        self.store_kek(&kek)?;
                        info!(kek_id, from = id, "key-encryption key fetched from a peer");
                        return Ok(kek);
                    }
                    _ => warn!(
                        kek_id,
                        from = id,
                        "a peer answered a KEK that does not match"
                    ),
                },
                Ok(RpcResponse::KeyringKek(None)) => {}
                Ok(other) => warn!(
                    from = id,
                    answer = other.kind(),
                    "unexpected answer to Keyring.Kek"
                ),
                Err(e) => debug!(from = id, error = %e, "peer did not answer for the KEK"),
            }
        }
        Err(ServerKeyringError::NoKek {
            kek_id: kek_id.to_string(),
            key_id: key_id.to_string(),
        })
    }

    /// `key` unwrapped (cached by key ID).
    async fn unwrapped(&self, key: &RootKey) -> Result<Arc<UnwrappedKey>, ServerKeyringError> {
        if let Some(hit) = lock(&self.inner.unwrapped).get(&key.meta.key_id) {
            return Ok(hit.clone());
        }
        let kek = self.kek(&key.wrapped.kek_id, &key.meta.key_id).await?;
        let unwrapped = Arc::new(UnwrappedKey::unwrap(&kek, key)?);
        lock(&self.inner.unwrapped).insert(key.meta.key_id.clone(), unwrapped.clone());
        Ok(unwrapped)
    }

    /// `claims` signed by the active root key (its `iss` set from `oidc_issuer`): the token
    /// and the key ID.
    pub async fn sign(
        &self,
        snap: &Snapshot,
        mut claims: IdentityClaims,
    ) -> Result<(String, String), ServerKeyringError> {
        let key = snap
            .active_root_key()
            .cloned()
            .ok_or(ServerKeyringError::NotInitialized)?;
        claims.iss = self.inner.settings.oidc_issuer.clone();
        let unwrapped = self.unwrapped(&key).await?;
        Ok((unwrapped.sign(&claims), key.meta.key_id.clone()))
    }

    /// `items` encrypted for the variable at `path` in `namespace`, by the active key.
    pub async fn encrypt_items(
        &self,
        snap: &Snapshot,
        namespace: &str,
        path: &str,
        items: &std::collections::BTreeMap<String, String>,
    ) -> Result<VariableData, ServerKeyringError> {
        let key = snap
            .active_root_key()
            .cloned()
            .ok_or(ServerKeyringError::NotInitialized)?;
        let unwrapped = self.unwrapped(&key).await?;
        let plain = serde_json::to_vec(items).expect("items encode");
        let (nonce, ciphertext) = unwrapped.encrypt(&plain, &variable_aad(namespace, path))?;
        Ok(VariableData {
            key_id: key.meta.key_id.clone(),
            nonce,
            ciphertext,
        })
    }

    /// The items of `var`, decrypted with the root key that encrypted them.
    pub async fn decrypt_items(
        &self,
        snap: &Snapshot,
        var: &VariableEncrypted,
    ) -> Result<std::collections::BTreeMap<String, String>, ServerKeyringError> {
        let key = snap.root_key(&var.data.key_id).cloned().ok_or_else(|| {
            ServerKeyringError::Refused(format!(
                "root key {} of variable {:?} not found",
                var.data.key_id, var.meta.path
            ))
        })?;
        let unwrapped = self.unwrapped(&key).await?;
        let plain = unwrapped.decrypt(
            &var.data.nonce,
            &var.data.ciphertext,
            &variable_aad(&var.meta.namespace, &var.meta.path),
        )?;
        serde_json::from_slice(&plain)
            .map_err(|e| ServerKeyringError::Refused(format!("variable items do not decode: {e}")))
    }

    /// The claims of `token` if one of the keyring's keys signed it and it has not expired.
    pub fn verify(&self, snap: &Snapshot, token: &str) -> Result<IdentityClaims, KeyringError> {
        let now = self.inner.clock.now_unix_nanos() / 1_000_000_000;
        crate::keyring::verify(token, |kid| snap.root_key(kid).map(|k| &**k), now)
    }

    /// A KEK to wrap a new key with: the one of the active key when this server has it,
    /// else any it has, else a new one (kept).
    fn kek_for_new_key(&self, snap: &Snapshot) -> Result<Kek, ServerKeyringError> {
        let active_kek = snap.active_root_key().map(|k| k.wrapped.kek_id.clone());
        {
            let keks = lock(&self.inner.keks);
            if let Some(kek) = active_kek.as_ref().and_then(|id| keks.get(id)) {
                return Ok(kek.clone());
            }
            if let Some(kek) = keks.values().min_by_key(|k| k.id()) {
                return Ok(kek.clone());
            }
        }
        let kek = Kek::generate()?;
        self.store_kek(&kek)?;
        info!(kek_id = %kek.id(), "created a key-encryption key");
        Ok(kek)
    }

    async fn write(&self, cmd: Command) -> Result<u64, ServerKeyringError> {
        let applied = self.inner.node.write_local(cmd).await?;
        if let Some(e) = applied.response.rejection() {
            return Err(ServerKeyringError::Refused(e.to_string()));
        }
        Ok(applied.index)
    }

    /// On the leader, a full rotation's second half: every variable under a `rekeying` key
    /// is re-encrypted with the active key's data key, each written back only if unchanged
    /// since it was read (check-and-set), keeping its lock (one written meanwhile was
    /// written under the active key already); a `rekeying` key that encrypts nothing more
    /// becomes inactive. Run by the rotation and by every keyring check, so a new leader
    /// finishes what the last one started. Returns how many variables were re-encrypted.
    pub async fn rekey(&self) -> Result<usize, ServerKeyringError> {
        let _one_at_a_time = self.inner.rekeying.lock().await;
        let snap = self.inner.node.state().snapshot();
        let rekeying: BTreeSet<String> = snap
            .root_keys()
            .filter(|k| k.meta.state == RootKeyState::Rekeying)
            .map(|k| k.meta.key_id.clone())
            .collect();
        if rekeying.is_empty() || snap.active_root_key().is_none() {
            return Ok(0);
        }
        let stale: Vec<Arc<VariableEncrypted>> = snap
            .variables(None, "")
            .filter(|v| rekeying.contains(&v.data.key_id))
            .cloned()
            .collect();
        let mut done = 0;
        for var in stale {
            // One variable that cannot be re-encrypted now (its key's KEK not here yet)
            // keeps its key rekeying; the others go on.
            let items = match self.decrypt_items(&snap, &var).await {
                Ok(items) => items,
                Err(e) => {
                    warn!(namespace = %var.meta.namespace, path = %var.meta.path, error = %e, "full rotation: a variable could not be decrypted; retrying later");
                    continue;
                }
            };
            let data = self
                .encrypt_items(&snap, &var.meta.namespace, &var.meta.path, &items)
                .await?;
            let cmd = Command::VariableUpsert(teamster_storage::fsm::VariableUpsert {
                var: VariableEncrypted {
                    meta: teamster_storage::model::VariableMetadata {
                        namespace: var.meta.namespace.clone(),
                        path: var.meta.path.clone(),
                        ..Default::default()
                    },
                    data,
                },
                cas: Some(var.meta.modify_index),
                now: self.inner.clock.now_unix_nanos(),
                lock_id: var.meta.lock.as_ref().map(|l| l.id.clone()),
                acquire: None,
                keep_items: false,
            });
            let applied = self.inner.node.write_local(cmd).await?;
            if applied.response.rejection().is_none() {
                done += 1;
            }
        }
        // Keys that encrypt nothing more are done.
        let snap = self.inner.node.state().snapshot();
        for key_id in rekeying {
            if snap.variables(None, "").any(|v| v.data.key_id == key_id) {
                continue;
            }
            if let Some(key) = snap.root_key(&key_id) {
                let mut key = (**key).clone();
                key.meta.state = RootKeyState::Inactive;
                self.write(Command::RootKeyUpsert(RootKeyUpsert {
                    key,
                    activate: false,
                }))
                .await?;
                info!(key_id, "full rotation done: the root key is inactive");
            }
        }
        Ok(done)
    }

    /// On the leader: a new root key, active at once, then every other key that encrypts
    /// variables marked `rekeying` (a full rotation; [`Keyring::rekey`] re-encrypts them).
    pub async fn rotate_full(&self) -> Result<RootKeyMeta, ServerKeyringError> {
        let meta = self.rotate(None).await?;
        let snap = self.inner.node.state().snapshot();
        let used: BTreeSet<&str> = snap
            .variables(None, "")
            .map(|v| v.data.key_id.as_str())
            .collect();
        let marked: Vec<RootKey> = snap
            .root_keys()
            .filter(|k| {
                // The former active key is inactive now; the active key (this rotation's or
                // one that came right after) is never marked.
                k.meta.key_id != meta.key_id
                    && k.meta.state == RootKeyState::Inactive
                    && used.contains(k.meta.key_id.as_str())
            })
            .map(|k| {
                let mut k = (**k).clone();
                k.meta.state = RootKeyState::Rekeying;
                k
            })
            .collect();
        for key in marked {
            self.write(Command::RootKeyUpsert(RootKeyUpsert {
                key,
                activate: false,
            }))
            .await?;
        }
        Ok(meta)
    }

    /// On the leader: a new root key, active at once, or prepublished until `publish_time`
    /// (Unix nanoseconds) when it is in the future. Its metadata as written.
    pub async fn rotate(
        &self,
        publish_time: Option<i64>,
    ) -> Result<RootKeyMeta, ServerKeyringError> {
        let snap = self.inner.node.state().snapshot();
        let kek = self.kek_for_new_key(&snap)?;
        let now = self.inner.clock.now_unix_nanos();
        let prepublish = publish_time.filter(|t| *t > now);
        let state = if prepublish.is_some() {
            RootKeyState::Prepublished
        } else {
            RootKeyState::Active
        };
        let key_id = self.inner.rng.uuid();
        let (key, unwrapped) =
            UnwrappedKey::generate(&kek, &key_id, now, state, prepublish.unwrap_or(0))?;
        lock(&self.inner.unwrapped).insert(key_id.clone(), Arc::new(unwrapped));
        self.write(Command::RootKeyUpsert(RootKeyUpsert {
            key,
            activate: prepublish.is_none(),
        }))
        .await?;
        info!(key_id, state = state.as_str(), "root key created");
        let snap = self.inner.node.state().snapshot();
        snap.root_key(&key_id)
            .map(|k| k.meta.clone())
            .ok_or(ServerKeyringError::NotInitialized)
    }

    /// On the leader: removes a root key (not the active one).
    pub async fn remove(&self, key_id: &str) -> Result<u64, ServerKeyringError> {
        let index = self
            .write(Command::RootKeyDelete(RootKeyDelete {
                key_id: key_id.to_string(),
            }))
            .await?;
        lock(&self.inner.unwrapped).remove(key_id);
        Ok(index)
    }

    /// On every server, for as long as it runs: every root key's KEK fetched from a peer as
    /// soon as the key is seen, so any server that becomes leader can sign (the server that
    /// made a KEK may be gone by then).
    pub async fn replicate(self, stop: tokio_util::sync::CancellationToken) {
        let mut logged = std::collections::HashSet::new();
        loop {
            let snap = self.inner.node.state().snapshot();
            let missing: Vec<(String, String)> = snap
                .root_keys()
                .filter(|k| self.local_kek(&k.wrapped.kek_id).is_none())
                .map(|k| (k.wrapped.kek_id.clone(), k.meta.key_id.clone()))
                .collect();
            drop(snap);
            for (kek_id, key_id) in missing {
                if let Err(e) = self.kek(&kek_id, &key_id).await {
                    if logged.insert(kek_id.clone()) {
                        debug!(kek_id, error = %e, "key-encryption key not fetched yet");
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(REPLICATE_INTERVAL) => {}
            }
        }
    }

    /// The leader's periodic check: a full rotation's re-encryption carried on; the first
    /// key when there is none; a prepublished key
    /// whose time has come activated; the active key rotated when it is too old, or when no
    /// server has the KEK that wraps it any more (a key nobody can sign with).
    async fn leader_check(&self) -> Result<(), ServerKeyringError> {
        self.lifecycle_check().await?;
        // Last, and never in the way of the key's lifecycle above.
        match self.rekey().await {
            Ok(0) => {}
            Ok(n) => info!(variables = n, "full rotation: variables re-encrypted"),
            Err(e) => warn!(error = %e, "full rotation: re-encryption paused; retrying"),
        }
        Ok(())
    }

    /// The first key, a prepublished key's activation, a rotation of an old or unusable
    /// active key.
    async fn lifecycle_check(&self) -> Result<(), ServerKeyringError> {
        let snap = self.inner.node.state().snapshot();
        let now = self.inner.clock.now_unix_nanos();
        let due = snap
            .root_keys()
            .filter(|k| k.meta.state == RootKeyState::Prepublished && k.meta.publish_time <= now)
            .min_by_key(|k| k.meta.publish_time)
            .cloned();
        if let Some(key) = due {
            info!(key_id = %key.meta.key_id, "activating a prepublished root key");
            self.write(Command::RootKeyUpsert(RootKeyUpsert {
                key: (*key).clone(),
                activate: true,
            }))
            .await?;
            return Ok(());
        }
        match snap.active_root_key() {
            None => {
                info!("initializing the keyring");
                self.rotate(None).await?;
            }
            Some(active)
                if matches!(
                    self.unwrapped(active).await,
                    Err(ServerKeyringError::NoKek { .. })
                ) =>
            {
                warn!(key_id = %active.meta.key_id, kek_id = %active.wrapped.kek_id, "no server has the KEK of the active root key; rotating");
                self.rotate(None).await?;
            }
            Some(active) => {
                let threshold = i64::try_from(self.inner.settings.rotation_threshold.as_nanos())
                    .unwrap_or(i64::MAX);
                let pending = snap
                    .root_keys()
                    .any(|k| k.meta.state == RootKeyState::Prepublished);
                if !pending && now.saturating_sub(active.meta.create_time) >= threshold {
                    info!(key_id = %active.meta.key_id, "rotating the root key: older than the rotation threshold");
                    self.rotate(None).await?;
                }
            }
        }
        Ok(())
    }
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// The leader's keyring duty: [`Keyring::leader_check`] at once and every minute.
pub struct KeyringDuty {
    keyring: Keyring,
    service: LeaderService,
}

impl KeyringDuty {
    /// The duty for `keyring`.
    pub fn new(keyring: Keyring) -> Arc<KeyringDuty> {
        Arc::new(KeyringDuty {
            keyring,
            service: LeaderService::default(),
        })
    }
}

impl LeaderDuty for KeyringDuty {
    fn name(&self) -> &'static str {
        "keyring"
    }

    fn establish(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let keyring = Arc::downgrade(&self.keyring.inner);
            self.service.start(|set| {
                set.spawn(move |stop| async move {
                    let check = |k: Weak<Inner>| async move {
                        let Some(inner) = k.upgrade() else {
                            return std::ops::ControlFlow::Break(());
                        };
                        if let Err(e) = (Keyring { inner }).leader_check().await {
                            warn!(error = %e, "keyring check failed; retrying");
                        }
                        std::ops::ControlFlow::Continue(())
                    };
                    if check(keyring.clone()).await.is_break() {
                        return;
                    }
                    run_every(&stop, CHECK_INTERVAL, || check(keyring.clone())).await;
                });
            });
            Ok(())
        })
    }

    fn revoke(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.service.stop())
    }
}
