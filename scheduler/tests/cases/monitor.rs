//! The progress directory monitor adopts valid files of live processes, reports each bad file
//! once, and drops files that vanish or whose writer exits.

use mlcc_scheduler::monitor::ProgressDir;

use crate::common;
use common::crafted;

#[test]
fn adopts_refuses_once_and_drops() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let me = std::process::id();
    let good = crafted(d, &format!("mlcc.job.worker.0.{me}"), me, |_| {});
    let rank1 = |b: &mut Vec<u8>| b[88] = 1;
    let bad = crafted(d, &format!("mlcc.job.worker.1.{me}"), me, |b| {
        rank1(b);
        b[0] = b'X'
    });
    // A dead writer: a pid that cannot exist.
    let dead = u32::MAX - 7;
    crafted(d, &format!("mlcc.job.worker.2.{dead}"), dead, |b| b[88] = 2);
    std::fs::write(d.join("unrelated"), b"x").unwrap();

    let mut m = ProgressDir::new(d);
    let r = m.rescan().unwrap();
    assert_eq!(r.added, vec![good.clone()]);
    assert_eq!(r.refused.len(), 1);
    assert!(r.refused[0].to_string().contains("bad magic"));
    assert_eq!(m.len(), 1);

    // Nothing changed: nothing reported again.
    let r = m.rescan().unwrap();
    assert!(r.added.is_empty() && r.refused.is_empty() && r.removed.is_empty());

    // The bad file is rewritten correctly: adopted now.
    crafted(d, &format!("mlcc.job.worker.1.{me}"), me, |b| {
        rank1(b);
        b.push(0)
    });
    let r = m.rescan().unwrap();
    assert!(
        r.refused[0].to_string().contains("size 513"),
        "a new version is reported"
    );
    crafted(d, &format!("mlcc.job.worker.1.{me}"), me, rank1);
    let r = m.rescan().unwrap();
    assert_eq!(r.added, vec![bad.clone()]);

    let snaps = m.read();
    assert_eq!(snaps.len(), 2);
    assert!(
        snaps
            .iter()
            .all(|s| s.as_ref().unwrap().header.job_id == "job")
    );

    std::fs::remove_file(&good).unwrap();
    let r = m.rescan().unwrap();
    assert_eq!(r.removed, vec![good]);
    assert_eq!(m.len(), 1);
}

#[test]
fn a_missing_directory_is_an_error_not_a_panic() {
    let mut m = ProgressDir::new("/nonexistent/mlcc-test-dir");
    assert!(m.rescan().is_err());
}

#[test]
fn inotify_drives_listings_and_a_periodic_rescan_backs_it_up() {
    use mlcc_scheduler::monitor::RESCAN_SLOTS;
    let dir = tempfile::tempdir().unwrap();
    let d = &dir.path().to_path_buf();
    let me = std::process::id();
    let mut m = ProgressDir::new(d);
    let r = m.poll().unwrap();
    assert!(r.added.is_empty());
    assert!(m.watching(), "inotify watch on {}", d.display());
    let base = m.listings();
    // Quiet directory: no listing until the periodic one.
    for _ in 0..3 {
        m.poll().unwrap();
    }
    assert_eq!(m.listings(), base, "listed without a change");
    // A new file is adopted at the next poll, through its inotify event.
    let f = crafted(d, &format!("mlcc.job.worker.0.{me}"), me, |_| {});
    let r = m.poll().unwrap();
    assert_eq!(r.added, vec![f.clone()]);
    assert_eq!(m.listings(), base + 1);
    // Files that are not ours also make it list, harmlessly.
    std::fs::write(d.join("unrelated"), b"x").unwrap();
    assert!(m.poll().unwrap().added.is_empty());
    // The periodic rescan happens even without events.
    let before = m.listings();
    for _ in 0..RESCAN_SLOTS {
        m.poll().unwrap();
    }
    assert_eq!(m.listings(), before + 1);
    // Removal is an event too.
    std::fs::remove_file(&f).unwrap();
    assert_eq!(m.poll().unwrap().removed, vec![f]);
    // The directory goes away: polls fail cleanly, and a new directory is watched again.
    drop(dir);
    assert!(m.poll().is_err());
    assert!(!m.watching());
    std::fs::create_dir_all(d).unwrap();
    m.poll().unwrap();
    assert!(m.watching());
    let g = crafted(d, &format!("mlcc.job.worker.1.{me}"), me, |b| b[88] = 1);
    assert_eq!(m.poll().unwrap().added, vec![g]);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_file_whose_writer_exits_is_dropped_at_the_next_poll() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = child.id();
    let f = crafted(d, &format!("mlcc.job.worker.0.{pid}"), pid, |_| {});
    let mut m = ProgressDir::new(d);
    assert_eq!(m.poll().unwrap().added, vec![f.clone()]);
    assert!(m.poll().unwrap().removed.is_empty(), "writer alive");
    child.kill().unwrap();
    // Not reaped yet: /proc/<pid> still exists (a zombie), but the writer is gone, and the
    // pidfd says so.
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(m.poll().unwrap().removed, vec![f]);
    assert!(m.is_empty());
    let _ = child.wait();
}

