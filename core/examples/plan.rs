//! A small planning run: a ring all-reduce job and a parameter-server job share a 4-host,
//! one-switch cluster. Each host runs its own `Planner`; the switch's and hosts' `LoadTable`s
//! carry the plans between them exactly as `mlcc-switchd` and `mlccd` do, and bytes advance at
//! the planned rates (shared proportionally where a link is overbooked). Prints each slot's
//! rates so the staggering of the two jobs is visible, then each job's completion time.
//!
//! `cargo run --release -p mlcc-core --example plan -- [slots] [all-others|precedence]`

use std::collections::HashMap;

use mlcc_core::dependency::Dependency;
use mlcc_core::flow::FlowRole;
use mlcc_core::job::{Arch, FlowGroup, Job, Member, Role};
use mlcc_core::load_table::{Query, Update};
use mlcc_core::planner::{FlowInput, LinkFeedback, PlannerConfig};
use mlcc_core::routing::{Routes, ecmp_hash_str};
use mlcc_core::topology::{LinkId, NodeId, Topology};
use mlcc_core::units::parse_rate;
use mlcc_core::{
    Bytes, FeedbackMode, FlowId, LoadTable, Planner, PrecedenceKey, Rank, Slot, SlotConfig,
};

struct JobState {
    job: Job,
    groups: Vec<FlowGroup>,
    compute_slots: u64,
    iterations: u32,
    done_iterations: u32,
    /// Slot the current communication phase starts (after compute).
    comm_start: Slot,
    finished: Option<Slot>,
}

