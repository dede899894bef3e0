//! The raft entries appended last, kept decoded beside sled.
//!
//! Every entry a server appends is read back soon after: by the state machine to apply it
//! (on every server) and, on the leader, by replication once per follower. Read from sled,
//! each of those reads is a tree lookup plus a full bincode decode of an entry that may carry
//! a thousand allocations. [`RecentEntries`] keeps the newest entries, up to a budget of
//! their encoded bytes, so those reads are a clone instead (ids are shared, one pointer each).
//!
//! It mirrors the tail of the sled log exactly: an append extends it, a truncation or a purge
//! cuts it the same way as the log, and an append that does not follow its last entry (after
//! a snapshot install, say) starts it afresh. A read it cannot answer in full goes to sled.

use std::collections::VecDeque;

use crate::raft_types::Entry;

/// The newest appended entries, contiguous by index, at most `budget` encoded bytes.
#[derive(Debug, Default)]
pub(super) struct RecentEntries {
    /// `(entry, its encoded size)`, oldest first, indexes consecutive.
    entries: VecDeque<(Entry, usize)>,
    bytes: usize,
    budget: usize,
}

impl RecentEntries {
    /// Keeps at most `budget` encoded bytes (0 keeps nothing).
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            ..Self::default()
        }
    }

    fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|(e, _)| e.log_id.index)
    }

    fn last_index(&self) -> Option<u64> {
        self.entries.back().map(|(e, _)| e.log_id.index)
    }

    /// Records an entry just written to the log under its index.
    pub fn push(&mut self, entry: Entry, size: usize) {
        if size > self.budget {
            // Too large to keep; what is kept must stay contiguous with the log's tail.
            self.clear();
            return;
        }
        match self.last_index() {
            Some(last) if last.checked_add(1) == Some(entry.log_id.index) => {}
            Some(_) => self.clear(),
            None => {}
        }
        self.bytes += size;
        self.entries.push_back((entry, size));
        while self.bytes > self.budget {
            let Some((_, size)) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= size;
        }
    }

    /// The log lost every entry from `index` on.
    pub fn truncate_from(&mut self, index: u64) {
        while self.last_index().is_some_and(|last| last >= index) {
            if let Some((_, size)) = self.entries.pop_back() {
                self.bytes -= size;
            }
        }
    }

    /// The log lost every entry up to `index`, inclusive.
    pub fn purge_up_to(&mut self, index: u64) {
        while self.first_index().is_some_and(|first| first <= index) {
            if let Some((_, size)) = self.entries.pop_front() {
                self.bytes -= size;
            }
        }
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// The entries in `[start, end)`, stopping before the one that would take their encoded
    /// size past `max_bytes` (the first is always included): `None` unless every entry the
    /// answer needs is here.
    pub fn read(&self, start: u64, end: u64, max_bytes: usize) -> Option<Vec<Entry>> {
        if end <= start {
            return Some(Vec::new());
        }
        let (first, last) = (self.first_index()?, self.last_index()?);
        if start < first || end > last.checked_add(1)? {
            return None;
        }
        let from = usize::try_from(start - first).ok()?;
        let to = usize::try_from(end - first).ok()?;
        let mut out = Vec::new();
        let mut bytes = 0usize;
        for (entry, size) in self.entries.range(from..to) {
            bytes = bytes.saturating_add(*size);
            if bytes > max_bytes && !out.is_empty() {
                break;
            }
            out.push(entry.clone());
        }
        Some(out)
    }

    /// Entries held and their encoded bytes.
    #[cfg(test)]
    pub fn len_and_bytes(&self) -> (usize, usize) {
        (self.entries.len(), self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsm::Command;
    use openraft::{CommittedLeaderId, EntryPayload, LogId};

    fn entry(index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Command::Batch(Vec::new()).into()),
        }
    }

    fn indexes(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|e| e.log_id.index).collect()
    }

    fn filled(budget: usize, range: std::ops::RangeInclusive<u64>) -> RecentEntries {
        let mut recent = RecentEntries::new(budget);
        for i in range {
            recent.push(entry(i), 10);
        }
        recent
    }

    #[test]
    fn reads_what_it_holds_and_nothing_else() {
        let recent = filled(1000, 5..=9);
        assert_eq!(
            indexes(&recent.read(5, 10, usize::MAX).unwrap()),
            [5, 6, 7, 8, 9]
        );
        assert_eq!(indexes(&recent.read(7, 9, usize::MAX).unwrap()), [7, 8]);
        assert_eq!(recent.read(4, 8, usize::MAX), None, "4 is not held");
        assert_eq!(recent.read(6, 11, usize::MAX), None, "10 is not held");
        assert_eq!(recent.read(8, 8, usize::MAX), Some(Vec::new()));
        assert_eq!(RecentEntries::new(1000).read(1, 2, usize::MAX), None);
    }

    #[test]
    fn a_read_stops_at_its_byte_limit_but_returns_at_least_one() {
        let recent = filled(1000, 1..=5);
        assert_eq!(indexes(&recent.read(1, 6, 25).unwrap()), [1, 2]);
        assert_eq!(indexes(&recent.read(2, 6, 1).unwrap()), [2]);
    }

    #[test]
    fn the_budget_drops_the_oldest() {
        let recent = filled(30, 1..=5);
        assert_eq!(recent.len_and_bytes(), (3, 30));
        assert_eq!(indexes(&recent.read(3, 6, usize::MAX).unwrap()), [3, 4, 5]);
        assert_eq!(recent.read(2, 4, usize::MAX), None);
        let mut recent = filled(30, 1..=2);
        recent.push(entry(3), 31);
        assert_eq!(
            recent.len_and_bytes(),
            (0, 0),
            "an entry over budget empties it"
        );
        assert_eq!(
            filled(0, 1..=3).len_and_bytes(),
            (0, 0),
            "a zero budget keeps none"
        );
    }

    #[test]
    fn truncate_purge_and_gaps_keep_it_a_copy_of_the_log_tail() {
        let mut recent = filled(1000, 1..=6);
        recent.truncate_from(5);
        assert_eq!(recent.read(1, 7, usize::MAX), None);
        assert_eq!(
            indexes(&recent.read(1, 5, usize::MAX).unwrap()),
            [1, 2, 3, 4]
        );
        recent.purge_up_to(2);
        assert_eq!(recent.len_and_bytes(), (2, 20));
        assert_eq!(recent.read(2, 4, usize::MAX), None);
        // Entries written again after the truncation.
        recent.push(entry(5), 10);
        assert_eq!(indexes(&recent.read(3, 6, usize::MAX).unwrap()), [3, 4, 5]);
        // An append that skips ahead (a snapshot was installed) starts afresh.
        recent.push(entry(40), 10);
        assert_eq!(recent.read(5, 6, usize::MAX), None);
        assert_eq!(indexes(&recent.read(40, 41, usize::MAX).unwrap()), [40]);
        recent.truncate_from(0);
        assert_eq!(recent.len_and_bytes(), (0, 0));
    }
}
