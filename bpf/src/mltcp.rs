//! MLTCP (Rajasekaran et al., HotNets'24, arXiv 2402.09589) as a second struct_ops congestion
//! control, a peer baseline for mlcc: loading it, and the per-socket ratio map its feeder
//! fills (mlcc-scheduler's `mltcp-feeder`).
//!
//! MLTCP scales a flow's congestion-window increase by a bandwidth-aggressiveness function
//! F(r) = [`SLOPE`] · r + [`INTERCEPT`], r being the share of its iteration's bytes the flow has
//! already sent. The paper gives the linear form and its analysis (the "shift" of the later
//! job's start per iteration grows with Slope/Intercept); the constants are ours, the same as
//! mlcc-sim's `mltcp` policy (a test in mlcc-testbed checks they agree): F runs from 0.25 for a
//! flow just starting to 2 for one about to finish, 8× apart, enough to interleave within a few
//! iterations without starving a newcomer. The kernel side works in integers: r in millionths,
//! F in thousandths ([`f_milli`] is the same arithmetic as `mltcp.bpf.c`).
//!
//! The base is Reno or CUBIC ([`Base`], chosen at load). Over Reno the CC feeds the kernel's
//! `tcp_reno_cong_avoid` F × acked segments, so slow start and congestion avoidance both grow F
//! times as fast, and loss handling is Reno's. Two AIMD flows with the same decrease and
//! synchronized losses hold windows in the ratio of their additive increases, which is the
//! premise of MLTCP's analysis (bandwidth in the ratio of F). Over CUBIC it is the kernel's
//! tcp_cubic through its kfuncs, `cubictcp_cong_avoid` fed F × acked the same way. CUBIC's
//! window target is a function of the time since the last loss, so F changes how fast cwnd
//! approaches the cubic curve (and slow start, and CUBIC's Reno-friendly estimate), not the
//! curve: a flow that reaches its target keeps to it whatever its F. A faithful MLTCP over CUBIC
//! would rewrite CUBIC's own arithmetic in BPF with F in it (the selftests' bpf_cubic.c shows
//! it can be done), which we did not.

use std::fmt;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{ErrorKind, MapCore, MapFlags, MapHandle};

use crate::clock::{Deadline, MonotonicNs};
use crate::config::CcName;
use crate::error::DatapathError;
use crate::kernel::read_map;
use crate::key::SocketKey;
use crate::mltcp_skel::MltcpSkelBuilder;
use crate::pins::{self, PinSet};
use crate::probe::probe;
use crate::sys::{self, BatchBuffers};

/// The kernel congestion control whose window increase MLTCP scales.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Base {
    /// `tcp_reno_cong_avoid`, `tcp_reno_ssthresh`, `tcp_reno_undo_cwnd`.
    #[default]
    Reno,
    /// tcp_cubic's kfuncs (`cubictcp_*`), HyStart and all.
    Cubic,
}

impl Base {
    pub const ALL: [Base; 2] = [Base::Reno, Base::Cubic];

    pub fn as_str(self) -> &'static str {
        match self {
            Base::Reno => "reno",
            Base::Cubic => "cubic",
        }
    }
}

impl fmt::Display for Base {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Base {
    type Err = DatapathError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Base::ALL
            .into_iter()
            .find(|b| b.as_str() == s)
            .ok_or_else(|| DatapathError::Invalid {
                what: "MLTCP base congestion control",
                why: format!("{s:?}: say reno or cubic"),
            })
    }
}

/// F(r) = SLOPE · r + INTERCEPT (see the module documentation for why these values).
pub const SLOPE: f64 = 1.75;
pub const INTERCEPT: f64 = 0.25;

/// r's fixed-point unit in the ratio map (`MLTCP_RATIO_ONE`).
pub const RATIO_ONE: u32 = 1_000_000;
/// F's fixed-point unit (`MLTCP_F_ONE`): F = 1 is Reno's own increase.
pub const F_ONE: u32 = 1000;

/// Pins under the datapath's directory, besides [`pins::CC_LINK`].
const RATIOS: &str = "mltcp_ratios";
const SOCKS: &str = "mltcp_socks";
const CONFIG: &str = "mltcp_config";

/// SLOPE and INTERCEPT in thousandths, as the BPF side reads them from its config map.
pub fn config_milli() -> (u32, u32) {
    (
        (SLOPE * f64::from(F_ONE)).round() as u32,
        (INTERCEPT * f64::from(F_ONE)).round() as u32,
    )
}

