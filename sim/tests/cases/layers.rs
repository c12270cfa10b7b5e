//! The per-layer communication model (`--per-layer`, `sim/src/layers.rs`) and the
//! layer-priority and compression baselines built on it: tensorexpress, dlcp, dc2.

use mlcc_core::SlotConfig;
use mlcc_core::flow::FlowRole;
use mlcc_core::job::Arch;
use mlcc_core::routing::Routes;
use mlcc_core::topology::Topology;
use mlcc_core::units::BytesPerSec;
use mlcc_sim::engine::{Engine, FlowRef, Phase};
use mlcc_sim::layers;
use mlcc_sim::model_zoo::{self, BUCKETS};
use mlcc_sim::physics;
use mlcc_sim::placement::Placement;
use mlcc_sim::policy::{self, Context, Policy, View};
use mlcc_sim::policy::{dc2, layerprio};
use mlcc_sim::workload::JobSpec;

/// 1 Gbit/s and 10 Gbit/s host links.
const GBIT: f64 = 125e6;

fn topo(link: f64) -> Topology {
    Topology::single_switch(4, BytesPerSec(link)).unwrap()
}

fn job(id: &str, model: &str, arch: Arch, workers: u32, servers: u32, n: u32) -> JobSpec {
    JobSpec {
        id: id.into(),
        arrival_s: 0.0,
        model: model_zoo::by_name(model).unwrap(),
        arch,
        workers,
        servers,
        iterations: n,
        pinned: None,
    }
}

fn build(name: &str, t: &Topology) -> Box<dyn Policy> {
    policy::by_name(name).unwrap().build(&Context {
        topo: t,
        slots: SlotConfig::paper(),
        switch_tables: true,
    })
}

/// Runs `name` to the end; returns the engine (its jobs and stats).
fn run<'t>(
    name: &str,
    t: &'t Topology,
    r: &'t Routes,
    specs: &[JobSpec],
    per_layer: bool,
) -> Engine<'t> {
    let mut p = build(name, t);
    let mut e = Engine::new(t, r, SlotConfig::paper(), specs, Placement::Packed, 1)
        .unwrap()
        .with_per_layer(per_layer);
    while !e.finished() {
        assert!(e.now() < 20_000, "{name}: did not finish");
        e.step(p.as_mut()).unwrap();
    }
    e
}

fn finish(e: &Engine<'_>) -> Vec<u64> {
    e.jobs.iter().map(|j| j.finish_slot.unwrap()).collect()
}

#[test]
fn buckets_released_during_the_backward_pass_shorten_a_lone_jobs_iterations() {
    // VGG19 ring of 3 at 10 Gbit/s: 732 MB per ring flow, 10 slots at line rate, against 7
    // slots of compute (5 of them backward). Its fully connected bucket (86 % of the bytes)
    // leaves when the backward pass starts, so most of the communication hides behind it.
    let t = topo(10.0 * GBIT);
    let r = Routes::new(&t);
    let specs = [job("vgg", "vgg19", Arch::Allreduce, 3, 0, 4)];
    for name in ["fair", "mlcc", "isolated", "tensorexpress"] {
        let off = finish(&run(name, &t, &r, &specs, false))[0];
        let on = finish(&run(name, &t, &r, &specs, true))[0];
        assert!(
            on + 4 * 2 <= off,
            "{name}: per-layer {on} slots, blob {off}"
        );
    }
    // Communication that fits in the backward pass: never slower than the blob (ResNet-50
    // PS at 100 Gbit/s: 49 MB per flow, under a slot).
    let t = topo(100.0 * GBIT);
    let r = Routes::new(&t);
    let specs = [job("rn", "resnet50", Arch::Ps, 2, 2, 5)];
    for name in ["fair", "mlcc", "isolated"] {
        let off = finish(&run(name, &t, &r, &specs, false))[0];
        let on = finish(&run(name, &t, &r, &specs, true))[0];
        assert!(on <= off, "{name}: per-layer {on} slots, blob {off}");
    }
}

