//! The feeder of MLTCP's ratio map (the `mltcp-feeder` binary): host-local knowledge only, as
//! MLTCP needs. MLTCP is a peer baseline, not an mlcc policy: its rate logic is the BPF CC
//! (`mlcc_bpf::mltcp`, F(r) scaling Reno's or CUBIC's increase) plus the ratio computed here,
//! so nothing of it lives in mlcc-core.
//!
//! Every slot the feeder reads the progress files of the host's training processes (the same
//! files and checks as mlccd), finds each process's TCP connections in /proc, and writes for
//! every one of them that is on the MLTCP CC the process's r = bytes sent this iteration /
//! bytes per iteration. The paper counts bytes per flow; a process's connections here carry
//! its iteration in parallel (one ring successor, or a push to every PS server at once), so the
//! process's share is each connection's. No planning, switch, or peer traffic.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use mlcc_bpf::SocketKey;
use mlcc_bpf::mltcp::RatioOrder;
use mlcc_core::job::{Arch, Role};

use crate::datapath::canonical;
use crate::progress::{ProgressHeader, ProgressSnapshot};
use crate::sockets::TcpConn;

/// Bytes the process sends per iteration: what it sent in its last whole iteration; before
/// the first one ends, the estimate from the model size (ring all-reduce 2(N−1)/N · M, a PS
/// worker pushes M, a PS server is assumed to send M); `None` when nothing tells.
pub fn iteration_bytes(h: &ProgressHeader, s: &ProgressSnapshot) -> Option<u64> {
    if s.last_iteration_bytes > 0 {
        return Some(s.last_iteration_bytes);
    }
    let m = h.model_bytes;
    let est = match (h.arch, h.role) {
        (Some(Arch::Allreduce), _) if h.world_size >= 2 => {
            let n = u128::from(h.world_size);
            (2 * (n - 1) * u128::from(m) / n) as u64
        }
        (_, Role::Scheduler) => 0,
        _ => m,
    };
    (est > 0).then_some(est)
}

/// MLTCP's r for the process: the share of its iteration's bytes sent so far, in [0, 1].
pub fn ratio(h: &ProgressHeader, s: &ProgressSnapshot) -> Option<f64> {
    let total = iteration_bytes(h, s)?;
    Some((s.sent_this_iteration() as f64 / total as f64).min(1.0))
}

/// One process as read this slot.
#[derive(Clone, Debug)]
pub struct ProcessView {
    pub header: ProgressHeader,
    pub snapshot: ProgressSnapshot,
    pub conns: Vec<TcpConn>,
}

/// The ratio of every connection of `processes` that is on the CC (`on_cc`: the CC's socket
/// keys; /proc gives no network-namespace cookie, so connections match by 4-tuple).
pub fn orders(processes: &[ProcessView], on_cc: &[SocketKey], ttl: Duration) -> Vec<RatioOrder> {
    let mut by_tuple: HashMap<(SocketAddr, SocketAddr), Vec<SocketKey>> = HashMap::new();
    for k in on_cc {
        by_tuple.entry((k.src(), k.dst())).or_default().push(*k);
    }
    let mut out = Vec::new();
    for p in processes {
        let Some(r) = ratio(&p.header, &p.snapshot) else {
            continue;
        };
        for c in &p.conns {
            for key in by_tuple
                .get(&(canonical(c.local), canonical(c.remote)))
                .into_iter()
                .flatten()
            {
                out.push(RatioOrder {
                    key: *key,
                    ratio: r,
                    ttl,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(arch: Option<Arch>, role: Role, world: u32, model: u64) -> ProgressHeader {
        ProgressHeader {
            job_id: "j".into(),
            arch,
            role,
            rank: 0,
            world_size: world,
            model_bytes: model,
            pid: 1,
            start_time_ns: 0,
            cc_name: "mltcp".into(),
            total_iterations: 0,
        }
    }

    fn snap(sent: u64, start: u64, last: u64) -> ProgressSnapshot {
        ProgressSnapshot {
            bytes_sent: sent,
            iteration_start_sent: start,
            last_iteration_bytes: last,
            ..Default::default()
        }
    }

    #[test]
    fn ratio_is_the_share_of_the_last_iterations_bytes_sent_since_this_one_began() {
        let h = header(Some(Arch::Allreduce), Role::Worker, 4, 1000);
        assert_eq!(ratio(&h, &snap(1300, 1000, 1200)), Some(0.25));
        assert_eq!(ratio(&h, &snap(1000, 1000, 1200)), Some(0.0));
        // A longer iteration than the last one (retransmissions, a resized bucket) stays at 1.
        assert_eq!(ratio(&h, &snap(3000, 1000, 1200)), Some(1.0));
    }

    #[test]
    fn before_the_first_iteration_ends_the_model_size_estimates_it() {
        // Ring of 4: 2 (N-1)/N M = 1.5 M.
        let ring = header(Some(Arch::Allreduce), Role::Worker, 4, 1000);
        assert_eq!(iteration_bytes(&ring, &snap(0, 0, 0)), Some(1500));
        assert_eq!(ratio(&ring, &snap(750, 0, 0)), Some(0.5));
        let worker = header(Some(Arch::Ps), Role::Worker, 4, 1000);
        assert_eq!(iteration_bytes(&worker, &snap(0, 0, 0)), Some(1000));
        // Nothing known: no ratio (the CC runs its plain base), not a made-up one.
        let unknown = header(None, Role::Worker, 0, 0);
        assert_eq!(ratio(&unknown, &snap(10, 0, 0)), None);
        let sched = header(Some(Arch::Ps), Role::Scheduler, 4, 1000);
        assert_eq!(ratio(&sched, &snap(10, 0, 0)), None);
    }

    #[test]
    fn every_connection_on_the_cc_gets_its_process_ratio() {
        let a: SocketAddr = "10.0.0.1:40000".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:20000".parse().unwrap();
        let c: SocketAddr = "10.0.0.3:20001".parse().unwrap();
        let other: SocketAddr = "10.0.0.1:40001".parse().unwrap();
        let p = ProcessView {
            header: header(Some(Arch::Ps), Role::Worker, 2, 1000),
            snapshot: snap(400, 0, 0),
            conns: vec![
                TcpConn {
                    local: a,
                    remote: b,
                    accepted: false,
                },
                TcpConn {
                    local: other,
                    remote: c,
                    accepted: false,
                },
            ],
        };
        // a→b is on the CC (in two namespaces with the same addresses); other→c is not.
        let on_cc = [SocketKey::new(7, a, b), SocketKey::new(8, a, b)];
        let got = orders(&[p], &on_cc, Duration::from_millis(30));
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|o| o.ratio == 0.4 && o.key.src() == a));
    }
}
