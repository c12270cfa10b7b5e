//! The datapath in the kernel: loading, pinning, re-opening and driving the BPF programs.

use std::fs;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{ErrorKind, Link, MapCore, MapFlags, MapHandle};

use crate::config::{CcName, CwndPolicy, Fallback, LoadOptions, RawConfig, RtoFloor};
use crate::datapath::Datapath;
use crate::error::DatapathError;
use crate::key::SocketKey;
use crate::pins::{self, PinSet};
use crate::probe::probe;
use crate::rate::{self, RateOrder};
use crate::skel::MlccSkelBuilder;
use crate::stats::SocketStats;
use crate::sys::{self, BatchBuffers};

/// Every entry of `map` (named `name` in errors) as `decode` reads it, batch by batch into
/// `bufs`; an entry that does not decode makes the map `Corrupt`.
pub(crate) fn read_map<T>(
    map: &MapHandle,
    name: &'static str,
    bufs: &mut BatchBuffers,
    decode: impl Fn(&[u8], &[u8]) -> Option<T>,
) -> Result<Vec<T>, DatapathError> {
    let mut out = Vec::with_capacity(bufs.last_read());
    let mut corrupt = false;
    let (ks, vs) = (map.key_size() as usize, map.value_size() as usize);
    sys::lookup_batch(map.as_fd(), ks, vs, BATCH, bufs, |k, v| {
        match decode(k, v) {
            Some(t) => out.push(t),
            None => corrupt = true,
        }
    })
    .map_err(DatapathError::io(format!("reading the {name} map")))?;
    if corrupt {
        return Err(DatapathError::Corrupt { map: name });
    }
    Ok(out)
}

/// Entries per batch syscall when reading maps.
const BATCH: u32 = 1024;

/// One BPF program's accumulated run time (counted only while BPF stats are enabled).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ProgRunStats {
    pub name: String,
    pub run_count: u64,
    pub run_time_ns: u64,
}

/// The loaded datapath. Dropping it leaves everything pinned and running; [`Self::unload`]
/// removes it.
pub struct KernelDatapath {
    pin_dir: PathBuf,
    cc_name: CcName,
    rates: MapHandle,
    stats: MapHandle,
    /// Kept between reads of the stats map, which happen every slot.
    stats_reads: std::sync::Mutex<BatchBuffers>,
    config: MapHandle,
    /// None for a datapath pinned by a version without the counter.
    repairs: Option<MapHandle>,
    sockops_prog: OwnedFd,
    cong_control_prog: OwnedFd,
    mark_prog: OwnedFd,
}

impl std::fmt::Debug for KernelDatapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelDatapath")
            .field("pin_dir", &self.pin_dir)
            .field("cc_name", &self.cc_name)
            .finish_non_exhaustive()
    }
}

/// The Cubic and BBR fallbacks run the kernel's tcp_cubic or tcp_bbr through its kfuncs, which
/// a kernel has only with that CC built in or its module loaded (Cubic is every distribution's
/// default; BBR is often a module). Without it the program would run Reno under its name.
fn check_fallback(fallback: Fallback) -> Result<(), DatapathError> {
    const AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
    let (cc, module) = match fallback {
        Fallback::Reno => return Ok(()),
        Fallback::Cubic => ("cubic", "tcp_cubic"),
        Fallback::Bbr => ("bbr", "tcp_bbr"),
    };
    let ccs =
        fs::read_to_string(AVAILABLE).map_err(DatapathError::io(format!("reading {AVAILABLE}")))?;
    if ccs.split_whitespace().any(|c| c == cc) {
        return Ok(());
    }
    Err(DatapathError::Invalid {
        what: "fallback congestion control",
        why: format!(
            "{cc} is not in {AVAILABLE} ({}): load {module} (modprobe {module}) or choose the reno fallback",
            ccs.trim()
        ),
    })
}

