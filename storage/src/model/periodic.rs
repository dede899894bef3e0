//! Periodic and parameterized jobs: the `periodic` block ([`PeriodicConfig`]) with its cron
//! arithmetic, the `parameterized` block ([`ParameterizedJobConfig`]), a task's
//! `dispatch_payload` block ([`DispatchPayloadConfig`]), a dispatched child's payload
//! ([`DispatchPayload`], snappy-compressed in the state) and the replicated record of a
//! periodic parent's last launch ([`PeriodicLaunch`]).
//!
//! A periodic or parameterized job is a *parent*: it is never placed. The leader's periodic
//! dispatcher (or `job periodic force`) registers `<parent>/periodic-<unix seconds>` children;
//! `job dispatch` registers `<parent>/dispatch-<unix seconds>-<8 hex>` children.
//!
//! # Time zones and daylight saving time
//!
//! Cron fields are read in the block's `TimeZone` (IANA name, default `UTC`). When the clocks
//! jump forward over a launch time (02:30 on a spring-forward night in America/New_York), the
//! launch happens once, at the first instant after the jump (03:00). When the clocks go back
//! and an hour repeats, a launch time in it runs once, at its first occurrence. Every next
//! launch is strictly later than the previous one, so a zone change can never make the
//! dispatcher launch in a loop.

use std::collections::BTreeSet;

use base64::Engine;
use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::model::de;
use crate::model::ids::{JobId, Namespace};

/// The only `SpecType` teamster knows (Nomad's `cron`).
pub const SPEC_TYPE_CRON: &str = "cron";
/// The largest dispatch payload, before compression (Nomad's `DispatchPayloadSizeLimit`).
pub const DISPATCH_PAYLOAD_LIMIT: usize = 16 * 1024;
/// `Payload` of a parameterized job: a dispatch may carry one.
pub const PAYLOAD_OPTIONAL: &str = "optional";
/// `Payload` of a parameterized job: a dispatch must carry one.
pub const PAYLOAD_REQUIRED: &str = "required";
/// `Payload` of a parameterized job: a dispatch must not carry one.
pub const PAYLOAD_FORBIDDEN: &str = "forbidden";

const NANOS_PER_SEC: i64 = 1_000_000_000;

/// A job's `periodic` block (Nomad's `PeriodicConfig`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PeriodicConfig {
    /// Whether the dispatcher launches children (default true).
    #[serde(deserialize_with = "de::enabled")]
    pub enabled: bool,
    /// One cron expression (`cron`); exclusive with `Specs`.
    #[serde(deserialize_with = "de::nullable")]
    pub spec: String,
    /// Several cron expressions (`crons`): the earliest next time of any of them wins.
    #[serde(deserialize_with = "de::nullable")]
    pub specs: Vec<String>,
    /// `cron` (the default).
    #[serde(deserialize_with = "de::nullable")]
    pub spec_type: String,
    /// Skip a launch while a child of the job is still pending or running.
    #[serde(deserialize_with = "de::nullable")]
    pub prohibit_overlap: bool,
    /// IANA time zone the cron fields are read in (default `UTC`).
    #[serde(deserialize_with = "de::nullable")]
    pub time_zone: String,
}

impl Default for PeriodicConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            spec: String::new(),
            specs: Vec::new(),
            spec_type: String::new(),
            prohibit_overlap: false,
            time_zone: String::new(),
        }
    }
}

/// Why a periodic block cannot be scheduled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeriodicError {
    /// `Spec` and `Specs` are both set.
    #[error("only cron or crons may be used")]
    BothSpecs,
    /// Neither is set.
    #[error("must specify a spec (cron or crons)")]
    NoSpec,
    /// A `SpecType` other than `cron`.
    #[error("unknown periodic specification type {0:?} (only \"cron\")")]
    SpecType(String),
    /// A cron expression does not parse.
    #[error("invalid cron expression {spec:?}: {reason}")]
    BadCron {
        /// The expression.
        spec: String,
        /// Why.
        reason: String,
    },
    /// The time zone is not an IANA name.
    #[error("invalid time zone {0:?}")]
    TimeZone(String),
}

/// A periodic block ready to compute launch times: its cron expressions and zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    crons: Vec<NomadCron>,
    zone: Tz,
}

/// The years cron's year field allows (Nomad's parser knows 1970 to 2099).
const CRON_YEARS: std::ops::RangeInclusive<i32> = 1970..=2099;

