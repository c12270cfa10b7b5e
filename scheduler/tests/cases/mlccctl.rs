//! mlccctl against a running mlccd over its Admin Unix socket: every subcommand, tables and JSON.

use std::process::Command;
use std::time::Duration;

use mlcc_core::SlotConfig;
use mlcc_core::topology::TopologyBuilder;
use mlcc_core::units::parse_rate;
use mlcc_scheduler::config::Config;
use mlcc_scheduler::daemon;
use mlcc_scheduler::datapath::DatapathPort;
use mlcc_scheduler::sockets::StaticSockets;
use tokio::net::TcpListener;

fn ctl(sock: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mlccctl"))
        .arg("--socket")
        .arg(sock)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mlccctl_drives_every_admin_call() {
    let mut b = TopologyBuilder::new();
    let cap = parse_rate("1Gbit").unwrap();
    // No emulator address: the switch's links are not scheduled remotely.
    b.add_switch("sw1", 0, None);
    for i in 1..=2 {
        let h = format!("h{i}");
        b.add_host(&h, Some(format!("10.0.0.{i}").parse().unwrap()), None);
        b.add_duplex(&h, "sw1", cap);
    }
    let t = b.build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("admin.sock");
    let pl = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slots = SlotConfig::new(Duration::from_millis(30), 10).unwrap();
    let cfg = Config {
        admin_socket: sock.clone(),
        ..crate::common::daemon_config("h1", dir.path(), pl.local_addr().unwrap(), slots)
    };
    let admin = daemon::bind_admin(&sock).unwrap();
    let running = daemon::start(
        cfg,
        t,
        DatapathPort::dry_run(),
        Box::new(StaticSockets::default()),
        pl,
        Some(admin),
        None,
    )
    .await
    .unwrap();
    let s = sock.clone();
    let r = tokio::task::spawn_blocking(move || {
        // A few slots, so the status has one behind it.
        std::thread::sleep(Duration::from_millis(150));
        let (ok, out, err) = ctl(&s, &["status"]);
        assert!(ok, "{err}");
        assert!(out.contains("host      h1"), "{out}");
        assert!(out.contains("dry run"), "{out}");

        let (ok, out, err) = ctl(
            &s,
            &[
                "job",
                "add",
                "j1",
                "--arch",
                "allreduce",
                "--model",
                "1GB",
                "--member",
                "h1:worker:0",
                "--member",
                "h2:worker:1",
            ],
        );
        assert!(ok, "{err}");
        assert!(out.contains("job j1 added"), "{out}");
        let (ok, _, err) = ctl(
            &s,
            &[
                "job",
                "add",
                "bad",
                "--arch",
                "allreduce",
                "--model",
                "1GB",
                "--member",
                "h1:worker:0",
                "--member",
                "nowhere:worker:1",
            ],
        );
        assert!(!ok && err.contains("nowhere"), "{err}");

        let (ok, out, _) = ctl(&s, &["--json", "jobs"]);
        assert!(ok);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v[0]["job_id"], "j1");
        assert_eq!(v[0]["members"][1]["host"], "h2");
        // An added job says nothing of its length.
        assert_eq!(v[0]["total_iterations"], 0, "{v}");

        // The admin job's flow h1 -> h2 appears once a slot has planned it.
        let mut flows = serde_json::Value::Null;
        for _ in 0..50 {
            let (ok, out, _) = ctl(&s, &["flows", "--json"]);
            assert!(ok);
            flows = serde_json::from_str(&out).unwrap();
            if flows["flows"].as_array().is_some_and(|a| !a.is_empty()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(30));
        }
        assert_eq!(flows["flows"][0]["flow_id"], "j1/h1>h2/ring", "{flows}");
        let (ok, out, _) = ctl(&s, &["flows", "--job", "j1"]);
        assert!(ok && out.contains("j1/h1>h2/ring"), "{out}");
        let (ok, out, _) = ctl(&s, &["links"]);
        assert!(ok && out.contains("h1->sw1"), "{out}");
        let (ok, out, _) = ctl(&s, &["--json", "switches"]);
        assert!(ok && out.starts_with('['), "{out}");
        let (ok, out, _) = ctl(&s, &["top", "--count", "2", "--interval", "50ms"]);
        assert!(ok && out.contains("j1/h1>h2/ring"), "{out}");

        let (ok, out, _) = ctl(&s, &["job", "remove", "j1"]);
        assert!(ok && out.contains("removed"), "{out}");
        let (ok, _, err) = ctl(&s, &["job", "remove", "j1"]);
        assert!(!ok && err.contains("no job"), "{err}");
    })
    .await;
    running.stop().await;
    r.unwrap();
    // No daemon: a clear error, not a hang.
    let (ok, _, err) = ctl(&dir.path().join("none.sock"), &["status"]);
    assert!(!ok && err.contains("cannot reach mlccd"), "{err}");
}