impl KernelDatapath {
    /// Loads the programs, registers the CC and pins everything under `opts.pin_dir`.
    pub fn load(opts: &LoadOptions) -> Result<Self, DatapathError> {
        probe()?;
        check_fallback(opts.fallback)?;
        let dir = opts.pin_dir.as_path();
        if dir.join(pins::CC_LINK).exists() {
            return Err(DatapathError::AlreadyLoaded(dir.to_path_buf()));
        }
        let created = pins::prepare_dir(dir)?;
        let mut pinned = PinSet::new(dir, created);

        let mut storage = MaybeUninit::uninit();
        let mut open = MlccSkelBuilder::default()
            .open(&mut storage)
            .map_err(DatapathError::bpf("opening the BPF object"))?;
        for (dst, src) in open
            .struct_ops
            .mlcc_cc_mut()
            .name
            .iter_mut()
            .zip(opts.cc_name.to_c())
        {
            *dst = src as std::ffi::c_char;
        }
        let n = opts.max_sockets.get();
        for map in [
            &mut open.maps.mlcc_stats,
            &mut open.maps.mlcc_rates,
            &mut open.maps.mlcc_marks,
        ] {
            map.set_max_entries(n)
                .map_err(DatapathError::bpf("sizing the per-socket maps"))?;
        }
        let mut skel = open
            .load()
            .map_err(DatapathError::bpf("loading the BPF programs (verifier)"))?;
        skel.maps
            .mlcc_config
            .update(
                &0u32.to_ne_bytes(),
                &RawConfig {
                    cc_name: opts.cc_name.clone(),
                    cwnd: opts.cwnd,
                    rto_floor: opts.rto_floor,
                    fallback: opts.fallback,
                }
                .to_raw(),
                MapFlags::ANY,
            )
            .map_err(DatapathError::bpf("writing the config map"))?;

        let mut cc_link = skel.maps.mlcc_cc.attach_struct_ops().map_err(|e| {
            if e.kind() == ErrorKind::AlreadyExists {
                DatapathError::Invalid {
                    what: "congestion control name",
                    why: format!("{} is already registered in this kernel", opts.cc_name),
                }
            } else {
                DatapathError::bpf(format!("registering congestion control {}", opts.cc_name))(e)
            }
        })?;

        let pin = |name: &str| dir.join(name);
        let maps = [
            (pins::RATES, &skel.maps.mlcc_rates),
            (pins::STATS, &skel.maps.mlcc_stats),
            (pins::CONFIG, &skel.maps.mlcc_config),
            (pins::MARKS, &skel.maps.mlcc_marks),
            (pins::REPAIRS, &skel.maps.window_repairs),
        ];
        for (name, map) in maps {
            sys::obj_pin(map.as_fd(), &pin(name)).map_err(DatapathError::io(format!(
                "pinning {}",
                pin(name).display()
            )))?;
            pinned.record(pin(name));
        }
        for (name, prog) in [
            (pins::SOCKOPS_PROG, skel.progs.mlcc_sockops.as_fd()),
            (
                pins::CONG_CONTROL_PROG,
                skel.progs.mlcc_cong_control.as_fd(),
            ),
            (pins::MARK_PROG, skel.progs.mlcc_mark.as_fd()),
        ] {
            sys::obj_pin(prog, &pin(name)).map_err(DatapathError::io(format!(
                "pinning {}",
                pin(name).display()
            )))?;
            pinned.record(pin(name));
        }
        // Last: once the link is pinned the CC outlives us.
        cc_link
            .pin(pin(pins::CC_LINK))
            .map_err(DatapathError::bpf(format!(
                "pinning {}",
                pin(pins::CC_LINK).display()
            )))?;
        pinned.record(pin(pins::CC_LINK));

        let dup = |fd: std::os::fd::BorrowedFd<'_>, what: &str| {
            fd.try_clone_to_owned()
                .map_err(DatapathError::io(format!("duplicating the {what} fd")))
        };
        let handle = |map: &libbpf_rs::MapMut<'_>, what: &str| {
            MapHandle::try_from(map)
                .map_err(DatapathError::bpf(format!("duplicating the {what} map")))
        };
        let this = Self {
            pin_dir: dir.to_path_buf(),
            cc_name: opts.cc_name.clone(),
            rates: handle(&skel.maps.mlcc_rates, "rates")?,
            stats: handle(&skel.maps.mlcc_stats, "stats")?,
            stats_reads: Default::default(),
            config: handle(&skel.maps.mlcc_config, "config")?,
            repairs: Some(handle(&skel.maps.window_repairs, "repairs")?),
            sockops_prog: dup(skel.progs.mlcc_sockops.as_fd(), "sock_ops program")?,
            cong_control_prog: dup(skel.progs.mlcc_cong_control.as_fd(), "cong_control program")?,
            mark_prog: dup(skel.progs.mlcc_mark.as_fd(), "marker program")?,
        };
        pinned.commit();
        Ok(this)
    }

    /// Re-opens a datapath that an earlier process loaded and pinned under `pin_dir`.
    pub fn open(pin_dir: &Path) -> Result<Self, DatapathError> {
        pins::check_loaded(pin_dir)?;
        let map = |name: &str| pins::open_map(pin_dir, name);
        let prog = |name: &str| {
            let p = pin_dir.join(name);
            sys::obj_get(&p).map_err(DatapathError::io(format!("opening {}", p.display())))
        };
        let config = map(pins::CONFIG)?;
        let raw = config
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(DatapathError::bpf("reading the config map"))?
            .ok_or(DatapathError::Corrupt { map: "config" })?;
        let cc_name = RawConfig::from_raw(&raw)
            .ok_or(DatapathError::Corrupt { map: "config" })?
            .cc_name;
        Ok(Self {
            pin_dir: pin_dir.to_path_buf(),
            cc_name,
            rates: map(pins::RATES)?,
            stats: map(pins::STATS)?,
            stats_reads: Default::default(),
            config,
            repairs: pin_dir
                .join(pins::REPAIRS)
                .exists()
                .then(|| map(pins::REPAIRS))
                .transpose()?,
            sockops_prog: prog(pins::SOCKOPS_PROG)?,
            cong_control_prog: prog(pins::CONG_CONTROL_PROG)?,
            mark_prog: prog(pins::MARK_PROG)?,
        })
    }

    pub fn cc_name(&self) -> &CcName {
        &self.cc_name
    }

    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }

    fn config(&self) -> Result<RawConfig, DatapathError> {
        self.config
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(DatapathError::bpf("reading the config map"))?
            .and_then(|raw| RawConfig::from_raw(&raw))
            .ok_or(DatapathError::Corrupt { map: "config" })
    }

    /// The RTO floor sockets get when they join the CC.
    pub fn rto_floor(&self) -> Result<RtoFloor, DatapathError> {
        Ok(self.config()?.rto_floor)
    }

    /// What sockets run without an order.
    pub fn fallback(&self) -> Result<Fallback, DatapathError> {
        Ok(self.config()?.fallback)
    }

    /// How many sockets the per-socket maps hold (what the loader sized them to).
    pub fn max_sockets(&self) -> Result<u32, DatapathError> {
        self.stats
            .info()
            .map(|i| i.info.max_entries)
            .map_err(DatapathError::bpf("reading the stats map's info"))
    }

    /// Takes effect at each socket's next ACK.
    pub fn set_cwnd_policy(&self, cwnd: CwndPolicy) -> Result<(), DatapathError> {
        let config = RawConfig {
            cwnd,
            ..self.config()?
        };
        // A datapath pinned by an older mlcc has the shorter layout; its prefix is the same.
        let size = self.config.value_size() as usize;
        let raw = config.to_raw();
        self.config
            .update(
                &0u32.to_ne_bytes(),
                &raw[..size.min(raw.len())],
                MapFlags::ANY,
            )
            .map_err(DatapathError::bpf("writing the config map"))
    }

    fn sockops_pin(&self, cgroup: &Path) -> Result<PathBuf, DatapathError> {
        let meta = fs::metadata(cgroup)
            .map_err(DatapathError::io(format!("cgroup {}", cgroup.display())))?;
        if !meta.is_dir() {
            return Err(DatapathError::Invalid {
                what: "cgroup",
                why: format!("{} is not a directory", cgroup.display()),
            });
        }
        Ok(self
            .pin_dir
            .join(format!("{}{}", pins::SOCKOPS_LINK_PREFIX, meta.ino())))
    }

    /// Puts TCP sockets of `cgroup` (a cgroup v2 directory) and its descendants on the CC when
    /// they become established. Idempotent.
    pub fn attach_cgroup(&self, cgroup: &Path) -> Result<(), DatapathError> {
        let pin = self.sockops_pin(cgroup)?;
        if pin.exists() {
            return Ok(());
        }
        let cg = fs::File::open(cgroup).map_err(DatapathError::io(format!(
            "opening cgroup {}",
            cgroup.display()
        )))?;
        let link =
            sys::link_sockops(self.sockops_prog.as_fd(), cg.as_fd()).map_err(DatapathError::io(
                format!("attaching sock_ops to {} (cgroup v2?)", cgroup.display()),
            ))?;
        sys::obj_pin(link.as_fd(), &pin)
            .map_err(DatapathError::io(format!("pinning {}", pin.display())))
    }

    /// Stops selecting the CC for new sockets of `cgroup`; sockets already on it stay.
    pub fn detach_cgroup(&self, cgroup: &Path) -> Result<(), DatapathError> {
        let pin = self.sockops_pin(cgroup)?;
        detach_and_unpin(&pin)
    }

    fn marker_pin(&self, dev: &str) -> Result<(PathBuf, u32), DatapathError> {
        let ifindex = sys::ifindex(dev).map_err(DatapathError::io(format!("device {dev}")))?;
        let netns = sys::current_netns_cookie()
            .map_err(DatapathError::io("reading this network namespace's cookie"))?;
        let name = format!("{}{netns}_{ifindex}", pins::MARK_LINK_PREFIX);
        Ok((self.pin_dir.join(name), ifindex))
    }

    /// Marks the bytes that sockets on fill orders send beyond their guaranteed rate as they
    /// leave device `dev` of this process's network namespace (a TCX egress link, pinned so it
    /// outlives the caller). Idempotent.
    pub fn attach_marker(&self, dev: &str) -> Result<(), DatapathError> {
        let (pin, ifindex) = self.marker_pin(dev)?;
        if pin.exists() {
            return Ok(());
        }
        let link =
            sys::link_tcx_egress(self.mark_prog.as_fd(), ifindex).map_err(DatapathError::io(
                format!("attaching the marker to {dev}'s egress (TCX, Linux 6.6+)"),
            ))?;
        sys::obj_pin(link.as_fd(), &pin)
            .map_err(DatapathError::io(format!("pinning {}", pin.display())))
    }

    /// Stops marking on `dev`.
    pub fn detach_marker(&self, dev: &str) -> Result<(), DatapathError> {
        let (pin, _) = self.marker_pin(dev)?;
        detach_and_unpin(&pin)
    }

    /// Unregisters the CC, detaches every cgroup and removes the pins. Sockets on the CC keep
    /// running it until they close (the kernel holds a reference).
    pub fn unload(self) -> Result<(), DatapathError> {
        let dir = self.pin_dir.clone();
        drop(self);
        unload_pinned(&dir)
    }

    /// How many times the CC found a socket's ssthresh above anything the kernel sets (a value
    /// no ssthresh program returned) and repaired it (`bpf/src/bpf/window.h`). None for a
    /// datapath pinned by a version that did not count them.
    pub fn ssthresh_repairs(&self) -> Result<Option<u64>, DatapathError> {
        self.repairs
            .as_ref()
            .map(|m| pins::read_counter(m, pins::REPAIRS))
            .transpose()
    }

    /// Run counters of the per-ACK program and the sock_ops program.
    pub fn prog_run_stats(&self) -> Result<Vec<ProgRunStats>, DatapathError> {
        [&self.cong_control_prog, &self.sockops_prog]
            .into_iter()
            .map(|fd| {
                let info = sys::prog_info(fd.as_fd())
                    .map_err(DatapathError::io("reading program info"))?;
                Ok(ProgRunStats {
                    name: info.name,
                    run_count: info.run_cnt,
                    run_time_ns: info.run_time_ns,
                })
            })
            .collect()
    }

    pub fn stats_of(&self, key: &SocketKey) -> Result<Option<SocketStats>, DatapathError> {
        let raw = self
            .stats
            .lookup(&key.to_raw(), MapFlags::ANY)
            .map_err(DatapathError::bpf("reading the stats map"))?;
        raw.map(|r| SocketStats::from_raw(&r).ok_or(DatapathError::Corrupt { map: "stats" }))
            .transpose()
    }

    /// The orders currently held (expired ones included), as (key, bytes per second).
    pub fn orders(&self) -> Result<Vec<(SocketKey, u64)>, DatapathError> {
        read_map(
            &self.rates,
            "rates",
            &mut BatchBuffers::default(),
            |k, v| {
                let rate: [u8; 8] = v.get(..8)?.try_into().ok()?;
                Some((SocketKey::from_raw(k)?, u64::from_ne_bytes(rate)))
            },
        )
    }

    /// Fills the stats map from user space; only benches use it.
    #[doc(hidden)]
    pub fn insert_stats_for_bench(
        &self,
        entries: &[(SocketKey, SocketStats)],
    ) -> Result<(), DatapathError> {
        let keys: Vec<u8> = entries.iter().flat_map(|(k, _)| k.to_raw()).collect();
        let values: Vec<u8> = entries.iter().flat_map(|(_, s)| s.to_raw()).collect();
        let n = u32::try_from(entries.len()).map_err(|_| DatapathError::Invalid {
            what: "batch",
            why: "too many entries".into(),
        })?;
        if n == 0 {
            return Ok(());
        }
        self.stats
            .update_batch(&keys, &values, n, MapFlags::ANY, MapFlags::ANY)
            .map_err(DatapathError::bpf("writing the stats map"))
    }
}

