//! surfacelog (work in progress skeleton)
pub mod error;
pub mod json;
