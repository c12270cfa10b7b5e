//! Random loss on a link ([`LossInjector`]): the tc program of `src/bpf/loss.bpf.c` on the
//! clsact *ingress* of the device where the link delivers, for the testbed's lossy links (this
//! kernel has no netem).
//!
//! Ingress, not the sender's egress: a packet shot at its own host's egress is a local drop the
//! sending socket hears of at once (`NET_XMIT_DROP`): TCP keeps the segment unsent, enters CWR
//! and retries on a probe timer — no retransmission, and a paced flow froze for 200 ms at a
//! time (measured). Dropped where the peer receives it, the segment is lost as on a wire.
//!
//! Only TCP segments that carry payload on the data-plane ports are dropped, so a lossy link
//! hurts training traffic as the paper's Fig. 10 does and leaves handshakes, ACKs and control
//! RPCs alone. So that a drop is one segment, not a 64 KB TSO burst, the *sending* device of the
//! link must hand its peer single segments: [`send_single_segments`] turns its TSO off, so the
//! stack segments in software at transmit while TCP still builds (and paces) large bursts.
//! (`gso_max_segs 1` instead made TCP pace every segment on its own: a flow paced at 400 Mbit/s
//! reached 310.)

use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::ops::RangeInclusive;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, TC_EGRESS, TC_INGRESS, TcHook};

use crate::error::DatapathError;
use crate::loss_skel::LossSkelBuilder;
use crate::sys;

/// What a lossy link drops.
#[derive(Clone, Debug, PartialEq)]
pub struct LossSpec {
    probability: f64,
    seed: u64,
    ports: RangeInclusive<u16>,
}

impl LossSpec {
    /// Drops each data segment (payload-carrying TCP with either port in `ports`) with
    /// `probability` in 0..=1, from a random source seeded with `seed`.
    pub fn new(
        probability: f64,
        seed: u64,
        ports: RangeInclusive<u16>,
    ) -> Result<Self, DatapathError> {
        if !(0.0..=1.0).contains(&probability) {
            return Err(DatapathError::Invalid {
                what: "loss probability",
                why: format!("{probability} is not within 0..=1"),
            });
        }
        if ports.is_empty() {
            return Err(DatapathError::Invalid {
                what: "loss port range",
                why: format!("{}..={} is empty", ports.start(), ports.end()),
            });
        }
        Ok(Self {
            probability,
            seed,
            ports,
        })
    }

    /// The program's threshold: a segment drops when a uniform u32 is below it.
    fn threshold(&self) -> u32 {
        (self.probability * f64::from(u32::MAX)).round() as u32
    }
}

/// What the program saw, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LossCounters {
    /// Data segments (payload on the data ports) that reached the program.
    pub data_segments: u64,
    /// Of those, dropped.
    pub dropped_segments: u64,
    /// Other packets, all passed.
    pub other_packets: u64,
}

impl LossCounters {
    /// Dropped over seen; 0 before any data segment.
    pub fn drop_ratio(&self) -> f64 {
        if self.data_segments == 0 {
            0.0
        } else {
            self.dropped_segments as f64 / self.data_segments as f64
        }
    }
}

/// The loss program attached to one device's ingress in one network namespace; removed (with
/// the device's clsact qdisc) on [`LossInjector::remove`] or drop.
pub struct LossInjector {
    netns: File,
    netns_path: PathBuf,
    dev: String,
    ifindex: i32,
    prog: OwnedFd,
    counters: MapHandle,
    removed: bool,
}

