//! mlcc-sim's integration tests in one binary (as raft-rs's `harness/tests/tests.rs`): one link
//! step for all of them. `cargo test -p mlcc-sim --test tests <module>::` runs one module.

mod cases;
