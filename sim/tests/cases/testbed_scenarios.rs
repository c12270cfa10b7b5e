//! The simulator runs every testbed scenario file as the testbed does (same hosts, links, bytes,
//! compute times, slots): every job finishes with every byte delivered, no policy beats a
//! job's isolated bound, and fair sharing leaves no capacity idle.

use mlcc_core::routing::Routes;
use mlcc_sim::policy::mlcc::Progress;
use mlcc_sim::run::run_policy;
use mlcc_sim::testbed::{Scenario, scenarios_dir};

#[test]
fn every_testbed_scenario_simulates_and_isolated_bounds_every_job() {
    let mut n = 0;
    for e in std::fs::read_dir(scenarios_dir()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let scn = Scenario::load(&p).unwrap().quick();
        let topo = scn.topology().unwrap();
        assert_eq!(topo.hosts().len() as u32, scn.hosts(), "{}", scn.name);
        let routes = Routes::new(&topo);
        let cfg = scn.run_config(&topo, &routes, 1_000_000).unwrap();
        let jobs = scn.sim_jobs();
        assert_eq!(jobs.len(), scn.jobs.len());
        let iso = run_policy("isolated", &jobs, &cfg).unwrap();
        for policy in ["mlcc", "fair"] {
            let r = run_policy(policy, &jobs, &cfg).unwrap();
            assert!(!r.stats.truncated, "{} {policy}", scn.name);
            assert!(
                (r.stats.bytes_delivered - r.stats.bytes_expected).abs() < 1.0,
                "{} {policy}: {} of {}",
                scn.name,
                r.stats.bytes_delivered,
                r.stats.bytes_expected
            );
            // Fair sharing is work-conserving: it leaves no capacity idle that a flow could
            // have used, broadcasts waiting on their pushes included (each bounded by where
            // its pushes were at the end of the slot).
            if policy == "fair" {
                assert!(
                    r.stats.idle_capacity_bytes < 1e3,
                    "{} fair: {} B idle",
                    scn.name,
                    r.stats.idle_capacity_bytes
                );
            }
            for (j, b) in r.jobs.iter().zip(&iso.jobs) {
                // The hosts are the scenario's, not a placement's.
                assert_eq!(j.hosts, b.hosts);
                let (got, bound) = (j.jct_s.unwrap(), b.jct_s.unwrap());
                assert!(
                    got >= bound - 1e-9,
                    "{} {policy}: {} in {got} s, alone {bound} s",
                    scn.name,
                    j.id
                );
            }
        }
        n += 1;
    }
    assert!(n >= 8, "expected the shipped scenarios, found {n}");
}

/// The testbed's trainer replies only once a PS holds every worker's whole push: on `solo-ps`
/// (two workers, two servers on other hosts), each iteration is its compute, then the pushes
/// (a model's bytes through each server's downlink), then the replies (the same through each
/// server's uplink), one after the other. The byte-pipelined broadcast of the paper-scale
/// simulator overlaps the two and runs well under that.
#[test]
fn a_testbed_ps_replies_only_to_a_whole_aggregate() {
    let scn = Scenario::find("solo-ps").unwrap().quick();
    let topo = scn.topology().unwrap();
    let routes = Routes::new(&topo);
    let cfg = scn.run_config(&topo, &routes, 1_000_000).unwrap();
    let jobs = scn.sim_jobs();
    let p = jobs[0].pinned.clone().unwrap();
    assert!(p.whole_aggregate);
    assert_eq!((p.workers.len(), p.servers.len()), (2, 2));
    let line = mlcc_sim::testbed::payload_rate(scn.host_link_bits).0;
    let floor = f64::from(jobs[0].iterations) * (p.compute_s + 2.0 * p.model_bytes as f64 / line);
    let mut piped = jobs.clone();
    piped[0].pinned.as_mut().unwrap().whole_aggregate = false;
    for policy in ["fair", "mlcc"] {
        let whole = run_policy(policy, &jobs, &cfg).unwrap().jobs[0]
            .jct_s
            .unwrap();
        let overlap = run_policy(policy, &piped, &cfg).unwrap().jobs[0]
            .jct_s
            .unwrap();
        assert!(whole >= floor, "{policy}: {whole} s, below {floor} s");
        assert!(
            overlap < floor,
            "{policy} pipelined: {overlap} s, not below {floor} s"
        );
    }
}