impl LossInjector {
    /// Loads the program with `spec` and attaches it to `dev`'s ingress in the network namespace
    /// at `netns` (e.g. `/run/netns/NAME`), creating the clsact qdisc: what arrives on `dev`
    /// is lost at `spec`'s rate.
    pub fn attach(netns: &Path, dev: &str, spec: LossSpec) -> Result<Self, DatapathError> {
        let ns = File::open(netns).map_err(DatapathError::io(format!(
            "opening network namespace {}",
            netns.display()
        )))?;
        let mut storage = MaybeUninit::uninit();
        let mut open = LossSkelBuilder::default()
            .open(&mut storage)
            .map_err(DatapathError::bpf("opening the loss BPF object"))?;
        let rodata =
            open.maps
                .rodata_data
                .as_deref_mut()
                .ok_or_else(|| DatapathError::Invalid {
                    what: "loss BPF object",
                    why: "it has no .rodata section".into(),
                })?;
        rodata.threshold = spec.threshold();
        rodata.seed = spec.seed;
        rodata.port_lo = *spec.ports.start();
        rodata.port_hi = *spec.ports.end();
        let skel = open
            .load()
            .map_err(DatapathError::bpf("loading the loss program (verifier)"))?;
        let prog = skel
            .progs
            .mlcc_loss
            .as_fd()
            .try_clone_to_owned()
            .map_err(DatapathError::io("duplicating the loss program fd"))?;
        let counters = MapHandle::try_from(&skel.maps.mlcc_loss_counters)
            .map_err(DatapathError::bpf("opening the loss counters map"))?;

        let dev_owned = dev.to_owned();
        let prog_fd = prog.as_fd();
        let ifindex = sys::in_netns(ns.as_fd(), move || {
            let ifindex = i32::try_from(sys::ifindex(&dev_owned)?)
                .map_err(|_| io::Error::other("interface index out of range"))?;
            let mut hook = TcHook::new(prog_fd);
            hook.ifindex(ifindex).replace(true).handle(1).priority(1);
            hook.attach_point(TC_INGRESS);
            hook.create().map_err(io::Error::other)?;
            hook.attach().map_err(io::Error::other)?;
            Ok(ifindex)
        })
        .map_err(DatapathError::io(format!(
            "attaching the loss program to {dev} in {}",
            netns.display()
        )))?;
        Ok(Self {
            netns: ns,
            netns_path: netns.to_path_buf(),
            dev: dev.to_owned(),
            ifindex,
            prog,
            counters,
            removed: false,
        })
    }

    /// The program's counters, summed over CPUs.
    pub fn counters(&self) -> Result<LossCounters, DatapathError> {
        let per_cpu = self
            .counters
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(DatapathError::bpf("reading the loss counters"))?
            .unwrap_or_default();
        let mut total = LossCounters::default();
        for v in per_cpu {
            let field = |i: usize| -> Result<u64, DatapathError> {
                v.get(i * 8..i * 8 + 8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_ne_bytes)
                    .ok_or(DatapathError::Corrupt {
                        map: "mlcc_loss_counters",
                    })
            };
            total.data_segments += field(0)?;
            total.dropped_segments += field(1)?;
            total.other_packets += field(2)?;
        }
        Ok(total)
    }

    /// Detaches the program and removes the clsact qdisc. Idempotent; a namespace or device
    /// already gone counts as removed.
    pub fn remove(&mut self) -> Result<(), DatapathError> {
        if self.removed {
            return Ok(());
        }
        self.removed = true;
        let ifindex = self.ifindex;
        let dev = self.dev.clone();
        let prog_fd = self.prog.as_fd();
        sys::in_netns(self.netns.as_fd(), move || {
            // A device deleted (or renumbered) with its namespace took the qdisc with it.
            if sys::ifindex(&dev).ok().and_then(|i| i32::try_from(i).ok()) != Some(ifindex) {
                return Ok(());
            }
            let mut hook = TcHook::new(prog_fd);
            hook.ifindex(ifindex);
            hook.attach_point(TC_EGRESS | TC_INGRESS);
            hook.destroy().map_err(io::Error::other)
        })
        .map_err(DatapathError::io(format!(
            "removing the loss program from {} in {}",
            self.dev,
            self.netns_path.display()
        )))
    }
}

impl Drop for LossInjector {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

/// Makes `dev` (in the network namespace at `netns`) hand its peer one segment per packet: TSO
/// off (`ethtool -K dev tso off`), so GSO segments in software at transmit. The sending side
/// of a lossy link, so that the loss program drops segments.
pub fn send_single_segments(netns: &Path, dev: &str) -> Result<(), DatapathError> {
    let ns = File::open(netns).map_err(DatapathError::io(format!(
        "opening network namespace {}",
        netns.display()
    )))?;
    let dev_owned = dev.to_owned();
    sys::in_netns(ns.as_fd(), move || sys::set_tso(&dev_owned, false)).map_err(DatapathError::io(
        format!("turning TSO off on {dev} in {}", netns.display()),
    ))
}
