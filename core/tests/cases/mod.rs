mod optimality;
mod planner;
mod properties;
mod snapshots;