fn member(host: &str, role: Role, rank: u32) -> Member {
    Member {
        host: host.into(),
        role,
        rank,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let max_slots: u64 = args.first().map(|s| s.parse()).transpose()?.unwrap_or(400);
    let mode: FeedbackMode = args
        .get(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or_default();

    let slots = SlotConfig::paper();
    let k = slots.horizon();
    let tau = slots.tau_secs();
    let topo = Topology::single_switch(4, parse_rate("1Gbit")?)?;
    let routes = Routes::new(&topo);
    let host = |n: &str| topo.node_by_name(n).expect("generated host");

    // Models scaled down ~25× so the demo runs in seconds of simulated time.
    let mut jobs = vec![
        JobState {
            job: Job {
                id: "vgg19-ring".into(),
                arch: Arch::Allreduce,
                members: vec![
                    member("h1", Role::Worker, 0),
                    member("h2", Role::Worker, 1),
                    member("h3", Role::Worker, 2),
                ],
                model_bytes: Bytes(22_000_000),
            },
            groups: vec![],
            compute_slots: 4,
            iterations: 5,
            done_iterations: 0,
            comm_start: Slot(4),
            finished: None,
        },
        JobState {
            job: Job {
                id: "resnet50-ps".into(),
                arch: Arch::Ps,
                members: vec![
                    member("h1", Role::Worker, 0),
                    member("h2", Role::Worker, 1),
                    member("h4", Role::Server, 0),
                ],
                model_bytes: Bytes(16_000_000),
            },
            groups: vec![],
            compute_slots: 3,
            iterations: 5,
            done_iterations: 0,
            comm_start: Slot(3),
            finished: None,
        },
    ];
    for j in &mut jobs {
        j.groups = j.job.flow_groups()?;
    }

    // One load table per owner: the switch owns its downlinks, each host its uplink.
    let mut owned: HashMap<NodeId, Vec<(LinkId, mlcc_core::BytesPerSec)>> = HashMap::new();
    for l in topo.links() {
        owned
            .entry(topo.owner(l.id).node())
            .or_default()
            .push((l.id, l.capacity));
    }
    let mut tables: HashMap<NodeId, LoadTable> = owned
        .into_iter()
        .map(|(owner, links)| (owner, LoadTable::new(k, Slot(0), links)))
        .collect();
    let mut planners: HashMap<NodeId, Planner> = topo
        .hosts()
        .map(|h| {
            (
                h,
                Planner::new(PlannerConfig {
                    slots,
                    eta: 1.0,
                    mode,
                }),
            )
        })
        .collect();

    let mut paths: HashMap<FlowId, Vec<LinkId>> = HashMap::new();
    let mut sent: HashMap<FlowId, f64> = HashMap::new();
    let mut progress: HashMap<FlowId, f64> = HashMap::new();
    let all_groups: Vec<FlowGroup> = jobs.iter().flat_map(|j| j.groups.clone()).collect();
    for g in &all_groups {
        paths.insert(
            g.id.clone(),
            routes.path(
                &topo,
                host(&g.src),
                host(&g.dst),
                ecmp_hash_str(g.id.as_str()),
            )?,
        );
    }

    println!(
        "mlcc planning demo: 4 hosts on one 1 Gbit/s switch, τ = 60 ms, K = {k}, feedback {mode:?}"
    );
    println!("rates in Mbit/s per flow group; '.' = idle\n");
    let header: Vec<String> = all_groups.iter().map(|g| short(&g.id)).collect();
    println!("slot  {}", header.join(" "));

    for n in 0..max_slots {
        let slot = Slot(n);
        for t in tables.values_mut() {
            t.advance(slot);
        }
        // Which flows are in their communication phase now.
        let mut active: Vec<(&JobState, &FlowGroup)> = vec![];
        for j in &jobs {
            if j.finished.is_none() && slot >= j.comm_start {
                for g in &j.groups {
                    if sent.get(&g.id).copied().unwrap_or(0.0) + 0.5
                        < g.bytes_per_iteration.as_f64()
                    {
                        active.push((j, g));
                    }
                }
            }
        }
        // Each host plans its own flows with feedback from the owners of their links.
        let mut rates: HashMap<FlowId, f64> = HashMap::new();
        for h in topo.hosts() {
            let hname = topo.node(h).name.clone();
            let inputs: Vec<FlowInput> = active
                .iter()
                .filter(|(_, g)| g.src == hname)
                .map(|(j, g)| {
                    let key = PrecedenceKey::new(Rank(j.comm_start.0), g.id.clone());
                    let path = paths[&g.id]
                        .iter()
                        .map(|&l| {
                            let t = &tables[&topo.owner(l).node()];
                            let mut load = vec![0.0; k];
                            t.feedback(
                                l,
                                &Query {
                                    flow: &g.id,
                                    key: &key,
                                    exclude_publisher: Some(&hname),
                                },
                                mode,
                                slot,
                                &mut load,
                            )
                            .expect("own link");
                            LinkFeedback {
                                link: l,
                                capacity: topo.link(l).capacity.0,
                                load,
                            }
                        })
                        .collect();
                    let up: Vec<f64> = g
                        .upstream
                        .iter()
                        .map(|u| progress.get(u).copied().unwrap_or(0.0))
                        .collect();
                    let dependency = match g.role {
                        FlowRole::Agg => Dependency::Aggregation {
                            broadcast_progress: up,
                        },
                        FlowRole::Bcast => Dependency::Broadcast {
                            aggregation_progress: up,
                        },
                        FlowRole::Ring => Dependency::Ring {
                            predecessor_progress: up.iter().copied().fold(f64::INFINITY, f64::min),
                            slack_bytes: g.slack_bytes.as_f64(),
                        },
                    };
                    let s = sent.get(&g.id).copied().unwrap_or(0.0);
                    FlowInput {
                        id: g.id.clone(),
                        rank: Rank(j.comm_start.0),
                        remaining_bytes: g.bytes_per_iteration.as_f64() - s,
                        sent_bytes: s,
                        path,
                        dependency,
                        delivery: None,
                        rate_cap: f64::INFINITY,
                    }
                })
                .collect();
            let out = planners
                .get_mut(&h)
                .expect("planner per host")
                .plan(slot, &inputs);
            for d in &out.decisions {
                rates.insert(d.id.clone(), d.rate);
                for &l in &paths[&d.id] {
                    let owner = topo.owner(l).node();
                    let _ = tables.get_mut(&owner).expect("owner table").update(
                        l,
                        &Update {
                            flow: &d.id,
                            publisher: &hname,
                            first_slot: slot,
                            rates: &d.plan,
                            key: &d.key,
                            done: d.done,
                        },
                    );
                }
            }
        }
        // Physics: an overbooked link shares what it has in proportion.
        let mut link_load: HashMap<LinkId, f64> = HashMap::new();
        for (id, r) in &rates {
            for l in &paths[id] {
                *link_load.entry(*l).or_default() += r;
            }
        }
        let mut line = format!("{n:>4}  ");
        for g in &all_groups {
            let r = rates.get(&g.id).copied().unwrap_or(0.0);
            let scale = paths[&g.id]
                .iter()
                .map(|l| {
                    (topo.link(*l).capacity.0 / link_load.get(l).copied().unwrap_or(0.0).max(1e-9))
                        .min(1.0)
                })
                .fold(1.0, f64::min);
            let moved = r * scale * tau;
            if r > 0.0 {
                *sent.entry(g.id.clone()).or_default() += moved;
                line += &format!(
                    "{:>width$.0} ",
                    r * scale * 8.0 / 1e6,
                    width = short(&g.id).len()
                );
            } else {
                line += &format!("{:>width$} ", ".", width = short(&g.id).len());
            }
            progress.insert(g.id.clone(), sent.get(&g.id).copied().unwrap_or(0.0));
        }
        if !rates.is_empty() {
            println!("{line}");
        }
        // Iterations end when all of a job's flows have delivered their bytes.
        for j in &mut jobs {
            if j.finished.is_some() || slot < j.comm_start {
                continue;
            }
            let complete = j.groups.iter().all(|g| {
                sent.get(&g.id).copied().unwrap_or(0.0) + 0.5 >= g.bytes_per_iteration.as_f64()
            });
            if complete {
                j.done_iterations += 1;
                for g in &j.groups {
                    sent.remove(&g.id);
                    progress.remove(&g.id);
                }
                if j.done_iterations == j.iterations {
                    j.finished = Some(slot.plus(1));
                } else {
                    j.comm_start = slot.plus(1 + j.compute_slots);
                }
            }
        }
        if jobs.iter().all(|j| j.finished.is_some()) {
            break;
        }
    }
    println!();
    for j in &jobs {
        match j.finished {
            Some(s) => println!(
                "{:<12} {} iterations, JCT {:.2} s",
                j.job.id,
                j.iterations,
                s.0 as f64 * tau
            ),
            None => println!("{:<12} unfinished after {max_slots} slots", j.job.id),
        }
    }
    Ok(())
}

/// A column header: "job/src>dst/role" → "src>dst:role".
fn short(id: &FlowId) -> String {
    let mut it = id.as_str().split('/');
    let _job = it.next();
    format!(
        "{}:{}",
        it.next().unwrap_or(""),
        &it.next().unwrap_or("")[..1]
    )
}