fn detach_and_unpin(pin: &Path) -> Result<(), DatapathError> {
    if !pin.exists() {
        return Ok(());
    }
    // Detaching first makes the effect immediate even if someone else holds the link's fd.
    if let Ok(link) = Link::open(pin) {
        let _ = link.detach();
    }
    fs::remove_file(pin).map_err(DatapathError::io(format!("removing {}", pin.display())))
}

/// Unloads whatever mlcc datapath is pinned under `dir` without opening it first (cleanup after
/// a crash, or when the maps are damaged).
pub fn unload_pinned(dir: &Path) -> Result<(), DatapathError> {
    if !dir.join(pins::CC_LINK).exists() && !dir.exists() {
        return Err(DatapathError::NotLoaded(dir.to_path_buf()));
    }
    let entries =
        fs::read_dir(dir).map_err(DatapathError::io(format!("listing {}", dir.display())))?;
    let mut first_err = None;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let res = if name == pins::CC_LINK
            || name.starts_with(pins::SOCKOPS_LINK_PREFIX)
            || name.starts_with(pins::MARK_LINK_PREFIX)
        {
            detach_and_unpin(&path)
        } else {
            fs::remove_file(&path)
                .map_err(DatapathError::io(format!("removing {}", path.display())))
        };
        if let Err(e) = res {
            first_err.get_or_insert(e);
        }
    }
    if let Err(e) = fs::remove_dir(dir) {
        first_err.get_or_insert(DatapathError::io(format!("removing {}", dir.display()))(e));
    }
    first_err.map_or(Ok(()), Err)
}

