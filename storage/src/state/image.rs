//! The state image: every table in one bincode blob, behind a format version.
//!
//! ```text
//! "TMSTIMG\0" (8 bytes) | format version (u32, little-endian) | bincode body
//! body = ( index, table indexes,
//!             job versions (every kept Job), jobs (namespace, ID, version) → a kept version,
//!             job summaries, nodes, evaluations, allocations,
//!             scheduler configuration, cluster metadata, periodic launches, deployments )
//! ```
//!
//! The current job of each ID is stored as a reference to its version, so no job is
//! written twice, and allocations never carry a job. Secondary indexes are not stored; they
//! are rebuilt on decode, and the ids of allocations and evaluations are interned again.
//! Decoding charges a byte budget proportional to the input (see [`crate::codec`]).

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use imbl::OrdMap;
use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, SerializeTuple};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::codec::{self, DecodeFailure};
use crate::model::{
    AclPolicy, AclToken, Allocation, AutopilotConfig, ClusterMeta, Deployment, Evaluation, Job,
    JobId, JobSummary, Namespace, NamespaceSpec, Node, OneTimeToken, PeriodicLaunch, RootKey,
    SchedulerConfiguration, ServiceRegistration, SharedStr, VariableEncrypted,
};
use crate::state::tables::{JobKey, Table, Tables};
use crate::state::StateError;

const MAGIC: &[u8; 8] = b"TMSTIMG\0";
/// The image format this build writes (and the only one it reads).
pub const IMAGE_FORMAT_VERSION: u32 = 18;
const HEADER_LEN: usize = MAGIC.len() + 4;
/// Fields of the body tuple.
const BODY_FIELDS: usize = 21;

/// Encodes every table.
pub(crate) fn encode(tables: &Tables) -> Result<Vec<u8>, StateError> {
    let body =
        codec::encode(&BodyRef(tables)).map_err(|e| StateError::ImageEncode(e.to_string()))?;
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&IMAGE_FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Decodes an image into fresh tables with rebuilt indexes.
pub(crate) fn decode(bytes: &[u8]) -> Result<Tables, StateError> {
    if bytes.len() < HEADER_LEN || &bytes[..MAGIC.len()] != MAGIC {
        return Err(StateError::ImageMagic);
    }
    let mut version = [0u8; 4];
    version.copy_from_slice(&bytes[MAGIC.len()..HEADER_LEN]);
    let version = u32::from_le_bytes(version);
    if version != IMAGE_FORMAT_VERSION {
        return Err(StateError::ImageVersion {
            found: version,
            supported: IMAGE_FORMAT_VERSION,
        });
    }
    let body = &bytes[HEADER_LEN..];
    // bincode charges decoded sizes (at most 8 bytes per input byte: a one-byte varint
    // decoded as a u64), so the budget is twice that multiple of the input, rounded up to a
    // power-of-four tier because `with_limit` takes a constant.
    let budget = body.len().saturating_mul(16);
    let decoded: Result<DecodedBody, DecodeFailure> = if budget <= 64 << 20 {
        codec::decode_exact::<DecodedBody, { 64 << 20 }>(body)
    } else if budget <= 256 << 20 {
        codec::decode_exact::<DecodedBody, { 256 << 20 }>(body)
    } else if budget <= 1 << 30 {
        codec::decode_exact::<DecodedBody, { 1 << 30 }>(body)
    } else if budget <= 4 << 30 {
        codec::decode_exact::<DecodedBody, { 4 << 30 }>(body)
    } else if budget <= 16 << 30 {
        codec::decode_exact::<DecodedBody, { 16 << 30 }>(body)
    } else {
        codec::decode_exact::<DecodedBody, { 64 << 30 }>(body)
    };
    let mut tables = decoded
        .map_err(|e| StateError::ImageDecode(e.to_string()))?
        .0;
    tables.rebuild_indexes();
    Ok(tables)
}

/// Serializes the body without copying a table.
struct BodyRef<'a>(&'a Tables);

