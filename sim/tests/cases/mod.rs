mod cli;
mod layers;
mod policies;
mod same_policy;
mod testbed_scenarios;
