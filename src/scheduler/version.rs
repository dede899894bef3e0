//! Version constraints for the `version` and `semver` constraint operands.
//!
//! Nomad evaluates `version` with hashicorp/go-version and `semver` with a strict Semantic
//! Versioning variant of it. Both read a comma-separated list of `operator version` terms that
//! must all hold; operators are `=` (also bare), `!=`, `>`, `>=`, `<`, `<=` and the pessimistic
//! `~>` (`~> 1.2` is `>= 1.2, < 2.0`; `~> 1.2.3` is `>= 1.2.3, < 1.3`).
//!
//! - **Versions** are dot-separated numeric segments with an optional `v` prefix, an optional
//!   pre-release (`-beta.1`) and optional build metadata (`+abc`, ignored). Missing segments
//!   compare as zero. In strict (`semver`) mode exactly three segments are required.
//! - **Pre-releases** sort before their release; identifiers compare numerically when both are
//!   numbers, else lexically, and numbers sort first (Semantic Versioning §11).
//! - **Pre-release matching** follows go-version: a pre-release version only satisfies a term
//!   whose own version is a pre-release of the same segments, so `> 1.0` does not admit
//!   `1.1.0-beta`.

use std::cmp::Ordering;

/// A parsed version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Version {
    /// Numeric segments as written (at least one).
    segments: Vec<u64>,
    /// Pre-release identifiers (empty for a release).
    pre: Vec<Identifier>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Identifier {
    Numeric(u64),
    Alpha(String),
}

impl Ord for Identifier {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Identifier::Numeric(a), Identifier::Numeric(b)) => a.cmp(b),
            (Identifier::Numeric(_), Identifier::Alpha(_)) => Ordering::Less,
            (Identifier::Alpha(_), Identifier::Numeric(_)) => Ordering::Greater,
            (Identifier::Alpha(a), Identifier::Alpha(b)) => a.cmp(b),
        }
    }
}

impl PartialOrd for Identifier {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Longest version text accepted (node attributes and job specs are outside input).
const MAX_VERSION_LEN: usize = 256;
/// Most terms in one constraint.
const MAX_TERMS: usize = 32;

impl Version {
    /// Parses a version; `strict` demands exactly `MAJOR.MINOR.PATCH`.
    pub(crate) fn parse(text: &str, strict: bool) -> Option<Version> {
        let text = text.trim();
        if text.is_empty() || text.len() > MAX_VERSION_LEN {
            return None;
        }
        let text = text.strip_prefix('v').unwrap_or(text);
        let text = match text.split_once('+') {
            Some((version, meta)) => {
                if meta.is_empty() || !meta.split('.').all(valid_identifier) {
                    return None;
                }
                version
            }
            None => text,
        };
        let (core, pre) = match text.split_once('-') {
            Some((core, pre)) => (core, Some(pre)),
            None => (text, None),
        };
        let mut segments = Vec::new();
        for part in core.split('.') {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            segments.push(part.parse::<u64>().ok()?);
        }
        if strict && segments.len() != 3 {
            return None;
        }
        let pre = match pre {
            None => Vec::new(),
            Some(pre) => {
                if pre.is_empty() {
                    return None;
                }
                let mut ids = Vec::new();
                for id in pre.split('.') {
                    if !valid_identifier(id) {
                        return None;
                    }
                    ids.push(match id.parse::<u64>() {
                        Ok(n) if id.bytes().all(|b| b.is_ascii_digit()) => Identifier::Numeric(n),
                        _ => Identifier::Alpha(id.to_owned()),
                    });
                }
                ids
            }
        };
        Some(Version { segments, pre })
    }

    fn segment(&self, i: usize) -> u64 {
        self.segments.get(i).copied().unwrap_or(0)
    }

    fn is_prerelease(&self) -> bool {
        !self.pre.is_empty()
    }

    fn same_segments(&self, other: &Version) -> bool {
        let n = self.segments.len().max(other.segments.len());
        (0..n).all(|i| self.segment(i) == other.segment(i))
    }
}

fn valid_identifier(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'~')
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        let n = self.segments.len().max(other.segments.len());
        for i in 0..n {
            match self.segment(i).cmp(&other.segment(i)) {
                Ordering::Equal => {}
                unequal => return unequal,
            }
        }
        match (self.pre.is_empty(), other.pre.is_empty()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => self.pre.cmp(&other.pre),
        }
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    Pessimistic,
}

/// A parsed constraint: every term must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VersionConstraints {
    terms: Vec<(Op, Version)>,
}