#[test]
fn every_byte_is_delivered_under_the_per_layer_model() {
    let t = topo(GBIT);
    let r = Routes::new(&t);
    let specs = [
        job("a", "resnet50", Arch::Allreduce, 3, 0, 3),
        job("b", "resnet50", Arch::Ps, 2, 2, 3),
        job("c", "vgg16", Arch::Allreduce, 2, 0, 2),
    ];
    for name in [
        "fair",
        "priority",
        "mcs",
        "ccml",
        "mltcp",
        "crux",
        "cassini",
        "mlcc",
        "isolated",
        "tensorexpress",
    ] {
        let e = run(name, &t, &r, &specs, true);
        let s = &e.stats;
        assert!(
            (s.bytes_delivered - s.bytes_expected).abs() < 1.0,
            "{name}: delivered {} of {}",
            s.bytes_delivered,
            s.bytes_expected
        );
        // The per-message latency is time, not bytes: exactly the job model's bytes.
        let nominal: f64 = e
            .jobs
            .iter()
            .map(|j| {
                j.flows.iter().map(|f| f.base_bytes).sum::<f64>() * f64::from(j.spec.iterations)
            })
            .sum();
        assert!(
            (s.bytes_expected - nominal).abs() < 1.0,
            "{name}: {} vs {nominal}",
            s.bytes_expected
        );
    }
}

/// Steps `name` over one VGG16 PS job whose pushes outlast the backward pass; returns the
/// slots its buckets arrived in, per iteration.
fn arrivals(name: &str) -> Vec<[u64; BUCKETS]> {
    let t = topo(GBIT);
    let r = Routes::new(&t);
    let specs = [job("v", "vgg16", Arch::Ps, 2, 2, 2)];
    let mut p = build(name, &t);
    let mut e = Engine::new(&t, &r, SlotConfig::paper(), &specs, Placement::Packed, 1)
        .unwrap()
        .with_per_layer(true);
    let mut out = vec![];
    let mut last = None;
    while !e.finished() {
        e.step(p.as_mut()).unwrap();
        let l = e.jobs[0].layers.as_ref().unwrap();
        if l.arrived.iter().all(Option::is_some) && last != Some(l.arrived) {
            last = Some(l.arrived);
            out.push(l.arrived.map(Option::unwrap));
        }
    }
    out
}

#[test]
fn tensorexpress_sends_front_layer_bytes_first() {
    // Within a job: a sender holding the back layers' bytes when the front bucket is released
    // sends the front bucket first under tensorexpress, so it arrives before the back bucket
    // (and the next forward pass can start); in release order (fair) it arrives last.
    for a in arrivals("tensorexpress") {
        assert!(a[0] < a[BUCKETS - 1], "tensorexpress {a:?}");
    }
    for a in arrivals("fair") {
        assert!(a.iter().all(|&x| x <= a[0]), "fair {a:?}");
    }

    // Between jobs, on a switch-owned link: ring job A (h1, h2) is sending its back bucket,
    // PS job B (workers h1, h2, servers h3, h4) its front bucket's replies. On sw→h2 the
    // replies from h3 and h4 take the link; A's h1→h2 gets nothing. Fair shares it in three.
    let t = topo(GBIT);
    let r = Routes::new(&t);
    let specs = [
        job("a", "resnet50", Arch::Allreduce, 2, 0, 1),
        job("b", "resnet50", Arch::Ps, 2, 2, 1),
    ];
    let mut e = Engine::new(&t, &r, SlotConfig::paper(), &specs, Placement::Packed, 1)
        .unwrap()
        .with_per_layer(true);
    e.step(build("fair", &t).as_mut()).unwrap();
    let mut jobs = e.jobs.clone();
    for (ji, j) in jobs.iter_mut().enumerate() {
        j.phase = Phase::Comm { since: 0 };
        j.layers.as_mut().unwrap().front_first = true;
        layers::begin_iteration(j);
        let bwd = j.layers.as_ref().unwrap().bwd_slots;
        // A: the backward pass has just started; B: it is over, the pushes are done.
        layers::release(j, if ji == 0 { 0 } else { bwd }, 0);
        for f in &mut j.flows {
            if ji == 1 && f.role == FlowRole::Agg {
                f.sent = f.bytes;
                f.bucket_sent.clone_from(&f.buckets);
            }
        }
    }
    let mut active = vec![];
    for (ji, j) in jobs.iter_mut().enumerate() {
        for (fi, f) in j.flows.iter_mut().enumerate() {
            f.active_idx = None;
            if !f.is_done() {
                f.active_idx = Some(active.len() as u32);
                active.push(FlowRef {
                    job: ji as u32,
                    flow: fi as u32,
                });
            }
        }
    }
    let mut sendable = vec![];
    physics::sendable(&t, &jobs, &active, 0.06, &mut sendable);
    let view = View {
        slot: 0,
        tau: 0.06,
        slots: SlotConfig::paper(),
        topo: &t,
        jobs: &jobs,
        active: &active,
        sendable: &sendable,
    };
    let h = |n: &str| t.node_by_name(n).unwrap();
    let a_to_h2 = active
        .iter()
        .position(|r| r.job == 0 && view.flow(*r).dst == h("h2"))
        .unwrap();
    let replies: Vec<usize> = (0..active.len())
        .filter(|&i| active[i].job == 1 && view.flow(active[i]).dst == h("h2"))
        .collect();
    assert_eq!(replies.len(), 2);
    assert_eq!(
        layerprio::LayerPriority::level(&view, active[a_to_h2]),
        BUCKETS - 1
    );
    assert_eq!(
        layerprio::LayerPriority::level(&view, active[replies[0]]),
        0
    );
    let mut rates = vec![0.0; active.len()];
    build("tensorexpress", &t).rates(&view, &mut rates);
    assert!(rates[a_to_h2] < 1.0, "{rates:?}");
    for &i in &replies {
        assert!((rates[i] - GBIT / 2.0).abs() < 1.0, "{rates:?}");
    }
    build("fair", &t).rates(&view, &mut rates);
    assert!((rates[a_to_h2] - GBIT / 3.0).abs() < 1.0, "{rates:?}");
}

