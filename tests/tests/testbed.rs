//! End to end, as root: the `smoke` scenario under reno, under mlcc (namespaces, shaped
//! links, mlcc-switchd, one mlccd per host on the real BPF datapath, ring and PS trainers,
//! iperf3 cross traffic) and under the peer baseline MLTCP over Reno and over CUBIC (its BPF
//! CC, one mltcp-feeder per host). Asserts completion, byte-for-byte integrity, that the sockets ran the
//! CC under test, and that nothing is left behind — not the speed-up, which needs longer runs
//! (README: `scripts/demo.sh`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Both tests look at machine-global names; they run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// mlccd, mltcp-feeder and mlcc-switchd live in other crates: build them (cargo does not hold its build lock
/// while tests run). The trainer and the testbed are this crate's and already built.
///
/// `cargo test --workspace --no-run` and not `cargo build -p ...`: under `cargo test
/// --workspace` (CI) it finds every binary fresh, where `cargo build` resolves the crates'
/// features without the dev-dependencies' and rebuilds half the workspace (2 minutes of CI).
/// Run alone (`cargo test -p mlcc-testbed`), it builds the workspace's tests once.
fn bin_dir() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "test",
        "--workspace",
        "--no-run",
        "--quiet",
    ]);
    if !cfg!(debug_assertions) {
        build.arg("--release");
    }
    let st = build.status().expect("run cargo test --no-run");
    assert!(
        st.success(),
        "building mlccd, mltcp-feeder and mlcc-switchd failed"
    );
    // The profile directory cargo built this test's binaries into holds them all.
    let dir = Path::new(env!("CARGO_BIN_EXE_mlcc-trainer"))
        .parent()
        .unwrap()
        .to_path_buf();
    for b in ["mlccd", "mltcp-feeder", "mlcc-switchd"] {
        assert!(dir.join(b).exists(), "{b} not in {}", dir.display());
    }
    dir
}

/// Whether a root test may run: not as another user (it says why it is skipped, needing
/// `needs`), and only one at a time with nothing of an earlier run left. Hold the guard for the
/// test's length.
fn alone_as_root(test: &str, needs: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    if !is_root() {
        eprintln!("skipped {test}: needs {needs}");
        return None;
    }
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        leftovers().is_empty(),
        "objects of an earlier run exist: {:?}",
        leftovers()
    );
    Some(serial)
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
fn smoke_scenario_runs_under_reno_mlcc_mltcp_and_isolated_and_leaves_nothing() {
    let Some(_serial) = alone_as_root(
        "smoke_scenario_runs_under_reno_mlcc_mltcp_and_isolated_and_leaves_nothing",
        "root (network namespaces, tc, BPF)",
    ) else {
        return;
    };
    let bins = bin_dir();
    let out = std::env::temp_dir().join(format!("mlcc-testbed-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new(env!("CARGO_BIN_EXE_mlcc-testbed"))
        .args([
            "run",
            "--scenario",
            "smoke",
            "--cc",
            "reno,mlcc,mltcp,mltcp/cubic,isolated/reno",
            "--out",
        ])
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
    assert_eq!(ccs.len(), 5);
    // Every job alone on its hosts: the lower bound beside each CC, and how much of what
    // contention costs under reno mlcc won back.
    assert!(s["isolated_mean_jct_s"].as_f64().unwrap() > 0.0);
    let mlcc = ccs.iter().find(|c| c["cc"] == "mlcc").unwrap();
    assert!(mlcc["contention_recovered"].is_f64(), "{mlcc}");
    assert_eq!(
        ccs.iter().find(|c| c["cc"] == "isolated").unwrap()["jct_per_job_s"]
            .as_object()
            .unwrap()
            .len(),
        2
    );
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
                "reno" | "isolated" => {
                    assert_eq!(socket_cc, "reno");
                    assert_eq!(j["progress_files"], false);
                }
                // The BPF CCs are registered per run under a unique name.
                _ => {
                    let prefix = match cc {
                        "mltcp" => "mltcp_tb",
                        "mltcp/cubic" => "mltcpc_tb",
                        _ => "mlcc_tb",
                    };
                    assert!(
                        socket_cc.starts_with(prefix),
                        "{cc}: {name} ran on {socket_cc}"
                    );
                    assert_eq!(j["progress_files"], true, "{name} wrote no progress file");
                }
            }
        }
        if cc == "isolated" {
            assert_eq!(
                run["cross_flows"], 0,
                "isolated jobs run without cross traffic"
            );
        } else {
            assert!(
                run["cross_flows"].as_u64().unwrap() > 0,
                "{cc}: no iperf3 cross traffic"
            );
        }
    }
    // The feeders found the trainers' sockets on each MLTCP CC and fed them.
    for cc in ["mltcp", "mltcp+cubic"] {
        let logs = dir.join("rep1").join(cc).join("logs");
        let fed = std::fs::read_dir(&logs)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("mltcp-feeder-"))
            .flat_map(|e| {
                std::fs::read_to_string(e.path())
                    .unwrap()
                    .lines()
                    .filter_map(|l| {
                        let (_, rest) = l.split_once(" processes, ")?;
                        rest.split_once(" sockets fed")?.0.parse::<u32>().ok()
                    })
                    .collect::<Vec<_>>()
            })
            .max()
            .unwrap_or(0);
        assert!(
            fed > 0,
            "no mltcp-feeder fed a socket (logs in {})",
            logs.display()
        );
    }
    for f in [
        "summary.md",
        "jct.svg",
        "bandwidth-reno.svg",
        "bandwidth-mlcc.svg",
        "bandwidth-mltcp.svg",
        "bandwidth-mltcp+cubic.svg",
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

/// A tonic client of mlccd's Admin service over its Unix socket.
async fn admin_connect(
    path: PathBuf,
) -> Result<
    mlcc_proto::v1::admin_client::AdminClient<tonic::transport::Channel>,
    tonic::transport::Error,
> {
    // The URI is required by the API and ignored by the connector.
    let ch = tonic::transport::Endpoint::from_static("http://mlccd.admin")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let p = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(p).await?,
                ))
            }
        }))
        .await?;
    Ok(mlcc_proto::v1::admin_client::AdminClient::new(ch))
}