/// Every step `solo-ps` (quick) runs under the simulated mlcc, its PS replying to a whole
/// aggregate or pipelined: the slot and what the host observed of each flow.
fn solo_ps_observations(whole: bool) -> Vec<(mlcc_core::Slot, mlcc_core::host::FlowObs)> {
    observations("solo-ps", Progress::Files, |jobs| {
        jobs[0].pinned.as_mut().unwrap().whole_aggregate = whole
    })
}

/// Every step scenario `name` (quick) runs under the simulated mlcc, each job's progress from
/// where `progress` says: the slot and what the host observed of each flow.
fn observations(
    name: &str,
    progress: Progress,
    edit: impl FnOnce(&mut [mlcc_sim::workload::JobSpec]),
) -> Vec<(mlcc_core::Slot, mlcc_core::host::FlowObs)> {
    use mlcc_sim::engine::Engine;
    use mlcc_sim::placement::Placement;
    use mlcc_sim::policy::mlcc::Mlcc;
    use mlcc_sim::policy::{self, Context};

    let scn = Scenario::find(name).unwrap().quick();
    let topo = scn.topology().unwrap();
    let routes = Routes::new(&topo);
    let slots = scn.slots().unwrap();
    let (cfg, vis) = policy::by_name("mlcc")
        .and_then(|e| e.mlcc_config(slots))
        .unwrap();
    let mut jobs = scn.sim_jobs();
    edit(&mut jobs);
    let ctx = Context {
        topo: &topo,
        slots,
        switch_tables: true,
    };
    let mut sim = Mlcc::new(&ctx, cfg, vis).with_progress(progress);
    sim.record();
    let mut e = Engine::new(&topo, &routes, slots, &jobs, Placement::Packed, 1).unwrap();
    while !e.finished() {
        assert!(e.now() < 100_000, "did not finish");
        e.step(&mut sim).unwrap();
    }
    sim.recorded()
        .iter()
        .flat_map(|r| r.obs.iter().map(move |o| (r.slot, o.clone())))
        .collect()
}

/// The trainer's PS calls `iteration_begin` for its replies only once the aggregate is whole,
/// so until then mlccd sees each reply flow done with its last iteration (on standby), never
/// an idle flow of the new one waiting for data. The simulator's testbed runs observe it so;
/// pipelined, the reply is observed waiting with nothing held.
#[test]
fn a_reply_to_a_whole_aggregate_is_observed_on_standby_until_the_aggregate_is_in() {
    use mlcc_core::flow::FlowRole;

    // (reply observations waiting with nothing held, on standby with no bytes left)
    let observe = |whole: bool| {
        let (mut waiting, mut standby) = (0, 0);
        for (_, o) in solo_ps_observations(whole) {
            if o.role != FlowRole::Bcast {
                continue;
            }
            if left(&o) > 0.0 && o.sent_bytes <= 0.0 && o.app_backlog == Some(0.0) {
                waiting += 1;
            }
            if left(&o) <= 0.0 {
                standby += 1;
            }
        }
        (waiting, standby)
    };
    let (waiting, standby) = observe(true);
    assert_eq!(waiting, 0);
    assert!(standby > 0);
    let (waiting, _) = observe(false);
    assert!(waiting > 0, "pipelined: {waiting}");
}

/// Since the trainer's PS begins its replies' iteration when the aggregate is whole, mlccd
/// reads that moment, not the pushes' start, as the replies' iteration start, and their rank
/// puts them first come, first served by it. The simulator's testbed runs observe the same:
/// each reply's iteration starts after its pushes' (at the slot its first bytes were there to
/// send, or the slot before where the aggregate came in during it), while a pipelined reply
/// starts with its pushes.
#[test]
fn a_reply_to_a_whole_aggregate_starts_its_iteration_when_the_aggregate_is_in() {
    use std::collections::BTreeMap;

    use mlcc_core::flow::FlowRole;

    // Per (iteration, role): the iteration starts observed, and the first slot observed in it.
    let starts = |seen: &[(mlcc_core::Slot, mlcc_core::host::FlowObs)]| {
        let mut by: BTreeMap<(u64, bool), (Vec<u64>, u64)> = BTreeMap::new();
        for (slot, o) in seen {
            if left(o) <= 0.0 {
                continue;
            }
            let e = by
                .entry((o.iteration, o.role == FlowRole::Bcast))
                .or_insert((Vec::new(), u64::MAX));
            e.0.push(o.iteration_start.0);
            e.1 = e.1.min(slot.0);
        }
        by
    };
    let seen = solo_ps_observations(true);
    let whole = starts(&seen);
    let mut compared = 0;
    for (&(it, reply), (starts, first_seen)) in &whole {
        if !reply {
            continue;
        }
        let Some((pushes, _)) = whole.get(&(it, false)) else {
            continue;
        };
        let pushed = pushes.iter().max().unwrap();
        for s in starts {
            assert!(
                s > pushed,
                "iteration {it}: reply starts {s}, pushes {pushed}"
            );
            assert!(
                *s + 1 >= *first_seen && s <= first_seen,
                "iteration {it}: reply starts {s}, first seen {first_seen}"
            );
        }
        compared += 1;
    }
    assert!(compared >= 5, "{compared} iterations compared");
    // On standby until the next aggregate is in, a reply is still seen in its last iteration,
    // with that iteration's start (before its first replies it has none to be seen in).
    let mut standby = 0;
    for (slot, o) in &seen {
        if o.role != FlowRole::Bcast || left(o) > 0.0 {
            continue;
        }
        if let Some((starts, first_seen)) = whole.get(&(o.iteration, true))
            && slot.0 > *first_seen
        {
            assert!(
                starts.contains(&o.iteration_start.0),
                "standby in iteration {}: starts {} against {starts:?}",
                o.iteration,
                o.iteration_start.0
            );
            standby += 1;
        }
    }
    assert!(standby > 0, "no standby reply observed");
    let piped = starts(&solo_ps_observations(false));
    for (&(it, reply), (starts, _)) in &piped {
        if let (true, Some((pushes, _))) = (reply, piped.get(&(it, false))) {
            assert!(
                starts.iter().all(|s| pushes.contains(s)),
                "iteration {it}: {starts:?} against {pushes:?}"
            );
        }
    }
}

