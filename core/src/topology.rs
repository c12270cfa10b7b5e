//! The cluster graph: hosts, switches and directed links with capacities (docs/design.md §4).
//!
//! Every consumer (daemon, switch emulator, simulator) needs the same answers to "which links does
//! this flow cross" and "who keeps the load table of that link", so the graph is loaded once from a
//! TOML file or generated, validated up front, and then only read. Node and link ids are dense
//! indices so that tables elsewhere can be plain vectors; names are what operators and the wire see.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize, Serializer};

use crate::hash::{self, Map};
use crate::units::{BytesPerSec, parse_rate};

/// Index of a node in [`Topology::nodes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(pub u32);

/// Index of a directed link in [`Topology::links`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LinkId(pub u32);

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl LinkId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for LinkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum NodeKind {
    /// `ip` lets the daemon map a socket's peer address back to a node; `rack` is a free label
    /// for operators (the structural answer is [`Topology::rack_of`]).
    Host {
        ip: Option<IpAddr>,
        rack: Option<String>,
    },
    /// `emulator` is the `host:port` of the mlcc-switchd that keeps this switch's load table,
    /// absent for a switch whose table lives elsewhere (e.g. the simulator).
    Switch { tier: u8, emulator: Option<String> },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
}

impl Node {
    pub fn is_host(&self) -> bool {
        matches!(self.kind, NodeKind::Host { .. })
    }

    pub fn is_switch(&self) -> bool {
        matches!(self.kind, NodeKind::Switch { .. })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Link {
    pub id: LinkId,
    pub from: NodeId,
    pub to: NodeId,
    pub capacity: BytesPerSec,
    /// `"{from}->{to}"` with node names: ids are local to one process, names are what schedulers
    /// and switch emulators agree on over the wire.
    pub name: String,
}

/// Who keeps the load table of a link: the node that transmits onto it, because that is where
/// the link's queue builds (a host's uplink is paced by its own daemon; a switch's egress sees
/// receiver-side incast).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Owner {
    Host(NodeId),
    Switch(NodeId),
}

impl Owner {
    pub fn node(self) -> NodeId {
        match self {
            Owner::Host(n) | Owner::Switch(n) => n,
        }
    }
}

/// Everything that can be wrong with a topology, each naming what to fix.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("node {0:?} is defined twice")]
    DuplicateNode(String),
    #[error("invalid node name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("link {from}->{to} is defined twice")]
    DuplicateLink { from: String, to: String },
    #[error("link {link}: unknown node {name:?}")]
    UnknownNode { link: String, name: String },
    #[error("link {0} has zero capacity")]
    ZeroCapacity(String),
    #[error("link {link}: invalid capacity: {reason}")]
    InvalidCapacity { link: String, reason: String },
    #[error("link from {0:?} to itself")]
    SelfLoop(String),
    #[error("link {link} connects two hosts; hosts attach to switches only")]
    HostToHost { link: String },
    #[error("hosts {first:?} and {second:?} both have ip {ip}")]
    DuplicateIp {
        ip: IpAddr,
        first: String,
        second: String,
    },
    #[error("switch {switch:?}: emulator address {addr:?} is not host:port")]
    InvalidEmulator { switch: String, addr: String },
    #[error("host {0:?} needs at least one outgoing and one incoming link")]
    HostIsolated(String),
    #[error("topology has no hosts")]
    NoHosts,
    #[error("{0}")]
    Toml(String),
    #[error("topology generator: {0}")]
    Generator(String),
    #[error("reading topology {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A validated, immutable cluster graph with the indexes every hot path needs.
#[derive(Clone, Debug)]
pub struct Topology {
    nodes: Vec<Node>,
    links: Vec<Link>,
    node_by_name: Map<String, NodeId>,
    link_by_name: Map<String, LinkId>,
    link_between: Map<(NodeId, NodeId), LinkId>,
    ip_index: Map<IpAddr, NodeId>,
    /// Per node, sorted by id (links are numbered in insertion order). Owned links are exactly
    /// the outgoing ones, so this doubles as the ownership index.
    out: Vec<Vec<LinkId>>,
    inn: Vec<Vec<LinkId>>,
    hosts: Vec<NodeId>,
    switches: Vec<NodeId>,
}

impl Serialize for Topology {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Topology", 2)?;
        st.serialize_field("nodes", &self.nodes)?;
        st.serialize_field("links", &self.links)?;
        st.end()
    }
}

