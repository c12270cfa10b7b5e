//! Fuzz targets for what mlcc-core parses from operators: units and topology files.
//!
//! Each target is a bolero harness. Under plain `cargo test` (stable Rust, no fuzzing engine)
//! it replays every file kept in `tests/__fuzz__/<target>/{corpus,crashes}` and then runs
//! random inputs for `BOLERO_RANDOM_TEST_TIME_MS` (1 s if unset; `scripts/fuzz.sh` sets the CI
//! budget). With `cargo bolero test -p mlcc-core --test fuzz <target>` the same harness runs
//! under libFuzzer. A failure prints the input; add it to the target's `crashes/` directory
//! (bytes targets) or as a named regression test below.
//!
//! The property everywhere: arbitrary input gives `Ok` with a valid value or an `Err` with a
//! message, never a panic, and never a value the rest of mlcc would choke on.

#[path = "support/toml_doc.rs"]
mod toml_doc;

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

use bolero::{TypeGenerator, check};
use mlcc_core::topology::Topology;
use mlcc_core::units::{parse_bytes, parse_duration, parse_rate};
use toml_doc::{Doc, Mutated, Pick, Vocabulary};

/// Pieces of unit strings: numbers at the edges of f64 parsing and every unit name.
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "1.5",
    "1_000",
    ".5",
    "5.",
    ".",
    "..",
    "1.2.3",
    "_",
    "0000000000000001",
    "179769313486231570000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "18446744073709551616",
    "1e3",
    "-1",
    "+1",
    "NaN",
    "inf",
];
const UNITS: &[&str] = &[
    "", "B", "b", "K", "KB", "kB", "k", "M", "MB", "G", "GB", "T", "TB", "KiB", "MiB", "GiB",
    "TiB", "bit", "bps", "bit/s", "Kbit", "Mbit", "Gbit", "Gbps", "Tbit", "B/s", "KB/s", "MB/s",
    "GB/s", "ns", "us", "µs", "ms", "s", "m", "min", " ms", "ms ", "é",
];

#[derive(Debug, TypeGenerator)]
struct UnitInput {
    lead: bool,
    number: Pick,
    unit: Pick,
    trail: bool,
}

impl UnitInput {
    fn text(&self) -> String {
        let num = match &self.number {
            Pick::Known(i) => NUMBERS[*i as usize % NUMBERS.len()].to_string(),
            Pick::Raw(s) => s.clone(),
        };
        let unit = match &self.unit {
            Pick::Known(i) => UNITS[*i as usize % UNITS.len()].to_string(),
            Pick::Raw(s) => s.clone(),
        };
        let ws = |b: bool| if b { " " } else { "" };
        format!("{}{num}{unit}{}", ws(self.lead), ws(self.trail))
    }
}

fn check_units(s: &str) {
    if let Ok(b) = parse_bytes(s) {
        let _ = b.to_string();
    }
    if let Ok(r) = parse_rate(s) {
        assert!(
            r.0.is_finite() && r.0 >= 0.0,
            "{s:?} parsed as rate {}",
            r.0
        );
    }
    let _ = parse_duration(s);
}

#[test]
fn units_text() {
    check!()
        .with_type::<UnitInput>()
        .for_each(|u| check_units(&u.text()));
}

#[test]
fn units_bytes() {
    check!().for_each(|b: &[u8]| {
        if let Ok(s) = std::str::from_utf8(b) {
            check_units(s);
        }
    });
}

/// What every topology that parses must satisfy: the indexes agree with the lists and each
/// capacity is a usable rate. Returns whether it parsed, so a target can report how deep its
/// inputs reach.
fn check_topology(s: &str) -> bool {
    let Ok(t) = Topology::from_toml_str(s) else {
        return false;
    };
    assert!(t.hosts().len() > 0, "a topology without hosts parsed:\n{s}");
    for l in t.links() {
        assert!(
            l.capacity.0.is_finite() && l.capacity.0 > 0.0,
            "link {} has capacity {}:\n{s}",
            l.name,
            l.capacity.0
        );
        assert_eq!(t.link_by_name(&l.name), Some(l.id));
        assert_eq!(t.link_between(l.from, l.to), Some(l.id));
    }
    for h in t.hosts() {
        assert!(!t.out_links(h).is_empty() && !t.in_links(h).is_empty());
        assert_eq!(t.node_by_name(&t.node(h).name), Some(h));
    }
    true
}