/// A slot with data waiting in which the flow moved less than this share of its rate is
/// counted as stalled rather than averaged in: a flow at 187 Mbit/s that delivers 0–20 for one
/// slot (seen about once per 20–60 busy slots, both directions, cause not found yet) would
/// alone add 0.5–2 points to the mean. The test bounds how often that happens instead.
const STALLED: f64 = 0.25;

/// One flow in one slot, as its mlccd reported it.
#[derive(Clone, Copy, Debug)]
struct SlotSample {
    /// The rate mlccd ordered to the datapath for this slot (bytes/s): the plan's, or more
    /// where it paces into free capacity.
    planned: f64,
    /// What the datapath's acked counters moved by over the previous slot (bytes/s).
    achieved_before: f64,
    sent: u64,
    /// Written by the application, not acked yet: data waiting on the network.
    backlog: Option<u64>,
}

/// docs/design.md §11 end to end on real parts: two hosts, one mlcc-switchd, one synthetic sender per
/// host writing progress (a two-rank ring job of the trainer), mlccd on the BPF datapath. Each
/// mlccd is sampled over Admin every ~15 ms; per flow and slot the rate it enforced is compared
/// with what was acked in that slot, over the slots in which the flow had data waiting for the
/// whole slot (a ring step waiting on its peer, or an iteration's tail, cannot follow any rate)
/// and its rate was the previous slot's; slots right after a rate change are reported apart.
#[test]
fn two_hosts_achieved_rates_follow_the_plan_and_the_bytes_arrive_intact() {
    const SCENARIO: &str = "e2e-two-hosts";
    let Some(_serial) = alone_as_root(
        "two_hosts_achieved_rates_follow_the_plan_and_the_bytes_arrive_intact",
        "root (network namespaces, tc, BPF)",
    ) else {
        return;
    };
    let mut seen: std::collections::BTreeMap<
        (String, String),
        std::collections::BTreeMap<u64, SlotSample>,
    > = Default::default();
    let mut polls = 0u32;
    let (out, s) = run_sampling(SCENARIO, &["h1", "h2"], |h, c, rt| {
        match within_poll(
            rt,
            c.list_flows(mlcc_proto::v1::ListFlowsRequest::default()),
        ) {
            Ok(Some(r)) => {
                polls += 1;
                for f in r.flows {
                    seen.entry((h.to_string(), f.flow_id.clone()))
                        .or_default()
                        .entry(r.slot)
                        .or_insert(SlotSample {
                            planned: f.enforced_rate_bytes_per_sec,
                            achieved_before: f.achieved_rate_bytes_per_sec,
                            sent: f.sent_bytes,
                            backlog: f.app_backlog_bytes,
                        });
                }
                true
            }
            Ok(None) => true,
            Err(_) => false,
        }
    });

    assert_one_job_intact_on_mlcc(&s);

    let flows: Vec<_> = seen
        .iter()
        .filter(|((_, id), _)| id.starts_with("ring-e2e"))
        .collect();
    println!("{polls} Admin polls; flows sampled: {}", flows.len());
    assert_eq!(flows.len(), 2, "one flow per host: {:?}", seen.keys());
    for ((host, id), slots) in flows {
        let mut errors = Vec::new();
        let mut planned = Vec::new();
        let mut worst = Vec::new();
        let mut stalled = 0usize;
        let mut changed = Vec::new();
        for (&n, a) in slots {
            let Some(b) = slots.get(&(n + 1)) else {
                continue;
            };
            // Data waiting on the network for the whole slot, as mlccd itself decides when a
            // slot's rate sample counts (`FlowState::was_ready`): a backlog at both ends, in the
            // same iteration (sent did not start over).
            let waiting = |s: &SlotSample| s.backlog.is_some_and(|b| b >= 64 * 1024);
            let busy = a.planned > 0.0 && waiting(a) && waiting(b) && b.sent > a.sent;
            // A slot whose rate differs from the one before cannot follow it at once: what
            // the old rate put in flight is acked in it, and the order lands when mlccd's slot
            // work is done (a debug build on a loaded machine: tens of ms). Those slots are
            // reported apart.
            let steady = slots
                .get(&(n.wrapping_sub(1)))
                .is_some_and(|p| (p.planned - a.planned).abs() <= 0.05 * a.planned);
            if busy && b.achieved_before < STALLED * a.planned {
                stalled += 1;
            } else if busy && !steady {
                changed.push((b.achieved_before - a.planned).abs() / a.planned);
            } else if busy {
                errors.push((b.achieved_before - a.planned).abs() / a.planned);
                planned.push(a.planned);
                worst.push((n, a.planned, b.achieved_before, a.backlog, b.backlog));
            }
        }
        worst.sort_by(|x, y| {
            let e = |w: &(u64, f64, f64, Option<u64>, Option<u64>)| (w.2 - w.1).abs() / w.1;
            e(y).total_cmp(&e(x))
        });
        let first = slots.keys().next().copied().unwrap_or(0);
        println!(
            "{host} {id}: worst slots (slot, enforced Mbit/s, achieved, backlog at start, at end): {:?}",
            worst
                .iter()
                .take(8)
                .map(|w| (
                    w.0 - first,
                    (w.1 * 8e-6) as u32,
                    (w.2 * 8e-6) as u32,
                    w.3,
                    w.4
                ))
                .collect::<Vec<_>>()
        );
        assert!(
            errors.len() >= 30,
            "{host} {id}: only {} whole busy slots at a steady rate sampled of {}",
            errors.len(),
            slots.len()
        );
        let mean = errors.iter().sum::<f64>() / errors.len() as f64;
        let busy = errors.len() + changed.len() + stalled;
        planned.sort_by(f64::total_cmp);
        let mbit = |b: f64| b * 8.0 / 1e6;
        println!(
            "{host} {id}: {busy} busy slots of {} sampled: {} at a steady rate, {} right after a \
             rate change, {stalled} stalled; steady rates {:.1}..{:.1} Mbit/s (median {:.1}); \
             mean |achieved - enforced| / enforced {:.1} % at a steady rate, {:.1} % after a \
             change",
            slots.len(),
            errors.len(),
            changed.len(),
            mbit(planned[0]),
            mbit(planned[planned.len() - 1]),
            mbit(planned[planned.len() / 2]),
            mean * 100.0,
            changed.iter().sum::<f64>() / changed.len().max(1) as f64 * 100.0
        );
        assert!(
            mean <= 0.10,
            "{host} {id}: achieved rates miss the plan by {:.1} % on average",
            mean * 100.0
        );
        assert!(
            stalled * 10 <= busy,
            "{host} {id}: {stalled} of {busy} busy slots stalled"
        );
    }
    std::fs::remove_dir_all(&out).unwrap();
}