impl Topology {
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Panics on an id from another topology: ids are only ever handed out by this one.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.node_by_name.get(name).copied()
    }

    pub fn hosts(&self) -> impl ExactSizeIterator<Item = NodeId> + '_ {
        self.hosts.iter().copied()
    }

    pub fn switches(&self) -> impl ExactSizeIterator<Item = NodeId> + '_ {
        self.switches.iter().copied()
    }

    pub fn links(&self) -> &[Link] {
        &self.links
    }

    pub fn link(&self, id: LinkId) -> &Link {
        &self.links[id.index()]
    }

    /// Looks up a link by its wire name `"{from}->{to}"`.
    pub fn link_by_name(&self, name: &str) -> Option<LinkId> {
        self.link_by_name.get(name).copied()
    }

    pub fn link_between(&self, from: NodeId, to: NodeId) -> Option<LinkId> {
        self.link_between.get(&(from, to)).copied()
    }

    pub fn owner(&self, link: LinkId) -> Owner {
        let from = self.link(link).from;
        if self.node(from).is_host() {
            Owner::Host(from)
        } else {
            Owner::Switch(from)
        }
    }

    /// The links whose load table `node` keeps (a switch's egress links, a host's uplinks).
    pub fn links_owned_by(&self, node: NodeId) -> Vec<LinkId> {
        self.out[node.index()].clone()
    }

    /// Sorted by [`LinkId`], which routing relies on for a stable ECMP choice.
    pub fn out_links(&self, node: NodeId) -> &[LinkId] {
        &self.out[node.index()]
    }

    /// Sorted by [`LinkId`].
    pub fn in_links(&self, node: NodeId) -> &[LinkId] {
        &self.inn[node.index()]
    }

    /// IPv4-mapped IPv6 addresses match their IPv4 host, as dual-stack sockets report them so.
    pub fn host_by_ip(&self, ip: IpAddr) -> Option<NodeId> {
        self.ip_index.get(&ip.to_canonical()).copied()
    }

    /// The switch at the end of the host's first uplink. `None` for a switch.
    pub fn rack_of(&self, host: NodeId) -> Option<NodeId> {
        if !self.node(host).is_host() {
            return None;
        }
        self.out[host.index()].first().map(|&l| self.link(l).to)
    }

    /// The smallest capacity along `path`; zero for an empty path, since nothing can be sent
    /// over no link.
    pub fn bottleneck(&self, path: &[LinkId]) -> BytesPerSec {
        path.iter()
            .map(|&l| self.link(l).capacity)
            .reduce(|a, b| if b.0 < a.0 { b } else { a })
            .unwrap_or(BytesPerSec::ZERO)
    }

    /// Parses either form of the topology file (see the module's tests for examples).
    pub fn from_toml_str(s: &str) -> Result<Topology, TopologyError> {
        let file: FileRepr = toml::from_str(s).map_err(|e| TopologyError::Toml(e.to_string()))?;
        file.into_topology()
    }

    pub fn load(path: &Path) -> Result<Topology, TopologyError> {
        let text = std::fs::read_to_string(path).map_err(|source| TopologyError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Topology::from_toml_str(&text)
    }

    /// Hosts `h1..hN` on one switch `sw1`.
    pub fn single_switch(hosts: u32, host_link: BytesPerSec) -> Result<Topology, TopologyError> {
        single_switch_builder(hosts, host_link)?.build()
    }

    /// Hosts `h{r}-{i}` under ToRs `tor{r}` (tier 0), every ToR linked to every spine
    /// `spine{s}` (tier 1); all 1-based, all links duplex.
    pub fn leaf_spine(
        racks: u32,
        hosts_per_rack: u32,
        spines: u32,
        host_link: BytesPerSec,
        uplink: BytesPerSec,
    ) -> Result<Topology, TopologyError> {
        leaf_spine_builder(racks, hosts_per_rack, spines, host_link, uplink)?.build()
    }

    /// The paper's three-tier tree: hosts `h{t}-{i}` under ToRs `tor{t}` (tier 0), ToRs under
    /// edges `edge{e}` (tier 1), edges under one aggregation switch `agg` (tier 2).
    pub fn hierarchy(spec: &HierarchySpec) -> Result<Topology, TopologyError> {
        hierarchy_builder(spec)?.build()
    }
}

/// Shape of [`Topology::hierarchy`]; `capacities` are host–ToR, ToR–edge, edge–agg.
#[derive(Clone, Debug, PartialEq)]
pub struct HierarchySpec {
    pub hosts_per_tor: u32,
    pub tors_per_edge: u32,
    pub edges: u32,
    pub capacities: [BytesPerSec; 3],
}

impl Default for HierarchySpec {
    /// The paper's evaluation cluster: 1000 hosts, 100 ToRs, 10 edges, 10/20/40 Gbit/s.
    fn default() -> Self {
        HierarchySpec {
            hosts_per_tor: 10,
            tors_per_edge: 10,
            edges: 10,
            capacities: [
                BytesPerSec::from_bits_per_sec(10e9),
                BytesPerSec::from_bits_per_sec(20e9),
                BytesPerSec::from_bits_per_sec(40e9),
            ],
        }
    }
}

/// Capacity as given by the caller, kept raw so that a bad value is reported with its link.
#[derive(Clone, Debug)]
enum RawCapacity {
    Rate(BytesPerSec),
    Text(String),
}

/// Collects nodes and links by name; all checking happens in [`TopologyBuilder::build`] so that
/// callers (file loader, generators, tests) get one error path.
#[derive(Clone, Debug, Default)]
pub struct TopologyBuilder {
    nodes: Vec<Node>,
    links: Vec<(String, String, RawCapacity)>,
}

