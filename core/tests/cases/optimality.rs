//! How far is sequential Alg. 1 (flows planned one after another in precedence order, each
//! around the bookings of the earlier ones) from the optimum of the paper's global problem?
//!
//! The global problem (paper eq. 1–5): choose for every flow a K-slot schedule so that each
//! flow delivers its bytes, no link carries more than its capacity in any slot, and the sum of
//! completion slots Σ β_f is minimal. As a MILP with y_ft = bytes of f in slot t and u_ft = 1
//! if f may send in t:
//!
//! ```text
//! min Σ_f β_f   s.t.  Σ_t y_ft = G_f                  (every byte delivered)
//!                     y_ft ≤ cap_f · u_ft             (send only in used slots)
//!                     β_f ≥ (t + 1) · u_ft            (completion = last used slot)
//!                     Σ_{f ∋ l} y_ft ≤ c_l · τ        (link capacity, every slot)
//! ```
//!
//! solved exactly with good_lp's pure-Rust microlp backend on random small instances.
//!
//! The bound asserted: planning flow i around flows 1..i−1 can delay it at most by the slots
//! those flows occupy, so its completion is at most the sum of the standalone completions of
//! flows 1..i (list scheduling); hence Σ β(Alg. 1) ≤ n · Σ β(OPT) for n flows. Precedence
//! order is iteration age, not size, so a big old flow delays small young ones (the classic
//! list-scheduling gap), and Alg. 1's price term (η) may trade a later completion for cheaper
//! slots: that is why the ratio is not 1. We assert the n-bound on every instance and a mean
//! ratio ≤ 1.25, and write the worst and mean ratios to
//! `$CARGO_TARGET_TMPDIR/optimality-report.txt` (CI prints it).

use std::fmt::Write as _;
use std::time::Duration;

use good_lp::{Expression, Solution, SolverModel, constraint, microlp, variable, variables};

use mlcc_core::dependency::Dependency;
use mlcc_core::planner::{FlowInput, LinkFeedback, PlannerConfig};
use mlcc_core::topology::LinkId;
use mlcc_core::{FeedbackMode, FlowId, Planner, Rank, Slot, SlotConfig};

const K: usize = 6;

/// A deterministic xorshift so the instances are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

struct Instance {
    /// Bytes per slot (τ = 1 s, so also bytes/s).
    capacities: Vec<f64>,
    /// (path, bytes), listed in precedence order.
    flows: Vec<(Vec<usize>, f64)>,
}

fn random_instance(rng: &mut Rng) -> Instance {
    let links = 1 + rng.below(3) as usize;
    let capacities: Vec<f64> = (0..links).map(|_| 10.0 + rng.below(31) as f64).collect();
    let n = 2 + rng.below(3) as usize;
    let mut flows: Vec<(Vec<usize>, f64)> = (0..n)
        .map(|_| {
            let mut path: Vec<usize> = (0..links).filter(|_| rng.below(2) == 0).collect();
            if path.is_empty() {
                path.push(rng.below(links as u64) as usize);
            }
            (path, 1.0 + rng.below(100) as f64)
        })
        .collect();
    // Scale so every link carries at most 70 % of what K slots allow: the instance is feasible
    // (every flow at a constant G_f / K fits) and the optimum completes within the horizon.
    let mut scale: f64 = 1.0;
    for (l, c) in capacities.iter().enumerate() {
        let on_l: f64 = flows.iter().filter(|f| f.0.contains(&l)).map(|f| f.1).sum();
        if on_l > 0.0 {
            scale = scale.min(0.7 * c * K as f64 / on_l);
        }
    }
    for f in &mut flows {
        f.1 = (f.1 * scale).max(1.0).floor();
    }
    Instance { capacities, flows }
}

