//! [`ConfigValue`]: a free-form JSON value that bincode can carry.
//!
//! A task's `Config` is driver-specific and free-form (`{"command": "/bin/sleep", "args":
//! ["30"]}`). `serde_json::Value` cannot be used in anything bincode decodes, because its
//! `Deserialize` needs `deserialize_any`, which bincode (no self-description) does not support.
//! `ConfigValue` serializes as plain JSON when the format is human readable and as an
//! externally tagged enum otherwise, so the same type serves the HTTP API and the raft log.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How deep a [`ConfigValue`] may nest before [`ConfigValue::depth`] validation rejects it.
pub const MAX_CONFIG_DEPTH: usize = 32;

/// A JSON value (null, bool, number, string, list or map) in a bincode-safe form.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum ConfigValue {
    /// JSON `null`.
    #[default]
    Null,
    /// JSON `true` / `false`.
    Bool(bool),
    /// An integral JSON number that fits `i64`.
    Int(i64),
    /// Any other JSON number.
    Float(f64),
    /// A JSON string.
    String(String),
    /// A JSON array.
    List(Vec<ConfigValue>),
    /// A JSON object (keys sorted, so encodings are deterministic).
    Map(BTreeMap<String, ConfigValue>),
}

impl ConfigValue {
    /// Nesting depth: 1 for scalars, 1 + the deepest element for lists and maps.
    pub fn depth(&self) -> usize {
        match self {
            ConfigValue::List(items) => 1 + items.iter().map(Self::depth).max().unwrap_or(0),
            ConfigValue::Map(items) => 1 + items.values().map(Self::depth).max().unwrap_or(0),
            _ => 1,
        }
    }

    /// Whether it says anything: not `null`, an empty string, list or map.
    pub fn is_set(&self) -> bool {
        match self {
            ConfigValue::Null => false,
            ConfigValue::String(s) => !s.is_empty(),
            ConfigValue::List(items) => !items.is_empty(),
            ConfigValue::Map(items) => !items.is_empty(),
            _ => true,
        }
    }

    /// The string, if this is one (drivers read `command` this way).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            ConfigValue::String(s) => Some(s),
            _ => None,
        }
    }
}

impl From<&str> for ConfigValue {
    fn from(s: &str) -> Self {
        ConfigValue::String(s.to_owned())
    }
}

/// The bincode form when serializing: borrowed, with the same variant names and order as
/// [`TaggedOwned`], so the two encode identically.
#[derive(Serialize)]
#[serde(rename = "ConfigValue")]
enum TaggedRef<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    String(&'a str),
    List(&'a [ConfigValue]),
    Map(&'a BTreeMap<String, ConfigValue>),
}

/// The bincode form when deserializing.
#[derive(Deserialize)]
#[serde(rename = "ConfigValue")]
enum TaggedOwned {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    String(String),
    List(Vec<ConfigValue>),
    Map(BTreeMap<String, ConfigValue>),
}

impl Serialize for ConfigValue {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            match self {
                ConfigValue::Null => serializer.serialize_unit(),
                ConfigValue::Bool(b) => serializer.serialize_bool(*b),
                ConfigValue::Int(i) => serializer.serialize_i64(*i),
                ConfigValue::Float(f) => serializer.serialize_f64(*f),
                ConfigValue::String(s) => serializer.serialize_str(s),
                ConfigValue::List(items) => items.serialize(serializer),
                ConfigValue::Map(items) => items.serialize(serializer),
            }
        } else {
            let tagged = match self {
                ConfigValue::Null => TaggedRef::Null,
                ConfigValue::Bool(b) => TaggedRef::Bool(*b),
                ConfigValue::Int(i) => TaggedRef::Int(*i),
                ConfigValue::Float(f) => TaggedRef::Float(*f),
                ConfigValue::String(s) => TaggedRef::String(s),
                ConfigValue::List(items) => TaggedRef::List(items),
                ConfigValue::Map(items) => TaggedRef::Map(items),
            };
            tagged.serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for ConfigValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            deserializer.deserialize_any(JsonVisitor)
        } else {
            Ok(match TaggedOwned::deserialize(deserializer)? {
                TaggedOwned::Null => ConfigValue::Null,
                TaggedOwned::Bool(b) => ConfigValue::Bool(b),
                TaggedOwned::Int(i) => ConfigValue::Int(i),
                TaggedOwned::Float(f) => ConfigValue::Float(f),
                TaggedOwned::String(s) => ConfigValue::String(s),
                TaggedOwned::List(items) => ConfigValue::List(items),
                TaggedOwned::Map(items) => ConfigValue::Map(items),
            })
        }
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = ConfigValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<ConfigValue, E> {
        Ok(ConfigValue::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<ConfigValue, E> {
        Ok(ConfigValue::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<ConfigValue, D::Error> {
        ConfigValue::deserialize(d)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<ConfigValue, E> {
        Ok(ConfigValue::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<ConfigValue, E> {
        Ok(ConfigValue::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<ConfigValue, E> {
        Ok(i64::try_from(v).map_or(ConfigValue::Float(v as f64), ConfigValue::Int))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<ConfigValue, E> {
        Ok(ConfigValue::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<ConfigValue, E> {
        Ok(ConfigValue::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<ConfigValue, E> {
        Ok(ConfigValue::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ConfigValue, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(ConfigValue::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ConfigValue, A::Error> {
        let mut items = BTreeMap::new();
        while let Some((key, value)) = map.next_entry::<String, ConfigValue>()? {
            items.insert(key, value);
        }
        Ok(ConfigValue::Map(items))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ConfigValue {
        serde_json::from_str(
            r#"{"command":"/bin/sleep","args":["30",1,-2,2.5,true,null],"nested":{"k":{"x":[]}},
                "big":18446744073709551615}"#,
        )
        .unwrap()
    }

    #[test]
    fn json_round_trip_is_plain_json() {
        let v = sample();
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["command"], "/bin/sleep");
        assert_eq!(json["args"][1], 1);
        assert_eq!(json["args"][5], serde_json::Value::Null);
        assert_eq!(serde_json::from_value::<ConfigValue>(json).unwrap(), v);
        assert_eq!(v.depth(), 4);
    }

    #[test]
    fn bincode_round_trip_is_tagged() {
        let v = sample();
        let cfg = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(&v, cfg).unwrap();
        let (back, used): (ConfigValue, usize) =
            bincode::serde::decode_from_slice(&bytes, cfg).unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(back, v);
    }
}