/// The writers are asked about in one poll: of several, only the one that exited is dropped,
/// whatever its place among them.
#[test]
fn of_several_writers_only_the_one_that_exits_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut children: Vec<_> = (0..4)
        .map(|_| {
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap()
        })
        .collect();
    let files: Vec<_> = children
        .iter()
        .enumerate()
        .map(|(rank, c)| {
            let pid = c.id();
            // The header's rank (byte 88) matches the file's name.
            crafted(d, &format!("mlcc.job.worker.{rank}.{pid}"), pid, |b| {
                b[88] = rank as u8
            })
        })
        .collect();
    let mut m = ProgressDir::new(d);
    assert_eq!(m.poll().unwrap().added, files);
    children[2].kill().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(m.poll().unwrap().removed, vec![files[2].clone()]);
    assert_eq!(m.len(), 3);
    assert_eq!(m.read().len(), 3);
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// A writer preempted inside its update holds the sequence lock through every retry of a
/// slot's read. Its file then gives the last consistent counters, marked stale, rather than
/// dropping out of the slot (which took its process's share out of its flow groups for a
/// slot: the PS-Lite namespace test saw one worker's bytes alone under load). A file never
/// read consistently is reported busy.
#[test]
fn a_file_busy_through_every_retry_gives_its_last_counters() {
    use mlcc_scheduler::progress::abi;
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let me = std::process::id();
    // Counters follow the header: the sequence word, then bytes sent.
    let seq = abi::HEADER_SIZE as u64;
    let sent = seq + 8;
    let a = crafted(d, &format!("mlcc.job.worker.0.{me}"), me, |b| {
        b[sent as usize..sent as usize + 8].copy_from_slice(&7u64.to_le_bytes())
    });
    let mut m = ProgressDir::new(d);
    assert_eq!(m.rescan().unwrap().added, vec![a.clone()]);
    let first = m.read();
    let s = first[0].as_ref().unwrap();
    assert_eq!((s.snapshot.bytes_sent, s.stale), (7, false));

    let write = |p: &std::path::Path, at: u64, v: u64| {
        let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
        f.write_all_at(&v.to_le_bytes(), at).unwrap();
    };
    // The writer takes the lock and is stopped half-way through its update.
    write(&a, seq, 1);
    write(&a, sent, 9);
    let b = crafted(d, &format!("mlcc.job.worker.1.{me}"), me, |b| {
        b[88] = 1;
        b[seq as usize] = 3;
    });
    assert_eq!(m.rescan().unwrap().added, vec![b.clone()]);
    let busy = m.read();
    assert_eq!(busy.len(), 2);
    let s = busy[0].as_ref().unwrap();
    assert_eq!(
        (s.path, s.snapshot.bytes_sent, s.stale),
        (a.as_path(), 7, true)
    );
    let e = busy[1].as_ref().unwrap_err();
    assert!(e.to_string().contains("sequence lock busy"), "{e}");

    // Released: the new counters, fresh.
    write(&a, seq, 2);
    let after = m.read();
    let s = after.iter().flatten().next().unwrap();
    assert_eq!((s.snapshot.bytes_sent, s.stale), (9, false));
}
