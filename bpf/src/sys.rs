//! The few system and libbpf calls that neither std nor libbpf-rs wrap: through rustix where it
//! wraps them, raw where nothing does. Every `unsafe` block of the crate lives here, each next
//! to the reason it is sound and why no safe wrapper is used.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::net::sockopt;

/// `SO_NETNS_COOKIE` (Linux 5.14); libc does not export it for every target.
const SO_NETNS_COOKIE: libc::c_int = 71;
/// `BPF_FS_MAGIC` from linux/magic.h.
const BPF_FS_MAGIC: rustix::fs::FsWord = 0xcafe4a11_u32 as rustix::fs::FsWord;
/// `TCP_CA_NAME_MAX`.
pub const CC_NAME_MAX: usize = 16;

fn cpath(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// libbpf (1.0 mode) returns `-errno` on failure.
fn libbpf_ret(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::from_raw_os_error(-ret))
    } else {
        Ok(ret)
    }
}

fn getsockopt_bytes(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    buf: &mut [u8],
) -> io::Result<usize> {
    let mut len = libc::socklen_t::try_from(buf.len()).unwrap_or(libc::socklen_t::MAX);
    // SAFETY: `buf` is valid for `len` writable bytes and the kernel writes at most `len`; raw
    // because rustix has no option for SO_NETNS_COOKIE.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((len as usize).min(buf.len()))
}

/// `tcpi_total_rto` of a TCP socket (Linux 6.7; libc's `tcp_info` ends before it): None on
/// kernels whose `TCP_INFO` is shorter.
pub fn tcp_total_rto(fd: BorrowedFd<'_>) -> io::Result<Option<u16>> {
    const OFFSET: usize = 240;
    let mut buf = [0u8; 256];
    let len = getsockopt_bytes(fd, libc::IPPROTO_TCP, libc::TCP_INFO, &mut buf)?;
    Ok((len >= OFFSET + 2).then(|| u16::from_ne_bytes([buf[OFFSET], buf[OFFSET + 1]])))
}

/// `TCP_INFO` of a TCP socket.
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<libc::tcp_info> {
    // SAFETY: tcp_info is plain old data, for which all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is valid for `len` writable bytes and the kernel writes at most `len`; raw
    // because rustix has no option for TCP_INFO.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &mut len,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

/// The cookie of the network namespace a socket lives in; the BPF side reads the same value
/// from `sk->__sk_common.skc_net.net->net_cookie`.
pub fn netns_cookie(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut buf = [0u8; 8];
    let n = getsockopt_bytes(fd, libc::SOL_SOCKET, SO_NETNS_COOKIE, &mut buf)?;
    if n != 8 {
        return Err(io::Error::other("SO_NETNS_COOKIE returned a short value"));
    }
    Ok(u64::from_ne_bytes(buf))
}

pub fn tcp_congestion(fd: BorrowedFd<'_>) -> io::Result<String> {
    Ok(sockopt::tcp_congestion(fd)?)
}

pub fn set_tcp_congestion(fd: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    Ok(sockopt::set_tcp_congestion(fd, name)?)
}

/// Sets a socket's send buffer to `bytes` even above `net.core.wmem_max` (SO_SNDBUFFORCE,
/// needs CAP_NET_ADMIN).
pub fn force_send_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    Ok(sockopt::set_socket_send_buffer_size_force(fd, bytes)?)
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Runs `f` on a thread of its own moved into the network namespace `ns` (setns affects only
/// the calling thread): sockets it creates, netlink it speaks and processes it spawns are the
/// namespace's.
pub fn in_netns<R: Send>(
    ns: BorrowedFd<'_>,
    f: impl FnOnce() -> io::Result<R> + Send,
) -> io::Result<R> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter_netns(ns)?;
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")))
    })
}

/// Moves the calling thread (only) into the network namespace `ns`.
pub fn enter_netns(ns: BorrowedFd<'_>) -> io::Result<()> {
    Ok(rustix::thread::move_into_link_name_space(
        ns,
        Some(rustix::thread::LinkNameSpaceType::Network),
    )?)
}

pub fn euid_is_root() -> bool {
    rustix::process::geteuid().is_root()
}

pub fn is_bpffs(path: &Path) -> io::Result<bool> {
    let c = cpath(path)?;
    let st = rustix::fs::statfs(c.as_c_str())?;
    Ok(st.f_type == BPF_FS_MAGIC)
}

pub fn mount_bpffs(path: &Path) -> io::Result<()> {
    let target = cpath(path)?;
    let fstype = c"bpf";
    Ok(rustix::mount::mount(
        fstype,
        target.as_c_str(),
        fstype,
        rustix::mount::MountFlags::empty(),
        None,
    )?)
}

pub fn obj_pin(fd: BorrowedFd<'_>, path: &Path) -> io::Result<()> {
    let c = cpath(path)?;
    // SAFETY: `c` is NUL-terminated; the fd is borrowed for the call. Raw because libbpf-rs
    // pins only through its own object handles, not a bare fd.
    libbpf_ret(unsafe { libbpf_sys::bpf_obj_pin(fd.as_raw_fd(), c.as_ptr()) }).map(drop)
}