/// One cron expression as Nomad's parser (`hashicorp/cronexpr`) reads it: five fields
/// (minute, hour, day of month, month, day of week), six (and a year), or seven (seconds
/// first, a year last); or a name such as `@daily`.
#[derive(Debug, Clone)]
struct NomadCron {
    cron: croner::Cron,
    /// The years it runs in (`None`: every year).
    years: Option<BTreeSet<i32>>,
}

impl NomadCron {
    fn parse(spec: &str) -> Result<NomadCron, String> {
        let fields: Vec<&str> = spec.split_whitespace().collect();
        let (pattern, seconds, year) = match fields.as_slice() {
            [name] if name.starts_with('@') => ((*name).to_string(), false, None),
            [_, _, _, _, _] => (fields.join(" "), false, None),
            [head @ .., year] if fields.len() == 6 => (head.join(" "), false, Some(*year)),
            [head @ .., year] if fields.len() == 7 => (head.join(" "), true, Some(*year)),
            _ => {
                return Err(format!(
                    "{} fields: a cron expression has 5, 6 (a year last) or 7 (seconds first, a year last)",
                    fields.len()
                ))
            }
        };
        let mut cron = croner::Cron::new(&pattern);
        if seconds {
            cron.with_seconds_required();
        }
        let cron = cron.parse().map_err(|e| e.to_string())?;
        let years = year.map(parse_years).transpose()?.flatten();
        Ok(NomadCron { cron, years })
    }
}

/// A cron year field: `*` (or `?`), a year, a range, a step (`2030/2`, `*/4`, `2030-2040/5`),
/// or a list of them. `None` for every year.
fn parse_years(field: &str) -> Result<Option<BTreeSet<i32>>, String> {
    if field == "*" || field == "?" {
        return Ok(None);
    }
    let year = |s: &str| -> Result<i32, String> {
        let y: i32 = s
            .parse()
            .map_err(|_| format!("year {s:?} is not a number"))?;
        if CRON_YEARS.contains(&y) {
            Ok(y)
        } else {
            Err(format!("year {y} is outside 1970-2099"))
        }
    };
    let mut years = BTreeSet::new();
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => {
                let step: i32 = step
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("step {step:?} in the year field"))?;
                (range, Some(step))
            }
            None => (part, None),
        };
        let (from, to) = match range.split_once('-') {
            _ if range == "*" => (*CRON_YEARS.start(), *CRON_YEARS.end()),
            Some((a, b)) => (year(a)?, year(b)?),
            // `2030/5`: from 2030 on.
            None if step.is_some() => (year(range)?, *CRON_YEARS.end()),
            None => {
                let y = year(range)?;
                (y, y)
            }
        };
        if from > to {
            return Err(format!("year range {range:?} goes backwards"));
        }
        years.extend((from..=to).step_by(step.unwrap_or(1) as usize));
    }
    Ok(Some(years))
}

impl PeriodicConfig {
    /// Fills Nomad's defaults: `SpecType` `cron`, `TimeZone` `UTC`.
    pub fn canonicalize(&mut self) {
        if self.spec_type.is_empty() {
            self.spec_type = SPEC_TYPE_CRON.to_owned();
        }
        if self.time_zone.is_empty() {
            self.time_zone = "UTC".to_owned();
        }
    }

    /// The expressions in use (`Spec` or `Specs`).
    pub fn expressions(&self) -> Vec<&str> {
        if self.spec.is_empty() {
            self.specs.iter().map(String::as_str).collect()
        } else {
            vec![self.spec.as_str()]
        }
    }

