//! Scenario files: they live in mlcc-sim (which simulates them too), see [`mlcc_sim::testbed`].

pub use mlcc_sim::testbed::*;
