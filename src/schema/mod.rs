//! The legacy schema as the mapping names it: the key columns' types ([`keys`]: how keys are
//! bound and read, and the watermark table's key types), and the preflight ([`preflight`])
//! that every mapped table, column and predicate exists, parses and has the right type
//! ([`column_types`]), run from zero-row queries per section ([`sections`]), and that the
//! counter's values are whole numbers within the 64-bit range ([`counter_values`]), before any
//! stage writes anything.

pub mod collations;
pub mod column_types;
pub mod counter_values;
pub mod evidence_share;
pub mod keys;
pub mod preflight;
pub mod sections;
pub mod time_kinds;

pub use collations::{Family, KeyCollations, KeyColumn};
pub use keys::{key_type, watermark_key_types, KeyKind, KeyType};
pub use preflight::{missing_contract_columns, preflight};