    /// Parses the expressions and the zone.
    pub fn schedule(&self) -> Result<CronSchedule, PeriodicError> {
        if !self.spec.is_empty() && !self.specs.is_empty() {
            return Err(PeriodicError::BothSpecs);
        }
        let specs = self.expressions();
        if specs.is_empty() || specs.iter().all(|s| s.trim().is_empty()) {
            return Err(PeriodicError::NoSpec);
        }
        if !self.spec_type.is_empty() && self.spec_type != SPEC_TYPE_CRON {
            return Err(PeriodicError::SpecType(self.spec_type.clone()));
        }
        let zone_name = if self.time_zone.is_empty() {
            "UTC"
        } else {
            self.time_zone.as_str()
        };
        let zone: Tz = zone_name
            .parse()
            .map_err(|_| PeriodicError::TimeZone(zone_name.to_owned()))?;
        let crons = specs
            .iter()
            .map(|spec| {
                NomadCron::parse(spec).map_err(|reason| PeriodicError::BadCron {
                    spec: (*spec).to_owned(),
                    reason,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CronSchedule { crons, zone })
    }
}

impl CronSchedule {
    /// The first launch strictly after `after_unix_nanos`, in Unix seconds (launches fall
    /// on whole seconds); `None` when no expression has one (e.g. `0 0 30 2 *`).
    pub fn next_after(&self, after_unix_nanos: i64) -> Option<i64> {
        let after_secs = after_unix_nanos.div_euclid(NANOS_PER_SEC);
        self.crons
            .iter()
            .filter_map(|cron| self.next_of(cron, after_secs))
            .min()
    }

    /// `unix_secs` as RFC 3339 in the schedule's zone (`2027-01-01T00:00:00+01:00`).
    pub fn local_rfc3339(&self, unix_secs: i64) -> Option<String> {
        let at = Utc.timestamp_opt(unix_secs, 0).single()?;
        Some(
            at.with_timezone(&self.zone)
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        )
    }

    /// The first launch of `cron` after `after_secs` in an allowed year: a launch in a year
    /// the expression leaves out moves the search to the start of its next year.
    fn next_of(&self, cron: &NomadCron, after_secs: i64) -> Option<i64> {
        use chrono::Datelike;
        let mut from = after_secs;
        // Each round moves to a later allowed year; there are at most 130 of them.
        for _ in 0..=CRON_YEARS.clone().count() {
            let next = self.next_in_any_year(&cron.cron, from)?;
            let Some(years) = &cron.years else {
                return Some(next);
            };
            let year = Utc
                .timestamp_opt(next, 0)
                .single()?
                .with_timezone(&self.zone)
                .year();
            if years.contains(&year) {
                return Some(next);
            }
            let later = *years.range(year + 1..).next()?;
            let new_year = self
                .zone
                .with_ymd_and_hms(later, 1, 1, 0, 0, 0)
                .earliest()?;
            from = new_year.timestamp() - 1;
        }
        None
    }

    fn next_in_any_year(&self, cron: &croner::Cron, after_secs: i64) -> Option<i64> {
        let mut from = after_secs;
        // The search runs on local wall-clock time; in a repeated hour the wall clock goes
        // back, so a candidate can be at or before `after`: search again from later on.
        for _ in 0..4 {
            let start: DateTime<Tz> = Utc
                .timestamp_opt(from, 0)
                .single()?
                .with_timezone(&self.zone);
            let next = cron.find_next_occurrence(&start, false).ok()?.timestamp();
            if next > after_secs {
                return Some(next);
            }
            from += 3600;
        }
        None
    }
}

/// A job's `parameterized` block (Nomad's `ParameterizedJobConfig`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ParameterizedJobConfig {
    /// `optional` (default), `required` or `forbidden`.
    #[serde(deserialize_with = "de::nullable")]
    pub payload: String,
    /// Meta keys every dispatch must give.
    #[serde(deserialize_with = "de::nullable")]
    pub meta_required: Vec<String>,
    /// Meta keys a dispatch may give.
    #[serde(deserialize_with = "de::nullable")]
    pub meta_optional: Vec<String>,
}

impl Default for ParameterizedJobConfig {
    fn default() -> Self {
        Self {
            payload: PAYLOAD_OPTIONAL.to_owned(),
            meta_required: Vec::new(),
            meta_optional: Vec::new(),
        }
    }
}

impl ParameterizedJobConfig {
    /// Fills the default `Payload` (`optional`).
    pub fn canonicalize(&mut self) {
        if self.payload.is_empty() {
            self.payload = PAYLOAD_OPTIONAL.to_owned();
        }
    }

    pub(crate) fn validate(&self, errors: &mut Vec<String>) {
        if ![PAYLOAD_OPTIONAL, PAYLOAD_REQUIRED, PAYLOAD_FORBIDDEN].contains(&self.payload.as_str())
        {
            errors.push(format!(
                "parameterized: unknown payload requirement {:?} (optional, required or forbidden)",
                self.payload
            ));
        }
        let required: BTreeSet<&str> = self.meta_required.iter().map(String::as_str).collect();
        let both: Vec<&str> = self
            .meta_optional
            .iter()
            .map(String::as_str)
            .filter(|k| required.contains(k))
            .collect();
        if !both.is_empty() {
            errors.push(format!(
                "parameterized: meta keys {both:?} are both required and optional"
            ));
        }
    }

    /// Checks a dispatch's payload size and meta keys against the block; every problem is
    /// listed.
    pub fn check_dispatch(
        &self,
        payload_len: usize,
        meta: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), Vec<String>> {
        let mut errors = Vec::new();
        match self.payload.as_str() {
            PAYLOAD_REQUIRED if payload_len == 0 => {
                errors.push("Payload is not provided but required by parameterized job".into())
            }
            PAYLOAD_FORBIDDEN if payload_len > 0 => {
                errors.push("Payload provided but forbidden by parameterized job".into())
            }
            _ => {}
        }
        if payload_len > DISPATCH_PAYLOAD_LIMIT {
            errors.push(format!(
                "Payload exceeds maximum size; {payload_len} > {DISPATCH_PAYLOAD_LIMIT}"
            ));
        }
        let unpermitted: Vec<&str> = meta
            .keys()
            .map(String::as_str)
            .filter(|k| !self.meta_required.iter().any(|r| r == k))
            .filter(|k| !self.meta_optional.iter().any(|o| o == k))
            .collect();
        if !unpermitted.is_empty() {
            errors.push(format!(
                "Dispatch request included unpermitted metadata keys: {unpermitted:?}"
            ));
        }
        let missing: Vec<&str> = self
            .meta_required
            .iter()
            .map(String::as_str)
            .filter(|k| !meta.contains_key(*k))
            .collect();
        if !missing.is_empty() {
            errors.push(format!(
                "Dispatch did not provide required meta keys: {missing:?}"
            ));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// A task's `dispatch_payload` block: where the client writes a dispatched child's payload.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DispatchPayloadConfig {
    /// A path relative to the task's `local/` directory.
    #[serde(deserialize_with = "de::nullable")]
    pub file: String,
}

impl DispatchPayloadConfig {
    pub(crate) fn validate(&self, at: &str, errors: &mut Vec<String>) {
        let path = std::path::Path::new(&self.file);
        if self.file.is_empty() {
            errors.push(format!("{at}: dispatch_payload needs a file"));
        } else if path.is_absolute()
            || path
                .components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            errors.push(format!(
                "{at}: dispatch_payload file {:?} must be a plain path inside the task's local directory",
                self.file
            ));
        }
    }
}

/// A dispatched child's payload, snappy-compressed as it is kept in the state. JSON writes
/// (and reads) the compressed bytes in base64, as Nomad's `Job.Payload`; bincode writes the
/// bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DispatchPayload(Vec<u8>);

/// Why a payload could not be (de)compressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("dispatch payload: {0}")]
pub struct PayloadError(String);

impl DispatchPayload {
    /// Compresses `raw`.
    pub fn compress(raw: &[u8]) -> Result<Self, PayloadError> {
        if raw.is_empty() {
            return Ok(Self::default());
        }
        snap::raw::Encoder::new()
            .compress_vec(raw)
            .map(Self)
            .map_err(|e| PayloadError(e.to_string()))
    }

    /// The payload as dispatched, at most [`DISPATCH_PAYLOAD_LIMIT`] bytes.
    pub fn decompress(&self) -> Result<Vec<u8>, PayloadError> {
        if self.0.is_empty() {
            return Ok(Vec::new());
        }
        let len = snap::raw::decompress_len(&self.0).map_err(|e| PayloadError(e.to_string()))?;
        if len > DISPATCH_PAYLOAD_LIMIT {
            return Err(PayloadError(format!(
                "{len} bytes, over the limit of {DISPATCH_PAYLOAD_LIMIT}"
            )));
        }
        snap::raw::Decoder::new()
            .decompress_vec(&self.0)
            .map_err(|e| PayloadError(e.to_string()))
    }

    /// True when there is no payload.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The compressed bytes.
    pub fn compressed(&self) -> &[u8] {
        &self.0
    }
}

impl Serialize for DispatchPayload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
        } else {
            serializer.serialize_bytes(&self.0)
        }
    }
}

