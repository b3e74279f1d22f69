//! The drift classes the generator injects, by their index in [`DriftClass::ALL`] order, and
//! how often each is injected.
//!
//! [`DriftClass::ALL`]: crate::drift::DriftClass::ALL

/// The fraction of member rows injected per class, in [`DriftClass::ALL`] order.
///
/// [`DriftClass::ALL`]: crate::drift::DriftClass::ALL
pub(super) const RATES: [f64; 9] = [
    0.002,  // null_counter
    0.003,  // orphan
    0.0015, // negative
    0.004,  // own_messages_counted
    0.003,  // excluded_counted
    0.005,  // cleared
    0.002,  // exceeds_history
    0.006,  // overcount
    0.006,  // undercount
];

pub(super) const NULL_COUNTER: usize = 0;
pub(super) const ORPHAN: usize = 1;
pub(super) const NEGATIVE: usize = 2;
pub(super) const OWN: usize = 3;
pub(super) const EXCLUDED: usize = 4;
pub(super) const CLEARED: usize = 5;
pub(super) const EXCEEDS: usize = 6;
pub(super) const OVERCOUNT: usize = 7;
pub(super) const UNDERCOUNT: usize = 8;
