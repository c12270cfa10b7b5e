//! Replays what mlccd's learner was fed, from an mlccd log written with
//! `RUST_LOG=info,mlcc_learn=trace`, through core's [`Learner`]: for each process, when it
//! would be learned, and if it is not, what the learner reads of its traffic (the period and
//! the iterations it finds, with their lengths and bytes), so an operator can see why.
//!
//!     cargo run --release -p mlcc-core --example learn-replay -- mlccd.log [PID]
//!
//! With a PID, also prints that process's bytes per slot.

use std::collections::BTreeMap;

use mlcc_core::Slot;
use mlcc_core::learn::{Learner, LearnerConfig};

/// `line` without its terminal colours (`ESC [ ... m`).
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}

/// `pid`, `slot` and `total` of one trace line, wherever they sit in it (human or JSON logs).
fn parse(line: &str) -> Option<(u32, u64, u64)> {
    if !line.contains("mlcc_learn") {
        return None;
    }
    let line = &plain(line).replace("\":", "=").replace('"', "");
    let field = |name: &str| -> Option<u64> {
        let at = line.find(&format!("{name}="))? + name.len() + 1;
        let digits: String = line[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    Some((
        u32::try_from(field("pid")?).ok()?,
        field("slot")?,
        field("total")?,
    ))
}

struct Replay {
    learner: Learner,
    first_slot: u64,
    /// Slots after the first, iteration, and observations before, when first learned.
    learned_at: Option<(u64, u64, usize)>,
    /// Observations with an estimate standing, and the least and most bytes per iteration it said.
    learned_slots: usize,
    bytes_range: Option<(f64, f64)>,
    series: Vec<(u64, u64)>,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: learn-replay MLCCD_LOG [PID]");
        std::process::exit(2);
    };
    let text = match std::fs::read(path) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => {
            eprintln!("learn-replay: {path}: {e}");
            std::process::exit(1);
        }
    };
    let show: Option<u32> = args.get(2).and_then(|p| p.parse().ok());
    let mut procs: BTreeMap<u32, Replay> = BTreeMap::new();
    for (pid, slot, total) in text.lines().filter_map(parse) {
        let r = procs.entry(pid).or_insert_with(|| Replay {
            learner: Learner::new(LearnerConfig::default()),
            first_slot: slot,
            learned_at: None,
            learned_slots: 0,
            bytes_range: None,
            series: Vec::new(),
        });
        r.learner.observe(Slot(slot), total);
        r.series.push((slot, total));
        if let Some(e) = r.learner.estimate() {
            let b = e.bytes_per_iteration;
            let seen = r.series.len() - 1;
            r.learned_at
                .get_or_insert((slot - r.first_slot, e.iteration, seen));
            r.learned_slots += 1;
            r.bytes_range = Some(
                r.bytes_range
                    .map_or((b, b), |(lo, hi)| (lo.min(b), hi.max(b))),
            );
        }
    }
    for (pid, r) in &procs {
        report(*pid, r);
        if show == Some(*pid) {
            let deltas: Vec<String> = r
                .series
                .windows(2)
                .map(|w| format!("{}", w[1].1.saturating_sub(w[0].1) / 1000))
                .collect();
            println!("  kB per slot: {}", deltas.join(" "));
        }
    }
}

fn report(pid: u32, r: &Replay) {
    let slots = r.series.len();
    let total = r.series.last().map_or(0, |s| s.1);
    match r.learned_at {
        Some((after, it, seen)) => {
            println!(
                "pid {pid}: learned after {after} slots, at iteration {it} ({slots} slots, {total} B)"
            );
            if let Some((lo, hi)) = r.bytes_range {
                println!(
                    "  learned in {} of the {} observations since, at {:.3}-{:.3} MB per iteration",
                    r.learned_slots,
                    slots - seen,
                    lo / 1e6,
                    hi / 1e6
                );
            }
        }
        None => println!("pid {pid}: not learned ({slots} slots, {total} B)"),
    }
    let i = r.learner.inspect();
    match i.period {
        Some((p, c)) => println!("  period {p} slots, correlation {c:.2}"),
        None => println!("  no period stands out"),
    }
    let its: Vec<String> = i
        .iterations
        .iter()
        .rev()
        .take(8)
        .rev()
        .map(|(l, b)| format!("{l:.0}:{:.3}MB", b / 1e6))
        .collect();
    println!("  last iterations (slots:bytes): {}", its.join(" "));
}
