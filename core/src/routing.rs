//! Shortest paths with stable ECMP (docs/design.md §4).
//!
//! The daemon, which books a flow's rates on the links of its path, and the simulator, which
//! replays the same flows, must pick the same path for the same flow on every machine and in
//! every release; otherwise load would be booked on links the packets never cross. So the hash
//! and the tie-breaking below are fixed, documented functions of their inputs, pinned by golden
//! tests, and nothing depends on hash-map order or on process state.

use std::collections::VecDeque;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::topology::{LinkId, NodeId, Topology};

/// The socket identity that ECMP hashes, as the kernel reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FiveTuple {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    /// IP protocol number (6 = TCP).
    pub protocol: u8,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

fn push_ip(buf: &mut Vec<u8>, ip: IpAddr) {
    // Canonical form: a dual-stack socket reports an IPv4 peer as ::ffff:a.b.c.d, and the same
    // flow must hash the same whichever way it was observed.
    match ip.to_canonical() {
        IpAddr::V4(v4) => buf.extend_from_slice(&v4.octets()),
        IpAddr::V6(v6) => buf.extend_from_slice(&v6.octets()),
    }
}

/// FNV-1a 64 (offset basis 0xcbf29ce484222325, prime 0x100000001b3) over the bytes
/// `src ‖ dst ‖ src_port ‖ dst_port ‖ protocol`, where an address is its 4 octets for IPv4
/// (including IPv4-mapped IPv6) or its 16 octets for IPv6, and ports are big-endian.
/// This is a wire-level contract: changing it moves flows between paths across a mixed fleet.
pub fn ecmp_hash(t: &FiveTuple) -> u64 {
    let mut buf = Vec::with_capacity(37);
    push_ip(&mut buf, t.src);
    push_ip(&mut buf, t.dst);
    buf.extend_from_slice(&t.src_port.to_be_bytes());
    buf.extend_from_slice(&t.dst_port.to_be_bytes());
    buf.push(t.protocol);
    fnv1a(FNV_OFFSET, &buf)
}

/// FNV-1a 64 of the UTF-8 bytes of `s`, for flow groups named by a flow id rather than one socket.
pub fn ecmp_hash_str(s: &str) -> u64 {
    fnv1a(FNV_OFFSET, s.as_bytes())
}

/// The splitmix64 finalizer (Steele, Lea, Flood 2014): a bijection with full avalanche, so that
/// hashes differing in a few bits spread over all next hops.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The value ECMP reduces modulo the number of equal next hops at `node`:
/// `splitmix64(hash ^ node.0)`. Mixing in the node keeps choices at successive hops independent;
/// with the raw hash, a flow that goes "left" at one tier would go "left" at every tier.
pub fn ecmp_mix(hash: u64, node: NodeId) -> u64 {
    splitmix64(hash ^ u64::from(node.0))
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("{0:?} is not a host; flows start and end at hosts")]
    NotAHost(String),
    #[error("no path from {src:?} to {dst:?}")]
    Unreachable { src: String, dst: String },
    #[error("{0:?} to itself: intra-host traffic is not scheduled")]
    SameHost(String),
    #[error("no host has ip {0}")]
    UnknownIp(IpAddr),
}

const UNREACHABLE: u16 = u16::MAX;

/// Hop distances from every node to every host, computed once.
///
/// All destinations are computed eagerly so that queries take `&self` and a `Routes` can be
/// shared read-only; for the paper's 1000-host hierarchy that is 1000 × 1111 `u16` (2.2 MB) and
/// a few milliseconds of BFS.
#[derive(Clone, Debug)]
pub struct Routes {
    node_count: usize,
    /// Row of each host in `dist`; `u32::MAX` for switches.
    row_of: Vec<u32>,
    /// `dist[row * node_count + node]` = hops from `node` to that row's host, or `UNREACHABLE`.
    dist: Vec<u16>,
    /// Whether a node forwards others' traffic (switches do, hosts do not).
    relays: Vec<bool>,
}

impl Routes {
    pub fn new(topo: &Topology) -> Routes {
        let n = topo.nodes().len();
        let relays: Vec<bool> = topo.nodes().iter().map(|node| node.is_switch()).collect();
        let mut row_of = vec![u32::MAX; n];
        let hosts: Vec<NodeId> = topo.hosts().collect();
        let mut dist = vec![UNREACHABLE; hosts.len() * n];
        let mut queue = VecDeque::with_capacity(n);
        for (row, &dst) in hosts.iter().enumerate() {
            row_of[dst.index()] = row as u32;
            let d = &mut dist[row * n..(row + 1) * n];
            // BFS on the reversed graph: d[u] = hops from u to dst, expanding only through
            // nodes that forward, since a path may end at a host but never pass one.
            d[dst.index()] = 0;
            queue.clear();
            queue.push_back(dst);
            while let Some(v) = queue.pop_front() {
                if v != dst && !relays[v.index()] {
                    continue;
                }
                let next = d[v.index()].saturating_add(1);
                if next == UNREACHABLE {
                    continue;
                }
                for &l in topo.in_links(v) {
                    let u = topo.link(l).from;
                    if d[u.index()] == UNREACHABLE {
                        d[u.index()] = next;
                        queue.push_back(u);
                    }
                }
            }
        }
        Routes {
            node_count: n,
            row_of,
            dist,
            relays,
        }
    }

