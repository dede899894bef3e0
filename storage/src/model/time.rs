//! [`Timestamp`]: a point in time that encodes like Go's `time.Time`.
//!
//! Nomad's JSON writes `time.Time` fields (`WaitUntil`, task `StartedAt`, …) as RFC 3339
//! strings, with Go's zero time `"0001-01-01T00:00:00Z"` for "unset". Most other times in
//! Nomad's API are plain Unix nanosecond integers (`CreateTime`, `SubmitTime`) and are `i64`
//! fields in the model, not this type.
//!
//! In JSON a `Timestamp` is an RFC 3339 string in UTC with trailing zeros of the fraction
//! trimmed (Go's `RFC3339Nano`); as input it also accepts any UTC offset and, leniently, an
//! integer of Unix nanoseconds. In bincode it is `(seconds, nanoseconds)`.
//! Timestamps are chosen by the proposer of a command and never read from a clock here.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::model::ModelError;

/// Seconds from 0001-01-01T00:00:00Z (Go's zero time) to the Unix epoch.
const GO_ZERO_UNIX_SECS: i64 = -62_135_596_800;
/// Seconds from the Unix epoch to 10000-01-01T00:00:00Z (first instant RFC 3339 cannot write).
const YEAR_10000_UNIX_SECS: i64 = 253_402_300_800;

/// A UTC instant with nanosecond precision; the default is Go's zero time ("unset").
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    /// Seconds since the Unix epoch (negative before 1970).
    secs: i64,
    /// Nanoseconds within the second, `0..1_000_000_000`.
    nanos: u32,
}

impl Default for Timestamp {
    fn default() -> Self {
        Self::ZERO
    }
}

impl Timestamp {
    /// Go's zero time, `0001-01-01T00:00:00Z`: what Nomad writes for "not set".
    pub const ZERO: Timestamp = Timestamp {
        secs: GO_ZERO_UNIX_SECS,
        nanos: 0,
    };

    /// The instant `nanos` nanoseconds after the Unix epoch.
    pub fn from_unix_nanos(nanos: i64) -> Self {
        Self {
            secs: nanos.div_euclid(1_000_000_000),
            nanos: nanos.rem_euclid(1_000_000_000) as u32,
        }
    }

    /// Unix nanoseconds, or `None` for the zero time or an instant outside `i64` nanoseconds
    /// (years before 1677 or after 2262).
    pub fn unix_nanos(&self) -> Option<i64> {
        if self.is_zero() {
            return None;
        }
        self.secs
            .checked_mul(1_000_000_000)
            .and_then(|n| n.checked_add(i64::from(self.nanos)))
    }

    /// True for Go's zero time ("unset").
    pub fn is_zero(&self) -> bool {
        *self == Self::ZERO
    }

    /// Writes the instant as RFC 3339 in UTC, like Go's `RFC3339Nano`.
    pub fn to_rfc3339(&self) -> String {
        let days = self.secs.div_euclid(86_400);
        let secs_of_day = self.secs.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        let mut out = format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
            secs_of_day / 3600,
            secs_of_day % 3600 / 60,
            secs_of_day % 60
        );
        if self.nanos != 0 {
            let frac = format!("{:09}", self.nanos);
            out.push('.');
            out.push_str(frac.trim_end_matches('0'));
        }
        out.push('Z');
        out
    }

    /// Parses RFC 3339 (`2024-05-01T10:00:00.5+02:00`, `…Z`) for years 0001–9999.
    pub fn parse_rfc3339(text: &str) -> Result<Self, ModelError> {
        let bad = || ModelError::InvalidTimestamp {
            text: text.chars().take(64).collect(),
        };
        let b = text.as_bytes();
        if b.len() < 20 {
            return Err(bad());
        }
        let num = |range: std::ops::Range<usize>| -> Result<i64, ModelError> {
            let part = text.get(range).ok_or_else(bad)?;
            if part.bytes().all(|c| c.is_ascii_digit()) {
                part.parse::<i64>().map_err(|_| bad())
            } else {
                Err(bad())
            }
        };
        if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
            return Err(bad());
        }
        if b[13] != b':' || b[16] != b':' {
            return Err(bad());
        }
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if year < 1
            || !(1..=12).contains(&month)
            || day < 1
            || day > days_in_month(year, month)
            || hour > 23
            || minute > 59
            || second > 60
        {
            return Err(bad());
        }
        let mut pos = 19;
        let mut nanos: u32 = 0;
        if b.get(pos) == Some(&b'.') {
            pos += 1;
            let start = pos;
            while pos < b.len() && b[pos].is_ascii_digit() {
                pos += 1;
            }
            let digits = &text[start..pos];
            if digits.is_empty() {
                return Err(bad());
            }
            // Only the first nine digits carry information we can keep.
            let kept = &digits[..digits.len().min(9)];
            let value: u32 = kept.parse().map_err(|_| bad())?;
            nanos = value * 10u32.pow(9 - kept.len() as u32);
        }
        let offset_secs = match &text[pos..] {
            "Z" | "z" => 0,
            tz if tz.len() == 6
                && matches!(tz.as_bytes()[0], b'+' | b'-')
                && tz.as_bytes()[3] == b':' =>
            {
                let h = num(pos + 1..pos + 3)?;
                let m = num(pos + 4..pos + 6)?;
                if h > 23 || m > 59 {
                    return Err(bad());
                }
                let off = h * 3600 + m * 60;
                if tz.as_bytes()[0] == b'-' {
                    -off
                } else {
                    off
                }
            }
            _ => return Err(bad()),
        };
        // A leap second (":60") is folded into the next second, as Go does.
        let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second
            - offset_secs;
        Ok(Self { secs, nanos })
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            if (GO_ZERO_UNIX_SECS..YEAR_10000_UNIX_SECS).contains(&self.secs) {
                serializer.serialize_str(&self.to_rfc3339())
            } else {
                Err(serde::ser::Error::custom(
                    "timestamp outside years 0001-9999",
                ))
            }
        } else {
            (self.secs, self.nanos).serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            deserializer.deserialize_any(TimestampVisitor)
        } else {
            let (secs, nanos) = <(i64, u32)>::deserialize(deserializer)?;
            if nanos >= 1_000_000_000 {
                return Err(de::Error::custom("timestamp nanoseconds out of range"));
            }
            Ok(Self { secs, nanos })
        }
    }
}

