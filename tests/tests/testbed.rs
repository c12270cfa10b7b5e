//! End to end, as root: the `smoke` scenario under reno and under mlcc (namespaces, shaped
//! links, mlcc-switchd, one mlccd per host on the real BPF datapath, ring and PS trainers,
//! iperf3 cross traffic). Asserts completion, byte-for-byte integrity, that the sockets ran the
//! CC under test, and that nothing is left behind — not the speed-up, which needs longer runs
//! (README: `scripts/demo.sh`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Both tests look at machine-global names; they run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// mlccd and mlcc-switchd live in other crates: build them (cargo does not hold its build lock
/// while tests run). The trainer and the testbed are this crate's and already built.
fn bin_dir() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "build",
            "-p",
            "mlcc-scheduler",
            "--bin",
            "mlccd",
            "-p",
            "mlcc-switch-emu",
            "--bin",
            "mlcc-switchd",
        ])
        .status()
        .expect("run cargo build");
    assert!(st.success(), "building mlccd and mlcc-switchd failed");
    // The profile directory cargo built this test's binaries into holds them all.
    let dir = Path::new(env!("CARGO_BIN_EXE_mlcc-trainer"))
        .parent()
        .unwrap()
        .to_path_buf();
    for b in ["mlccd", "mlcc-switchd"] {
        assert!(dir.join(b).exists(), "{b} not in {}", dir.display());
    }
    dir
}

fn leftovers() -> Vec<String> {
    let mut v = Vec::new();
    for d in ["/run/netns", "/sys/fs/bpf", "/dev/shm"] {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("mlcc-tb-") {
                v.push(format!("{d}/{n}"));
            }
        }
    }
    v
}

#[test]
fn smoke_scenario_runs_under_reno_and_mlcc_and_leaves_nothing() {
    if !is_root() {
        eprintln!(
            "skipped smoke_scenario_runs_under_reno_and_mlcc_and_leaves_nothing: needs root (network namespaces, tc, BPF)"
        );
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        leftovers().is_empty(),
        "objects of an earlier run exist: {:?}",
        leftovers()
    );
    let bins = bin_dir();
    let out = std::env::temp_dir().join(format!("mlcc-testbed-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new(env!("CARGO_BIN_EXE_mlcc-testbed"))
        .args(["run", "--scenario", "smoke", "--cc", "reno,mlcc", "--out"])
        .arg(&out)
        .arg("--bin-dir")
        .arg(&bins)
        .output()
        .expect("run mlcc-testbed");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    println!("{stdout}");
    let dir = out.join("smoke");
    assert!(
        run.status.success(),
        "mlcc-testbed failed: {stderr}\n(logs under {})",
        dir.display()
    );
    assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());

    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let ccs = s["ccs"].as_array().unwrap();
    assert_eq!(ccs.len(), 2);
    for run in s["runs"].as_array().unwrap() {
        let cc = run["cc"].as_str().unwrap();
        let jobs = run["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 2, "{cc}: both jobs reported");
        for j in jobs {
            let name = j["job"].as_str().unwrap();
            assert_eq!(j["ok"], true, "{cc} {name}: {}", j["error"]);
            let (sent, verified) = (
                j["bytes_sent"].as_u64().unwrap(),
                j["bytes_verified"].as_u64().unwrap(),
            );
            assert!(
                sent > 1_000_000 && sent == verified,
                "{cc} {name}: sent {sent}, verified {verified}"
            );
            let socket_cc = j["socket_cc"].as_str().unwrap();
            match cc {
                "reno" => {
                    assert_eq!(socket_cc, "reno");
                    assert_eq!(j["progress_files"], false);
                }
                _ => {
                    assert!(
                        socket_cc.starts_with("mlcc_tb"),
                        "{name} ran on {socket_cc}"
                    );
                    assert_eq!(j["progress_files"], true, "{name} wrote no progress file");
                }
            }
        }
        assert!(
            run["cross_flows"].as_u64().unwrap() > 0,
            "{cc}: no iperf3 cross traffic"
        );
    }
    for f in [
        "summary.md",
        "jct.svg",
        "bandwidth-reno.svg",
        "bandwidth-mlcc.svg",
    ] {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn a_run_refuses_while_another_runs_objects_exist() {
    if !is_root() {
        eprintln!("skipped a_run_refuses_while_another_runs_objects_exist: needs root");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bins = bin_dir();
    let fake = format!("mlcc-tb-fake{}", std::process::id());
    assert!(
        Command::new("ip")
            .args(["netns", "add", &fake])
            .status()
            .unwrap()
            .success()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_mlcc-testbed"))
        .args([
            "up",
            "--scenario",
            "smoke",
            "--cc",
            "reno",
            "--out",
            "/tmp/mlcc-tb-refuse",
            "--bin-dir",
        ])
        .arg(&bins)
        .output()
        .unwrap();
    let _ = Command::new("ip").args(["netns", "del", &fake]).status();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("objects of another testbed run exist") && err.contains(&fake),
        "{err}"
    );
}