    fn row(&self, dst: NodeId) -> Option<&[u16]> {
        let row = *self.row_of.get(dst.index())?;
        if row == u32::MAX {
            return None;
        }
        let start = row as usize * self.node_count;
        Some(&self.dist[start..start + self.node_count])
    }

    /// Hop count of the shortest path from host `src` to host `dst`, `None` if there is none.
    pub fn distance(&self, src: NodeId, dst: NodeId) -> Option<u16> {
        let row = self.row(dst)?;
        // Only hosts are endpoints; a switch has no row of its own.
        if self.row_of.get(src.index()).is_none_or(|&r| r == u32::MAX) {
            return None;
        }
        Some(row[src.index()]).filter(|&d| d != UNREACHABLE)
    }

    /// A shortest path (in hops) from host `src` to host `dst`. At each node the equally short
    /// next hops, in [`LinkId`] order, are chosen among by `ecmp_mix(hash, node) % count`, so a
    /// given hash always yields the same path on the same topology.
    pub fn path(
        &self,
        topo: &Topology,
        src: NodeId,
        dst: NodeId,
        hash: u64,
    ) -> Result<Vec<LinkId>, RouteError> {
        debug_assert_eq!(
            topo.nodes().len(),
            self.node_count,
            "Routes built for another topology"
        );
        let name = |n: NodeId| topo.node(n).name.clone();
        if !topo.node(src).is_host() {
            return Err(RouteError::NotAHost(name(src)));
        }
        let Some(row) = self.row(dst) else {
            return Err(RouteError::NotAHost(name(dst)));
        };
        if src == dst {
            return Err(RouteError::SameHost(name(src)));
        }
        let unreachable = || RouteError::Unreachable {
            src: name(src),
            dst: name(dst),
        };
        let hops = row[src.index()];
        if hops == UNREACHABLE {
            return Err(unreachable());
        }
        let mut path = Vec::with_capacity(usize::from(hops));
        let mut u = src;
        while u != dst {
            let want = row[u.index()] - 1;
            let closer = |l: &&LinkId| {
                let v = topo.link(**l).to;
                row[v.index()] == want && (v == dst || self.relays[v.index()])
            };
            let count = topo.out_links(u).iter().filter(closer).count();
            // Non-zero by construction of the BFS; guarded so a mismatched topology errs
            // instead of panicking.
            if count == 0 {
                return Err(unreachable());
            }
            let pick = (ecmp_mix(hash, u) % count as u64) as usize;
            let &l = topo
                .out_links(u)
                .iter()
                .filter(closer)
                .nth(pick)
                .expect("pick < count");
            path.push(l);
            u = topo.link(l).to;
        }
        Ok(path)
    }