#[test]
fn dc2_compresses_more_when_its_communication_slows_down() {
    // Job A alone for its first iterations, then B on the same two hosts shares every link:
    // A's communication slows and DC2 lowers A's ratio below k_max; bytes shrink with it.
    let t = topo(GBIT);
    let r = Routes::new(&t);
    let mut b = job("b", "vgg19", Arch::Allreduce, 2, 0, 10);
    b.arrival_s = 3.0;
    let specs = [job("a", "resnet50", Arch::Allreduce, 2, 0, 30), b];
    let mut p = build("dc2", &t);
    let mut e = Engine::new(&t, &r, SlotConfig::paper(), &specs, Placement::Packed, 1).unwrap();
    let (mut before, mut after) = (vec![], vec![]);
    while !e.finished() {
        e.step(p.as_mut()).unwrap();
        let a = &e.jobs[0];
        if let Phase::Comm { .. } = a.phase {
            for f in &a.flows {
                assert!((f.bytes - f.base_bytes * a.shape.scale).abs() < 1.0);
            }
            if e.jobs[1].start_slot.is_none() {
                before.push(a.shape.scale);
            } else {
                after.push(a.shape.scale);
            }
        }
    }
    assert!(
        !before.is_empty() && before.iter().all(|&k| k == dc2::K_MAX),
        "{before:?}"
    );
    let low = after.iter().copied().fold(f64::INFINITY, f64::min);
    assert!((dc2::K_MIN..dc2::K_MAX * 0.8).contains(&low), "{after:?}");
    assert!((e.stats.bytes_delivered - e.stats.bytes_expected).abs() < 1.0);
}

#[test]
fn dlcp_does_not_wait_for_a_bounded_share_of_the_front_layers() {
    let t = topo(GBIT);
    let r = Routes::new(&t);
    let specs = [
        job("a", "vgg16", Arch::Ps, 2, 2, 3),
        job("b", "resnet50", Arch::Allreduce, 2, 0, 3),
    ];
    for per_layer in [false, true] {
        let te = run("tensorexpress", &t, &r, &specs, per_layer);
        let dl = run("dlcp", &t, &r, &specs, per_layer);
        // What dlcp does not wait for: p of each push and ring flow, p/2 of each reply, and
        // never more than the front bucket.
        let p = layerprio::DLCP_TOLERANCE;
        let mut bound = 0.0;
        for j in &dl.jobs {
            for f in &j.flows {
                let share = if f.role == FlowRole::Bcast {
                    p / 2.0
                } else {
                    p
                };
                bound += share * f.base_bytes * f64::from(j.spec.iterations);
            }
            if per_layer {
                let l = j.layers.as_ref().unwrap();
                for f in &j.flows {
                    // The front bucket lost at most its own bytes.
                    let front = f.base_bytes * l.bytes_share[0];
                    assert!(f.buckets[0] >= front - p * f.base_bytes - 1.0);
                }
            }
        }
        let saved = te.stats.bytes_delivered - dl.stats.bytes_delivered;
        assert!(
            (saved - bound).abs() < 1.0 + 1e-9 * bound,
            "per-layer {per_layer}: {saved} vs {bound}"
        );
        assert!((dl.stats.bytes_delivered - dl.stats.bytes_expected).abs() < 1.0);
        // Never more than p of what the job model sends.
        let nominal: f64 = te
            .jobs
            .iter()
            .map(|j| {
                j.flows.iter().map(|f| f.base_bytes).sum::<f64>() * f64::from(j.spec.iterations)
            })
            .sum();
        assert!(saved <= p * nominal + 1.0);
    }
}