impl TopologyBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add_host(
        &mut self,
        name: impl Into<String>,
        ip: Option<IpAddr>,
        rack: Option<String>,
    ) -> &mut Self {
        self.nodes.push(Node {
            name: name.into(),
            kind: NodeKind::Host { ip, rack },
        });
        self
    }

    pub fn add_switch(
        &mut self,
        name: impl Into<String>,
        tier: u8,
        emulator: Option<String>,
    ) -> &mut Self {
        self.nodes.push(Node {
            name: name.into(),
            kind: NodeKind::Switch { tier, emulator },
        });
        self
    }

    /// One directed link `from -> to`.
    pub fn add_link(
        &mut self,
        from: impl Into<String>,
        to: impl Into<String>,
        capacity: BytesPerSec,
    ) -> &mut Self {
        self.links
            .push((from.into(), to.into(), RawCapacity::Rate(capacity)));
        self
    }

    /// `a -> b` then `b -> a`, same capacity.
    pub fn add_duplex(
        &mut self,
        a: impl Into<String>,
        b: impl Into<String>,
        capacity: BytesPerSec,
    ) -> &mut Self {
        let (a, b) = (a.into(), b.into());
        self.add_link(a.clone(), b.clone(), capacity);
        self.add_link(b, a, capacity)
    }

    fn add_link_raw(&mut self, from: &str, to: &str, capacity: RawCapacity) {
        self.links
            .push((from.to_string(), to.to_string(), capacity));
    }

    /// Gives switch number i (in insertion order) the emulator `address:base_port+i`.
    fn assign_emulators(&mut self, address: &str, base_port: u16) -> Result<(), TopologyError> {
        // A bare IPv6 literal needs brackets to be followed by a port.
        let host = if address.contains(':') && !address.starts_with('[') {
            format!("[{address}]")
        } else {
            address.to_string()
        };
        let mut port = u32::from(base_port);
        for node in &mut self.nodes {
            if let NodeKind::Switch { emulator, .. } = &mut node.kind {
                if port > u32::from(u16::MAX) {
                    return Err(TopologyError::Generator(format!(
                        "emulator ports from base_port {base_port} run past 65535 at switch {:?}",
                        node.name
                    )));
                }
                *emulator = Some(format!("{host}:{port}"));
                port += 1;
            }
        }
        Ok(())
    }

    pub fn build(self) -> Result<Topology, TopologyError> {
        let mut node_by_name = hash::map_with_capacity(self.nodes.len());
        let mut ip_index: Map<IpAddr, NodeId> = Map::default();
        let mut hosts = Vec::new();
        let mut switches = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let id = NodeId(i as u32);
            check_name(&node.name)?;
            if node_by_name.insert(node.name.clone(), id).is_some() {
                return Err(TopologyError::DuplicateNode(node.name.clone()));
            }
            match &node.kind {
                NodeKind::Host { ip, .. } => {
                    hosts.push(id);
                    if let Some(ip) = ip
                        && let Some(prev) = ip_index.insert(ip.to_canonical(), id)
                    {
                        return Err(TopologyError::DuplicateIp {
                            ip: *ip,
                            first: self.nodes[prev.index()].name.clone(),
                            second: node.name.clone(),
                        });
                    }
                }
                NodeKind::Switch { emulator, .. } => {
                    switches.push(id);
                    if let Some(addr) = emulator
                        && !is_host_port(addr)
                    {
                        return Err(TopologyError::InvalidEmulator {
                            switch: node.name.clone(),
                            addr: addr.clone(),
                        });
                    }
                }
            }
        }
        if hosts.is_empty() {
            return Err(TopologyError::NoHosts);
        }

        let n = self.nodes.len();
        let mut links = Vec::with_capacity(self.links.len());
        let mut link_by_name = hash::map_with_capacity(self.links.len());
        let mut link_between = hash::map_with_capacity(self.links.len());
        let mut out = vec![Vec::new(); n];
        let mut inn = vec![Vec::new(); n];
        for (from_name, to_name, raw) in self.links {
            let name = format!("{from_name}->{to_name}");
            let resolve = |who: &str| {
                node_by_name
                    .get(who)
                    .copied()
                    .ok_or_else(|| TopologyError::UnknownNode {
                        link: name.clone(),
                        name: who.to_string(),
                    })
            };
            let from = resolve(&from_name)?;
            let to = resolve(&to_name)?;
            if from == to {
                return Err(TopologyError::SelfLoop(from_name));
            }
            if self.nodes[from.index()].is_host() && self.nodes[to.index()].is_host() {
                return Err(TopologyError::HostToHost { link: name });
            }
            let capacity = check_capacity(&name, raw)?;
            let id = LinkId(links.len() as u32);
            if link_between.insert((from, to), id).is_some() {
                return Err(TopologyError::DuplicateLink {
                    from: from_name,
                    to: to_name,
                });
            }
            link_by_name.insert(name.clone(), id);
            out[from.index()].push(id);
            inn[to.index()].push(id);
            links.push(Link {
                id,
                from,
                to,
                capacity,
                name,
            });
        }
        for &h in &hosts {
            if out[h.index()].is_empty() || inn[h.index()].is_empty() {
                return Err(TopologyError::HostIsolated(
                    self.nodes[h.index()].name.clone(),
                ));
            }
        }
        Ok(Topology {
            nodes: self.nodes,
            links,
            node_by_name,
            link_by_name,
            link_between,
            ip_index,
            out,
            inn,
            hosts,
            switches,
        })
    }
}

/// Names end up in link names, metric labels and file paths, so they are kept to a safe set;
/// `>` is excluded, which keeps `"{from}->{to}"` unambiguous.
fn check_name(name: &str) -> Result<(), TopologyError> {
    let reason = if name.is_empty() {
        "empty"
    } else if name.len() > 63 {
        "longer than 63 bytes"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        "only A-Z, a-z, 0-9, '.', '_' and '-' are allowed"
    } else {
        return Ok(());
    };
    Err(TopologyError::InvalidName {
        name: name.to_string(),
        reason,
    })
}

fn is_host_port(addr: &str) -> bool {
    match addr.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok(),
        None => false,
    }
}

fn check_capacity(link: &str, raw: RawCapacity) -> Result<BytesPerSec, TopologyError> {
    let invalid = |reason: String| TopologyError::InvalidCapacity {
        link: link.to_string(),
        reason,
    };
    let rate = match raw {
        RawCapacity::Rate(r) => r,
        RawCapacity::Text(s) => parse_rate(&s).map_err(|e| invalid(e.to_string()))?,
    };
    if !rate.0.is_finite() || rate.0 < 0.0 {
        return Err(invalid(format!(
            "{} bytes/s is not a finite non-negative rate",
            rate.0
        )));
    }
    if rate.0 == 0.0 {
        return Err(TopologyError::ZeroCapacity(link.to_string()));
    }
    Ok(rate)
}

// ---------------------------------------------------------------------------------------------
// Generators

/// Generated hosts get `10.{r/256}.{r%256}.{i+1}` for host i of rack r (both 0-based): one /24
/// per rack, readable, and the same on every machine that generates the topology.
fn host_ip(rack: u32, index: u32) -> IpAddr {
    debug_assert!(rack < 65536 && index < 254);
    IpAddr::V4(std::net::Ipv4Addr::new(
        10,
        (rack / 256) as u8,
        (rack % 256) as u8,
        (index + 1) as u8,
    ))
}

const MAX_RACKS: u64 = 65536;
const MAX_HOSTS_PER_RACK: u64 = 254;
/// Far beyond what the simulator models; guards against a typo allocating gigabytes.
const MAX_GENERATED_LINKS: u64 = 10_000_000;

