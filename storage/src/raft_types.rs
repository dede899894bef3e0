//! The openraft type configuration: what a log entry carries, what applying one answers, and
//! how a server is addressed. Membership doubles as the cluster's address book, so a
//! [`ServerAddr`] carries everything another server or a client needs to reach a member.
//!
//! A log entry's command is an [`EntryCommand`]: shared by every holder of the entry (the
//! log store's copy of its newest entries, replication to each follower, the state machine)
//! and bincode-encoded at most once. Its encoding is that byte string, length-prefixed, so
//! the leader writes the bytes it encoded for its own log into every AppendEntries, and a
//! follower keeps the bytes it received to write its log:
//!
//! ```text
//!  leader:   client_write ─▶ log append: encode once ──┬─▶ sled
//!                                                      ├─▶ AppendEntries to follower 1 (copy)
//!                                                      └─▶ AppendEntries to follower 2 (copy)
//!  follower: AppendEntries ─▶ decode once, keep the bytes ─▶ sled (copy) ─▶ state machine
//! ```

use std::fmt;
use std::io::Cursor;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::codec;
use crate::fsm::{Command, CommandResponse};

/// A server's raft id. Stable for the life of its data directory. (Not to be confused with
/// a client node's ID in the domain model, which is a UUID string.)
pub type ServerId = u64;

/// How to reach a server: the raft membership's per-member payload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerAddr {
    /// The server's name (`name` in the agent config).
    pub name: String,
    /// `ip:port` of the RPC listener (raft, forwarded calls, client agents).
    pub rpc_addr: String,
    /// `ip:port` of the HTTP API.
    pub http_addr: String,
}

/// Decode budget for the command inside one entry: that of a whole RPC body
/// (`teamster::rpc::frame::DECODE_LIMIT`, 4 × the largest frame). It is the entry's own,
/// not drawn from the enclosing body's; the entry's bytes are bounded by the frame, and
/// bincode charges what it allocates before it allocates it.
const COMMAND_DECODE_LIMIT: usize = 256 << 20;

/// The command of a raft log entry: shared, and encoded at most once (see the module docs).
///
/// Cloning it is a reference count. serde writes it as one byte string holding the
/// command's bincode encoding (with the crate's configuration), and reads it back by
/// decoding that string with a byte budget and keeping the bytes for the next write.
#[derive(Clone)]
pub struct EntryCommand(Arc<Shared>);

struct Shared {
    command: Command,
    /// The command's encoding, once something asked for it (or as it arrived).
    encoded: OnceLock<Box<[u8]>>,
}

impl EntryCommand {
    /// Wraps a command; it is encoded when the first holder writes it.
    pub fn new(command: Command) -> Self {
        Self(Arc::new(Shared {
            command,
            encoded: OnceLock::new(),
        }))
    }

    /// Decodes a command from its encoding, keeping the bytes.
    pub(crate) fn decode(bytes: Box<[u8]>) -> Result<Self, codec::DecodeFailure> {
        let command = codec::decode_exact::<Command, COMMAND_DECODE_LIMIT>(&bytes)?;
        Ok(Self(Arc::new(Shared {
            command,
            encoded: OnceLock::from(bytes),
        })))
    }

    /// The command's encoding, made on the first call and shared by every clone after it.
    pub fn encoded(&self) -> Result<&[u8], bincode::error::EncodeError> {
        if let Some(bytes) = self.0.encoded.get() {
            return Ok(bytes);
        }
        let bytes = codec::encode(&self.0.command)?.into_boxed_slice();
        // Two holders may race to encode; both encodings are the same bytes.
        Ok(self.0.encoded.get_or_init(|| bytes))
    }

    /// Whether the encoding has been made (or arrived with the command).
    pub fn is_encoded(&self) -> bool {
        self.0.encoded.get().is_some()
    }

    /// The command itself when no other holder shares it, else `self` back.
    pub fn try_into_command(self) -> Result<Command, Self> {
        Arc::try_unwrap(self.0)
            .map(|shared| shared.command)
            .map_err(Self)
    }
}

impl From<Command> for EntryCommand {
    fn from(command: Command) -> Self {
        Self::new(command)
    }
}

impl Deref for EntryCommand {
    type Target = Command;

    fn deref(&self) -> &Command {
        &self.0.command
    }
}

impl fmt::Debug for EntryCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.command.fmt(f)
    }
}

impl PartialEq for EntryCommand {
    fn eq(&self, other: &Self) -> bool {
        self.0.command == other.0.command
    }
}

impl Serialize for EntryCommand {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let bytes = self.encoded().map_err(serde::ser::Error::custom)?;
        serializer.serialize_bytes(bytes)
    }
}

impl<'de> Deserialize<'de> for EntryCommand {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BytesVisitor;

        impl<'de> serde::de::Visitor<'de> for BytesVisitor {
            type Value = Box<[u8]>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("the bytes of an encoded command")
            }

            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
                Ok(v.into())
            }

            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Self::Value, E> {
                Ok(v.into_boxed_slice())
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                while let Some(b) = seq.next_element::<u8>()? {
                    bytes.push(b);
                }
                Ok(bytes.into_boxed_slice())
            }
        }

        let bytes = deserializer.deserialize_byte_buf(BytesVisitor)?;
        Self::decode(bytes).map_err(serde::de::Error::custom)
    }
}