impl Datapath for KernelDatapath {
    fn set_rates(&mut self, orders: &[RateOrder]) -> Result<(), DatapathError> {
        match orders {
            [] => Ok(()),
            [o] => self
                .rates
                .update(
                    &o.key.to_raw(),
                    &rate::to_raw(o, o.expiry.deadline()),
                    MapFlags::ANY,
                )
                .map_err(DatapathError::bpf("writing the rates map")),
            _ => {
                let n = u32::try_from(orders.len()).map_err(|_| DatapathError::Invalid {
                    what: "batch",
                    why: "too many orders".into(),
                })?;
                let keys: Vec<u8> = orders.iter().flat_map(|o| o.key.to_raw()).collect();
                let values: Vec<u8> = orders
                    .iter()
                    .flat_map(|o| rate::to_raw(o, o.expiry.deadline()))
                    .collect();
                self.rates
                    .update_batch(&keys, &values, n, MapFlags::ANY, MapFlags::ANY)
                    .map_err(DatapathError::bpf("writing the rates map"))
            }
        }
    }

    fn clear_rates(&mut self, keys: &[SocketKey]) -> Result<(), DatapathError> {
        let Ok(n) = u32::try_from(keys.len()) else {
            return Err(DatapathError::Invalid {
                what: "batch",
                why: "too many keys".into(),
            });
        };
        if n == 0 {
            return Ok(());
        }
        let raw: Vec<u8> = keys.iter().flat_map(|k| k.to_raw()).collect();
        if self
            .rates
            .delete_batch(&raw, n, MapFlags::ANY, MapFlags::ANY)
            .is_ok()
        {
            return Ok(());
        }
        // The batch stops at the first key without an order; clearing is idempotent, so go one
        // by one and ignore those.
        for k in keys {
            match self.rates.delete(&k.to_raw()) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(DatapathError::bpf("deleting from the rates map")(e)),
            }
        }
        Ok(())
    }

    fn read_stats(&self) -> Result<Vec<(SocketKey, SocketStats)>, DatapathError> {
        let mut bufs = self.stats_reads.lock().unwrap_or_else(|e| e.into_inner());
        read_map(&self.stats, "stats", &mut bufs, |k, v| {
            Some((SocketKey::from_raw(k)?, SocketStats::from_raw(v)?))
        })
    }

    fn sockets(&self) -> Result<Vec<SocketKey>, DatapathError> {
        self.stats
            .keys()
            .map(|k| SocketKey::from_raw(&k).ok_or(DatapathError::Corrupt { map: "stats" }))
            .collect()
    }

    fn ssthresh_repairs(&self) -> Result<Option<u64>, DatapathError> {
        KernelDatapath::ssthresh_repairs(self)
    }
}