fn require(cond: bool, msg: impl FnOnce() -> String) -> Result<(), TopologyError> {
    if cond {
        Ok(())
    } else {
        Err(TopologyError::Generator(msg()))
    }
}

fn check_racks(racks: u32, hosts_per_rack: u32, what: &str) -> Result<(), TopologyError> {
    require(racks >= 1, || format!("need at least 1 {what}, got 0"))?;
    require(hosts_per_rack >= 1, || {
        format!("need at least 1 host per {what}, got 0")
    })?;
    require(u64::from(racks) <= MAX_RACKS, || {
        format!("at most {MAX_RACKS} {what}s (one /24 each), got {racks}")
    })?;
    require(u64::from(hosts_per_rack) <= MAX_HOSTS_PER_RACK, || {
        format!(
            "at most {MAX_HOSTS_PER_RACK} hosts per {what} (one /24 each), got {hosts_per_rack}"
        )
    })
}

fn single_switch_builder(
    hosts: u32,
    host_link: BytesPerSec,
) -> Result<TopologyBuilder, TopologyError> {
    require(hosts >= 1, || "need at least 1 host, got 0".to_string())?;
    require(u64::from(hosts) <= MAX_RACKS * MAX_HOSTS_PER_RACK, || {
        format!(
            "at most {} hosts, got {hosts}",
            MAX_RACKS * MAX_HOSTS_PER_RACK
        )
    })?;
    let links = 2 * u64::from(hosts);
    require(links <= MAX_GENERATED_LINKS, || {
        format!("{links} links is more than the {MAX_GENERATED_LINKS} a generator makes")
    })?;
    let mut b = TopologyBuilder::new();
    for k in 0..hosts {
        let ip = host_ip(k / 254, k % 254);
        b.add_host(format!("h{}", k + 1), Some(ip), Some("sw1".to_string()));
    }
    b.add_switch("sw1", 0, None);
    for k in 1..=hosts {
        b.add_duplex(format!("h{k}"), "sw1", host_link);
    }
    Ok(b)
}

fn leaf_spine_builder(
    racks: u32,
    hosts_per_rack: u32,
    spines: u32,
    host_link: BytesPerSec,
    uplink: BytesPerSec,
) -> Result<TopologyBuilder, TopologyError> {
    check_racks(racks, hosts_per_rack, "rack")?;
    require(spines >= 1, || "need at least 1 spine, got 0".to_string())?;
    let links = 2 * u64::from(racks) * (u64::from(hosts_per_rack) + u64::from(spines));
    require(links <= MAX_GENERATED_LINKS, || {
        format!("{links} links is more than the {MAX_GENERATED_LINKS} a generator makes")
    })?;
    let mut b = TopologyBuilder::new();
    for r in 1..=racks {
        for i in 1..=hosts_per_rack {
            let ip = host_ip(r - 1, i - 1);
            b.add_host(format!("h{r}-{i}"), Some(ip), Some(format!("tor{r}")));
        }
    }
    for r in 1..=racks {
        b.add_switch(format!("tor{r}"), 0, None);
    }
    for s in 1..=spines {
        b.add_switch(format!("spine{s}"), 1, None);
    }
    for r in 1..=racks {
        for i in 1..=hosts_per_rack {
            b.add_duplex(format!("h{r}-{i}"), format!("tor{r}"), host_link);
        }
    }
    for r in 1..=racks {
        for s in 1..=spines {
            b.add_duplex(format!("tor{r}"), format!("spine{s}"), uplink);
        }
    }
    Ok(b)
}

fn hierarchy_builder(spec: &HierarchySpec) -> Result<TopologyBuilder, TopologyError> {
    require(spec.edges >= 1, || {
        "need at least 1 edge switch, got 0".to_string()
    })?;
    require(spec.tors_per_edge >= 1, || {
        "need at least 1 ToR per edge switch, got 0".to_string()
    })?;
    let tors = u64::from(spec.edges) * u64::from(spec.tors_per_edge);
    require(tors <= MAX_RACKS, || {
        format!("at most {MAX_RACKS} ToRs (one /24 each), got {tors}")
    })?;
    check_racks(tors as u32, spec.hosts_per_tor, "ToR")?;
    let tors = tors as u32;
    let [host_cap, tor_cap, edge_cap] = spec.capacities;
    let mut b = TopologyBuilder::new();
    for t in 1..=tors {
        for i in 1..=spec.hosts_per_tor {
            let ip = host_ip(t - 1, i - 1);
            b.add_host(format!("h{t}-{i}"), Some(ip), Some(format!("tor{t}")));
        }
    }
    for t in 1..=tors {
        b.add_switch(format!("tor{t}"), 0, None);
    }
    for e in 1..=spec.edges {
        b.add_switch(format!("edge{e}"), 1, None);
    }
    b.add_switch("agg", 2, None);
    for t in 1..=tors {
        for i in 1..=spec.hosts_per_tor {
            b.add_duplex(format!("h{t}-{i}"), format!("tor{t}"), host_cap);
        }
    }
    for t in 1..=tors {
        let e = (t - 1) / spec.tors_per_edge + 1;
        b.add_duplex(format!("tor{t}"), format!("edge{e}"), tor_cap);
    }
    for e in 1..=spec.edges {
        b.add_duplex(format!("edge{e}"), "agg", edge_cap);
    }
    Ok(b)
}

