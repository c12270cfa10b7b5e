//! Replays what mlccd's learner was fed, from an mlccd log written with
//! `RUST_LOG=info,mlcc_learn=trace`, through core's [`Learner`]: for each process, when it
//! would be learned, how often its estimate was withdrawn and why, and what the learner reads
//! of its traffic at the end (the period and the iterations it finds, with their lengths and
//! bytes), so an operator can see why a job is not scheduled.
//!
//!     cargo run --release -p mlcc-core --example learn-replay -- mlccd.log [PID] [--set NAME=VALUE]...
//!
//! Where the log holds what peers' reports said (`peers=[...]`, the bytes per iteration of
//! the learned processes at the other ends of a process's connections), the replay hears them
//! as mlccd did. With a PID, also prints that process's bytes per slot. `--set` replays with one of
//! [`LearnerConfig`]'s fields changed (`--set min_iterations=2`), to see what a rule costs or
//! buys on traffic that was really seen.

use std::collections::BTreeMap;

use mlcc_core::Slot;
use mlcc_core::learn::{Learned, Learner, LearnerConfig, Reading};

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

/// One trace line: what a process's learner was fed at a slot.
#[derive(Debug, PartialEq)]
struct Traced {
    pid: u32,
    slot: u64,
    fed: Fed,
}

/// The process's total, or the bytes per iteration its peers said.
#[derive(Debug, PartialEq)]
enum Fed {
    Total(u64),
    Peers(Vec<u64>),
}

/// The fields of one trace line, wherever they sit in it (human or JSON logs).
fn parse(line: &str) -> Option<Traced> {
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
    let fed = match line.find("peers=[") {
        Some(at) => {
            let list = &line[at + "peers=[".len()..];
            let bytes = list[..list.find(']')?]
                .split(',')
                .filter_map(|b| b.trim().parse().ok())
                .collect();
            Fed::Peers(bytes)
        }
        None => Fed::Total(field("total")?),
    };
    Some(Traced {
        pid: u32::try_from(field("pid")?).ok()?,
        slot: field("slot")?,
        fed,
    })
}

struct Replay {
    learner: Learner,
    first_slot: u64,
    /// When first learned: slots after the first, observations before, and the estimate then
    /// (its iteration the one learned in).
    learned_at: Option<(u64, usize, Learned)>,
    /// Observations with an estimate standing, and the least and most bytes per iteration it said.
    learned_slots: usize,
    bytes_range: Option<(f64, f64)>,
    series: Vec<(u64, u64)>,
    /// The reading of the estimate last observed, and why each withdrawn one went.
    reading: Option<Reading>,
    withdrawals: BTreeMap<String, usize>,
}

impl Replay {
    /// Counts a withdrawal when the estimate that stood is gone: a reading of the pauses that
    /// stopped holding, or why the per-slot bytes give none.
    fn note_withdrawal(&mut self) {
        let now = self.learner.estimate().map(|e| e.reading);
        if let (Some(was), None) = (self.reading, now) {
            let why = self.learner.unlearned().map_or("standing", |u| u.as_str());
            let key = match was {
                Reading::Pauses | Reading::Peer => {
                    format!("pauses stopped holding, per-slot bytes: {why}")
                }
                Reading::Period => why.to_string(),
            };
            *self.withdrawals.entry(key).or_default() += 1;
        }
        self.reading = now;
    }
}

/// `cfg` with the field `name=value` set.
fn set(cfg: &mut LearnerConfig, kv: &str) -> Result<(), String> {
    let (name, value) = kv
        .split_once('=')
        .ok_or_else(|| format!("--set {kv}: expected NAME=VALUE"))?;
    let f: f64 = value
        .parse()
        .ok()
        .filter(|f: &f64| f.is_finite() && *f >= 0.0)
        .ok_or_else(|| format!("--set {kv}: {value} is not a number from 0 up"))?;
    // `least` 1 where the learner divides by the setting or needs one slot to look at.
    let whole = |least: f64| {
        (f >= least && f.fract() == 0.0)
            .then_some(f as usize)
            .ok_or_else(|| format!("--set {kv}: {name} takes a whole number from {least} up"))
    };
    match name {
        "window_slots" => cfg.window_slots = whole(1.0)?,
        "min_period_slots" => cfg.min_period_slots = whole(1.0)?,
        "max_period_slots" => cfg.max_period_slots = whole(1.0)?,
        "min_iterations" => cfg.min_iterations = whole(1.0)?,
        "pause_iterations" => cfg.pause_iterations = whole(0.0)?,
        "resume_iterations" => cfg.resume_iterations = whole(0.0)?,
        "peer_iterations" => cfg.peer_iterations = whole(0.0)?,
        "byte_tolerance" => cfg.byte_tolerance = f,
        "period_tolerance" => cfg.period_tolerance = f,
        "min_correlation" => cfg.min_correlation = f,
        "strong_correlation" => cfg.strong_correlation = f,
        "exact_byte_tolerance" => cfg.exact_byte_tolerance = f,
        "exact_period_tolerance" => cfg.exact_period_tolerance = f,
        "exact_correlation" => cfg.exact_correlation = f,
        "active_share" => cfg.active_share = f,
        _ => return Err(format!("--set {kv}: no learner setting {name}")),
    }
    Ok(())
}

