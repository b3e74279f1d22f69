//! The pictures' numbers of an audit (issue 24): the |drift| distribution and the
//! conversations with the most drift, counted as the drifting rows stream past
//! ([`super::rows::record_row`]) and kept in the summary, so the HTML page, `--format json`
//! and the ledger read the same numbers.

use std::collections::HashMap;

use super::types::{AuditSummary, ConversationDrift, DriftBucket, TOP_CONVERSATIONS};
use crate::stages::Key;

/// Counts one drifting row of |drift| `abs` (>= 1) into the distribution.
pub(super) fn add_to_buckets(buckets: &mut Vec<DriftBucket>, abs: u64) {
    let bucket = DriftBucket::of(abs);
    match buckets.binary_search_by_key(&bucket.to, |b| b.to) {
        Ok(i) => buckets[i].rows += 1,
        Err(i) => buckets.insert(i, DriftBucket { rows: 1, ..bucket }),
    }
}

/// The drifting rows of one batch per conversation. A batch holds whole conversations, so
/// each conversation is counted in one batch only and [`BatchTally::merge_into`] keeps the
/// summary's list exact.
#[derive(Debug, Default)]
pub(super) struct BatchTally {
    by_conversation: HashMap<Key, (u64, i64)>,
}

impl BatchTally {
    /// Counts a drifting row of conversation `conv` with |drift| `abs` (0 for a NULL counter).
    pub(super) fn add(&mut self, conv: &Key, abs: i64) {
        let entry = match self.by_conversation.get_mut(conv) {
            Some(entry) => entry,
            None => self.by_conversation.entry(conv.clone()).or_default(),
        };
        entry.0 += 1;
        entry.1 = entry.1.saturating_add(abs);
    }

    /// Merges the batch into the summary's [`AuditSummary::top_conversations`]: the kept
    /// ones first (earlier batches), then this batch's in key order, sorted (stably) by
    /// drifting rows and sum of |drift|, most first, and cut at [`TOP_CONVERSATIONS`].
    pub(super) fn merge_into(self, summary: &mut AuditSummary) {
        if self.by_conversation.is_empty() {
            return;
        }
        let mut batch: Vec<(Key, (u64, i64))> = self.by_conversation.into_iter().collect();
        batch.sort_by(|a, b| a.0.cmp(&b.0));
        let top = &mut summary.top_conversations;
        top.extend(
            batch
                .into_iter()
                .map(|(conv, (rows, sum))| ConversationDrift {
                    conversation: conv.to_string(),
                    drifting_rows: rows,
                    sum_abs_drift: sum,
                }),
        );
        top.sort_by(|a, b| {
            (b.drifting_rows, b.sum_abs_drift).cmp(&(a.drifting_rows, a.sum_abs_drift))
        });
        top.truncate(TOP_CONVERSATIONS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two() {
        let mut b = Vec::new();
        for abs in [1, 2, 3, 4, 5, 8, 9, 1, i64::MAX as u64] {
            add_to_buckets(&mut b, abs);
        }
        let got: Vec<(u64, u64, u64)> = b.iter().map(|b| (b.from, b.to, b.rows)).collect();
        assert_eq!(
            got,
            vec![
                (1, 1, 2),
                (2, 2, 1),
                (3, 4, 2),
                (5, 8, 2),
                (9, 16, 1),
                (1 << 62 | 1, 1 << 63, 1)
            ]
        );
    }

    #[test]
    fn the_top_keeps_the_most_drifting_conversations_in_batch_order_on_ties() {
        let mut s = AuditSummary::default();
        let mut t = BatchTally::default();
        for (conv, abs) in [(5, 1), (3, 2), (5, 1), (4, 0)] {
            t.add(&Key::Int(conv), abs);
        }
        t.merge_into(&mut s);
        let mut t = BatchTally::default();
        t.add(&Key::Int(9), 2);
        t.add(&Key::Int(9), 0);
        t.add(&Key::Int(7), 2);
        t.merge_into(&mut s);
        let got: Vec<(&str, u64, i64)> = s
            .top_conversations
            .iter()
            .map(|c| (c.conversation.as_str(), c.drifting_rows, c.sum_abs_drift))
            .collect();
        assert_eq!(
            got,
            vec![
                ("5", 2, 2),
                ("9", 2, 2),
                ("3", 1, 2),
                ("7", 1, 2),
                ("4", 1, 0)
            ]
        );
    }
}
