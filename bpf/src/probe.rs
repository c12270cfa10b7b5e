//! Checks, before loading, that this kernel can run the CC, so the operator gets one clear
//! sentence instead of a verifier log.

use std::path::Path;

use libbpf_rs::btf::Btf;
use libbpf_rs::btf::types::Struct;

use crate::error::DatapathError;
use crate::sys;

const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// `cong_control(sk, ack, flag, rs)` appeared in Linux 6.10; older kernels pass (sk, rs) and
/// would run our program with the wrong arguments.
const MIN_KERNEL: (u32, u32) = (6, 10);

pub fn probe() -> Result<(), DatapathError> {
    if !sys::euid_is_root() {
        return Err(DatapathError::NotPrivileged("loading BPF programs"));
    }
    if !Path::new(VMLINUX_BTF).exists() {
        return Err(DatapathError::Unsupported(format!(
            "{VMLINUX_BTF} is missing: the kernel was built without CONFIG_DEBUG_INFO_BTF"
        )));
    }
    let btf = Btf::from_vmlinux().map_err(DatapathError::bpf("reading kernel BTF"))?;
    if btf
        .type_by_name::<Struct<'_>>("bpf_struct_ops_tcp_congestion_ops")
        .is_none()
    {
        return Err(DatapathError::Unsupported(
            "no BPF struct_ops for tcp_congestion_ops (needs CONFIG_BPF_JIT and Linux 5.13+)"
                .into(),
        ));
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_err(DatapathError::io("reading /proc/sys/kernel/osrelease"))?;
    match parse_release(&release) {
        Some(v) if v >= MIN_KERNEL => Ok(()),
        Some((major, minor)) => Err(DatapathError::Unsupported(format!(
            "Linux {major}.{minor} has the old cong_control signature; mlcc needs {}.{}+",
            MIN_KERNEL.0, MIN_KERNEL.1
        ))),
        None => Err(DatapathError::Unsupported(format!(
            "cannot parse kernel release {release:?}"
        ))),
    }
}

fn parse_release(s: &str) -> Option<(u32, u32)> {
    let mut it = s.trim().split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_kernel_releases() {
        assert_eq!(super::parse_release("6.18.44-fc-v445\n"), Some((6, 18)));
        assert_eq!(super::parse_release("5.15.0-91-generic"), Some((5, 15)));
        assert_eq!(super::parse_release("garbage"), None);
    }
}