struct TimestampVisitor;

impl Visitor<'_> for TimestampVisitor {
    type Value = Timestamp;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an RFC 3339 time string or Unix nanoseconds")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Timestamp, E> {
        Timestamp::parse_rfc3339(v).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Timestamp, E> {
        Ok(Timestamp::from_unix_nanos(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Timestamp, E> {
        i64::try_from(v)
            .map(Timestamp::from_unix_nanos)
            .map_err(|_| E::custom("Unix nanoseconds out of range"))
    }
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(year) => 29,
        _ => 28,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (eras of 400 years = 146 097 days).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let shifted_month = (month + 9) % 12; // March = 0 … February = 11
    let day_of_year = (153 * shifted_month + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_time_is_gos_zero_time() {
        assert_eq!(Timestamp::ZERO.to_rfc3339(), "0001-01-01T00:00:00Z");
        assert_eq!(
            Timestamp::parse_rfc3339("0001-01-01T00:00:00Z").unwrap(),
            Timestamp::ZERO
        );
        assert!(Timestamp::default().is_zero());
        assert_eq!(Timestamp::ZERO.unix_nanos(), None);
    }

    #[test]
    fn formats_and_parses_known_instants() {
        let t = Timestamp::from_unix_nanos(1_700_000_000_123_450_000);
        assert_eq!(t.to_rfc3339(), "2023-11-14T22:13:20.12345Z");
        assert_eq!(
            Timestamp::parse_rfc3339("2023-11-14T22:13:20.12345Z").unwrap(),
            t
        );
        assert_eq!(
            Timestamp::parse_rfc3339("2023-11-15T00:13:20.12345+02:00").unwrap(),
            t
        );
        assert_eq!(
            Timestamp::from_unix_nanos(0).to_rfc3339(),
            "1970-01-01T00:00:00Z"
        );
        assert_eq!(
            Timestamp::from_unix_nanos(-1).to_rfc3339(),
            "1969-12-31T23:59:59.999999999Z"
        );
        assert_eq!(
            Timestamp::parse_rfc3339("2024-02-29T12:00:00Z")
                .unwrap()
                .unix_nanos(),
            Some(1_709_208_000_000_000_000)
        );
    }

    #[test]
    fn rejects_malformed_text() {
        for bad in [
            "",
            "2024-02-30T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-01-01 00:00:00",
            "2024-01-01T00:00:00",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T00:00:00+0200",
            "0000-01-01T00:00:00Z",
            "２０２４-01-01T00:00:00Z",
        ] {
            assert!(Timestamp::parse_rfc3339(bad).is_err(), "{bad} should fail");
        }
    }

    #[test]
    fn every_day_of_four_centuries_round_trips() {
        for days in (-800_000..800_000).step_by(7) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn json_and_bincode_round_trip() {
        let t = Timestamp::from_unix_nanos(1_650_000_000_000_000_001);
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Timestamp>(&json).unwrap(), t);
        assert_eq!(
            serde_json::from_str::<Timestamp>("1650000000000000001").unwrap(),
            t
        );
        let cfg = bincode::config::standard();
        for value in [t, Timestamp::ZERO] {
            let bytes = bincode::serde::encode_to_vec(value, cfg).unwrap();
            let (back, _): (Timestamp, usize) =
                bincode::serde::decode_from_slice(&bytes, cfg).unwrap();
            assert_eq!(back, value);
        }
    }
}