impl<'de> Deserialize<'de> for DispatchPayload {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            let text = Option::<String>::deserialize(deserializer)?.unwrap_or_default();
            base64::engine::general_purpose::STANDARD
                .decode(text.as_bytes())
                .map(DispatchPayload)
                .map_err(serde::de::Error::custom)
        } else {
            Ok(DispatchPayload(serde_bytes_vec(deserializer)?))
        }
    }
}

fn serde_bytes_vec<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
    struct BytesVisitor;
    impl<'de> serde::de::Visitor<'de> for BytesVisitor {
        type Value = Vec<u8>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("bytes")
        }
        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }
        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut out = Vec::new();
            while let Some(b) = seq.next_element()? {
                out.push(b);
            }
            Ok(out)
        }
    }
    deserializer.deserialize_byte_buf(BytesVisitor)
}

/// The last launch of a periodic parent (Nomad's `PeriodicLaunch`), written in the raft
/// entry of each scheduled launch: a new leader launches only what comes after it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PeriodicLaunch {
    /// The parent.
    #[serde(rename = "ID", deserialize_with = "de::nullable")]
    pub id: JobId,
    /// Its namespace.
    #[serde(deserialize_with = "de::nullable")]
    pub namespace: Namespace,
    /// The last launch time (or the parent's first registration), Unix nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub launch: i64,
    /// Raft index of the first write.
    #[serde(deserialize_with = "de::nullable")]
    pub create_index: u64,
    /// Raft index of the last write.
    #[serde(deserialize_with = "de::nullable")]
    pub modify_index: u64,
}

