//! The per-layer communication model (`--per-layer`, `sim/src/layers.rs`).

use mlcc_core::SlotConfig;
use mlcc_core::job::Arch;
use mlcc_core::routing::Routes;
use mlcc_core::topology::Topology;
use mlcc_core::units::BytesPerSec;
use mlcc_sim::engine::Engine;
use mlcc_sim::layers;
use mlcc_sim::models::{self, BUCKETS};
use mlcc_sim::placement::Placement;
use mlcc_sim::policy::{self, Context, Policy};
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
        model: models::by_name(model).unwrap(),
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
    for name in ["fair", "mlcc", "isolated"] {
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
        "fair", "priority", "mcs", "ccml", "mltcp", "crux", "cassini", "mlcc", "isolated",
    ] {
        let e = run(name, &t, &r, &specs, true);
        let s = &e.stats;
        assert!(
            (s.bytes_delivered - s.bytes_expected).abs() < 1.0,
            "{name}: delivered {} of {}",
            s.bytes_delivered,
            s.bytes_expected
        );
        // Each bucket costs its flow a = 1.4 ms at the path's rate on top of the model's bytes.
        let nominal: f64 = e
            .jobs
            .iter()
            .map(|j| {
                j.flows.iter().map(|f| f.base_bytes).sum::<f64>() * f64::from(j.spec.iterations)
            })
            .sum();
        let flows: f64 = e
            .jobs
            .iter()
            .map(|j| (j.flows.len() as u32 * j.spec.iterations) as f64)
            .sum();
        let latency = flows * BUCKETS as f64 * layers::LATENCY_SECS * GBIT;
        assert!(
            (s.bytes_expected - nominal - latency).abs() < 1.0,
            "{name}: {} vs {nominal} + {latency}",
            s.bytes_expected
        );
    }
}
