//! The example configs under deploy/ (the 6-host testbed, the 2-rack cluster, the Kubernetes
//! ConfigMaps) parsed by the daemons' own loaders, so an option renamed in the code cannot
//! leave a stale example behind. Each set must also be one the daemons would run together:
//! mlccd's host and every emulated switch exist in the topology, and τ, K and the feedback mode
//! agree between mlccd and mlcc-switchd (docs/design.md §3).

use std::path::{Path, PathBuf};

use mlcc_core::Slot;
use mlcc_core::topology::{NodeKind, Topology};
use mlcc_scheduler::config::DaemonArgs;
use mlcc_switch_emu::Emulator;
use mlcc_switch_emu::config::ServeArgs;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// Every switch of `topo` that has an emulator address.
fn emulated_switches(topo: &Topology) -> Vec<String> {
    topo.switches()
        .filter_map(|id| {
            let n = topo.node(id);
            match &n.kind {
                NodeKind::Switch {
                    emulator: Some(_), ..
                } => Some(n.name.clone()),
                _ => None,
            }
        })
        .collect()
}

/// Checks one set: `topology`, an mlccd config (with `host` as the flag a deployment would
/// pass, if any) and a switchd config run for every emulated switch of the topology.
fn check_set(what: &str, topology: &Path, mlccd: &Path, host: Option<&str>, switchd: &Path) {
    let topo = Topology::load(topology).unwrap_or_else(|e| panic!("{what}: topology: {e}"));
    let m = DaemonArgs {
        config: Some(mlccd.to_path_buf()),
        host: host.map(str::to_string),
        ..Default::default()
    }
    .resolve()
    .unwrap_or_else(|e| panic!("{what}: mlccd config: {e}"));
    let h = topo
        .node_by_name(&m.host)
        .unwrap_or_else(|| panic!("{what}: mlccd host {:?} is not in the topology", m.host));
    assert!(
        matches!(topo.node(h).kind, NodeKind::Host { ip: Some(_), .. }),
        "{what}: host {} needs an IP for its peers to dial",
        m.host
    );
    let switches = emulated_switches(&topo);
    assert!(!switches.is_empty(), "{what}: no switch has an emulator");
    for sw in &switches {
        // As deployed: one config file, --switch per instance.
        let s = ServeArgs {
            config: Some(switchd.to_path_buf()),
            switch: Some(sw.clone()),
            ..Default::default()
        }
        .resolve()
        .unwrap_or_else(|e| panic!("{what}: switchd config: {e}"));
        Emulator::new(&topo, sw, s.slots, s.feedback_mode, Slot(0))
            .unwrap_or_else(|e| panic!("{what}: switch {sw}: {e}"));
        assert_eq!(
            s.slots, m.policy.slots,
            "{what}: τ/K of mlccd and switchd differ"
        );
        assert_eq!(
            s.feedback_mode, m.policy.mode,
            "{what}: feedback modes differ"
        );
    }
}

#[test]
fn six_host_testbed_examples_are_valid() {
    let d = deploy();
    check_set(
        "6-host testbed",
        &d.join("topology.example.toml"),
        &d.join("mlccd.example.toml"),
        None,
        &d.join("switchd.example.toml"),
    );
    let topo = Topology::load(&d.join("topology.example.toml")).unwrap();
    assert_eq!(topo.hosts().len(), 6);
}

#[test]
fn two_rack_cluster_examples_are_valid() {
    let d = deploy().join("examples/cluster-2rack");
    check_set(
        "2-rack cluster",
        &d.join("topology.toml"),
        &d.join("mlccd.toml"),
        None,
        &d.join("switchd.toml"),
    );
    // This one is the mTLS example: both daemons must have picked the files up.
    let m = DaemonArgs {
        config: Some(d.join("mlccd.toml")),
        ..Default::default()
    }
    .resolve()
    .unwrap();
    assert!(m.tls.is_some() && m.admin_group.as_deref() == Some("mlcc"));
    let s = ServeArgs {
        config: Some(d.join("switchd.toml")),
        ..Default::default()
    }
    .resolve()
    .unwrap();
    assert!(s.tls.is_some());
    let topo = Topology::load(&d.join("topology.toml")).unwrap();
    assert_eq!(topo.hosts().len(), 8);
    let racks: std::collections::BTreeSet<_> =
        topo.hosts().filter_map(|h| topo.rack_of(h)).collect();
    assert_eq!(racks.len(), 2);
}

/// The text of the block scalar `key: |` in a YAML file, dedented. Enough for our ConfigMaps,
/// whose `data` values are all block scalars; a wrong indentation shows up as a parse error.
fn yaml_block(yaml: &str, key: &str) -> Option<String> {
    let mut lines = yaml.lines();
    let head = format!("{key}: |");
    lines.by_ref().position(|l| l.trim() == head)?;
    let mut out = String::new();
    let mut indent = None;
    for l in lines {
        if l.trim().is_empty() {
            out.push('\n');
            continue;
        }
        let n = l.len() - l.trim_start().len();
        let want = *indent.get_or_insert(n);
        if n < want {
            break;
        }
        out.push_str(&l[want..]);
        out.push('\n');
    }
    Some(out)
}

#[test]
fn kubernetes_configmaps_are_valid() {
    let k = deploy().join("k8s");
    let dir = tempfile::tempdir().unwrap();
    let extract = |file: &str, key: &str| {
        let yaml = std::fs::read_to_string(k.join(file)).unwrap();
        let text = yaml_block(&yaml, key).unwrap_or_else(|| panic!("{file}: no {key}"));
        let p = dir.path().join(key);
        std::fs::write(&p, text).unwrap();
        p
    };
    let topology = extract("10-topology.yaml", "topology.toml");
    let mlccd = extract("11-config.yaml", "mlccd.toml");
    let switchd = extract("11-config.yaml", "switchd.toml");
    // The DaemonSet passes --host=$(NODE_NAME); any host of the topology stands for a node.
    let topo = Topology::load(&topology).unwrap();
    let first = topo.node(topo.hosts().next().unwrap()).name.clone();
    check_set("k8s", &topology, &mlccd, Some(&first), &switchd);
    // Each switch has its Deployment and Service, named as the topology addresses it.
    let manifests = std::fs::read_to_string(k.join("30-switchd.yaml")).unwrap();
    for sw in emulated_switches(&topo) {
        let n = topo.node_by_name(&sw).unwrap();
        let NodeKind::Switch {
            emulator: Some(addr),
            ..
        } = &topo.node(n).kind
        else {
            unreachable!()
        };
        let service = format!("mlcc-switchd-{sw}");
        assert!(
            addr.starts_with(&format!("{service}.mlcc.svc")),
            "{sw}: emulator {addr} is not its Service"
        );
        assert!(
            manifests.contains(&format!("kind: Service\nmetadata:\n  name: {service}\n")),
            "no Service {service}"
        );
        assert!(
            manifests.contains(&format!("- --switch={sw}\n")),
            "no Deployment runs --switch={sw}"
        );
    }
    // The 2-rack cluster it is said to be.
    let example = Topology::load(&deploy().join("examples/cluster-2rack/topology.toml")).unwrap();
    assert_eq!(topo.hosts().len(), example.hosts().len());
    assert_eq!(topo.links().len(), example.links().len());
}
