//! Which socket an order or a measurement belongs to.

use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpStream};
use std::os::fd::AsFd;

use serde::Serialize;

use crate::sys;

/// A TCP socket seen from its own host: local and remote address plus the network namespace,
/// so namespaces (containers, the testbed) that reuse addresses do not collide.
///
/// The identity is what the kernel can see on the wire: an IPv4-mapped IPv6 address is the IPv4
/// address (dual-stack sockets talking to IPv4 peers match), and IPv6 flow labels and scope ids
/// are not part of it. `new` normalizes accordingly, so two keys are equal exactly when the
/// kernel would compute the same map key for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SocketKey {
    netns_cookie: u64,
    src: SocketAddr,
    dst: SocketAddr,
}

/// Layout of `struct mlcc_sock_key` in `src/bpf/mlcc.h`; `tests` check it against the BTF.
pub(crate) mod layout {
    pub const SIZE: usize = 48;
    pub const NETNS_COOKIE: usize = 0;
    pub const SRC_ADDR: usize = 8;
    pub const DST_ADDR: usize = 24;
    pub const SRC_PORT: usize = 40;
    pub const DST_PORT: usize = 42;
}

fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

fn octets(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn port_of(raw: &[u8; layout::SIZE], at: usize) -> u16 {
    u16::from_ne_bytes([raw[at], raw[at + 1]])
}

fn addr_of(raw: &[u8; layout::SIZE], at: usize) -> IpAddr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&raw[at..at + 16]);
    Ipv6Addr::from(o).to_canonical()
}

impl SocketKey {
    pub fn new(netns_cookie: u64, src: SocketAddr, dst: SocketAddr) -> Self {
        Self {
            netns_cookie,
            src: canonical(src),
            dst: canonical(dst),
        }
    }

    /// The key of a connected socket of this host (any namespace: the socket carries its own).
    pub fn of_stream(stream: &TcpStream) -> std::io::Result<Self> {
        let cookie = sys::netns_cookie(stream.as_fd())?;
        Ok(Self::new(cookie, stream.local_addr()?, stream.peer_addr()?))
    }

    pub fn netns_cookie(&self) -> u64 {
        self.netns_cookie
    }

    pub fn src(&self) -> SocketAddr {
        self.src
    }

    pub fn dst(&self) -> SocketAddr {
        self.dst
    }

    pub(crate) fn to_raw(self) -> [u8; layout::SIZE] {
        let mut raw = [0u8; layout::SIZE];
        raw[layout::NETNS_COOKIE..layout::NETNS_COOKIE + 8]
            .copy_from_slice(&self.netns_cookie.to_ne_bytes());
        raw[layout::SRC_ADDR..layout::SRC_ADDR + 16].copy_from_slice(&octets(self.src.ip()));
        raw[layout::DST_ADDR..layout::DST_ADDR + 16].copy_from_slice(&octets(self.dst.ip()));
        raw[layout::SRC_PORT..layout::SRC_PORT + 2].copy_from_slice(&self.src.port().to_ne_bytes());
        raw[layout::DST_PORT..layout::DST_PORT + 2].copy_from_slice(&self.dst.port().to_ne_bytes());
        raw
    }

    /// `None` when `raw` is not a key's size (a map created by something else).
    pub(crate) fn from_raw(raw: &[u8]) -> Option<Self> {
        let raw: &[u8; layout::SIZE] = raw.try_into().ok()?;
        let mut cookie = [0u8; 8];
        cookie.copy_from_slice(&raw[layout::NETNS_COOKIE..layout::NETNS_COOKIE + 8]);
        Some(Self::new(
            u64::from_ne_bytes(cookie),
            SocketAddr::new(
                addr_of(raw, layout::SRC_ADDR),
                port_of(raw, layout::SRC_PORT),
            ),
            SocketAddr::new(
                addr_of(raw, layout::DST_ADDR),
                port_of(raw, layout::DST_PORT),
            ),
        ))
    }
}

impl std::fmt::Display for SocketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} -> {} (netns {})",
            self.src, self.dst, self.netns_cookie
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddrV6};

    #[test]
    fn raw_round_trip_v4_and_v6() {
        let v4 = SocketKey::new(
            7,
            "10.0.0.1:5000".parse().unwrap(),
            "10.0.0.2:80".parse().unwrap(),
        );
        assert_eq!(SocketKey::from_raw(&v4.to_raw()), Some(v4));
        let v6 = SocketKey::new(
            9,
            "[fd00::1]:1".parse().unwrap(),
            "[fd00::2]:65535".parse().unwrap(),
        );
        assert_eq!(SocketKey::from_raw(&v6.to_raw()), Some(v6));
    }

    #[test]
    fn ipv4_is_stored_mapped_like_the_kernel_does() {
        let k = SocketKey::new(
            1,
            "1.2.3.4:258".parse().unwrap(),
            "5.6.7.8:80".parse().unwrap(),
        );
        let raw = k.to_raw();
        assert_eq!(
            &raw[layout::SRC_ADDR..layout::SRC_ADDR + 16],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4]
        );
        assert_eq!(
            &raw[layout::SRC_PORT..layout::SRC_PORT + 2],
            &258u16.to_ne_bytes()
        );
    }

    #[test]
    fn mapped_v6_and_flow_labels_do_not_change_identity() {
        let mapped = Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped();
        let a = SocketKey::new(
            1,
            SocketAddr::V6(SocketAddrV6::new(mapped, 9, 42, 3)),
            "10.0.0.2:1".parse().unwrap(),
        );
        let b = SocketKey::new(
            1,
            "10.0.0.1:9".parse().unwrap(),
            "10.0.0.2:1".parse().unwrap(),
        );
        assert_eq!(a, b);
    }

    #[test]
    fn wrong_size_is_rejected() {
        assert_eq!(SocketKey::from_raw(&[0u8; 47]), None);
    }
}