/// The job completed and every byte arrived as sent (the trainer checks each byte against the
/// sender's pattern, which is stronger than a checksum), on the mlcc BPF CC.
fn assert_one_job_intact_on_mlcc(s: &serde_json::Value) {
    let jobs = s["runs"][0]["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1);
    let (sent, verified) = (
        jobs[0]["bytes_sent"].as_u64().unwrap(),
        jobs[0]["bytes_verified"].as_u64().unwrap(),
    );
    assert_eq!(jobs[0]["ok"], true, "{}", jobs[0]["error"]);
    assert!(
        sent > 10_000_000 && sent == verified,
        "sent {sent}, verified {verified}"
    );
    assert!(
        jobs[0]["socket_cc"]
            .as_str()
            .unwrap()
            .starts_with("mlcc_tb"),
        "the job ran on {}",
        jobs[0]["socket_cc"]
    );
}

type AdminClient = mlcc_proto::v1::admin_client::AdminClient<tonic::transport::Channel>;

/// One Admin call of a [`run_sampling`] poll, given 50 ms: `Ok(Some(reply))`, `Ok(None)` when
/// it was late (the poll goes on), `Err` when the daemon failed it (the poll returns false).
fn within_poll<T>(
    rt: &tokio::runtime::Runtime,
    call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<Option<T>, tonic::Status> {
    // The timer is made inside the runtime: it needs its reactor.
    let answer = rt
        .block_on(async { tokio::time::timeout(std::time::Duration::from_millis(50), call).await });
    match answer {
        Ok(Ok(r)) => Ok(Some(r.into_inner())),
        Ok(Err(e)) => Err(e),
        Err(_) => Ok(None),
    }
}

/// Runs `mlcc-testbed run --scenario <scenario> --cc mlcc` and, while it runs, calls `poll`
/// every ~15 ms for each host whose mlccd Admin socket answers; `poll` returns false when the
/// call failed (the client is dropped and connected again next round). Asserts the run
/// succeeded and left nothing behind; returns the output directory and summary.json.
fn run_sampling(
    scenario: &str,
    hosts: &[&str],
    mut poll: impl FnMut(&str, &mut AdminClient, &tokio::runtime::Runtime) -> bool,
) -> (PathBuf, serde_json::Value) {
    let bins = bin_dir();
    let out = std::env::temp_dir().join(format!("mlcc-testbed-{scenario}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mut child = Command::new(env!("CARGO_BIN_EXE_mlcc-testbed"))
        .args(["run", "--scenario", scenario, "--cc", "mlcc", "--out"])
        .arg(&out)
        .arg("--bin-dir")
        .arg(&bins)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run mlcc-testbed");
    let run_dir = out.join(scenario).join("rep1").join("mlcc");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut clients: Vec<Option<AdminClient>> = vec![None; hosts.len()];
    while child.try_wait().expect("poll mlcc-testbed").is_none() {
        for (i, h) in hosts.iter().enumerate() {
            let sock = run_dir.join(format!("{h}.sock"));
            if clients[i].is_none() && sock.exists() {
                clients[i] = rt
                    .block_on(async {
                        tokio::time::timeout(
                            std::time::Duration::from_millis(200),
                            admin_connect(sock),
                        )
                        .await
                    })
                    .ok()
                    .and_then(Result::ok);
            }
            if let Some(c) = clients[i].as_mut()
                && !poll(h, c, &rt)
            {
                clients[i] = None;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(15));
    }
    let run = child.wait_with_output().expect("mlcc-testbed output");
    println!("{}", String::from_utf8_lossy(&run.stdout));
    let dir = out.join(scenario);
    assert!(
        run.status.success(),
        "mlcc-testbed failed: {}\n(logs under {})",
        String::from_utf8_lossy(&run.stderr),
        dir.display()
    );
    assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
    let s =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    (out, s)
}

/// What the fault test keeps of an mlccd Status answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    /// "switch tor1 ..." among its degraded modes.
    switch_degraded: bool,
    /// "peer h<n> unreachable ..." among its degraded modes.
    peer_degraded: bool,
    /// "clock skew vs switch ..." among its degraded modes.
    skew_degraded: bool,
    uptime: u64,
    flows: u32,
}

/// Faults on real parts: the switch emulator and a host's mlccd SIGKILLed and started
/// again, a link flap, and a hung (SIGSTOPped) peer mlccd, during one ring job on the BPF
/// datapath. The job must finish with every byte intact; the other mlccd must enter the
/// matching degraded mode and leave it when the fault is undone, planning its flow all along;
/// the killed mlccd must come back and plan the job's flow again.
#[test]
fn killed_daemons_and_a_link_flap_lose_no_bytes_and_degrade_and_recover() {
    const SCENARIO: &str = "e2e-faults";
    let Some(_serial) = alone_as_root(
        "killed_daemons_and_a_link_flap_lose_no_bytes_and_degrade_and_recover",
        "root (network namespaces, tc, BPF)",
    ) else {
        return;
    };
    // Per host, each change of its Status, with the Unix time it was seen (polls are ~15 ms
    // apart per host).
    let mut states: std::collections::BTreeMap<String, Vec<(Seen, f64)>> = Default::default();
    let unix_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let (out, s) = run_sampling(SCENARIO, &["h1", "h2"], |h, c, rt| {
        match within_poll(rt, c.status(mlcc_proto::v1::StatusRequest::default())) {
            Ok(Some(r)) => {
                let seen = Seen {
                    switch_degraded: r
                        .degraded
                        .iter()
                        .any(|d| d.contains("switch tor1") && !d.contains("clock skew")),
                    skew_degraded: r.degraded.iter().any(|d| d.contains("clock skew")),
                    peer_degraded: r.degraded.iter().any(|d| d.contains("peer h")),
                    uptime: r.uptime_secs,
                    flows: r.flows,
                };
                let v = states.entry(h.to_string()).or_default();
                if v.last().map(|x| x.0) != Some(seen) {
                    v.push((seen, unix_now()));
                }
                true
            }
            Ok(None) => true,
            Err(_) => false,
        }
    });
    assert_one_job_intact_on_mlcc(&s);
    let faults = s["runs"][0]["faults"].as_array().unwrap();
    assert_eq!(faults.len(), 5, "{faults:?}");
    for f in faults {
        assert!(
            f["applied_s"].is_number() && f["restored_s"].is_number(),
            "fault not applied and undone during the job: {f}"
        );
        println!(
            "fault {} {} at {:.1} s, undone at {:.1} s",
            f["fault"]["kind"], f["fault"]["target"], f["applied_s"], f["restored_s"]
        );
    }
    let (h1, h2) = (&states["h1"], &states["h2"]);
    // h1's mlccd came back (its uptime started over) and planned the job's flow again.
    let restart = h1.windows(2).position(|w| w[1].0.uptime < w[0].0.uptime);
    assert!(restart.is_some(), "h1's mlccd never restarted: {h1:?}");
    assert!(
        h1[restart.unwrap() + 1..].iter().any(|x| x.0.flows > 0),
        "h1's restarted mlccd planned no flow: {h1:?}"
    );
    // With its mlccd dead, h1's flow goes on under the datapath's fallback: its uplink (switch
    // port counters, 100 ms samples) carries at least half its mean of the whole run.
    let killed = faults
        .iter()
        .find(|f| f["fault"]["kind"] == "kill-mlccd")
        .unwrap();
    let (from, to) = (
        killed["applied_s"].as_f64().unwrap(),
        killed["restored_s"].as_f64().unwrap(),
    );
    let up: Vec<(f64, f64)> = s["runs"][0]["bandwidth"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["host"] == "h1")
        .expect("h1's bandwidth samples")["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x[0].as_f64().unwrap(), x[1].as_f64().unwrap()))
        .collect();
    let mean = |v: Vec<f64>| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let busy = mean(up.iter().filter(|x| x.1 > 1.0).map(|x| x.1).collect());
    let dead = mean(
        up.iter()
            .filter(|x| x.0 > from + 0.1 && x.0 <= to)
            .map(|x| x.1)
            .collect(),
    );
    println!(
        "kill-mlccd: h1's uplink {dead:.1} Mbit/s while its mlccd was dead, {busy:.1} Mbit/s \
         mean over the run's busy samples"
    );
    assert!(
        dead >= 0.5 * busy,
        "h1's flow did not keep moving without its mlccd: {dead:.1} vs {busy:.1} Mbit/s"
    );
    // After each fault h2 enters the degraded mode it stands for, and leaves it once the
    // fault is undone; meanwhile it keeps planning its own flow.
    // (fault, whether it shows as a silent peer rather than a silent switch)
    for (kind, peer) in [
        ("kill-switchd", false),
        ("link-down", false),
        ("stop-mlccd", true),
    ] {
        let degraded = |x: &Seen| {
            if peer {
                x.peer_degraded
            } else {
                x.switch_degraded
            }
        };
        let f = faults
            .iter()
            .find(|f| f["fault"]["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} fault"));
        let (hit, undone) = (
            f["applied_unix_s"].as_f64().unwrap(),
            f["restored_unix_s"].as_f64().unwrap(),
        );
        let entered = h2
            .iter()
            .find(|x| x.1 >= hit && degraded(&x.0))
            .map(|x| x.1);
        let left = h2
            .iter()
            .find(|x| x.1 >= undone && !degraded(&x.0))
            .map(|x| x.1);
        let (Some(entered), Some(left)) = (entered, left) else {
            panic!("{kind}: h2 did not enter and leave its degraded mode after it: {h2:?}");
        };
        let during: Vec<_> = h2.iter().filter(|x| x.1 >= entered && x.1 < left).collect();
        assert!(
            during.iter().all(|x| x.0.flows > 0),
            "{kind}: h2 stopped planning its flow meanwhile: {during:?}"
        );
        println!(
            "{kind}: h2 degraded {:.0} ms after the fault, recovered {:.0} ms after it was undone",
            (entered - hit) * 1e3,
            (left - undone) * 1e3
        );
        // Within a few slots on a loaded 2-core machine; one slot (60 ms) plus the RPC
        // deadline is the design value (docs/design.md §11), printed above.
        assert!(
            entered - hit < 1.0 && left - undone < 2.0,
            "{kind}: degraded after {:.2} s, recovered after {:.2} s",
            entered - hit,
            left - undone
        );
    }
    // h2's mlccd restarted with its clock 40 ms behind (τ/4 = 15 ms, and beyond its RPC
    // deadline, so the switch sheds its first messages as late): it measures the offset from
    // the switch's stamped replies, leaves its flow to kernel TCP (degraded "clock skew"), and
    // once restarted with the true clock schedules it again. The job's bytes all arrived
    // (checked above).
    let f = faults
        .iter()
        .find(|f| f["fault"]["kind"] == "skew-mlccd")
        .expect("a skew-mlccd fault");
    let (hit, undone) = (
        f["applied_unix_s"].as_f64().unwrap(),
        f["restored_unix_s"].as_f64().unwrap(),
    );
    let skewed: Vec<_> = h2
        .iter()
        .filter(|x| x.1 >= hit && x.1 < undone && x.0.skew_degraded)
        .collect();
    assert!(
        !skewed.is_empty(),
        "skew-mlccd: h2 never reported its clock skew: {h2:?}"
    );
    assert!(
        skewed.iter().all(|x| x.0.flows > 0),
        "skew-mlccd: h2 lost track of its flow: {skewed:?}"
    );
    let entered = skewed[0].1;
    let resumed = h2
        .iter()
        .find(|x| x.1 >= undone && !x.0.skew_degraded && x.0.flows > 0)
        .map(|x| x.1);
    assert!(
        h2.iter()
            .filter(|x| x.1 >= undone + 0.5)
            .all(|x| !x.0.skew_degraded),
        "skew-mlccd: h2 still skewed with its true clock: {h2:?}"
    );
    let Some(resumed) = resumed else {
        panic!("skew-mlccd: h2 never scheduled its flow again: {h2:?}");
    };
    println!(
        "skew-mlccd: h2 (clock -40 ms) reported the skew {:.0} ms after its skewed restart, \
         scheduled again {:.0} ms after its restart with the true clock",
        (entered - hit) * 1e3,
        (resumed - undone) * 1e3
    );
    // The restart itself (process start, socket discovery) is most of this.
    assert!(
        entered - hit < 3.0 && resumed - undone < 3.0,
        "skew-mlccd: skew reported after {:.2} s, scheduling again after {:.2} s",
        entered - hit,
        resumed - undone
    );
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn every_link_gets_the_bucket_and_the_classes_its_scenario_asks_for() {
    if !is_root() {
        eprintln!(
            "skipped every_link_gets_the_bucket_and_the_classes_its_scenario_asks_for: needs \
             root (network namespaces, tc)"
        );
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    use mlcc_testbed::net::{NetPlan, bucket_bytes};
    // two-tier: host links in two racks and the inter-switch link.
    let mut scn = mlcc_testbed::scenario::Scenario::find("two-tier").unwrap();
    for (burst, classes) in [
        (scn.link_burst, scn.link_classes),
        (std::time::Duration::from_millis(3), 0),
    ] {
        scn.link_burst = burst;
        scn.link_classes = classes;
        let bucket = bucket_bytes(scn.host_link_bits, burst);
        let want = format!("burst {bucket}b");
        let plan = NetPlan::new(&format!("lb{}", std::process::id()), &scn);
        plan.create().expect("create the links");
        let mut shown = Vec::new();
        let qdisc = |ns: &str, dev: &str| {
            let show = |what: &[&str]| {
                let o = Command::new("tc")
                    .args(["-n", ns])
                    .args(what)
                    .args(["dev", dev])
                    .output()
                    .expect("tc");
                String::from_utf8_lossy(&o.stdout).trim().to_string()
            };
            format!(
                "{ns}/{dev}: {} {} {}",
                show(&["qdisc", "show"]),
                show(&["class", "show"]),
                show(&["filter", "show", "parent", "10:"])
            )
        };
        for h in &plan.hosts {
            let sw = &plan.switches[(h.rack - 1) as usize];
            shown.push(qdisc(&h.ns, "eth0"));
            shown.push(qdisc(&sw.ns, &h.name));
        }
        for sw in &plan.switches {
            shown.push(qdisc(&sw.ns, "isl"));
        }
        plan.destroy();
        assert_eq!(shown.len(), 2 * plan.hosts.len() + 2);
        for s in &shown {
            assert!(
                s.contains("tbf") && s.contains(&want),
                "{burst:?}: want {want} in {s}"
            );
            // The default class and each fill class, strict priority in that order, each fill
            // class fed by its DSCP (TOS 4 * (1 + class)); none at 0 classes.
            let htb_classes = s.matches("class htb 10:").count();
            assert_eq!(
                htb_classes,
                usize::from(classes) + usize::from(classes > 0),
                "{s}"
            );
            // No class throttles beneath TBF: each takes TBF's bucket (HTB's default, 1250
            // bytes, made single segments wait for HTB's timer one by one).
            let unthrottled = format!("burst {bucket}b cburst {bucket}b");
            assert_eq!(s.matches(&unthrottled).count(), htb_classes, "{s}");
            for k in 0..classes {
                let prio = format!("prio {}", k + 1);
                assert!(s.contains(&prio), "fill class {k}: no {prio} in {s}");
                let tos = format!("match {:08x}/00fc0000", u32::from(4 * (1 + k)) << 16);
                assert!(s.contains(&tos), "fill class {k}: no {tos} in {s}");
            }
        }
    }
    assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
}

/// Each thread of the processes named `names` whose command line mentions `dir`, with its
/// nice value (field 19 of /proc/<pid>/task/<tid>/stat, counted after the command's `)`).
fn threads_nice(names: &[&str], dir: &Path) -> Vec<(String, u32, i32)> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let mentions = String::from_utf8_lossy(&cmdline).contains(&*dir.to_string_lossy());
        if !names.contains(&comm.trim()) || !mentions {
            continue;
        }
        for t in std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            let after = stat.rsplit_once(')').map_or("", |x| x.1);
            // Fields from the 3rd (state) on: nice is the 19th, the 17th after the command.
            if let Some(nice) = after
                .split_whitespace()
                .nth(16)
                .and_then(|n| n.parse().ok())
            {
                let tid = t.file_name().to_string_lossy().parse().unwrap_or(0);
                found.push((comm.trim().to_string(), tid, nice));
            }
        }
    }
    found
}

/// The daemons run at the CPU priority `--daemon-nice` gives them, every thread of them, so
/// that on the testbed's two cores mlccd's slot loop is not starved by the jobs it schedules.
#[test]
fn the_daemons_run_at_the_cpu_priority_they_are_given() {
    let Some(_serial) = alone_as_root(
        "the_daemons_run_at_the_cpu_priority_they_are_given",
        "root (network namespaces, BPF, a negative nice)",
    ) else {
        return;
    };
    let out = std::env::temp_dir().join(format!("mlcc-testbed-nice-{}", std::process::id()));
    let said = std::env::temp_dir().join(format!("mlcc-testbed-nice-{}.log", std::process::id()));
    let testbed = || Command::new(env!("CARGO_BIN_EXE_mlcc-testbed"));
    // Into a file, not a pipe: the daemons `up` leaves running would hold a pipe open.
    let log = std::fs::File::create(&said).expect("the up log");
    let up = testbed()
        .args([
            "up",
            "--scenario",
            "smoke",
            "--cc",
            "mlcc",
            "--daemon-nice",
            "-7",
        ])
        .arg("--out")
        .arg(&out)
        .arg("--bin-dir")
        .arg(bin_dir())
        .stdout(log.try_clone().expect("the up log"))
        .stderr(log)
        .status()
        .expect("mlcc-testbed up");
    let threads = threads_nice(&["mlccd", "mlcc-switchd"], &out);
    let down = testbed().arg("down").output().expect("mlcc-testbed down");
    let up_said = std::fs::read_to_string(&said).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_file(&said);
    assert!(up.success(), "mlcc-testbed up failed: {up_said}");
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
    for daemon in ["mlccd", "mlcc-switchd"] {
        assert!(
            threads.iter().filter(|t| t.0 == daemon).count() > 1,
            "no {daemon} threads found: {threads:?}"
        );
    }
    assert!(threads.iter().all(|t| t.2 == -7), "{threads:?}");
}

/// Gloo's ring all-reduce (gloo/allreduce.cc, `ring`, as Debian's libgloo0 and PyTorch run it):
/// payload bytes rank `rank` of `world` sends in one all-reduce of `elements` elements of `size`
/// bytes. Written apart from python/mlcc/ring.py, which the hook uses, so that each checks the
/// other.
fn gloo_ring_sent(elements: u64, size: u64, world: u64, rank: u64) -> u64 {
    if world < 2 || elements == 0 {
        return 0;
    }
    let total = elements * size;
    let max_segment = size * ((1u64 << 20) / size).max(1);
    let segments = total.div_ceil(max_segment).max(2 * world).div_ceil(world) * world;
    let per_rank = segments / world;
    let segment = total.div_ceil(segments).div_ceil(size) * size;
    let len = |i: u64| segment.min(total.saturating_sub((i % segments) * segment));
    (0..segments - per_rank)
        .map(|i| len((rank + 1) * per_rank + i) + len(rank * per_rank + i))
        .sum()
}

#[test]
fn gloo_ring_sent_matches_the_textbook_where_segments_divide() {
    // 2 ranks, 8 MiB: 8 segments of 1 MiB, each rank sends 4 + 4 of them.
    assert_eq!(gloo_ring_sent(2 << 20, 4, 2, 0), 8 << 20);
    // 3 ranks, 6 MiB: 6 segments, each rank sends 4 (reduce-scatter) + 4 (all-gather).
    assert_eq!(gloo_ring_sent(6 << 18, 4, 3, 1), 8 << 20);
    // A short tail: 7 elements over 3 ranks (Gloo's segments of 4 bytes, two per rank).
    let sent: Vec<u64> = (0..3).map(|r| gloo_ring_sent(7, 4, 3, r)).collect();
    assert_eq!(sent, [40, 28, 44]);
}

/// A PyTorch DDP job (two ranks in two namespaces, Gloo over real TCP) under mlcc: its sockets
/// run mlcc's CC through the run's cgroup, mlccd plans the job's ring flows from the progress
/// files mlcc's comm hook writes, and each rank's file, read by mlccd's own reader, holds
/// exactly the bytes Gloo's ring moves for the buckets DDP handed it, within Gloo's framing of
/// what the sockets carried.
#[test]
fn a_torch_ddp_job_is_scheduled_and_its_progress_is_exact() {
    const SCENARIO: &str = "torch-smoke";
    if !is_root() {
        eprintln!(
            "skipped a_torch_ddp_job_is_scheduled_and_its_progress_is_exact: needs root \
             (network namespaces, tc, BPF)"
        );
        return;
    }
    let torch = Command::new("/usr/bin/python3")
        .args(["-c", "import torch"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        torch,
        "PyTorch is missing: apt install python3-torch (scripts/setup.sh does)"
    );
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        leftovers().is_empty(),
        "objects of an earlier run exist: {:?}",
        leftovers()
    );
    // (host, flow) -> the highest rate mlccd enforced for it
    let mut planned: std::collections::BTreeMap<(String, String), f64> = Default::default();
    let (out, s) = run_sampling(SCENARIO, &["h1", "h2"], |h, c, rt| {
        match within_poll(
            rt,
            c.list_flows(mlcc_proto::v1::ListFlowsRequest::default()),
        ) {
            Ok(Some(r)) => {
                for f in r.flows {
                    let e = planned.entry((h.to_string(), f.flow_id)).or_default();
                    *e = e.max(f.enforced_rate_bytes_per_sec);
                }
                true
            }
            Ok(None) => true,
            Err(_) => false,
        }
    });
    let job = &s["runs"][0]["jobs"][0];
    assert_eq!(job["ok"], true, "{}", job["error"]);
    assert_eq!(job["arch"], "ddp");
    // Where its iterations went, from the ranks' own clocks: each part took time, and the
    // backward pass (with the all-reduces) no longer than the mean iteration.
    let phase = |k: &str| job["phases"][k].as_f64().unwrap_or(-1.0);
    let iteration_ms = job["mean_iteration_s"].as_f64().unwrap() * 1e3;
    assert!(
        phase("forward_ms") > 0.0
            && phase("backward_ms") > 0.0
            && phase("step_ms") > 0.0
            && phase("backward_ms") < iteration_ms,
        "{} against a mean iteration of {iteration_ms} ms",
        job["phases"]
    );
    let cc = job["socket_cc"].as_str().unwrap();
    assert!(cc.starts_with("mlcc_tb"), "Gloo's sockets ran on {cc}");
    let flows: Vec<_> = planned
        .iter()
        .filter(|((_, id), rate)| id.starts_with("ddp-s/") && id.ends_with("/ring") && **rate > 0.0)
        .collect();
    println!("mlccd's flows of the job, highest enforced rate: {flows:?}");
    for (host, dst) in [("h1", "h2"), ("h2", "h1")] {
        assert!(
            flows
                .iter()
                .any(|((h, id), _)| h == host && id.contains(&format!("{host}>{dst}"))),
            "mlccd on {host} planned no ring flow to {dst}: {planned:?}"
        );
    }

    let logs = out.join(SCENARIO).join("rep1").join("mlcc").join("logs");
    for rank in 0..2u64 {
        let rep: serde_json::Value = serde_json::from_str(
            std::fs::read_to_string(logs.join(format!("ddp-s-w{rank}.json")))
                .unwrap()
                .trim(),
        )
        .unwrap();
        let phases: Vec<[f64; 3]> = serde_json::from_value(rep["phases_s"].clone()).unwrap();
        let times: Vec<f64> = serde_json::from_value(rep["iteration_s"].clone()).unwrap();
        assert_eq!(
            phases.len(),
            times.len(),
            "one forward/backward/step per iteration"
        );
        for (p, t) in phases.iter().zip(&times) {
            assert!(
                p.iter().all(|&x| x >= 0.0) && p.iter().sum::<f64>() <= t + 1e-6,
                "{p:?} in {t}"
            );
        }
        let t = &rep["torch"];
        let buckets: Vec<Vec<(u64, u64)>> = serde_json::from_value(t["buckets"].clone()).unwrap();
        assert_eq!(buckets.len(), 6, "one list of buckets per iteration");
        assert!(
            buckets[5].len() >= 3,
            "0.5 MB buckets: several per step, got {:?}",
            buckets[5]
        );
        let per_iter: Vec<u64> = buckets
            .iter()
            .map(|it| it.iter().map(|&(e, z)| gloo_ring_sent(e, z, 2, rank)).sum())
            .collect();
        // The file as the rank left it before closing, read by mlccd's reader.
        let bytes = (0..t["progress_hex"].as_str().unwrap().len() / 2)
            .map(|i| {
                u8::from_str_radix(&t["progress_hex"].as_str().unwrap()[2 * i..2 * i + 2], 16)
                    .unwrap()
            })
            .collect::<Vec<u8>>();
        // Named as the writer named it (the reader checks the name against the header).
        let pid = u32::from_le_bytes(bytes[104..108].try_into().unwrap());
        let dir = out.join("progress");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("mlcc.ddp-s.worker.{rank}.{pid}"));
        std::fs::write(&path, &bytes).unwrap();
        let reader = mlcc_scheduler::progress::ProgressReader::open(&path).expect("mlccd reads it");
        let h = reader.header();
        let snap = reader.snapshot().unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            (
                h.job_id.as_str(),
                h.arch,
                h.role,
                u64::from(h.rank),
                h.world_size,
                h.model_bytes,
                h.total_iterations
            ),
            (
                "ddp-s",
                Some(mlcc_core::job::Arch::Allreduce),
                mlcc_core::job::Role::Worker,
                rank,
                2,
                t["param_bytes"].as_u64().unwrap(),
                6
            )
        );
        assert_eq!(snap.iteration, 6);
        assert_eq!(snap.bytes_sent, per_iter.iter().sum::<u64>());
        assert_eq!(snap.last_iteration_bytes, per_iter[4]);
        assert_eq!(snap.iteration_start_sent, per_iter[..5].iter().sum::<u64>());
        // What the sockets carried: the ring's payload and Gloo's framing (a preamble of six
        // 8-byte fields per segment sent, 64 allowed), the rendezvous store's and the final
        // parameter check's few kilobytes.
        // Two ranks send 2 (N - 1) / N of a bucket's segments: as many sends as segments.
        let sends: u64 = buckets
            .iter()
            .flatten()
            .map(|&(e, z)| (e * z).div_ceil(1 << 20).max(4).div_ceil(2) * 2)
            .sum();
        let tcp = t["tcp_bytes_acked"].as_u64().unwrap();
        assert!(
            tcp >= snap.bytes_sent && tcp <= snap.bytes_sent + sends * 64 + 64 * 1024,
            "rank {rank}: TCP carried {tcp}, the ring {} ({sends} segments)",
            snap.bytes_sent
        );
    }
    std::fs::remove_dir_all(&out).unwrap();
}
