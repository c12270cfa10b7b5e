//! The few system and libbpf calls that neither std nor libbpf-rs wrap. Every `unsafe` block of
//! the crate lives here, each next to the reason it is sound.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `SO_NETNS_COOKIE` (Linux 5.14); libc does not export it for every target.
const SO_NETNS_COOKIE: libc::c_int = 71;
/// `BPF_FS_MAGIC` from linux/magic.h.
const BPF_FS_MAGIC: i64 = 0xcafe4a11;
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
    // SAFETY: `buf` is valid for `len` writable bytes and the kernel writes at most `len`.
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

/// `TCP_INFO` of a TCP socket.
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<libc::tcp_info> {
    // SAFETY: tcp_info is plain old data, for which all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is valid for `len` writable bytes and the kernel writes at most `len`.
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
    let mut buf = [0u8; CC_NAME_MAX];
    let n = getsockopt_bytes(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, &mut buf)?;
    let name = &buf[..n];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

pub fn set_tcp_congestion(fd: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    let len = libc::socklen_t::try_from(name.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "name too long"))?;
    // SAFETY: `name` is valid for `len` readable bytes.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            len,
        )
    };
    if ret != 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Sets a socket's send buffer to `bytes` even above `net.core.wmem_max` (SO_SNDBUFFORCE,
/// needs CAP_NET_ADMIN).
pub fn force_send_buffer(fd: BorrowedFd<'_>, bytes: i32) -> io::Result<()> {
    // SAFETY: `bytes` is a valid c_int for the duration of the call.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUFFORCE,
            (&bytes as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if ret != 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    // SAFETY: an all-zero timespec is valid and clock_gettime only writes it.
    let mut ts: libc::timespec = unsafe { zeroed() };
    // SAFETY: `ts` is a valid timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
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
    // SAFETY: setns only reads the fd; it affects the calling thread's namespace.
    let ret = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if ret != 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub fn euid_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn is_bpffs(path: &Path) -> io::Result<bool> {
    let c = cpath(path)?;
    // SAFETY: an all-zero statfs is valid; statfs writes it.
    let mut st: libc::statfs = unsafe { zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` is writable.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_type as i64 == BPF_FS_MAGIC)
}

pub fn mount_bpffs(path: &Path) -> io::Result<()> {
    let target = cpath(path)?;
    let fstype = c"bpf";
    // SAFETY: all pointers are NUL-terminated strings; no data argument.
    let ret = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if ret != 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub fn obj_pin(fd: BorrowedFd<'_>, path: &Path) -> io::Result<()> {
    let c = cpath(path)?;
    // SAFETY: `c` is NUL-terminated; the fd is borrowed for the call.
    libbpf_ret(unsafe { libbpf_sys::bpf_obj_pin(fd.as_raw_fd(), c.as_ptr()) }).map(drop)
}

pub fn obj_get(path: &Path) -> io::Result<OwnedFd> {
    let c = cpath(path)?;
    // SAFETY: `c` is NUL-terminated.
    let fd = libbpf_ret(unsafe { libbpf_sys::bpf_obj_get(c.as_ptr()) })?;
    // SAFETY: on success bpf_obj_get returns a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A `BPF_CGROUP_SOCK_OPS` link of `prog` on `cgroup`.
pub fn link_sockops(prog: BorrowedFd<'_>, cgroup: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: both fds are borrowed for the call; NULL opts are allowed.
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
    // SAFETY: `info` is writable for `len` bytes.
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
    // SAFETY: no pointers involved.
    let fd = libbpf_ret(unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) })?;
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