/// The bytes a simulated flow has left (the simulator knows every flow's size).
fn left(o: &mlcc_core::host::FlowObs) -> f64 {
    o.remaining_bytes.expect("a simulated flow's size is known")
}

/// Learned from their bytes alone (`progress=off`), the simulated hosts name each ring of
/// `micro-two-jobs-heavy` as mlccd's do (core's identity rule): once a ring's three flows are
/// observed under one name they keep it, the two rings keep two names, and a ring flow follows
/// its predecessor's reports across hosts (Alg. 2).
#[test]
fn learned_rings_agree_on_one_name_each_and_follow_their_predecessors() {
    use std::collections::{BTreeMap, BTreeSet};

    let obs = observations("micro-two-jobs-heavy", Progress::Learned, |_| {});
    // Per slot, per ring (its true job, from the flow id), the learned names its flows bore.
    let mut by_slot: BTreeMap<(u64, String), (usize, BTreeSet<String>)> = BTreeMap::new();
    for (slot, o) in &obs {
        let ring = o.id.parts().unwrap().job.to_string();
        let e = by_slot.entry((slot.0, ring)).or_default();
        e.0 += 1;
        e.1.insert(o.job.to_string());
    }
    let mut agreed: BTreeMap<String, String> = BTreeMap::new();
    for ((slot, ring), (flows, names)) in &by_slot {
        if let Some(name) = agreed.get(ring) {
            assert_eq!(names.iter().collect::<Vec<_>>(), [name], "{ring} at {slot}");
        } else if *flows == 3 && names.len() == 1 {
            agreed.insert(ring.clone(), names.first().unwrap().clone());
        }
    }
    assert_eq!(agreed.len(), 2, "each ring agreed on a name: {agreed:?}");
    let names: BTreeSet<&String> = agreed.values().collect();
    assert_eq!(names.len(), 2, "two rings, two names: {agreed:?}");
    assert!(names.iter().all(|n| n.starts_with("learned-")));
    let following = obs.iter().filter(|(_, o)| !o.upstream.is_empty()).count();
    assert!(
        following * 2 > obs.len(),
        "{following} of {} observations had their predecessor's report",
        obs.len()
    );
}

/// A learned job told its length (`progress=told`) is observed with it, as a progress file
/// would give it, and the rank then orders it by the bytes it has left; not told
/// (`progress=off`), its length is unknown.
#[test]
fn a_learned_job_told_its_length_is_observed_with_it() {
    let iterations = |progress: Progress| -> std::collections::BTreeSet<u64> {
        observations("micro-two-jobs-heavy", progress, |_| {})
            .iter()
            .map(|(_, o)| o.job_progress.total)
            .collect()
    };
    let scn = Scenario::find("micro-two-jobs-heavy").unwrap().quick();
    let truth: std::collections::BTreeSet<u64> = scn
        .sim_jobs()
        .iter()
        .map(|j| u64::from(j.iterations))
        .collect();
    assert_eq!(iterations(Progress::Told), truth);
    assert_eq!(iterations(Progress::Learned), [0].into());
}