/// r in millionths, as the ratio map holds it: clamped to [0, 1], NaN as 0.
pub fn ratio_ppm(r: f64) -> u32 {
    if r.is_nan() {
        return 0;
    }
    (r.clamp(0.0, 1.0) * f64::from(RATIO_ONE)).round() as u32
}

/// F in thousandths for a ratio in millionths: what `mltcp.bpf.c` computes at each ACK.
pub fn f_milli(ratio_ppm: u32) -> u32 {
    let (slope, intercept) = config_milli();
    let ppm = u64::from(ratio_ppm.min(RATIO_ONE));
    intercept + (u64::from(slope) * ppm / u64::from(RATIO_ONE)) as u32
}

/// The feeder's word for one socket.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RatioOrder {
    pub key: SocketKey,
    /// Share of the iteration's bytes sent, 0..=1.
    pub ratio: f64,
    /// After this the CC falls back to F = 1 (the plain base).
    pub ttl: Duration,
}

/// What the CC recorded for a socket at its last ACK that could raise cwnd.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MltcpSocket {
    pub bytes_acked: u64,
    pub updated: MonotonicNs,
    /// The F applied, in thousandths ([`F_ONE`] without a fresh ratio).
    pub f_milli: u32,
    pub cwnd_segments: u32,
    pub ssthresh_segments: u32,
}

/// Layouts of the structs in `src/bpf/mltcp.h`; tests compare them with the BTF.
pub(crate) mod layout {
    pub const RATIO_SIZE: usize = 16;
    pub const RATIO_PPM: usize = 0;
    pub const RATIO_EXPIRES_NS: usize = 8;

    pub const SOCK_SIZE: usize = 32;
    pub const SOCK_BYTES_ACKED: usize = 0;
    pub const SOCK_UPDATED_NS: usize = 8;
    pub const SOCK_F_MILLI: usize = 16;
    pub const SOCK_SND_CWND: usize = 20;
    pub const SOCK_SND_SSTHRESH: usize = 24;

    pub const CONFIG_SIZE: usize = 8;
    pub const CONFIG_SLOPE: usize = 0;
    pub const CONFIG_INTERCEPT: usize = 4;
}

fn ratio_raw(ratio: f64, ttl: Duration) -> [u8; layout::RATIO_SIZE] {
    let mut raw = [0u8; layout::RATIO_SIZE];
    raw[layout::RATIO_PPM..layout::RATIO_PPM + 4].copy_from_slice(&ratio_ppm(ratio).to_ne_bytes());
    raw[layout::RATIO_EXPIRES_NS..layout::RATIO_EXPIRES_NS + 8]
        .copy_from_slice(&Deadline::after(ttl).as_raw_ns().to_ne_bytes());
    raw
}

fn config_raw() -> [u8; layout::CONFIG_SIZE] {
    let (slope, intercept) = config_milli();
    let mut raw = [0u8; layout::CONFIG_SIZE];
    raw[layout::CONFIG_SLOPE..layout::CONFIG_SLOPE + 4].copy_from_slice(&slope.to_ne_bytes());
    raw[layout::CONFIG_INTERCEPT..layout::CONFIG_INTERCEPT + 4]
        .copy_from_slice(&intercept.to_ne_bytes());
    raw
}

fn sock_from_raw(raw: &[u8]) -> Option<MltcpSocket> {
    if raw.len() != layout::SOCK_SIZE {
        return None;
    }
    let u64_at = |at: usize| u64::from_ne_bytes(raw[at..at + 8].try_into().expect("8 bytes"));
    let u32_at = |at: usize| u32::from_ne_bytes(raw[at..at + 4].try_into().expect("4 bytes"));
    Some(MltcpSocket {
        bytes_acked: u64_at(layout::SOCK_BYTES_ACKED),
        updated: MonotonicNs(u64_at(layout::SOCK_UPDATED_NS)),
        f_milli: u32_at(layout::SOCK_F_MILLI),
        cwnd_segments: u32_at(layout::SOCK_SND_CWND),
        ssthresh_segments: u32_at(layout::SOCK_SND_SSTHRESH),
    })
}

/// The loaded MLTCP CC. Dropping it leaves it registered and pinned; [`Self::unload`] (or
/// [`crate::unload_pinned`] on its directory) removes it.
pub struct MltcpDatapath {
    pin_dir: PathBuf,
    ratios: MapHandle,
    socks: MapHandle,
    repairs: MapHandle,
}

