//! Unix-socket permissions (docs/design.md §16: the Admin API on a Unix socket, mode 0660, group
//! configurable): who may talk to a daemon's local control socket is decided by the file system.

use std::ffi::CString;
use std::io;
use std::path::Path;

/// The gid of `group`: a numeric gid, or a group name looked up through NSS (getgrnam_r, so
/// LDAP/sssd groups work too).
pub fn resolve_group(group: &str) -> io::Result<u32> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    let name = CString::new(group).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("group {group:?} contains NUL"),
        )
    })?;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: all-zero is a valid `struct group` (pointers null, gid 0).
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::group = std::ptr::null_mut();
        // SAFETY: name is NUL-terminated; grp, buf (with its true length) and result are valid
        // for writes for the duration of the call; nothing is kept after it. Raw because rustix
        // does no NSS lookups (LDAP/sssd groups need glibc's getgrnam_r).
        let rc = unsafe {
            libc::getgrnam_r(
                name.as_ptr(),
                &mut grp,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        if result.is_null() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no group named {group:?} (create it, e.g. groupadd --system {group})"),
            ));
        }
        return Ok(grp.gr_gid);
    }
}

/// Makes the socket at `path` mode 0660, owned by `gid` when given: its owner and that
/// group's members may connect, nobody else (connecting needs write permission).
pub fn restrict_socket(path: &Path, gid: Option<u32>) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(gid) = gid {
        std::os::unix::fs::chown(path, None, Some(gid)).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("giving {} to gid {gid}: {e}", path.display()),
            )
        })?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_resolve_by_number_and_name() {
        assert_eq!(resolve_group("4242").unwrap(), 4242);
        // "root" is group 0 on every Linux system.
        assert_eq!(resolve_group("root").unwrap(), 0);
        let e = resolve_group("no-such-group-mlcc").unwrap_err().to_string();
        assert!(e.contains("no-such-group-mlcc"), "{e}");
    }
}
