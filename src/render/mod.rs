//! Rendering of outcomes for people ([`text`], and the [`html`] page of `audit --html` and
//! `status --html`) and scripts ([`json`]): the functions write to any `std::io::Write` and
//! know nothing of the terminal, so the command line (`crate::cli`) and the demo
//! (`crate::demo`) print the same words.

pub mod html;
pub mod json;
pub mod text;