    /// The path of one socket: endpoints looked up by ip, ECMP by [`ecmp_hash`].
    pub fn path_for_tuple(
        &self,
        topo: &Topology,
        tuple: &FiveTuple,
    ) -> Result<Vec<LinkId>, RouteError> {
        let src = topo
            .host_by_ip(tuple.src)
            .ok_or(RouteError::UnknownIp(tuple.src))?;
        let dst = topo
            .host_by_ip(tuple.dst)
            .ok_or(RouteError::UnknownIp(tuple.dst))?;
        self.path(topo, src, dst, ecmp_hash(tuple))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{HierarchySpec, TopologyBuilder};
    use crate::units::BytesPerSec;
    use proptest::prelude::*;

    fn gbit(x: f64) -> BytesPerSec {
        BytesPerSec::from_bits_per_sec(x * 1e9)
    }

    fn id(t: &Topology, name: &str) -> NodeId {
        t.node_by_name(name).unwrap()
    }

    fn names(t: &Topology, path: &[LinkId]) -> Vec<String> {
        path.iter().map(|&l| t.link(l).name.clone()).collect()
    }

    fn assert_contiguous(t: &Topology, src: NodeId, dst: NodeId, path: &[LinkId]) {
        assert_eq!(t.link(path[0]).from, src);
        assert_eq!(t.link(*path.last().unwrap()).to, dst);
        for w in path.windows(2) {
            assert_eq!(t.link(w[0]).to, t.link(w[1]).from, "{:?}", names(t, path));
        }
        for &l in &path[..path.len() - 1] {
            assert!(t.node(t.link(l).to).is_switch(), "path passes a host");
        }
    }

    // Golden values from an independent implementation:
    // python3 -c 'h=0xcbf29ce484222325
    // for b in bytes([10,0,0,1,10,0,1,2,0x9c,0x40,0x14,0x51,6]): h=((h^b)*0x100000001b3)%2**64
    // print(hex(h))'
    #[test]
    fn ecmp_hash_is_pinned() {
        let t = FiveTuple {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.1.2".parse().unwrap(),
            src_port: 40000,
            dst_port: 5201,
            protocol: 6,
        };
        assert_eq!(ecmp_hash(&t), GOLDEN_V4);
        let mapped = FiveTuple {
            src: "::ffff:10.0.0.1".parse().unwrap(),
            ..t
        };
        assert_eq!(ecmp_hash(&mapped), GOLDEN_V4);
        let v6 = FiveTuple {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            src_port: 1,
            dst_port: 65535,
            protocol: 17,
        };
        assert_eq!(ecmp_hash(&v6), GOLDEN_V6);
        assert_eq!(ecmp_hash_str(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(ecmp_hash_str("job7/h1-1->h2-1"), GOLDEN_STR);
        assert_eq!(ecmp_mix(0, NodeId(0)), GOLDEN_MIX0);
        assert_eq!(ecmp_mix(GOLDEN_V4, NodeId(5)), GOLDEN_MIX_V4_5);
    }

    const GOLDEN_V4: u64 = 0xb514_81fa_5970_6f64;
    const GOLDEN_V6: u64 = 0x5497_cc9e_6bbb_19e0;
    const GOLDEN_STR: u64 = 0x705b_29f2_a19d_cd64;
    const GOLDEN_MIX0: u64 = 0xe220_a839_7b1d_cdaf;
    const GOLDEN_MIX_V4_5: u64 = 0x6291_32b8_6cf1_5c53;

    #[test]
    fn same_rack_is_two_hops() {
        let t = Topology::hierarchy(&HierarchySpec::default()).unwrap();
        let r = Routes::new(&t);
        let (a, b) = (id(&t, "h5-1"), id(&t, "h5-9"));
        let p = r.path(&t, a, b, 42).unwrap();
        assert_eq!(names(&t, &p), ["h5-1->tor5", "tor5->h5-9"]);
        assert_eq!(r.distance(a, b), Some(2));
    }

    #[test]
    fn hierarchy_paths_within_and_across_edges() {
        let t = Topology::hierarchy(&HierarchySpec::default()).unwrap();
        let r = Routes::new(&t);
        let p = r.path(&t, id(&t, "h1-1"), id(&t, "h10-3"), 7).unwrap();
        assert_eq!(
            names(&t, &p),
            ["h1-1->tor1", "tor1->edge1", "edge1->tor10", "tor10->h10-3"]
        );
        let p = r.path(&t, id(&t, "h1-1"), id(&t, "h100-10"), 7).unwrap();
        assert_eq!(
            names(&t, &p),
            [
                "h1-1->tor1",
                "tor1->edge1",
                "edge1->agg",
                "agg->edge10",
                "edge10->tor100",
                "tor100->h100-10"
            ]
        );
        assert_eq!(t.bottleneck(&p), gbit(10.0));
        for (i, s) in t.hosts().enumerate().step_by(37) {
            for d in t.hosts().skip(i % 13).step_by(101) {
                if s != d {
                    assert_contiguous(&t, s, d, &r.path(&t, s, d, i as u64).unwrap());
                }
            }
        }
    }

    #[test]
    fn ecmp_spreads_over_spines_and_is_stable() {
        let t = Topology::leaf_spine(2, 2, 2, gbit(10.0), gbit(40.0)).unwrap();
        let r = Routes::new(&t);
        let (a, b) = (id(&t, "h1-1"), id(&t, "h2-2"));
        let spine_of = |p: &[LinkId]| t.node(t.link(p[1]).to).name.clone();
        let mut seen = std::collections::BTreeMap::new();
        for port in 0..64u16 {
            let tuple = FiveTuple {
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.1.2".parse().unwrap(),
                src_port: 40000 + port,
                dst_port: 5201,
                protocol: 6,
            };
            let p = r.path_for_tuple(&t, &tuple).unwrap();
            assert_eq!(p, r.path(&t, a, b, ecmp_hash(&tuple)).unwrap());
            assert_eq!(p.len(), 4);
            assert_contiguous(&t, a, b, &p);
            let again = r.path_for_tuple(&t, &tuple).unwrap();
            assert_eq!(p, again);
            *seen.entry(spine_of(&p)).or_insert(0) += 1;
        }
        assert_eq!(seen.keys().collect::<Vec<_>>(), ["spine1", "spine2"]);
        assert!(seen.values().all(|&c| c >= 16), "{seen:?}");
    }

    #[test]
    fn route_errors_name_the_nodes() {
        let t = Topology::leaf_spine(2, 2, 1, gbit(10.0), gbit(40.0)).unwrap();
        let r = Routes::new(&t);
        let (h, tor) = (id(&t, "h1-1"), id(&t, "tor1"));
        let e = r.path(&t, h, h, 0).unwrap_err();
        assert_eq!(e, RouteError::SameHost("h1-1".into()));
        assert!(e.to_string().contains("h1-1"));
        assert_eq!(
            r.path(&t, tor, h, 0).unwrap_err(),
            RouteError::NotAHost("tor1".into())
        );
        assert_eq!(
            r.path(&t, h, tor, 0).unwrap_err(),
            RouteError::NotAHost("tor1".into())
        );
        assert_eq!(r.distance(tor, h), None);
        let tuple = FiveTuple {
            src: "10.9.9.9".parse().unwrap(),
            dst: "10.0.0.1".parse().unwrap(),
            src_port: 1,
            dst_port: 2,
            protocol: 6,
        };
        assert!(
            r.path_for_tuple(&t, &tuple)
                .unwrap_err()
                .to_string()
                .contains("10.9.9.9")
        );
    }

    #[test]
    fn hosts_do_not_forward() {
        // h1 - s1 - relay - s2 - h2: the only connection passes through a host.
        let mut b = TopologyBuilder::new();
        b.add_host("h1", None, None)
            .add_host("relay", None, None)
            .add_host("h2", None, None)
            .add_switch("s1", 0, None)
            .add_switch("s2", 0, None)
            .add_duplex("h1", "s1", gbit(1.0))
            .add_duplex("relay", "s1", gbit(1.0))
            .add_duplex("relay", "s2", gbit(1.0))
            .add_duplex("h2", "s2", gbit(1.0));
        let t = b.build().unwrap();
        let r = Routes::new(&t);
        let (h1, h2, relay) = (id(&t, "h1"), id(&t, "h2"), id(&t, "relay"));
        assert_eq!(
            r.path(&t, h1, h2, 0).unwrap_err(),
            RouteError::Unreachable {
                src: "h1".into(),
                dst: "h2".into()
            }
        );
        assert_eq!(r.distance(h1, h2), None);
        // The dual-homed host itself reaches both sides.
        assert_eq!(r.path(&t, relay, h2, 0).unwrap().len(), 2);
        assert_eq!(r.path(&t, h1, relay, 0).unwrap().len(), 2);
    }

    #[test]
    fn multi_homed_source_uses_both_uplinks() {
        let mut b = TopologyBuilder::new();
        b.add_host("a", None, None)
            .add_host("b", None, None)
            .add_switch("s1", 0, None)
            .add_switch("s2", 0, None)
            .add_duplex("a", "s1", gbit(1.0))
            .add_duplex("a", "s2", gbit(1.0))
            .add_duplex("b", "s1", gbit(1.0))
            .add_duplex("b", "s2", gbit(1.0));
        let t = b.build().unwrap();
        let r = Routes::new(&t);
        let (a, bb) = (id(&t, "a"), id(&t, "b"));
        let firsts: std::collections::BTreeSet<_> =
            (0..32).map(|h| r.path(&t, a, bb, h).unwrap()[0]).collect();
        assert_eq!(firsts.len(), 2);
    }

    proptest! {
        #[test]
        fn leaf_spine_paths_are_shortest_and_contiguous(
            racks in 1u32..6,
            per_rack in 1u32..5,
            spines in 1u32..4,
            picks in proptest::collection::vec((any::<u32>(), any::<u32>(), any::<u64>()), 1..20),
        ) {
            let t = Topology::leaf_spine(racks, per_rack, spines, gbit(10.0), gbit(40.0)).unwrap();
            let r = Routes::new(&t);
            let hosts: Vec<NodeId> = t.hosts().collect();
            for (i, j, hash) in picks {
                let s = hosts[i as usize % hosts.len()];
                let d = hosts[j as usize % hosts.len()];
                if s == d {
                    prop_assert_eq!(r.path(&t, s, d, hash), Err(RouteError::SameHost(t.node(s).name.clone())));
                    continue;
                }
                let p = r.path(&t, s, d, hash).unwrap();
                let want = if t.rack_of(s) == t.rack_of(d) { 2 } else { 4 };
                prop_assert_eq!(p.len(), want);
                prop_assert_eq!(r.distance(s, d), Some(want as u16));
                assert_contiguous(&t, s, d, &p);
                prop_assert_eq!(&p, &r.path(&t, s, d, hash).unwrap());
            }
        }
    }
}