impl VersionConstraints {
    /// Parses `">= 1.2, < 2"`; `strict` applies semver rules to the versions in it.
    pub(crate) fn parse(text: &str, strict: bool) -> Option<VersionConstraints> {
        if text.len() > MAX_VERSION_LEN * 4 {
            return None;
        }
        let mut terms = Vec::new();
        for term in text.split(',') {
            if terms.len() == MAX_TERMS {
                return None;
            }
            let term = term.trim();
            let (op, rest) = [
                (">=", Op::Ge),
                ("<=", Op::Le),
                ("!=", Op::Ne),
                ("~>", Op::Pessimistic),
                (">", Op::Gt),
                ("<", Op::Lt),
                ("=", Op::Eq),
            ]
            .iter()
            .find_map(|(p, op)| term.strip_prefix(p).map(|rest| (*op, rest)))
            .unwrap_or((Op::Eq, term));
            terms.push((op, Version::parse(rest, strict)?));
        }
        if terms.is_empty() {
            return None;
        }
        Some(VersionConstraints { terms })
    }

    /// Whether `version` satisfies every term.
    pub(crate) fn matches(&self, version: &Version) -> bool {
        self.terms
            .iter()
            .all(|(op, c)| term_matches(*op, c, version))
    }
}

/// go-version's pre-release rule: a pre-release version only satisfies a term whose version
/// is a pre-release with the same segments.
fn prerelease_ok(v: &Version, c: &Version) -> bool {
    match (v.is_prerelease(), c.is_prerelease()) {
        (true, true) => v.same_segments(c),
        (true, false) => false,
        _ => true,
    }
}

fn term_matches(op: Op, c: &Version, v: &Version) -> bool {
    match op {
        Op::Eq => v.cmp(c) == Ordering::Equal,
        Op::Ne => v.cmp(c) != Ordering::Equal,
        Op::Gt => prerelease_ok(v, c) && v > c,
        Op::Ge => prerelease_ok(v, c) && v >= c,
        Op::Lt => prerelease_ok(v, c) && v < c,
        Op::Le => prerelease_ok(v, c) && v <= c,
        Op::Pessimistic => {
            if !prerelease_ok(v, c) || (c.is_prerelease() && !v.is_prerelease()) || v < c {
                return false;
            }
            let n = c.segments.len();
            if n > v.segments.len().max(3) {
                return false;
            }
            // All but the last written segment are pinned; the last may only grow.
            (0..n.saturating_sub(1)).all(|i| v.segment(i) == c.segment(i))
                && v.segment(n - 1) >= c.segment(n - 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(constraint: &str, version: &str) -> bool {
        let c = VersionConstraints::parse(constraint, false).expect("constraint parses");
        let v = Version::parse(version, false).expect("version parses");
        c.matches(&v)
    }

    #[test]
    fn versions_compare_numerically_with_prereleases_first() {
        let v = |s| Version::parse(s, false).unwrap();
        assert!(v("1.10.0") > v("1.9.9"));
        assert_eq!(v("1.2").cmp(&v("1.2.0")), Ordering::Equal);
        assert!(v("1.2.0-beta") < v("1.2.0"));
        assert!(v("1.2.0-beta.2") < v("1.2.0-beta.11"));
        assert!(v("1.2.0-1") < v("1.2.0-alpha"));
        assert_eq!(v("v1.2.3+build.5").cmp(&v("1.2.3")), Ordering::Equal);
        assert!(Version::parse("1..2", false).is_none());
        assert!(Version::parse("one", false).is_none());
        assert!(
            Version::parse("1.2", true).is_none(),
            "semver needs 3 parts"
        );
        assert!(Version::parse("1.2.3", true).is_some());
    }

    #[test]
    fn operators_follow_go_version() {
        assert!(check(">= 1.2, < 2.0", "1.5.0"));
        assert!(!check(">= 1.2, < 2.0", "2.0.0"));
        assert!(check("= 1.2.3", "1.2.3"));
        assert!(check("1.2.3", "1.2.3"));
        assert!(check("!= 1.2.3", "1.2.4"));
        assert!(check("> 1.0", "1.0.1"));
        assert!(check("<= 1.0", "1.0.0"));
        assert!(!check("< 1.0", "1.0.0"));
    }

    #[test]
    fn pessimistic_pins_all_but_the_last_written_segment() {
        assert!(check("~> 1.2", "1.9.0"));
        assert!(!check("~> 1.2", "2.0.0"));
        assert!(!check("~> 1.2", "1.1.0"));
        assert!(check("~> 1.2.3", "1.2.9"));
        assert!(!check("~> 1.2.3", "1.3.0"));
        assert!(!check("~> 1.2.3", "1.2.2"));
    }

    #[test]
    fn prereleases_only_match_prerelease_terms_of_the_same_release() {
        assert!(!check("> 1.0", "1.1.0-beta"));
        assert!(check(">= 1.1.0-alpha", "1.1.0-beta"));
        assert!(!check(">= 1.1.0-alpha", "1.2.0-beta"));
        assert!(check(">= 1.1.0-alpha", "1.2.0"));
    }

    #[test]
    fn malformed_constraints_are_refused() {
        assert!(VersionConstraints::parse("", false).is_none());
        assert!(VersionConstraints::parse(">= ", false).is_none());
        assert!(VersionConstraints::parse(">= 1.0,", false).is_none());
        assert!(VersionConstraints::parse(&"1,".repeat(40), false).is_none());
    }
}
