//! GPU accounting and where a job's processes go.
//!
//! Every server has 8 GPUs; each worker or PS takes one. A job's members always go to
//! distinct servers: co-located members talk over NVLink/shared memory, which is not
//! scheduled, and the paper's point is the network. Jobs start in arrival order (FIFO, no
//! back-filling: a job that does not fit blocks the ones behind it, as in a plain queue).

use mlcc_core::topology::NodeId;

use crate::rng::Rng;

pub const GPUS_PER_SERVER: u8 = 8;

/// How servers are chosen for a job's members.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Random servers with a free GPU (seeded per job): what a fragmented cluster looks like;
    /// most flows cross the upper tiers.
    Spread,
    /// First fit in server order: jobs pile onto the same servers and racks, so host links are
    /// shared by many jobs and little traffic leaves the rack.
    Packed,
}

/// The cluster's GPUs: which servers have a free one, and the rule that picks a job's.
#[derive(Clone, Debug)]
pub struct GpuPool {
    hosts: Vec<NodeId>,
    free: Vec<u8>,
    /// Servers with at least one free GPU.
    open: usize,
    placement: Placement,
    seed: u64,
}

impl GpuPool {
    pub fn new(hosts: Vec<NodeId>, placement: Placement, seed: u64) -> Self {
        let n = hosts.len();
        GpuPool {
            hosts,
            free: vec![GPUS_PER_SERVER; n],
            open: n,
            placement,
            seed,
        }
    }

    pub fn free_gpus(&self) -> u64 {
        self.free.iter().map(|&f| u64::from(f)).sum()
    }

    /// Servers for `members` processes of job number `job`, or `None` if fewer than that many
    /// servers have a free GPU. Takes the GPUs.
    pub fn place(&mut self, job: u64, members: u32) -> Option<Vec<NodeId>> {
        let m = members as usize;
        if m > self.open || m == 0 {
            return None;
        }
        let n = self.hosts.len();
        let mut chosen: Vec<usize> = Vec::with_capacity(m);
        match self.placement {
            Placement::Spread => {
                let mut rng = Rng::derive(self.seed, 0x5eed_0000 + job);
                let mut tries = 0;
                while chosen.len() < m && tries < 64 * m {
                    tries += 1;
                    let h = rng.below(n as u64) as usize;
                    if self.free[h] > 0 && !chosen.contains(&h) {
                        chosen.push(h);
                    }
                }
                // A nearly full cluster: scan from a random point for the rest.
                let start = rng.below(n as u64) as usize;
                for i in 0..n {
                    if chosen.len() == m {
                        break;
                    }
                    let h = (start + i) % n;
                    if self.free[h] > 0 && !chosen.contains(&h) {
                        chosen.push(h);
                    }
                }
            }
            Placement::Packed => {
                for h in 0..n {
                    if chosen.len() == m {
                        break;
                    }
                    if self.free[h] > 0 {
                        chosen.push(h);
                    }
                }
            }
        }
        if chosen.len() < m {
            return None;
        }
        for &h in &chosen {
            self.free[h] -= 1;
            if self.free[h] == 0 {
                self.open -= 1;
            }
        }
        Some(chosen.into_iter().map(|h| self.hosts[h]).collect())
    }

    pub fn release(&mut self, hosts: &[NodeId]) {
        for h in hosts {
            if let Some(i) = self.hosts.iter().position(|x| x == h) {
                if self.free[i] == 0 {
                    self.open += 1;
                }
                self.free[i] = (self.free[i] + 1).min(GPUS_PER_SERVER);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(n: u32) -> Vec<NodeId> {
        (0..n).map(NodeId).collect()
    }

    #[test]
    fn members_get_distinct_servers_and_gpus_run_out() {
        let mut c = GpuPool::new(hosts(3), Placement::Packed, 1);
        for j in 0..8 {
            let p = c.place(j, 3).unwrap();
            assert_eq!(p, hosts(3));
        }
        assert_eq!(c.free_gpus(), 0);
        assert!(c.place(9, 1).is_none());
        c.release(&hosts(2));
        assert!(c.place(10, 3).is_none(), "only 2 servers have a free GPU");
        assert_eq!(c.place(11, 2).unwrap(), hosts(2));
    }

    #[test]
    fn spread_is_seeded_and_distinct() {
        let mut a = GpuPool::new(hosts(50), Placement::Spread, 7);
        let mut b = GpuPool::new(hosts(50), Placement::Spread, 7);
        for j in 0..40 {
            let p = a.place(j, 4).unwrap();
            assert_eq!(Some(p.clone()), b.place(j, 4));
            let mut d = p.clone();
            d.sort();
            d.dedup();
            assert_eq!(d.len(), 4);
        }
    }
}
