//! mlcc-switch-emu's integration tests in one binary (as raft-rs's `harness/tests/tests.rs`): one
//! link step for all of them. `cargo test -p mlcc-switch-emu --test tests <module>::` runs one
//! module. Binaries of their own: `tests/fuzz.rs` (the bolero fuzz targets, which scripts/fuzz.sh
//! runs alone with a time budget and whose corpus bolero keeps by file) and `tests/flood.rs` (a
//! hostile load sized by what the switch sustains, measured in the same test).

mod cases;
mod common;