/// Σ β of the exact optimum.
fn optimum(inst: &Instance) -> f64 {
    let mut vars = variables!();
    let n = inst.flows.len();
    let cap_f: Vec<f64> = inst
        .flows
        .iter()
        .map(|(p, _)| {
            p.iter()
                .map(|&l| inst.capacities[l])
                .fold(f64::INFINITY, f64::min)
        })
        .collect();
    let y: Vec<Vec<_>> = (0..n)
        .map(|f| {
            (0..K)
                .map(|_| vars.add(variable().min(0.0).max(cap_f[f])))
                .collect()
        })
        .collect();
    let u: Vec<Vec<_>> = (0..n)
        .map(|_| (0..K).map(|_| vars.add(variable().binary())).collect())
        .collect();
    let beta: Vec<_> = (0..n)
        .map(|_| vars.add(variable().min(0.0).max(K as f64)))
        .collect();
    let objective: Expression = beta.iter().copied().sum();
    let mut model = vars.minimise(objective).using(microlp);
    for f in 0..n {
        let total: Expression = y[f].iter().copied().sum();
        model = model.with(constraint!(total == inst.flows[f].1));
        for (t, (&y_ft, &u_ft)) in y[f].iter().zip(&u[f]).enumerate() {
            model = model.with(constraint!(y_ft <= cap_f[f] * u_ft));
            model = model.with(constraint!(beta[f] >= (t as f64 + 1.0) * u_ft));
        }
    }
    for (l, c) in inst.capacities.iter().enumerate() {
        #[allow(
            clippy::needless_range_loop,
            reason = "t indexes the slot of every flow"
        )]
        for t in 0..K {
            let load: Expression = (0..n)
                .filter(|&f| inst.flows[f].0.contains(&l))
                .map(|f| y[f][t])
                .sum();
            model = model.with(constraint!(load <= *c));
        }
    }
    let sol = model.solve().expect("feasible by construction");
    beta.iter().map(|b| sol.value(*b).round()).sum()
}

/// Σ β of sequential Alg. 1 in precedence order (one planner sees every flow; η as given).
/// A flow that cannot finish within K counts K + 1.
fn sequential_alg1(inst: &Instance, eta: f64) -> f64 {
    let mut planner = Planner::new(PlannerConfig {
        slots: SlotConfig::new(Duration::from_secs(1), K).unwrap(),
        eta,
        mode: FeedbackMode::Precedence,
    });
    let flows: Vec<FlowInput> = inst
        .flows
        .iter()
        .enumerate()
        .map(|(i, (path, bytes))| FlowInput {
            id: FlowId::new(&format!("f{i}")).unwrap(),
            rank: Rank(i as u64),
            remaining_bytes: *bytes,
            sent_bytes: 0.0,
            path: path
                .iter()
                .map(|&l| LinkFeedback {
                    link: LinkId(l as u32),
                    capacity: inst.capacities[l],
                    load: vec![0.0; K],
                })
                .collect(),
            dependency: Dependency::None,
            delivery: None,
            rate_cap: f64::INFINITY,
        })
        .collect();
    let out = planner.plan(Slot(0), &flows);
    out.decisions
        .iter()
        .map(|d| d.completion.map_or(K as f64 + 1.0, |c| c as f64))
        .sum()
}

#[test]
fn sequential_alg1_is_close_to_the_global_optimum() {
    let mut rng = Rng(0x5eed_2024_0a1b_c3d4);
    let mut report = String::new();
    for eta in [1.0, 0.0] {
        let (mut worst, mut sum, mut count, mut optimal) = (1.0f64, 0.0, 0usize, 0usize);
        let mut worst_case = String::new();
        for _ in 0..150 {
            let inst = random_instance(&mut rng);
            let opt = optimum(&inst);
            let alg = sequential_alg1(&inst, eta);
            assert!(opt >= inst.flows.len() as f64, "each flow needs ≥ 1 slot");
            let ratio = alg / opt;
            let n = inst.flows.len() as f64;
            assert!(
                ratio <= n + 1e-9,
                "η={eta}: ratio {ratio} above the list-scheduling bound {n}: caps {:?} flows {:?}",
                inst.capacities,
                inst.flows
            );
            assert!(
                ratio >= 1.0 - 1e-9,
                "Alg. 1 beat the optimum: solver or model bug"
            );
            if ratio > worst {
                worst = ratio;
                worst_case = format!(
                    "caps {:?} flows {:?} (alg {alg}, opt {opt})",
                    inst.capacities, inst.flows
                );
            }
            optimal += usize::from(ratio < 1.0 + 1e-9);
            sum += ratio;
            count += 1;
        }
        let mean = sum / count as f64;
        writeln!(
            report,
            "eta={eta}: {count} instances (2-4 flows, 1-3 links, K={K}): mean ratio {mean:.4}, worst {worst:.4}, optimal in {optimal}/{count}\n  worst: {worst_case}"
        )
        .unwrap();
        assert!(
            mean <= 1.25,
            "η={eta}: mean ratio {mean} too far from optimal"
        );
    }
    println!("{report}");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("optimality-report.txt");
    std::fs::write(&path, &report).unwrap();
}