pub const TOPOLOGY_WORDS: Vocabulary = Vocabulary {
    tables: &["host", "switch", "link", "generate", "emulators"],
    keys: &[
        "name",
        "ip",
        "rack",
        "tier",
        "emulator",
        "a",
        "b",
        "capacity",
        "duplex",
        "kind",
        "hosts",
        "host_link",
        "racks",
        "hosts_per_rack",
        "spines",
        "uplink",
        "hosts_per_tor",
        "tors_per_edge",
        "edges",
        "tier_capacity",
        "base_port",
        "address",
    ],
    strings: &[
        "h1",
        "h2",
        "h3",
        "sw1",
        "tor1",
        "spine1",
        "10.0.0.1",
        "10.0.0.2",
        "::1",
        "::ffff:10.0.0.1",
        "25Gbit",
        "10Gbps",
        "0bit",
        "1.5GB/s",
        "99999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999Gbit",
        "single-switch",
        "leaf-spine",
        "hierarchy",
        "127.0.0.1:50061",
        "127.0.0.1",
        ":1",
        "x:99999",
        "a->b",
        "h1->sw1",
        "",
    ],
};

/// Valid topologies the `topology_mutated` target starts from.
const TOPOLOGY_SEEDS: &[&str] = &[
    include_str!("../../deploy/topology.example.toml"),
    "[generate]\nkind = \"single-switch\"\nhosts = 3\nhost_link = \"25Gbit\"\n",
    "[generate]\nkind = \"leaf-spine\"\nracks = 2\nhosts_per_rack = 2\nspines = 2\nhost_link = \"10Gbit\"\nuplink = \"40Gbit\"\n[emulators]\nbase_port = 50061\naddress = \"127.0.0.1\"\n",
    "[generate]\nkind = \"hierarchy\"\nhosts_per_tor = 2\ntors_per_edge = 2\nedges = 2\ntier_capacity = [\"10Gbit\", \"20Gbit\", \"40Gbit\"]\n",
    "[[switch]]\nname = \"sw1\"\n[[host]]\nname = \"h1\"\nip = \"10.0.0.1\"\n[[host]]\nname = \"h2\"\n[[link]]\na = \"h1\"\nb = \"sw1\"\ncapacity = 1250000000\n[[link]]\na = \"h2\"\nb = \"sw1\"\ncapacity = \"10Gbit\"\nduplex = true\n",
];

/// Runs `check` over generated values of a type and reports how many parsed (to stderr, with
/// `--nocapture`): a target whose inputs never parse only tests the parser's error path. A
/// macro so that bolero names the target (and its corpus directory) after the test function.
macro_rules! count_valid {
    ($name:literal, $ty:ty, $check:expr) => {{
        let (tried, parsed) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let check = $check;
        bolero::check!().with_type::<$ty>().for_each(|t| {
            tried.fetch_add(1, Relaxed);
            if check(t) {
                parsed.fetch_add(1, Relaxed);
            }
        });
        eprintln!(
            "{}: {} of {} inputs were valid",
            $name,
            parsed.into_inner(),
            tried.into_inner()
        );
    }};
}

#[test]
fn topology_doc() {
    count_valid!("topology_doc", Doc, |d: &Doc| check_topology(
        &d.render(&TOPOLOGY_WORDS)
    ));
}

#[test]
fn topology_mutated() {
    count_valid!("topology_mutated", Mutated, |m: &Mutated| check_topology(
        &m.render(TOPOLOGY_SEEDS, &TOPOLOGY_WORDS)
    ));
}

#[test]
fn topology_bytes() {
    check!().for_each(|b: &[u8]| {
        if let Ok(s) = std::str::from_utf8(b) {
            check_topology(s);
        }
    });
}

/// A generated topology is capped by its link count whatever its kind: 16 M hosts on one
/// switch is within the per-rack address plan but would allocate gigabytes.
#[test]
fn a_huge_single_switch_is_refused_quickly() {
    let e = Topology::from_toml_str(
        "[generate]\nkind = \"single-switch\"\nhosts = 16000000\nhost_link = \"25Gbit\"\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("links"), "{e}");
}
