//! Local trust boundaries of mlccd (deploy/SECURITY.md): which progress files it believes and
//! who may reach its admin socket.

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use mlcc_scheduler::daemon::bind_admin_as;
use mlcc_scheduler::monitor::ProgressDir;
use mlcc_scheduler::progress::ProgressPolicy;

use crate::common;
use common::crafted;

fn chmod(p: &std::path::Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[test]
fn files_others_can_write_are_refused_until_fixed() {
    let dir = tempfile::tempdir().unwrap();
    let me = std::process::id();
    let p = crafted(dir.path(), &format!("mlcc.job.worker.0.{me}"), me, |_| {});
    for mode in [0o666, 0o660, 0o602] {
        chmod(&p, mode);
        let mut m = ProgressDir::new(dir.path());
        let r = m.rescan().unwrap();
        assert!(r.added.is_empty(), "mode {mode:o} adopted");
        let e = r.refused[0].to_string();
        assert!(e.contains("lets other users write it"), "{e}");
    }
    // Refused once; fixed by chmod alone (no new content, no new mtime), adopted next scan.
    let mut m = ProgressDir::new(dir.path());
    assert_eq!(m.rescan().unwrap().refused.len(), 1);
    assert_eq!(m.rescan().unwrap().refused.len(), 0, "reported once");
    chmod(&p, 0o640);
    assert_eq!(m.rescan().unwrap().added, vec![p]);
}

#[test]
fn only_allowed_owners_when_a_list_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let me = std::process::id();
    let p = crafted(dir.path(), &format!("mlcc.job.worker.0.{me}"), me, |_| {});
    let uid = std::fs::metadata(&p).unwrap().uid();
    let policy = |allowed_uids| ProgressPolicy {
        allowed_uids,
        ..Default::default()
    };
    let mut m = ProgressDir::with_policy(dir.path(), policy(vec![uid + 1]));
    let r = m.rescan().unwrap();
    assert!(r.added.is_empty());
    let e = r.refused[0].to_string();
    assert!(
        e.contains(&format!("owned by uid {uid}")) && e.contains("progress_uids"),
        "{e}"
    );
    let mut m = ProgressDir::with_policy(dir.path(), policy(vec![uid + 1, uid]));
    assert_eq!(m.rescan().unwrap().added, vec![p]);
}

#[test]
fn a_file_must_belong_to_the_user_of_the_process_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let me = std::process::id();
    // Root's files are trusted, so as root the forged file is one owned by another user
    // naming this (root) process; otherwise our own file naming init (root's process).
    let (pid, forged_owner) = if is_root() {
        (me, Some(65534))
    } else {
        (1, None)
    };
    let p = crafted(dir.path(), &format!("mlcc.job.worker.0.{pid}"), pid, |_| {});
    if let Some(uid) = forged_owner {
        std::os::unix::fs::chown(&p, Some(uid), None).unwrap();
    }
    let mut m = ProgressDir::new(dir.path());
    let r = m.rescan().unwrap();
    assert!(r.added.is_empty(), "a forged file was adopted");
    let e = r.refused[0].to_string();
    assert!(
        e.contains(&format!("names pid {pid}, which runs as uid")),
        "{e}"
    );
    // The same file is fine for a policy that trusts any writer (tests, tools).
    let mut m = ProgressDir::with_policy(
        dir.path(),
        ProgressPolicy {
            trust_any_writer: true,
            ..Default::default()
        },
    );
    assert_eq!(m.rescan().unwrap().added, vec![p]);
}

#[test]
fn symlinks_are_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let me = std::process::id();
    let real = crafted(dir.path(), "target-file", me, |_| {});
    let link = dir.path().join(format!("mlcc.job.worker.0.{me}"));
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let mut m = ProgressDir::new(dir.path());
    let r = m.rescan().unwrap();
    assert!(r.added.is_empty(), "followed a symlink");
    // And opened directly (the race the directory listing cannot see), O_NOFOLLOW refuses it.
    let e = mlcc_scheduler::progress::ProgressReader::open_trusted(&link, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("mlcc.job.worker.0"), "{e}");
}

#[tokio::test]
async fn admin_socket_is_0660_and_given_to_the_admin_group() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("run/mlccd.sock");
    // Root may give it any group; another user only one of its own (its primary here).
    let probe = dir.path().join("probe");
    std::fs::write(&probe, b"").unwrap();
    let gid = if is_root() {
        4242
    } else {
        std::fs::metadata(&probe).unwrap().gid()
    };
    let _l = bind_admin_as(&sock, Some(&gid.to_string())).unwrap();
    let meta = std::fs::symlink_metadata(&sock).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o660);
    assert_eq!(meta.gid(), gid);
    let e = bind_admin_as(&dir.path().join("other.sock"), Some("no-such-group-mlcc"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no-such-group-mlcc"), "{e}");
}
