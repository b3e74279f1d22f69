//! Rendering of outcomes for people ([`text`]) and scripts ([`json`]): the functions write to
//! any `std::io::Write` and know nothing of the terminal, so the command line (`crate::cli`)
//! and the demo (`crate::demo`) print the same words.

pub mod json;
pub mod text;
