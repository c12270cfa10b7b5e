//! The `mlcc-switchd` binary: serving with JSON logs, stopping on SIGTERM, and the bench
//! subcommand printing valid JSON (a small run; no timing is asserted).

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::switchd;

const BIN: &str = env!("CARGO_BIN_EXE_mlcc-switchd");

/// A topology file of the test's own: tests run in parallel, and one rewriting a shared file
/// (truncated, then written) while another's server read it made that server exit on an
/// empty topology.
fn topology_file(test: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!(
        "mlcc-switchd-cli-{}-{test}.toml",
        std::process::id()
    ));
    std::fs::write(
        &p,
        "[generate]\nkind = \"single-switch\"\nhosts = 8\nhost_link = \"10Gbit\"\n",
    )
    .unwrap();
    p
}

/// `mlcc-switchd bench` against `addr`: 4 hosts × 3 flows, 3 measured slots after one warm-up.
fn bench(addr: &str, extra: &[&str]) -> serde_json::Value {
    let out = Command::new(BIN)
        .args(["bench", "--target", addr, "--hosts", "4", "--flows", "3"])
        .args(["--slots", "3", "--warmup-slots", "1"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{extra:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("bench prints JSON")
}

/// No timing assertions: on a loaded machine a debug build can miss the τ/3 deadline, but every
/// message of [`bench`]'s measured slots is accounted for, as answered or as an error, and none
/// of the warm-up slot's; whatever was not applied is counted as refused, with the reason.
fn assert_accounted(report: &serde_json::Value) {
    let n = |v: &serde_json::Value| v.as_u64().unwrap();
    let (fetch, update) = (
        &report["rpc"]["fetch_feedback"],
        &report["rpc"]["update_schedule"],
    );
    assert_eq!(n(&fetch["count"]) + n(&fetch["errors"]), 4 * 3, "{report}");
    assert_eq!(
        n(&update["count"]) + n(&update["errors"]),
        4 * 3,
        "{report}"
    );
    assert_eq!(
        n(&report["accepted_items"]),
        3 * n(&update["count"]),
        "{report}"
    );
    assert_eq!(
        n(&report["refused"]["flow_updates"]) + n(&report["accepted_items"]),
        4 * 3 * 3,
        "{report}"
    );
    assert!(report["limit"].is_string(), "{report}");
}

#[test]
fn serves_benches_and_stops_on_sigterm() {
    let topo = topology_file("serve");
    let (mut child, addr, message, lines) = switchd(
        "--metrics-listen 127.0.0.1:0 --tau 20ms --horizon 4 --feedback-mode all-others",
        &topo,
    );
    let child = &mut child.0;
    // The port is ephemeral: the address is the one the log announced.
    assert_eq!(message, "serving mlcc.v1.Switch");

    let pid = child.id().to_string();
    // Session mode is the default; unary mode is the other way in.
    for mode in ["session", "unary"] {
        let report = bench(&addr, &["--mode", mode, "--server-pid", &pid]);
        println!("{mode}: {report}");
        assert_eq!(report["mode"], mode);
        assert_eq!(report["warmup_slots"], 1);
        assert_accounted(&report);
        assert_eq!(report["rejected_items"], 0, "{report}");
        assert!(report["bytes_per_slot_per_host"]["total"].as_u64().unwrap() > 0);
        assert!(report["cpu"]["server"]["cpu_secs"].is_number(), "{report}");
        assert!(
            report["cpu"]["generator"]["cpu_secs"].is_number(),
            "{report}"
        );
    }

    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("SIGTERM")), "{rest:?}");
    let _ = std::fs::remove_file(topo);
}

/// `bench-baseline` serves the same service with no table: the generator drives it like the
/// switch, and every update it sends is answered as applied.
#[test]
fn the_transport_baseline_answers_every_message() {
    let topo = topology_file("baseline");
    let (_child, addr, message, _log) = switchd("bench-baseline --tau 20ms --horizon 4", &topo);
    assert!(message.contains("baseline"), "{message}");
    let report = bench(&addr, &[]);
    assert_accounted(&report);
    assert_eq!(report["switch"], "sw1", "{report}");
    let _ = std::fs::remove_file(topo);
}

#[test]
fn config_errors_are_clear_and_exit_2() {
    let out = Command::new(BIN)
        .args(["--switch", "sw1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--topology"), "{err}");
}
