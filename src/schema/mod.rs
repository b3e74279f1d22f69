//! The legacy schema as the mapping names it: the key columns' types ([`keys`]: how keys are
//! bound and read, and the watermark table's key types), and the preflight ([`preflight`])
//! that every mapped table, column and predicate exists, parses and has the right type
//! ([`column_types`]), run from zero-row queries per section ([`sections`]), and that the
//! counter's values are whole numbers within the 64-bit range ([`counter_values`]) and the
//! messages' positions are > 0 ([`positions`]), before any stage writes anything.

pub mod collations;
pub mod column_types;
pub mod counter_values;
pub mod evidence_share;
pub mod flag_keys;
pub mod key_families;
pub mod keys;
pub mod positions;
pub mod preflight;
pub mod sections;
pub mod statements;
pub mod time_kinds;

pub use collations::{Family, KeyCollations, KeyColumn};
pub use key_families::{KeyFamilies, KeyFamily};
pub use keys::{key_type, watermark_key_types, KeyKind, KeyType};
pub use preflight::{missing_contract_columns, preflight};
