//! Identifier newtypes backed by a thin shared string ([`arcstr::ArcStr`]).
//!
//! Every table and secondary index of the state store is keyed by these ids. An id is one
//! pointer wide (8 bytes, where an `Arc<str>` is 16 and a `String` 24): the length and the
//! reference count live in the shared allocation beside the bytes. Cloning one is a
//! reference-count bump, so a composite index key such as `(NodeId, AllocId)` shares the id
//! bytes with the record it points at instead of copying them; the state store also *interns*
//! the ids of a new allocation (its job, node and eval ids become clones of the ids already in
//! the job, node and eval tables), so a million allocations of one job hold one copy of the
//! job id.
//!
//! On the wire an id is a plain string (JSON and bincode alike). Nomad uses the empty string
//! for "no id" (e.g. `PreviousAllocation: ""`), and so do we: `Default` is the empty id and
//! [`AllocId::is_empty`] (and friends) test for it.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::OnceLock;

use arcstr::ArcStr;
use serde::de::Visitor;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Reads an id straight from the decoder's string, without an intermediate `String`.
struct IdVisitor;

impl Visitor<'_> for IdVisitor {
    type Value = ArcStr;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an id string")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ArcStr, E> {
        Ok(shared(v))
    }

    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<ArcStr, E> {
        std::str::from_utf8(v)
            .map(shared)
            .map_err(|_| E::custom("an id is not UTF-8"))
    }
}

/// A shared copy of `s`; the empty string is a static one and allocates nothing.
fn shared(s: &str) -> ArcStr {
    if s.is_empty() {
        ArcStr::new()
    } else {
        ArcStr::from(s)
    }
}

macro_rules! arc_id {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(ArcStr);

        impl $name {
            /// Wraps a string as this id (one allocation, none for the empty id; clones are
            /// free afterwards).
            pub fn new(id: impl AsRef<str>) -> Self {
                Self(shared(id.as_ref()))
            }

            /// The id as a string slice.
            #[inline]
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// True for the empty id, which Nomad uses for "none".
            #[inline]
            pub fn is_empty(&self) -> bool {
                self.0.is_empty()
            }

            /// True when both ids share one allocation (used to check interning).
            pub fn ptr_eq(&self, other: &Self) -> bool {
                ArcStr::ptr_eq(&self.0, &other.0)
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self(ArcStr::new())
            }
        }

        impl Deref for $name {
            type Target = str;
            #[inline]
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self::new(id)
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self::new(id)
            }
        }

        impl From<&String> for $name {
            fn from(id: &String) -> Self {
                Self::new(id)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                &*self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &*self.0 == other.as_str()
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == &*other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == &*other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                self.as_str() == &*other.0
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.as_str().to_owned()
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer.deserialize_str(IdVisitor).map(Self)
            }
        }
    };
}

arc_id!(
    /// A job's ID, unique within its namespace (chosen by the user, e.g. `"sleepy"`).
    JobId
);
arc_id!(
    /// A client node's ID (a UUID chosen by the client agent). Not a raft server id.
    NodeId
);
arc_id!(
    /// An evaluation's ID (a UUID chosen by whoever proposes the evaluation).
    EvalId
);
arc_id!(
    /// An allocation's ID (a UUID chosen by the scheduler that placed it).
    AllocId
);
arc_id!(
    /// A deployment's ID (a UUID chosen by the scheduler that created it).
    DeploymentId
);
arc_id!(
    /// A namespace name; jobs, evaluations and allocations live in one (`"default"` unless
    /// the job says otherwise).
    Namespace
);

arc_id!(
    /// A shared string for allocation fields whose values repeat across many allocations
    /// (the task group's name, the status descriptions): one pointer wide, and the state store
    /// lets equal values share one allocation.
    SharedStr
);

impl Namespace {
    /// Nomad's default namespace, `"default"`.
    pub fn default_namespace() -> Self {
        static DEFAULT: OnceLock<Namespace> = OnceLock::new();
        DEFAULT.get_or_init(|| Namespace::new("default")).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_compare_like_strings_and_clone_shares_bytes() {
        let a = AllocId::new("b");
        let b = AllocId::new("a");
        assert!(b < a);
        let c = a.clone();
        assert!(a.ptr_eq(&c));
        assert!(!a.ptr_eq(&AllocId::new("b")));
        assert_eq!(a, AllocId::new("b"));
        assert!(AllocId::default().is_empty());
        assert!(
            AllocId::default() < b,
            "the empty id sorts first, so it bounds ranges"
        );
    }

    #[test]
    fn ids_round_trip_through_json_and_bincode() {
        let id = NodeId::new("8f1c-node");
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, "\"8f1c-node\"");
        assert_eq!(serde_json::from_str::<NodeId>(&json).unwrap(), id);
        let cfg = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(&id, cfg).unwrap();
        let (back, _): (NodeId, usize) = bincode::serde::decode_from_slice(&bytes, cfg).unwrap();
        assert_eq!(back, id);
    }

    #[test]
    fn an_id_is_one_pointer_and_a_map_finds_it_by_str() {
        assert_eq!(std::mem::size_of::<AllocId>(), 8);
        assert_eq!(std::mem::size_of::<Option<NodeId>>(), 8);
        let mut map = std::collections::HashMap::new();
        map.insert(JobId::new("web"), 1);
        assert_eq!(map.get("web"), Some(&1));
        assert_eq!(map.get("db"), None);
        assert!(
            AllocId::new("").ptr_eq(&AllocId::default()),
            "empty ids do not allocate"
        );
        assert_eq!(String::from(JobId::new("web")), "web");
        let owned = String::from("web");
        assert!(
            "web" == JobId::new("web") && JobId::new("web") == owned && owned == JobId::new("web")
        );
    }
}
