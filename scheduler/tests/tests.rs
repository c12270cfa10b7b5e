//! mlcc-scheduler's integration tests in one binary (as raft-rs's `harness/tests/tests.rs`): one
//! link step for all of them. `cargo test -p mlcc-scheduler --test tests <module>::` runs one
//! module. Binaries of their own: `tests/fuzz.rs` (the bolero fuzz targets, which scripts/fuzz.sh
//! runs alone with a time budget and whose corpus bolero keeps by file); `tests/progress_abi.rs`
//! (it sets the environment variables the C progress writer reads, which no other test thread may
//! race).

mod cases;
mod common;
