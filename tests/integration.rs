//! The integration tests: one binary driving the real executable, so that the tests of every file
//! share the harness's threads (a file's long test runs beside the others' instead of after them)
//! and the test build links once. One module per subject; `cargo test --release --test integration
//! faults::` runs one.

mod common;

mod browser;
mod cli;
mod docs;
mod exec;
mod faults;
mod parallel;
mod stream;