impl Serialize for BodyRef<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut tuple = serializer.serialize_tuple(BODY_FIELDS)?;
        tuple.serialize_element(&t.index)?;
        tuple.serialize_element(&t.table_index)?;
        tuple.serialize_element(&Values(&t.job_versions))?;
        tuple.serialize_element(&JobRefs(&t.jobs))?;
        tuple.serialize_element(&Values(&t.job_summaries))?;
        tuple.serialize_element(&Values(&t.nodes))?;
        tuple.serialize_element(&Values(&t.evals))?;
        tuple.serialize_element(&Values(&t.allocs))?;
        tuple.serialize_element(&*t.scheduler_config)?;
        tuple.serialize_element(&t.cluster_meta.as_deref())?;
        tuple.serialize_element(&Values(&t.periodic_launches))?;
        tuple.serialize_element(&Values(&t.deployments))?;
        tuple.serialize_element(&Values(&t.services))?;
        tuple.serialize_element(&Values(&t.namespaces))?;
        tuple.serialize_element(&Values(&t.acl_policies))?;
        tuple.serialize_element(&Values(&t.acl_tokens))?;
        tuple.serialize_element(&t.acl_bootstrap_index)?;
        tuple.serialize_element(&Values(&t.root_keys))?;
        tuple.serialize_element(&Values(&t.variables))?;
        tuple.serialize_element(&Values(&t.one_time_tokens))?;
        tuple.serialize_element(&*t.autopilot_config)?;
        tuple.end()
    }
}

/// A map's values as a sequence.
struct Values<'a, K, V>(&'a OrdMap<K, Arc<V>>);

impl<K: Ord + Clone, V: Serialize> Serialize for Values<'_, K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for value in self.0.values() {
            seq.serialize_element(&**value)?;
        }
        seq.end()
    }
}

/// The jobs table as `(namespace, ID, version)` references into the versions table.
struct JobRefs<'a>(&'a OrdMap<JobKey, Arc<Job>>);

impl Serialize for JobRefs<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for job in self.0.values() {
            seq.serialize_element(&(&job.namespace, &job.id, job.version))?;
        }
        seq.end()
    }
}

/// The decoded tables.
struct DecodedBody(Tables);

impl<'de> Deserialize<'de> for DecodedBody {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_tuple(BODY_FIELDS, BodyVisitor)
    }
}

struct BodyVisitor;

fn field<'de, T: Deserialize<'de>, A: SeqAccess<'de>>(
    seq: &mut A,
    name: &str,
) -> Result<T, A::Error> {
    seq.next_element()?
        .ok_or_else(|| de::Error::custom(format!("image ends before {name}")))
}

fn seeded<'de, S: DeserializeSeed<'de>, A: SeqAccess<'de>>(
    seq: &mut A,
    seed: S,
    name: &str,
) -> Result<S::Value, A::Error> {
    seq.next_element_seed(seed)?
        .ok_or_else(|| de::Error::custom(format!("image ends before {name}")))
}