/// The log, the PID to show, and the learner's settings, from the command line.
fn parse_args(args: &[String]) -> Result<(String, Option<u32>, LearnerConfig), String> {
    let usage = "usage: learn-replay MLCCD_LOG [PID] [--set NAME=VALUE]...";
    let mut cfg = LearnerConfig::default();
    let mut positional = Vec::new();
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        if a == "--set" {
            set(&mut cfg, it.next().ok_or(usage)?)?;
        } else {
            positional.push(a.clone());
        }
    }
    let (path, show) = match positional.as_slice() {
        [path] => (path.clone(), None),
        [path, pid] => {
            let pid = pid
                .parse()
                .map_err(|_| format!("{pid} is not a PID\n{usage}"))?;
            (path.clone(), Some(pid))
        }
        _ => return Err(usage.to_string()),
    };
    Ok((path, show, cfg))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (path, show, cfg) = parse_args(&args).unwrap_or_else(|e| {
        eprintln!("learn-replay: {e}");
        std::process::exit(2);
    });
    let text = match std::fs::read(&path) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => {
            eprintln!("learn-replay: {path}: {e}");
            std::process::exit(1);
        }
    };
    let mut procs: BTreeMap<u32, Replay> = BTreeMap::new();
    for Traced { pid, slot, fed } in text.lines().filter_map(parse) {
        let r = procs.entry(pid).or_insert_with(|| Replay {
            learner: Learner::new(cfg.clone()),
            first_slot: slot,
            learned_at: None,
            learned_slots: 0,
            bytes_range: None,
            series: Vec::new(),
            reading: None,
            withdrawals: BTreeMap::new(),
        });
        let total = match fed {
            Fed::Peers(bytes) => {
                r.learner.hear(Slot(slot), bytes);
                continue;
            }
            Fed::Total(total) => total,
        };
        r.learner.observe(Slot(slot), total);
        r.note_withdrawal();
        r.series.push((slot, total));
        if let Some(e) = r.learner.estimate() {
            let b = e.bytes_per_iteration;
            let seen = r.series.len() - 1;
            r.learned_at
                .get_or_insert_with(|| (slot - r.first_slot, seen, e.clone()));
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
    match &r.learned_at {
        Some((after, seen, first)) => {
            println!(
                "pid {pid}: learned after {after} slots, at iteration {} ({slots} slots, {total} B), first at {:.3} MB read by the {}",
                first.iteration,
                first.bytes_per_iteration / 1e6,
                first.reading.as_str()
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
    for (why, n) in &r.withdrawals {
        println!("  withdrawn {n}x: {why}");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        std::iter::once("learn-replay")
            .chain(a.iter().copied())
            .map(String::from)
            .collect()
    }

    #[test]
    fn settings_change_the_learner_and_bad_ones_are_refused() {
        let (path, show, cfg) =
            parse_args(&args(&["--set", "min_iterations=2", "h1.log", "42"])).unwrap();
        assert_eq!((path.as_str(), show), ("h1.log", Some(42)));
        assert_eq!(cfg.min_iterations, 2);
        let (_, show, cfg) =
            parse_args(&args(&["h1.log", "--set", "exact_correlation=0.45"])).unwrap();
        assert_eq!(show, None);
        assert_eq!(cfg.exact_correlation, 0.45);
        assert_eq!(cfg.min_iterations, LearnerConfig::default().min_iterations);
        let (_, _, cfg) = parse_args(&args(&["h1.log", "--set", "resume_iterations=0"])).unwrap();
        assert_eq!(cfg.resume_iterations, 0);
        for bad in [
            &["h1.log", "--set", "nope=1"][..],
            &["h1.log", "--set", "min_iterations=2.5"],
            &["h1.log", "--set", "min_iterations=0"],
            &["h1.log", "--set", "byte_tolerance=NaN"],
            &["h1.log", "--set", "byte_tolerance=-1"],
            &["h1.log", "1", "2"],
            &["h1.log", "--set", "byte_tolerance"],
            &["h1.log", "--set"],
            &["h1.log", "pid"],
            &[],
        ] {
            assert!(parse_args(&args(bad)).is_err(), "{bad:?} accepted");
        }
    }

    /// Both kinds of trace line mlccd writes, with colours and in JSON.
    #[test]
    fn trace_lines_are_read_as_totals_and_peers_bytes() {
        let total =
            "\u{1b}[2m2026-12-06T15:11:49Z\u{1b}[0m TRACE mlcc_learn: pid=5494 slot=17 total=4096";
        assert_eq!(
            parse(total),
            Some(Traced {
                pid: 5494,
                slot: 17,
                fed: Fed::Total(4096)
            })
        );
        let peers =
            "2026-12-06T15:11:49Z TRACE mlcc_learn: pid=5494 slot=18 peers=[29282492, 29282557]";
        assert_eq!(
            parse(peers),
            Some(Traced {
                pid: 5494,
                slot: 18,
                fed: Fed::Peers(vec![29282492, 29282557])
            })
        );
        let json = r#"{"target":"mlcc_learn","fields":{"pid":7,"slot":3,"peers":"[]"}}"#;
        assert_eq!(
            parse(json),
            Some(Traced {
                pid: 7,
                slot: 3,
                fed: Fed::Peers(Vec::new())
            })
        );
        assert_eq!(parse("INFO mlcc_scheduler: pid=1 slot=2 total=3"), None);
    }
}