pub fn obj_get(path: &Path) -> io::Result<OwnedFd> {
    let c = cpath(path)?;
    // SAFETY: `c` is NUL-terminated. Raw because libbpf-rs reopens pinned maps, not programs.
    let fd = libbpf_ret(unsafe { libbpf_sys::bpf_obj_get(c.as_ptr()) })?;
    // SAFETY: on success bpf_obj_get returns a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A `BPF_CGROUP_SOCK_OPS` link of `prog` on `cgroup`.
pub fn link_sockops(prog: BorrowedFd<'_>, cgroup: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: both fds are borrowed for the call; NULL opts are allowed. Raw because libbpf-rs
    // attaches only a program it loaded, not one reopened from its pin.
    let fd = libbpf_ret(unsafe {
        libbpf_sys::bpf_link_create(
            prog.as_raw_fd(),
            cgroup.as_raw_fd(),
            libbpf_sys::BPF_CGROUP_SOCK_OPS,
            std::ptr::null(),
        )
    })?;
    // SAFETY: a new link fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The index of device `dev` in the calling thread's network namespace: SIOCGIFINDEX on a
/// datagram socket, as glibc's `if_nametoindex` does.
pub fn ifindex(dev: &str) -> io::Result<u32> {
    if dev.as_bytes().contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "device name holds a NUL",
        ));
    }
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
    Ok(rustix::net::netdevice::name_to_index(&socket, dev)?)
}

/// The device that holds address `ip` in the calling thread's network namespace, if any.
pub fn device_with_address(ip: std::net::IpAddr) -> io::Result<Option<String>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list it allocates into `head`, freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points at a sockaddr whose family says which one it is.
        let addr = unsafe {
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    std::net::IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes())
                }
                libc::AF_INET6 => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    std::net::IpAddr::from(a.sin6_addr.s6_addr)
                }
                _ => continue,
            }
        };
        if addr == ip {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
            found = Some(name.to_string_lossy().into_owned());
            break;
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(found)
}

/// The cookie of the caller's network namespace (what [`netns_cookie`] gives its sockets).
pub fn current_netns_cookie() -> io::Result<u64> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
    netns_cookie(std::os::fd::AsFd::as_fd(&socket))
}

