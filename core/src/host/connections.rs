//! How a flow's rate splits over its connections. NCCL and PS-Lite split a transfer evenly
//! over the connections that carry it, so unequal pacing among those would only slow the group
//! to its slowest connection: they share the rate evenly. But not every connection carries the
//! group's data — over ZMQ, PS-Lite sends on the connections a process opened and only
//! receives on those its peers opened, half of a worker's group — and an even split over all
//! left that half of the rate unused (measured: a group achieved 47.5 of 95.6 Mbit/s planned).
//! Quiet connections (nothing sent or acknowledged last slot) get the rate floor, so a burst
//! that starts on one is not stalled before the next slot counts it as sending; the others
//! share the rest, never less than an even split. With every connection quiet (or none), all
//! share evenly. No connection is ordered below the policy's rate floor
//! ([`super::PolicyConfig::rate_floor_per_connection`]).

use super::config::PolicyConfig;
use super::obs::FlowObs;

impl PolicyConfig {
    /// `f`'s connections, with this policy's rate floor.
    pub fn connections_of(&self, f: &FlowObs) -> Connections {
        Connections {
            count: f.connections,
            quiet: f.quiet_connections,
            floor: self.rate_floor_per_connection,
        }
    }
}

/// A flow's connections as the split sees them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Connections {
    pub count: usize,
    pub quiet: usize,
    /// The lowest rate a connection is ordered (bytes/s).
    pub floor: f64,
}

/// What each connection of a flow is ordered (bytes/s, whole bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConnectionRates {
    /// Each connection that sent or was acknowledged during the last slot.
    pub busy: f64,
    /// Each quiet connection.
    pub quiet: f64,
}

impl Connections {
    /// The per-connection orders that carry the flow's `rate`.
    pub fn split(&self, rate: f64) -> ConnectionRates {
        let floor = self.floor.max(0.0);
        let even = (rate / self.count.max(1) as f64).max(1.0).floor();
        let (busy, quiet) = if self.quiet == 0 || self.quiet >= self.count {
            (even, even)
        } else {
            let busy = (self.count - self.quiet) as f64;
            let per = ((rate - floor * self.quiet as f64) / busy)
                .max(even)
                .floor();
            (per, floor.min(even))
        };
        ConnectionRates {
            busy: busy.max(floor).floor(),
            quiet: quiet.max(floor).floor(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOOR: f64 = 125e3;

    fn split(rate: f64, count: usize, quiet: usize) -> ConnectionRates {
        Connections {
            count,
            quiet,
            floor: FLOOR,
        }
        .split(rate)
    }

    #[test]
    fn busy_connections_share_what_the_quiet_ones_floors_leave() {
        // 4 connections, 2 quiet: the busy two carry the rate less two floors.
        let r = split(100e6, 4, 2);
        assert_eq!(r.quiet, FLOOR);
        assert_eq!(r.busy, ((100e6 - 2.0 * FLOOR) / 2.0).floor());
        // None quiet, or all: an even split.
        for quiet in [0, 4] {
            assert_eq!(
                split(100e6, 4, quiet),
                ConnectionRates {
                    busy: 25e6,
                    quiet: 25e6
                }
            );
        }
        // Never below an even split, however many floors the quiet ones take.
        let r = split(400e3, 4, 3);
        assert_eq!(r.busy, 125e3);
    }

    #[test]
    fn no_connection_is_ordered_below_the_floor_and_a_zero_floor_leaves_whole_bytes() {
        let r = split(100e3, 4, 0);
        assert_eq!(
            r,
            ConnectionRates {
                busy: FLOOR,
                quiet: FLOOR
            }
        );
        let none = Connections {
            count: 3,
            quiet: 1,
            floor: 0.0,
        };
        let r = none.split(10.0);
        assert_eq!(r.quiet, 0.0);
        assert_eq!(r.busy, 5.0);
        assert_eq!(none.split(0.0).busy, 1.0, "at least a byte per second");
    }
}