openraft::declare_raft_types!(
    /// teamster's raft types: commands in (an [`EntryCommand`], shared and encoded once),
    /// command responses out, servers addressed by [`ServerAddr`], snapshots as in-memory
    /// byte buffers.
    pub TypeConfig:
        D = EntryCommand,
        R = CommandResponse,
        NodeId = ServerId,
        Node = ServerAddr,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
);

/// A raft log entry of teamster.
pub type Entry = openraft::Entry<TypeConfig>;
/// A log id (term, leader, index).
pub type LogId = openraft::LogId<ServerId>;
/// A vote.
pub type Vote = openraft::Vote<ServerId>;
/// The membership as stored in the log and snapshots.
pub type StoredMembership = openraft::StoredMembership<ServerId, ServerAddr>;
/// openraft's storage error, with our node id.
pub type StorageError = openraft::StorageError<ServerId>;
/// The raft handle.
pub type Raft = openraft::Raft<TypeConfig>;

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;
    use crate::model::ClusterMeta;

    fn command() -> Command {
        Command::Batch(vec![Command::ClusterMeta(ClusterMeta {
            cluster_id: "6b1f0e3c-3d1a-4c55-9a51-0a0a2f6c1d11".to_owned(),
            create_time: 1_700_000_000_000_000_000,
        })])
    }

    fn entry(command: EntryCommand) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(3, 1), 42),
            payload: EntryPayload::Normal(command),
        }
    }

    #[test]
    fn an_entry_is_encoded_once_and_every_clone_shares_the_bytes() {
        let first = EntryCommand::new(command());
        let replica = first.clone();
        assert!(!replica.is_encoded());
        let log_bytes = codec::encode(&entry(first.clone())).unwrap();
        assert!(
            replica.is_encoded(),
            "a clone sees the encoding the log made"
        );
        assert!(std::ptr::eq(
            first.encoded().unwrap().as_ptr(),
            replica.encoded().unwrap().as_ptr()
        ));
        // Writing it again (an AppendEntries) gives the same bytes.
        assert_eq!(codec::encode(&entry(replica)).unwrap(), log_bytes);
    }

    #[test]
    fn the_encoding_is_the_command_s_bytes_as_a_byte_string() {
        let inner = codec::encode(&command()).unwrap();
        let outer = codec::encode(&EntryCommand::new(command())).unwrap();
        assert_eq!(outer, codec::encode(&serde_bytes_of(&inner)).unwrap());
        assert!(outer.ends_with(&inner));
    }

    /// A byte string as serde writes `serialize_bytes`.
    fn serde_bytes_of(bytes: &[u8]) -> impl Serialize + '_ {
        struct B<'a>(&'a [u8]);
        impl Serialize for B<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(self.0)
            }
        }
        B(bytes)
    }

    #[test]
    fn a_decoded_entry_keeps_the_bytes_it_came_in() {
        let bytes = codec::encode(&entry(EntryCommand::new(command()))).unwrap();
        let decoded: Entry = codec::decode_exact::<Entry, { 1 << 20 }>(&bytes).unwrap();
        let EntryPayload::Normal(decoded) = &decoded.payload else {
            panic!("a normal entry decodes as one");
        };
        assert_eq!(**decoded, command());
        assert!(
            decoded.is_encoded(),
            "the received bytes are kept for the log write"
        );
        assert_eq!(
            decoded.encoded().unwrap(),
            &codec::encode(&command()).unwrap()[..]
        );
    }

    #[test]
    fn bad_command_bytes_are_refused() {
        let mut inner = codec::encode(&command()).unwrap();
        inner.push(0);
        let trailing = codec::encode(&serde_bytes_of(&inner)).unwrap();
        assert!(codec::decode_exact::<EntryCommand, { 1 << 20 }>(&trailing).is_err());
        let truncated = codec::encode(&serde_bytes_of(&inner[..inner.len() / 2])).unwrap();
        assert!(codec::decode_exact::<EntryCommand, { 1 << 20 }>(&truncated).is_err());
        let unknown_variant = codec::encode(&serde_bytes_of(&[250, 1, 2])).unwrap();
        assert!(codec::decode_exact::<EntryCommand, { 1 << 20 }>(&unknown_variant).is_err());
    }

    #[test]
    fn the_state_machine_takes_an_unshared_command_whole() {
        let only = EntryCommand::new(command());
        assert_eq!(only.try_into_command().unwrap(), command());
        let shared = EntryCommand::new(command());
        let _held = shared.clone();
        assert!(shared.try_into_command().is_err());
    }

    #[test]
    fn a_self_describing_format_round_trips_it_too() {
        let json = serde_json::to_string(&EntryCommand::new(command())).unwrap();
        let back: EntryCommand = serde_json::from_str(&json).unwrap();
        assert_eq!(*back, command());
    }
}
