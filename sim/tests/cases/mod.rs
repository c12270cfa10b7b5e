mod cli;
mod layers;
mod physics;
mod policies;
mod same_policy;
mod testbed_scenarios;