impl<'de> Visitor<'de> for BodyVisitor {
    type Value = DecodedBody;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a state image body")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<DecodedBody, A::Error> {
        let mut t = Tables {
            index: field(&mut seq, "the index")?,
            table_index: field::<[u64; Table::COUNT], _>(&mut seq, "the table indexes")?,
            ..Tables::default()
        };
        t.job_versions = seeded(
            &mut seq,
            ArcMapSeed::new(|job: &mut Job| (job.namespace.clone(), job.id.clone(), job.version)),
            "the job versions",
        )?;
        let refs: Vec<(Namespace, JobId, u64)> = field(&mut seq, "the jobs")?;
        for key in refs {
            let Some(job) = t.job_versions.get(&key).cloned() else {
                return Err(de::Error::custom(format!(
                    "job {:?} refers to version {} that the image lacks",
                    key.1, key.2
                )));
            };
            if t.jobs
                .insert((job.namespace.clone(), job.id.clone()), job)
                .is_some()
            {
                return Err(de::Error::custom("a job is listed twice"));
            }
        }
        t.job_summaries = seeded(
            &mut seq,
            ArcMapSeed::new(|s: &mut JobSummary| (s.namespace.clone(), s.job_id.clone())),
            "the job summaries",
        )?;
        t.nodes = seeded(
            &mut seq,
            ArcMapSeed::new(|n: &mut Node| n.id.clone()),
            "the nodes",
        )?;
        let evals = {
            let partial = &t;
            seeded(
                &mut seq,
                ArcMapSeed::new(|e: &mut Evaluation| {
                    partial.intern_eval_ids(e);
                    e.id.clone()
                }),
                "the evaluations",
            )?
        };
        t.evals = evals;
        let allocs = {
            let partial = &t;
            // Task group names and descriptions repeat across allocations: one copy each.
            let mut strings = std::collections::HashSet::<SharedStr>::new();
            let mut share = move |s: &mut SharedStr| {
                if s.is_empty() {
                    return;
                }
                match strings.get(s.as_str()) {
                    Some(seen) => *s = seen.clone(),
                    None => {
                        strings.insert(s.clone());
                    }
                }
            };
            seeded(
                &mut seq,
                ArcMapSeed::new(move |a: &mut Allocation| {
                    partial.intern_alloc_ids(a);
                    share(&mut a.task_group);
                    share(&mut a.desired_description);
                    share(&mut a.client_description);
                    a.id.clone()
                }),
                "the allocations",
            )?
        };
        t.allocs = allocs;
        t.scheduler_config = Arc::new(field::<SchedulerConfiguration, _>(
            &mut seq,
            "the scheduler configuration",
        )?);
        t.cluster_meta =
            field::<Option<ClusterMeta>, _>(&mut seq, "the cluster metadata")?.map(Arc::new);
        t.periodic_launches = seeded(
            &mut seq,
            ArcMapSeed::new(|l: &mut PeriodicLaunch| (l.namespace.clone(), l.id.clone())),
            "the periodic launches",
        )?;
        t.deployments = seeded(
            &mut seq,
            ArcMapSeed::new(|d: &mut Deployment| d.id.clone()),
            "the deployments",
        )?;
        t.services = seeded(
            &mut seq,
            ArcMapSeed::new(|r: &mut ServiceRegistration| {
                (r.namespace.clone(), r.service_name.clone(), r.id.clone())
            }),
            "the service registrations",
        )?;
        t.namespaces = seeded(
            &mut seq,
            ArcMapSeed::new(|n: &mut NamespaceSpec| Namespace::new(&n.name)),
            "the namespaces",
        )?;
        t.acl_policies = seeded(
            &mut seq,
            ArcMapSeed::new(|p: &mut AclPolicy| p.name.clone()),
            "the ACL policies",
        )?;
        t.acl_tokens = seeded(
            &mut seq,
            ArcMapSeed::new(|t: &mut AclToken| t.accessor_id.clone()),
            "the ACL tokens",
        )?;
        t.acl_secrets = t
            .acl_tokens
            .values()
            .map(|token| (token.secret_id.clone(), token.accessor_id.clone()))
            .collect();
        t.acl_bootstrap_index = field(&mut seq, "the ACL bootstrap index")?;
        t.root_keys = seeded(
            &mut seq,
            ArcMapSeed::new(|k: &mut RootKey| k.meta.key_id.clone()),
            "the root keys",
        )?;
        t.variables = seeded(
            &mut seq,
            ArcMapSeed::new(|v: &mut VariableEncrypted| {
                (v.meta.namespace.clone(), v.meta.path.clone())
            }),
            "the variables",
        )?;
        t.one_time_tokens = seeded(
            &mut seq,
            ArcMapSeed::new(|t: &mut OneTimeToken| t.one_time_secret_id.clone()),
            "the one-time tokens",
        )?;
        t.autopilot_config = Arc::new(field::<AutopilotConfig, _>(
            &mut seq,
            "the autopilot configuration",
        )?);
        Ok(DecodedBody(t))
    }
}

/// Decodes a sequence of records straight into an `OrdMap` of `Arc`s, keyed (and prepared)
/// by a closure, without an intermediate `Vec`.
struct ArcMapSeed<K, V, F> {
    key: F,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V, F> ArcMapSeed<K, V, F> {
    fn new(key: F) -> Self {
        Self {
            key,
            _types: PhantomData,
        }
    }
}

impl<'de, K, V, F> DeserializeSeed<'de> for ArcMapSeed<K, V, F>
where
    K: Ord + Clone,
    V: Deserialize<'de>,
    F: FnMut(&mut V) -> K,
{
    type Value = OrdMap<K, Arc<V>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, K, V, F> Visitor<'de> for ArcMapSeed<K, V, F>
where
    K: Ord + Clone,
    V: Deserialize<'de>,
    F: FnMut(&mut V) -> K,
{
    type Value = OrdMap<K, Arc<V>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence of records")
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut map = OrdMap::new();
        while let Some(mut value) = seq.next_element::<V>()? {
            let key = (self.key)(&mut value);
            if map.insert(key, Arc::new(value)).is_some() {
                return Err(de::Error::custom("duplicate record in state image"));
            }
        }
        Ok(map)
    }
}