/// The ID of a periodic child launched at `launch_secs` (Unix seconds).
pub fn periodic_child_id(parent: &str, launch_secs: i64) -> String {
    format!("{parent}/periodic-{launch_secs}")
}

/// The ID of a dispatched child: `<parent>/dispatch-<unix seconds>-<8 hex>`.
pub fn dispatch_child_id(parent: &str, unix_secs: i64, suffix: u32) -> String {
    format!("{parent}/dispatch-{unix_secs}-{suffix:08x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unix(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s).unwrap().timestamp()
    }

    fn cfg(spec: &str, zone: &str) -> PeriodicConfig {
        PeriodicConfig {
            spec: spec.into(),
            time_zone: zone.into(),
            ..PeriodicConfig::default()
        }
    }

    #[test]
    fn next_launches_follow_the_zone_across_daylight_saving_changes() {
        let s = cfg("30 2 * * *", "America/New_York").schedule().unwrap();
        // 2026-03-08: clocks jump from 02:00 to 03:00 EST→EDT; 02:30 does not exist.
        let before = unix("2026-03-07T08:00:00Z") * NANOS_PER_SEC;
        let first = s.next_after(before).unwrap();
        assert_eq!(
            first,
            unix("2026-03-08T03:00:00-04:00"),
            "the gap runs once, after the jump"
        );
        let second = s.next_after(first * NANOS_PER_SEC).unwrap();
        assert_eq!(second, unix("2026-03-09T02:30:00-04:00"));
        assert_eq!(
            s.local_rfc3339(second).unwrap(),
            "2026-03-09T02:30:00-04:00"
        );
        // 2026-11-01: 01:00–02:00 repeats (EDT then EST); a 01:30 job runs once.
        let s = cfg("30 1 * * *", "America/New_York").schedule().unwrap();
        let first = s
            .next_after(unix("2026-10-31T12:00:00Z") * NANOS_PER_SEC)
            .unwrap();
        assert_eq!(first, unix("2026-11-01T01:30:00-04:00"));
        let second = s.next_after(first * NANOS_PER_SEC).unwrap();
        assert_eq!(second, unix("2026-11-02T01:30:00-05:00"));
        // From inside the repeated hour (after the first 01:30), still the next day.
        let inside = unix("2026-11-01T01:10:00-05:00") * NANOS_PER_SEC;
        assert_eq!(s.next_after(inside).unwrap(), second);
    }

    #[test]
    fn five_six_and_seven_fields_are_read_as_nomad_reads_them() {
        let next = |spec: &str, after: &str| {
            cfg(spec, "UTC")
                .schedule()
                .unwrap_or_else(|e| panic!("{spec}: {e}"))
                .next_after(unix(after) * NANOS_PER_SEC)
        };
        // Five: minute to day of week.
        assert_eq!(
            next("15 3 * * *", "2027-01-01T00:00:00Z"),
            Some(unix("2027-01-01T03:15:00Z"))
        );
        // Six: a year last.
        assert_eq!(
            next("0 0 1 1 * 2030", "2027-06-01T00:00:00Z"),
            Some(unix("2030-01-01T00:00:00Z"))
        );
        assert_eq!(next("0 12 * * * 2028-2029", "2029-12-31T13:00:00Z"), None);
        assert_eq!(
            next("0 12 29 2 * 2028/4", "2027-01-01T00:00:00Z"),
            Some(unix("2028-02-29T12:00:00Z")),
            "every fourth year from 2028"
        );
        // From 1970 every fourth year is 2 more than a leap year: never a 29 February.
        assert_eq!(next("0 12 29 2 * */4", "2027-01-01T00:00:00Z"), None);
        // Seven: seconds first, a year last (Nomad's own example).
        assert_eq!(
            next("0/3 * * * * * *", "2027-01-01T00:00:01Z"),
            Some(unix("2027-01-01T00:00:03Z"))
        );
        assert_eq!(
            next("30 0 0 1 1 * 2031", "2027-01-01T00:00:00Z"),
            Some(unix("2031-01-01T00:00:30Z"))
        );
        assert_eq!(
            next("@daily", "2027-01-01T10:00:00Z"),
            Some(unix("2027-01-02T00:00:00Z"))
        );
        for bad in [
            "* * * *",
            "0 0 0 0 0 0 0 0",
            "0 0 * * * 1969",
            "0 0 * * * 2031-2030",
            "0 0 * * * x",
        ] {
            assert!(
                matches!(
                    cfg(bad, "UTC").schedule(),
                    Err(PeriodicError::BadCron { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn crons_take_the_earliest_and_bad_blocks_are_named() {
        let p = PeriodicConfig {
            specs: vec!["0 12 * * *".into(), "0 6 * * *".into()],
            ..PeriodicConfig::default()
        };
        let s = p.schedule().unwrap();
        let t = s
            .next_after(unix("2026-01-01T00:00:00Z") * NANOS_PER_SEC)
            .unwrap();
        assert_eq!(t, unix("2026-01-01T06:00:00Z"));
        assert!(matches!(
            cfg("every tuesday", "UTC").schedule(),
            Err(PeriodicError::BadCron { .. })
        ));
        assert_eq!(
            cfg("* * * * *", "Mars/Olympus").schedule().unwrap_err(),
            PeriodicError::TimeZone("Mars/Olympus".into())
        );
        let both = PeriodicConfig {
            spec: "* * * * *".into(),
            specs: vec!["* * * * *".into()],
            ..PeriodicConfig::default()
        };
        assert_eq!(both.schedule().unwrap_err(), PeriodicError::BothSpecs);
        assert_eq!(
            PeriodicConfig::default().schedule().unwrap_err(),
            PeriodicError::NoSpec
        );
    }

    #[test]
    fn payloads_compress_and_round_trip_in_json_and_bincode() {
        let raw = b"{\"image\": 42}".repeat(100);
        let p = DispatchPayload::compress(&raw).unwrap();
        assert!(p.compressed().len() < raw.len());
        assert_eq!(p.decompress().unwrap(), raw);
        let json = serde_json::to_string(&p).unwrap();
        let back: DispatchPayload = serde_json::from_str(&json).unwrap();
        assert_eq!(back, p);
        let cfg = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(&p, cfg).unwrap();
        let (back, _): (DispatchPayload, usize) =
            bincode::serde::decode_from_slice(&bytes, cfg).unwrap();
        assert_eq!(back, p);
        let null: DispatchPayload = serde_json::from_str("null").unwrap();
        assert!(null.is_empty());
    }

    #[test]
    fn dispatch_checks_list_every_problem() {
        let block = ParameterizedJobConfig {
            payload: PAYLOAD_FORBIDDEN.into(),
            meta_required: vec!["image".into()],
            meta_optional: vec!["width".into()],
        };
        let meta = std::collections::BTreeMap::from([("color".to_string(), "red".to_string())]);
        let errors = block.check_dispatch(3, &meta).unwrap_err();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].contains("forbidden"));
        assert!(errors[1].contains("unpermitted metadata keys: [\"color\"]"));
        assert!(errors[2].contains("required meta keys: [\"image\"]"));
        let required = ParameterizedJobConfig {
            payload: PAYLOAD_REQUIRED.into(),
            ..ParameterizedJobConfig::default()
        };
        assert!(required.check_dispatch(0, &Default::default()).is_err());
        let big = required
            .check_dispatch(DISPATCH_PAYLOAD_LIMIT + 1, &Default::default())
            .unwrap_err();
        assert!(big[0].contains("exceeds maximum size"), "{big:?}");
        assert!(required.check_dispatch(10, &Default::default()).is_ok());
    }
}