impl std::fmt::Debug for MltcpDatapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MltcpDatapath")
            .field("pin_dir", &self.pin_dir)
            .finish_non_exhaustive()
    }
}

impl MltcpDatapath {
    /// Registers the CC over `base` as `name` and pins it and its maps under `pin_dir`.
    pub fn load(name: &CcName, base: Base, pin_dir: &Path) -> Result<Self, DatapathError> {
        probe()?;
        if pin_dir.join(pins::CC_LINK).exists() {
            return Err(DatapathError::AlreadyLoaded(pin_dir.to_path_buf()));
        }
        let created = pins::prepare_dir(pin_dir)?;
        let mut pinned = PinSet::new(pin_dir, created);

        let mut storage = MaybeUninit::uninit();
        let mut open = MltcpSkelBuilder::default()
            .open(&mut storage)
            .map_err(DatapathError::bpf("opening the MLTCP BPF object"))?;
        // One CC per base in the object: name the one asked for, leave the other uncreated
        // (libbpf then loads only the programs the created one uses).
        let (ops, unused) = match base {
            Base::Reno => (
                open.struct_ops.mltcp_cc_mut(),
                &mut open.maps.mltcp_cubic_cc,
            ),
            Base::Cubic => (
                open.struct_ops.mltcp_cubic_cc_mut(),
                &mut open.maps.mltcp_cc,
            ),
        };
        for (dst, src) in ops.name.iter_mut().zip(name.to_c()) {
            *dst = src as std::ffi::c_char;
        }
        unused
            .set_autocreate(false)
            .map_err(DatapathError::bpf("leaving the other MLTCP base out"))?;
        let mut skel = open.load().map_err(DatapathError::bpf(format!(
            "loading the MLTCP BPF programs over {base} (verifier)"
        )))?;
        skel.maps
            .mltcp_config
            .update(&0u32.to_ne_bytes(), &config_raw(), MapFlags::ANY)
            .map_err(DatapathError::bpf("writing the MLTCP config map"))?;
        let ops = match base {
            Base::Reno => &mut skel.maps.mltcp_cc,
            Base::Cubic => &mut skel.maps.mltcp_cubic_cc,
        };
        let mut link = ops.attach_struct_ops().map_err(|e| {
            if e.kind() == ErrorKind::AlreadyExists {
                DatapathError::Invalid {
                    what: "congestion control name",
                    why: format!("{name} is already registered in this kernel"),
                }
            } else {
                DatapathError::bpf(format!("registering congestion control {name}"))(e)
            }
        })?;
        for (file, map) in [
            (RATIOS, &skel.maps.mltcp_ratios),
            (SOCKS, &skel.maps.mltcp_socks),
            (CONFIG, &skel.maps.mltcp_config),
            (pins::REPAIRS, &skel.maps.window_repairs),
        ] {
            let p = pin_dir.join(file);
            sys::obj_pin(map.as_fd(), &p)
                .map_err(DatapathError::io(format!("pinning {}", p.display())))?;
            pinned.record(p);
        }
        let p = pin_dir.join(pins::CC_LINK);
        link.pin(&p)
            .map_err(DatapathError::bpf(format!("pinning {}", p.display())))?;
        pinned.record(p);
        let handle = |map: &libbpf_rs::MapMut<'_>, what: &str| {
            MapHandle::try_from(map)
                .map_err(DatapathError::bpf(format!("duplicating the {what} map")))
        };
        let this = Self {
            pin_dir: pin_dir.to_path_buf(),
            ratios: handle(&skel.maps.mltcp_ratios, "ratios")?,
            socks: handle(&skel.maps.mltcp_socks, "sockets")?,
            repairs: handle(&skel.maps.window_repairs, "repairs")?,
        };
        pinned.commit();
        Ok(this)
    }

    /// Re-opens the maps an earlier process pinned under `pin_dir` (what the feeder does).
    pub fn open(pin_dir: &Path) -> Result<Self, DatapathError> {
        pins::check_loaded(pin_dir)?;
        let map = |name: &str| pins::open_map(pin_dir, name);
        Ok(Self {
            pin_dir: pin_dir.to_path_buf(),
            ratios: map(RATIOS)?,
            socks: map(SOCKS)?,
            repairs: map(pins::REPAIRS)?,
        })
    }

    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }

    /// Unregisters the CC and removes the pins; sockets on it keep it until they close.
    pub fn unload(self) -> Result<(), DatapathError> {
        let dir = self.pin_dir.clone();
        drop(self);
        crate::kernel::unload_pinned(&dir)
    }

    /// Writes each socket's ratio (one batch syscall).
    pub fn set_ratios(&self, orders: &[RatioOrder]) -> Result<(), DatapathError> {
        let n = u32::try_from(orders.len()).map_err(|_| DatapathError::Invalid {
            what: "batch",
            why: "too many ratios".into(),
        })?;
        if n == 0 {
            return Ok(());
        }
        let keys: Vec<u8> = orders.iter().flat_map(|o| o.key.to_raw()).collect();
        let values: Vec<u8> = orders
            .iter()
            .flat_map(|o| ratio_raw(o.ratio, o.ttl))
            .collect();
        self.ratios
            .update_batch(&keys, &values, n, MapFlags::ANY, MapFlags::ANY)
            .map_err(DatapathError::bpf("writing the MLTCP ratio map"))
    }

    /// Every socket on the CC with what the CC last recorded for it.
    pub fn sockets(&self) -> Result<Vec<(SocketKey, MltcpSocket)>, DatapathError> {
        read_map(&self.socks, SOCKS, &mut BatchBuffers::default(), |k, v| {
            Some((SocketKey::from_raw(k)?, sock_from_raw(v)?))
        })
    }

    /// How many times the CC found a socket's ssthresh above anything the kernel sets (a value
    /// no ssthresh program returned) and repaired it (`bpf/src/bpf/window.h`).
    pub fn ssthresh_repairs(&self) -> Result<u64, DatapathError> {
        pins::read_counter(&self.repairs, pins::REPAIRS)
    }

    /// What the CC recorded for one socket, if it is on the CC.
    pub fn socket(&self, key: &SocketKey) -> Result<Option<MltcpSocket>, DatapathError> {
        let raw = self
            .socks
            .lookup(&key.to_raw(), MapFlags::ANY)
            .map_err(DatapathError::bpf("reading the MLTCP socket map"))?;
        raw.map(|r| sock_from_raw(&r).ok_or(DatapathError::Corrupt { map: SOCKS }))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f_runs_from_the_intercept_to_slope_plus_intercept() {
        assert_eq!(config_milli(), (1750, 250));
        assert_eq!(f_milli(0), 250);
        assert_eq!(f_milli(RATIO_ONE), 2000);
        assert_eq!(f_milli(ratio_ppm(0.5)), 1125);
        // Above 1 (a retransmission-heavy iteration) stays at the top.
        assert_eq!(f_milli(RATIO_ONE * 2), 2000);
        assert!(f_milli(ratio_ppm(0.3)) < f_milli(ratio_ppm(0.6)));
    }

    #[test]
    fn bases_parse_by_their_kernel_names() {
        assert_eq!(Base::default(), Base::Reno);
        for b in Base::ALL {
            assert_eq!(b.as_str().parse::<Base>().unwrap(), b);
            assert_eq!(b.to_string(), b.as_str());
        }
        assert!("bbr".parse::<Base>().is_err());
        assert!("Cubic".parse::<Base>().is_err());
    }

    #[test]
    fn ratios_are_clamped_to_the_unit_interval() {
        assert_eq!(ratio_ppm(-0.5), 0);
        assert_eq!(ratio_ppm(f64::NAN), 0);
        assert_eq!(ratio_ppm(1.7), RATIO_ONE);
        assert_eq!(ratio_ppm(0.25), 250_000);
    }

    #[test]
    fn the_integer_f_matches_the_real_one() {
        for i in 0..=100 {
            let r = f64::from(i) / 100.0;
            let exact = SLOPE * r + INTERCEPT;
            let got = f64::from(f_milli(ratio_ppm(r))) / f64::from(F_ONE);
            assert!((got - exact).abs() <= 1e-3, "r = {r}: {got} vs {exact}");
        }
    }

    #[test]
    fn ratio_entries_encode_ppm_and_a_deadline() {
        let raw = ratio_raw(0.5, Duration::from_secs(1));
        assert_eq!(u32::from_ne_bytes(raw[0..4].try_into().unwrap()), 500_000);
        let deadline = u64::from_ne_bytes(raw[8..16].try_into().unwrap());
        assert!(deadline > MonotonicNs::now().0);
    }
}