// ---------------------------------------------------------------------------------------------
// File format

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRepr {
    #[serde(default)]
    host: Vec<HostRepr>,
    #[serde(default)]
    switch: Vec<SwitchRepr>,
    #[serde(default)]
    link: Vec<LinkRepr>,
    generate: Option<GenerateRepr>,
    emulators: Option<EmulatorsRepr>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HostRepr {
    name: String,
    ip: Option<IpAddr>,
    rack: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SwitchRepr {
    name: String,
    #[serde(default)]
    tier: u8,
    emulator: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkRepr {
    a: String,
    b: String,
    capacity: CapacityRepr,
    #[serde(default = "yes")]
    duplex: bool,
}

fn yes() -> bool {
    true
}

/// Deserialized loosely so that a bad capacity is reported by [`TopologyBuilder::build`] with
/// the link's name rather than only a line number.
enum CapacityRepr {
    Number(f64),
    Text(String),
}

impl<'de> Deserialize<'de> for CapacityRepr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = CapacityRepr;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a rate such as \"10Gbit\" or a number of bytes/s")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<CapacityRepr, E> {
                Ok(CapacityRepr::Number(v as f64))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<CapacityRepr, E> {
                Ok(CapacityRepr::Number(v as f64))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<CapacityRepr, E> {
                Ok(CapacityRepr::Number(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<CapacityRepr, E> {
                Ok(CapacityRepr::Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

impl From<CapacityRepr> for RawCapacity {
    fn from(c: CapacityRepr) -> Self {
        match c {
            CapacityRepr::Number(n) => RawCapacity::Rate(BytesPerSec(n)),
            CapacityRepr::Text(s) => RawCapacity::Text(s),
        }
    }
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
enum GenerateRepr {
    SingleSwitch(SingleSwitchRepr),
    LeafSpine(LeafSpineRepr),
    Hierarchy(HierarchyRepr),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SingleSwitchRepr {
    hosts: u32,
    host_link: BytesPerSec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LeafSpineRepr {
    racks: u32,
    hosts_per_rack: u32,
    spines: u32,
    host_link: BytesPerSec,
    uplink: BytesPerSec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HierarchyRepr {
    hosts_per_tor: Option<u32>,
    tors_per_edge: Option<u32>,
    edges: Option<u32>,
    tier_capacity: Option<Vec<BytesPerSec>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmulatorsRepr {
    #[serde(default = "default_base_port")]
    base_port: u16,
    #[serde(default = "default_emulator_address")]
    address: String,
}

fn default_base_port() -> u16 {
    50061
}

fn default_emulator_address() -> String {
    "127.0.0.1".to_string()
}

impl FileRepr {
    fn into_topology(self) -> Result<Topology, TopologyError> {
        let explicit = !(self.host.is_empty() && self.switch.is_empty() && self.link.is_empty());
        let Some(generate) = self.generate else {
            if self.emulators.is_some() {
                return Err(TopologyError::Toml(
                    "[emulators] applies to a [generate]d topology only; give each [[switch]] \
                     its own `emulator`"
                        .to_string(),
                ));
            }
            let mut b = TopologyBuilder::new();
            for h in self.host {
                b.add_host(h.name, h.ip, h.rack);
            }
            for s in self.switch {
                b.add_switch(s.name, s.tier, s.emulator);
            }
            for l in self.link {
                let cap = RawCapacity::from(l.capacity);
                if l.duplex {
                    b.add_link_raw(&l.a, &l.b, cap.clone());
                    b.add_link_raw(&l.b, &l.a, cap);
                } else {
                    b.add_link_raw(&l.a, &l.b, cap);
                }
            }
            return b.build();
        };
        if explicit {
            return Err(TopologyError::Toml(
                "[generate] and explicit [[host]]/[[switch]]/[[link]] tables cannot be mixed"
                    .to_string(),
            ));
        }
        let mut b = match generate {
            GenerateRepr::SingleSwitch(g) => single_switch_builder(g.hosts, g.host_link)?,
            GenerateRepr::LeafSpine(g) => {
                leaf_spine_builder(g.racks, g.hosts_per_rack, g.spines, g.host_link, g.uplink)?
            }
            GenerateRepr::Hierarchy(g) => {
                let d = HierarchySpec::default();
                let capacities = match g.tier_capacity {
                    None => d.capacities,
                    Some(v) => <[BytesPerSec; 3]>::try_from(v.as_slice()).map_err(|_| {
                        TopologyError::Generator(format!(
                            "tier_capacity needs 3 values (host-ToR, ToR-edge, edge-agg), got {}",
                            v.len()
                        ))
                    })?,
                };
                hierarchy_builder(&HierarchySpec {
                    hosts_per_tor: g.hosts_per_tor.unwrap_or(d.hosts_per_tor),
                    tors_per_edge: g.tors_per_edge.unwrap_or(d.tors_per_edge),
                    edges: g.edges.unwrap_or(d.edges),
                    capacities,
                })?
            }
        };
        if let Some(e) = self.emulators {
            b.assign_emulators(&e.address, e.base_port)?;
        }
        b.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gbit(x: f64) -> BytesPerSec {
        BytesPerSec::from_bits_per_sec(x * 1e9)
    }

    const EXPLICIT: &str = r#"
# two hosts on one ToR, a third on another, ToRs joined by a spine
[[host]]
name = "h1"
ip = "10.0.0.1"
rack = "r1"
[[host]]
name = "h2"
ip = "10.0.0.2"
[[host]]
name = "h3"

[[switch]]
name = "tor1"
emulator = "127.0.0.1:50061"
[[switch]]
name = "tor2"
[[switch]]
name = "spine"
tier = 1

[[link]]
a = "h1"
b = "tor1"
capacity = "1Gbit"
[[link]]
a = "h2"
b = "tor1"
capacity = 125000000
[[link]]
a = "h3"
b = "tor2"
capacity = "10Gbit"
[[link]]
a = "tor1"
b = "spine"
capacity = "40Gbit"
duplex = false
[[link]]
a = "spine"
b = "tor1"
capacity = "20Gbit"
duplex = false
[[link]]
a = "tor2"
b = "spine"
capacity = "40Gbit"
"#;

    #[test]
    fn explicit_file_loads() {
        let t = Topology::from_toml_str(EXPLICIT).unwrap();
        assert_eq!(t.hosts().count(), 3);
        assert_eq!(t.switches().count(), 3);
        assert_eq!(t.links().len(), 10);
        let h1 = t.node_by_name("h1").unwrap();
        let tor1 = t.node_by_name("tor1").unwrap();
        let spine = t.node_by_name("spine").unwrap();
        let up = t.link_between(h1, tor1).unwrap();
        let down = t.link_between(tor1, h1).unwrap();
        assert_eq!(t.owner(up), Owner::Host(h1));
        assert_eq!(t.owner(down), Owner::Switch(tor1));
        assert_eq!(t.link(up).name, "h1->tor1");
        assert_eq!(t.link_by_name("h1->tor1"), Some(up));
        assert_eq!(t.link(up).capacity, gbit(1.0));
        let h2 = t.node_by_name("h2").unwrap();
        assert_eq!(
            t.link(t.link_between(h2, tor1).unwrap()).capacity,
            BytesPerSec(125e6)
        );
        assert_eq!(
            t.link(t.link_between(tor1, spine).unwrap()).capacity,
            gbit(40.0)
        );
        assert_eq!(
            t.link(t.link_between(spine, tor1).unwrap()).capacity,
            gbit(20.0)
        );
        assert_eq!(t.links_owned_by(h1), vec![up]);
        let mut owned = t.links_owned_by(tor1);
        owned.sort();
        assert_eq!(owned.len(), 3);
        assert!(owned.iter().all(|&l| t.owner(l) == Owner::Switch(tor1)));
        assert_eq!(t.host_by_ip("10.0.0.2".parse().unwrap()), Some(h2));
        assert_eq!(t.host_by_ip("::ffff:10.0.0.2".parse().unwrap()), Some(h2));
        assert_eq!(t.host_by_ip("10.0.0.9".parse().unwrap()), None);
        assert_eq!(t.rack_of(h1), Some(tor1));
        assert_eq!(t.rack_of(tor1), None);
        assert_eq!(
            t.node(tor1).kind,
            NodeKind::Switch {
                tier: 0,
                emulator: Some("127.0.0.1:50061".into())
            }
        );
        assert_eq!(
            t.node(spine).kind,
            NodeKind::Switch {
                tier: 1,
                emulator: None
            }
        );
        assert_eq!(
            t.node(h1).kind,
            NodeKind::Host {
                ip: Some("10.0.0.1".parse().unwrap()),
                rack: Some("r1".into())
            }
        );
        let path = [up, t.link_between(tor1, spine).unwrap()];
        assert_eq!(t.bottleneck(&path), gbit(1.0));
        assert_eq!(t.bottleneck(&[]), BytesPerSec::ZERO);
        // Every link is owned by its transmitter.
        for l in t.links() {
            assert_eq!(t.owner(l.id).node(), l.from);
            assert!(t.out_links(l.from).contains(&l.id));
            assert!(t.in_links(l.to).contains(&l.id));
        }
    }

    fn err(toml: &str) -> String {
        match Topology::from_toml_str(toml) {
            Ok(_) => panic!("accepted:\n{toml}"),
            Err(e) => e.to_string(),
        }
    }

    const TOR: &str = "[[switch]]\nname = \"tor1\"\n";

    fn host_link(host: &str) -> String {
        format!(
            "[[host]]\nname = \"{host}\"\n[[link]]\na = \"{host}\"\nb = \"tor1\"\ncapacity = \"1Gbit\"\n"
        )
    }

    #[test]
    fn each_error_names_its_culprit() {
        let ok = format!("{TOR}{}", host_link("h1"));
        Topology::from_toml_str(&ok).unwrap();

        let dup_node = format!("{ok}[[host]]\nname = \"h1\"\n");
        let e = err(&dup_node);
        assert!(e.contains("\"h1\"") && e.contains("twice"), "{e}");

        let dup_link =
            format!("{ok}[[link]]\na = \"tor1\"\nb = \"h1\"\ncapacity = 5\nduplex = false\n");
        let e = err(&dup_link);
        assert!(e.contains("tor1->h1") && e.contains("twice"), "{e}");

        let dangling = format!("{ok}[[link]]\na = \"tor1\"\nb = \"ghost\"\ncapacity = 5\n");
        let e = err(&dangling);
        assert!(e.contains("ghost") && e.contains("tor1->ghost"), "{e}");

        let zero = format!(
            "{TOR}[[host]]\nname = \"h1\"\n[[link]]\na = \"h1\"\nb = \"tor1\"\ncapacity = 0\n"
        );
        let e = err(&zero);
        assert!(e.contains("h1->tor1") && e.contains("zero"), "{e}");

        for bad in ["-5", "\"10Gbirds\"", "nan", "inf", "\"\""] {
            let f = format!(
                "{TOR}[[host]]\nname = \"h1\"\n[[link]]\na = \"h1\"\nb = \"tor1\"\ncapacity = {bad}\n"
            );
            let e = err(&f);
            assert!(
                e.contains("h1->tor1") && e.contains("invalid capacity"),
                "{bad}: {e}"
            );
        }

        let self_loop = format!("{ok}[[link]]\na = \"tor1\"\nb = \"tor1\"\ncapacity = 5\n");
        let e = err(&self_loop);
        assert!(e.contains("\"tor1\"") && e.contains("itself"), "{e}");

        let h2h = format!(
            "{ok}{}[[link]]\na = \"h1\"\nb = \"h2\"\ncapacity = 5\n",
            host_link("h2")
        );
        let e = err(&h2h);
        assert!(e.contains("h1->h2") && e.contains("two hosts"), "{e}");

        let dup_ip = format!(
            "{TOR}[[host]]\nname = \"a\"\nip = \"10.0.0.1\"\n[[host]]\nname = \"b\"\nip = \"10.0.0.1\"\n"
        );
        let e = err(&dup_ip);
        assert!(
            e.contains("\"a\"") && e.contains("\"b\"") && e.contains("10.0.0.1"),
            "{e}"
        );

        let isolated = format!("{ok}[[host]]\nname = \"lonely\"\n");
        let e = err(&isolated);
        assert!(e.contains("lonely") && e.contains("incoming"), "{e}");
        let half = format!(
            "{ok}[[host]]\nname = \"half\"\n[[link]]\na = \"half\"\nb = \"tor1\"\ncapacity = 5\nduplex = false\n"
        );
        assert!(err(&half).contains("\"half\""));

        for (bad, why) in [
            ("", "empty"),
            ("has space", "allowed"),
            ("a>b", "allowed"),
            (&"x".repeat(64), "63"),
        ] {
            let f = format!("[[host]]\nname = \"{bad}\"\n");
            let e = err(&f);
            assert!(e.contains(&format!("{bad:?}")) && e.contains(why), "{e}");
        }
        let f = format!("[[host]]\nname = \"{}\"\n", "x".repeat(63));
        assert!(!err(&f).contains("invalid node name"));

        let emu = format!("{ok}[[switch]]\nname = \"s2\"\nemulator = \"localhost\"\n");
        let e = err(&emu);
        assert!(e.contains("\"s2\"") && e.contains("localhost"), "{e}");

        assert!(err("").contains("no hosts"));
    }

    #[test]
    fn toml_errors_carry_line_and_unknown_fields_are_refused() {
        let e = err("[[host]]\nname = \"h1\"\ncolour = \"blue\"\n");
        assert!(e.contains("colour") && e.contains("line 3"), "{e}");
        let e = err("[[host]]\nname = \"h1\"\n[wat]\n");
        assert!(e.contains("wat"), "{e}");
        let e = err(
            "[generate]\nkind = \"single-switch\"\nhosts = 2\nhost_link = \"1Gbit\"\nspines = 2\n",
        );
        assert!(e.contains("spines"), "{e}");
        let e = err("[generate]\nkind = \"torus\"\n");
        assert!(e.contains("torus"), "{e}");
        let e = err("[[link]]\na = \"x\"\nb = \"y\"\ncapacity = true\n");
        assert!(e.contains("line 4") && e.contains("10Gbit"), "{e}");
        let e = err("[[host]\n");
        assert!(e.contains("line 1"), "{e}");
        let e = err(
            "[generate]\nkind = \"single-switch\"\nhosts = 2\nhost_link = \"1Gbit\"\n[[host]]\nname = \"x\"\n",
        );
        assert!(e.contains("mixed"), "{e}");
        let e = err(&format!(
            "{TOR}{}[emulators]\nbase_port = 1\n",
            host_link("h1")
        ));
        assert!(e.contains("[emulators]"), "{e}");
    }

    #[test]
    fn generated_forms_load() {
        let t = Topology::from_toml_str(
            "[generate]\nkind = \"single-switch\"\nhosts = 4\nhost_link = \"25Gbit\"\n",
        )
        .unwrap();
        assert_eq!(
            (t.hosts().count(), t.switches().count(), t.links().len()),
            (4, 1, 8)
        );
        assert!(t.links().iter().all(|l| l.capacity == gbit(25.0)));

        let t = Topology::from_toml_str(
            "[generate]\nkind = \"leaf-spine\"\nracks = 2\nhosts_per_rack = 3\nspines = 2\n\
             host_link = \"10Gbit\"\nuplink = 5e9\n\
             [emulators]\nbase_port = 6000\naddress = \"192.168.1.5\"\n",
        )
        .unwrap();
        assert_eq!((t.hosts().count(), t.switches().count()), (6, 4));
        let emulators: Vec<_> = t
            .switches()
            .map(|s| match &t.node(s).kind {
                NodeKind::Switch { emulator, .. } => emulator.clone().unwrap(),
                NodeKind::Host { .. } => unreachable!(),
            })
            .collect();
        assert_eq!(
            emulators,
            [
                "192.168.1.5:6000",
                "192.168.1.5:6001",
                "192.168.1.5:6002",
                "192.168.1.5:6003"
            ]
        );
        let tor1 = t.node_by_name("tor1").unwrap();
        let spine2 = t.node_by_name("spine2").unwrap();
        assert_eq!(
            t.link(t.link_between(tor1, spine2).unwrap()).capacity,
            BytesPerSec(5e9)
        );

        let t = Topology::from_toml_str("[generate]\nkind = \"hierarchy\"\n[emulators]\n").unwrap();
        assert_eq!(t.hosts().count(), 1000);
        let agg = t.node_by_name("agg").unwrap();
        assert_eq!(
            t.node(agg).kind,
            NodeKind::Switch {
                tier: 2,
                emulator: Some("127.0.0.1:50171".into())
            }
        );

        let t = Topology::from_toml_str(
            "[generate]\nkind = \"hierarchy\"\nhosts_per_tor = 2\ntors_per_edge = 3\nedges = 2\n\
             tier_capacity = [\"1Gbit\", \"2Gbit\", 500000000]\n\
             [emulators]\naddress = \"::1\"\nbase_port = 7000\n",
        )
        .unwrap();
        assert_eq!((t.hosts().count(), t.switches().count()), (12, 9));
        let tor1 = t.node_by_name("tor1").unwrap();
        assert_eq!(
            t.node(tor1).kind,
            NodeKind::Switch {
                tier: 0,
                emulator: Some("[::1]:7000".into())
            }
        );
        let edge2 = t.node_by_name("edge2").unwrap();
        let agg = t.node_by_name("agg").unwrap();
        assert_eq!(
            t.link(t.link_between(agg, edge2).unwrap()).capacity,
            BytesPerSec(5e8)
        );

        let e = err("[generate]\nkind = \"hierarchy\"\ntier_capacity = [\"1Gbit\"]\n");
        assert!(e.contains("tier_capacity") && e.contains("got 1"), "{e}");
        let e = err("[generate]\nkind = \"single-switch\"\nhosts = 0\nhost_link = \"1Gbit\"\n");
        assert!(
            e.contains("generator") && e.contains("at least 1 host"),
            "{e}"
        );
        let e = err(
            "[generate]\nkind = \"leaf-spine\"\nracks = 2\nhosts_per_rack = 1\nspines = 1\n\
             host_link = \"1Gbit\"\nuplink = \"1Gbit\"\n[emulators]\nbase_port = 65534\n",
        );
        assert!(e.contains("65535") && e.contains("spine1"), "{e}");
    }

    #[test]
    fn generator_arguments_are_checked() {
        let g = |r: Result<Topology, TopologyError>| match r {
            Err(TopologyError::Generator(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(g(Topology::single_switch(0, gbit(1.0))).contains("host"));
        assert!(g(Topology::leaf_spine(0, 1, 1, gbit(1.0), gbit(1.0))).contains("rack"));
        assert!(g(Topology::leaf_spine(1, 0, 1, gbit(1.0), gbit(1.0))).contains("host"));
        assert!(g(Topology::leaf_spine(1, 1, 0, gbit(1.0), gbit(1.0))).contains("spine"));
        assert!(g(Topology::leaf_spine(1, 255, 1, gbit(1.0), gbit(1.0))).contains("255"));
        let spec = HierarchySpec {
            edges: 0,
            ..HierarchySpec::default()
        };
        assert!(g(Topology::hierarchy(&spec)).contains("edge"));
        // A bad capacity is reported against the first link it lands on.
        let e = Topology::single_switch(2, BytesPerSec(f64::NAN)).unwrap_err();
        assert!(e.to_string().contains("h1->sw1"), "{e}");
        let e = Topology::single_switch(2, BytesPerSec::ZERO).unwrap_err();
        assert!(
            matches!(e, TopologyError::ZeroCapacity(ref l) if l == "h1->sw1"),
            "{e}"
        );
    }

    #[test]
    fn single_switch_shape() {
        let t = Topology::single_switch(5, gbit(10.0)).unwrap();
        assert_eq!(
            (t.hosts().count(), t.switches().count(), t.links().len()),
            (5, 1, 10)
        );
        let sw = t.node_by_name("sw1").unwrap();
        for h in t.hosts() {
            assert_eq!(t.rack_of(h), Some(sw));
        }
        assert_eq!(t.node(t.node_by_name("h5").unwrap()).name, "h5");
        // Hosts spill into the next /24 after 254.
        let t = Topology::single_switch(300, gbit(10.0)).unwrap();
        let h255 = t.node_by_name("h255").unwrap();
        assert_eq!(t.host_by_ip("10.0.1.1".parse().unwrap()), Some(h255));
    }

    #[test]
    fn leaf_spine_shape() {
        let t = Topology::leaf_spine(2, 3, 2, gbit(10.0), gbit(40.0)).unwrap();
        assert_eq!(t.hosts().count(), 6);
        assert_eq!(t.switches().count(), 4);
        assert_eq!(t.links().len(), 2 * (6 + 2 * 2));
        let h23 = t.node_by_name("h2-3").unwrap();
        let tor2 = t.node_by_name("tor2").unwrap();
        assert_eq!(t.rack_of(h23), Some(tor2));
        assert_eq!(
            t.node(h23).kind,
            NodeKind::Host {
                ip: Some("10.0.1.3".parse().unwrap()),
                rack: Some("tor2".into())
            }
        );
        for s in t.switches() {
            let n = t.node(s);
            let want = if n.name.starts_with("tor") { 0 } else { 1 };
            assert!(matches!(n.kind, NodeKind::Switch { tier, .. } if tier == want));
        }
        for l in t.links() {
            let host_link = t.node(l.from).is_host() || t.node(l.to).is_host();
            assert_eq!(l.capacity, if host_link { gbit(10.0) } else { gbit(40.0) });
        }
    }

    #[test]
    fn paper_hierarchy_shape() {
        let t = Topology::hierarchy(&HierarchySpec::default()).unwrap();
        assert_eq!(t.hosts().count(), 1000);
        assert_eq!(t.switches().count(), 111);
        assert_eq!(t.links().len(), 2 * (1000 + 100 + 10));
        let tier = |n: NodeId| match t.node(n).kind {
            NodeKind::Switch { tier, .. } => Some(tier),
            NodeKind::Host { .. } => None,
        };
        let mut per_tier = [0; 3];
        for s in t.switches() {
            per_tier[tier(s).unwrap() as usize] += 1;
        }
        assert_eq!(per_tier, [100, 10, 1]);
        for l in t.links() {
            let lo = match (tier(l.from), tier(l.to)) {
                (None, _) | (_, None) => 0,
                (Some(a), Some(b)) => a.min(b) + 1,
            };
            assert_eq!(
                l.capacity,
                gbit([10.0, 20.0, 40.0][lo as usize]),
                "{}",
                l.name
            );
        }
        // tor37 sits under edge4; its hosts are h37-1..h37-10 in 10.0.36.0/24.
        let h = t.node_by_name("h37-10").unwrap();
        assert_eq!(t.host_by_ip("10.0.36.10".parse().unwrap()), Some(h));
        let tor = t.rack_of(h).unwrap();
        assert_eq!(t.node(tor).name, "tor37");
        let edge4 = t.node_by_name("edge4").unwrap();
        assert!(t.link_between(tor, edge4).is_some());
        assert_eq!(t.links_owned_by(t.node_by_name("agg").unwrap()).len(), 10);
        assert_eq!(t.links_owned_by(edge4).len(), 11);
        assert_eq!(t.links_owned_by(h), vec![t.link_between(h, tor).unwrap()]);
    }

    #[test]
    fn serializes_nodes_and_links() {
        let t = Topology::single_switch(1, BytesPerSec(100.0)).unwrap();
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["nodes"][0]["kind"]["type"], "host");
        assert_eq!(v["nodes"][0]["kind"]["ip"], "10.0.0.1");
        assert_eq!(v["links"][0]["name"], "h1->sw1");
        assert_eq!(v["links"][0]["capacity"], 100.0);
    }

    #[test]
    fn load_reports_missing_file() {
        let e = Topology::load(Path::new("/nonexistent/topo.toml")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/topo.toml"), "{e}");
    }
}