/// Attaches a tc program to the egress of device `ifindex` in the caller's network namespace
/// through a TCX link (no qdisc needed; it runs before the device's root qdisc).
pub fn link_tcx_egress(prog: BorrowedFd<'_>, ifindex: u32) -> io::Result<OwnedFd> {
    // SAFETY: the program fd is borrowed for the call; NULL opts are allowed. Raw because
    // libbpf-rs attaches only a program it loaded, not one reopened from its pin.
    let fd = libbpf_ret(unsafe {
        libbpf_sys::bpf_link_create(
            prog.as_raw_fd(),
            ifindex as i32,
            libbpf_sys::BPF_TCX_EGRESS,
            std::ptr::null(),
        )
    })?;
    // SAFETY: a new link fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A program's name and its `bpf_stats` counters (zero unless run-time stats are enabled).
pub struct ProgInfo {
    pub name: String,
    pub run_cnt: u64,
    pub run_time_ns: u64,
}

pub fn prog_info(prog: BorrowedFd<'_>) -> io::Result<ProgInfo> {
    // SAFETY: bpf_prog_info is plain data; all-zero asks for no variable-length arrays.
    let mut info: libbpf_sys::bpf_prog_info = unsafe { zeroed() };
    let mut len = size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: `info` is writable for `len` bytes. Raw because libbpf-rs reads no prog info
    // by fd.
    libbpf_ret(unsafe {
        libbpf_sys::bpf_prog_get_info_by_fd(prog.as_raw_fd(), &mut info, &mut len)
    })?;
    let name: Vec<u8> = info
        .name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Ok(ProgInfo {
        name: String::from_utf8_lossy(&name).into_owned(),
        run_cnt: info.run_cnt,
        run_time_ns: info.run_time_ns,
    })
}

/// Turns on BPF run-time accounting for as long as the returned fd lives.
pub fn enable_run_time_stats() -> io::Result<OwnedFd> {
    // SAFETY: no pointers involved. Raw because libbpf-rs does not wrap BPF_ENABLE_STATS.
    let fd = libbpf_ret(unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) })?;
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `ethtool -K DEV tso on|off` in the calling thread's namespace (the legacy ETHTOOL_STSO
/// ioctl; iproute2 cannot, and this machine has no ethtool).
pub fn set_tso(dev: &str, on: bool) -> io::Result<()> {
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    const ETHTOOL_STSO: u32 = 0x1f;
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    #[repr(C)]
    struct IfReq {
        name: [libc::c_char; libc::IFNAMSIZ],
        data: *mut EthtoolValue,
        _pad: [u8; 16],
    }
    if dev.len() >= libc::IFNAMSIZ || dev.as_bytes().contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{dev:?} is not a device name"),
        ));
    }
    let mut value = EthtoolValue {
        cmd: ETHTOOL_STSO,
        data: u32::from(on),
    };
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: &mut value,
        _pad: [0; 16],
    };
    for (d, s) in req.name.iter_mut().zip(dev.as_bytes()) {
        *d = *s as libc::c_char;
    }
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
    // SAFETY: `req` names a NUL-terminated device and points at `value`, both alive for the
    // call; SIOCETHTOOL reads and writes only those. Raw because no crate wraps ethtool.
    let r = unsafe { libc::ioctl(socket.as_raw_fd(), SIOCETHTOOL as _, &mut req as *mut IfReq) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Buffers for reading a hash map in batches, kept between reads so that a read of a map whose
/// size did not grow allocates nothing.
#[derive(Debug, Default)]
pub struct BatchBuffers {
    keys: Vec<u8>,
    values: Vec<u8>,
    cursor: Vec<u8>,
    next: Vec<u8>,
    /// Entries the last read handed out: the next read's expected size.
    last_read: usize,
}

impl BatchBuffers {
    /// How many entries the last read through these buffers found.
    pub fn last_read(&self) -> usize {
        self.last_read
    }
}

/// Every entry of the hash map `map` (keys of `key_size` bytes, values of `value_size`),
/// `batch` entries per `BPF_MAP_LOOKUP_BATCH`, each handed to `each` as it is read. Unlike
/// libbpf-rs's batch iterator, a failing syscall is an error, not a silently shorter map.
pub fn lookup_batch(
    map: BorrowedFd<'_>,
    key_size: usize,
    value_size: usize,
    batch: u32,
    bufs: &mut BatchBuffers,
    mut each: impl FnMut(&[u8], &[u8]),
) -> io::Result<()> {
    if key_size == 0 || value_size == 0 || batch == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a batch read needs non-empty keys, values and batches",
        ));
    }
    let n = batch as usize;
    bufs.keys.resize(key_size * n, 0);
    bufs.values.resize(value_size * n, 0);
    bufs.cursor.resize(key_size, 0);
    bufs.next.resize(key_size, 0);
    bufs.last_read = 0;
    let mut first = true;
    loop {
        let mut count = batch;
        // SAFETY: all-zero is the documented default of this plain C struct; `sz` is set below.
        let mut opts: libbpf_sys::bpf_map_batch_opts = unsafe { zeroed() };
        opts.sz = size_of::<libbpf_sys::bpf_map_batch_opts>() as _;
        let in_batch = if first {
            std::ptr::null_mut()
        } else {
            bufs.cursor.as_mut_ptr().cast()
        };
        // SAFETY: the kernel writes at most `count` (= batch) keys and values into buffers
        // sized for `batch` of each, and one key into `next`; `in_batch` is null or a key-sized
        // buffer holding the previous call's `out_batch`. libbpf-rs wraps this call only in an
        // iterator that allocates twice per entry and hides errors, hence the raw call.
        let ret = unsafe {
            libbpf_sys::bpf_map_lookup_batch(
                map.as_raw_fd(),
                in_batch,
                bufs.next.as_mut_ptr().cast(),
                bufs.keys.as_mut_ptr().cast(),
                bufs.values.as_mut_ptr().cast(),
                &mut count,
                &opts,
            )
        };
        // ENOENT: the walk reached the end; `count` still says how many this call read.
        let done = match libbpf_ret(ret) {
            Ok(_) => false,
            Err(e) if e.kind() == io::ErrorKind::NotFound => true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let got = (count as usize).min(n);
        for (k, v) in bufs.keys[..got * key_size]
            .chunks_exact(key_size)
            .zip(bufs.values[..got * value_size].chunks_exact(value_size))
        {
            each(k, v);
        }
        bufs.last_read += got;
        if done {
            return Ok(());
        }
        std::mem::swap(&mut bufs.cursor, &mut bufs.next);
        first = false;
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    #[test]
    fn socket_options_round_trip_on_loopback() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        // reno is built in and allowed to unprivileged sockets.
        set_tcp_congestion(stream.as_fd(), "reno").unwrap();
        assert_eq!(tcp_congestion(stream.as_fd()).unwrap(), "reno");
        assert!(set_tcp_congestion(stream.as_fd(), "no-such-cc").is_err());
        assert_eq!(tcp_info(stream.as_fd()).unwrap().tcpi_state, 1); // TCP_ESTABLISHED
    }

    #[test]
    fn monotonic_clock_moves_forward() {
        let a = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(1));
        assert!(monotonic_ns() > a && a > 0);
    }

    #[test]
    fn bpffs_is_told_apart_and_bad_paths_are_refused() {
        assert!(!is_bpffs(Path::new("/proc")).unwrap());
        assert!(is_bpffs(Path::new("/no/such/dir")).is_err());
        let e = is_bpffs(Path::new("a\0b")).unwrap_err();
        assert_eq!(e.to_string(), "path contains a NUL byte");
    }
}
