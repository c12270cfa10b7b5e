//! How well mlccd's learner read each job of a run without progress files
//! (`mlcc/progress=off`): what it first said of each member's process, read back from mlccd's
//! log, against what the member reported of itself. Per job: how many members were learned,
//! by which iteration, and how far off the bytes per iteration and the period were.

use std::collections::BTreeMap;

use serde::Serialize;

/// What mlccd logs when the learner first stands behind an estimate for a process.
const LEARNED_LINE: &str = "learned a process's iterations; scheduling it";

/// The learner's first estimate for a process, as mlccd logged it.
#[derive(Clone, Debug, PartialEq)]
pub struct FirstEstimate {
    /// The iteration (the learner's count, from the first it saw) it was learned in.
    pub iteration: u64,
    pub bytes_per_iteration: f64,
    pub period_ms: f64,
    /// When mlccd logged it (Unix s), where the line says.
    pub at_unix_s: Option<f64>,
}

/// What a member said of itself.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberTruth {
    pub pid: u32,
    pub bytes_per_iteration: f64,
    /// Its mean iteration time; none for a member that does not time iterations (a PS server).
    pub mean_iteration_s: Option<f64>,
    /// Unix time (s) at the end of each of its iterations; empty where it does not time them.
    pub iteration_ends_unix_s: Vec<f64>,
}

/// The Unix time (s) of a log line's leading timestamp, as `tracing` writes it in UTC
/// (`2026-12-05T21:57:37.651873Z`); `None` for a line that starts otherwise.
fn line_time(line: &str) -> Option<f64> {
    let stamp = line.split_whitespace().next()?.strip_suffix('Z')?;
    let (date, time) = stamp.split_once('T')?;
    let num = |s: &str| s.parse::<i64>().ok();
    let mut d = date.splitn(3, '-').map(num);
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.splitn(3, ':');
    let (h, min) = (num(t.next()?)?, num(t.next()?)?);
    let sec: f64 = t.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return None;
    }
    // Days from 1970-01-01 to the date (Howard Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3_600 + min * 60) as f64 + sec)
}

/// How many of a member's iterations the period is also compared with: the last before it was
/// learned, as many as the learner needs to agree on (`LearnerConfig::min_iterations`).
const RECENT_ITERATIONS: usize = 3;

/// The mean length (s) of the member's last `RECENT_ITERATIONS` iterations that ended by Unix
/// time `at` (fewer where fewer had; its first has no start): what the learner read, where the
/// mean over the run also holds iterations sped up or slowed down by other jobs later.
fn recent_iteration_s(ends_unix_s: &[f64], at: f64) -> Option<f64> {
    let ended: Vec<f64> = ends_unix_s.iter().copied().filter(|&e| e <= at).collect();
    let from = ended.len().saturating_sub(RECENT_ITERATIONS + 1);
    let whole = ended.len().checked_sub(from + 1).filter(|&n| n > 0)?;
    Some((ended[ended.len() - 1] - ended[from]) / whole as f64)
}

/// The member's own iteration (counting from 1) that was under way at Unix time `at`, from the
/// times its iterations ended.
fn own_iteration(ends_unix_s: &[f64], at: f64) -> u64 {
    1 + ends_unix_s.iter().filter(|&&e| e <= at).count() as u64
}

/// One job's learning in one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct JobLearning {
    /// Members that sent bytes, and those of them the learner stood behind.
    pub members: usize,
    pub learned: usize,
    /// The latest iteration in which a member was first learned, in the learner's count
    /// (from the first iteration it saw of the process).
    pub learned_by_iteration: Option<u64>,
    /// The same in the members' own counts, from their first iteration (members that time
    /// their iterations, where mlccd's log line has a time): the figure the issue's "after at
    /// most 3 iterations" asks for. The learner's count starts late by the iterations before it
    /// found the process.
    pub learned_by_own_iteration: Option<u64>,
    /// The largest |learned / true − 1| of bytes per iteration over the learned members.
    pub bytes_error_max: Option<f64>,
    /// The largest |learned period − the member's mean iteration time|, in slots.
    pub period_error_slots_max: Option<f64>,
    /// The largest |learned period − the mean of the member's last iterations before it was
    /// learned| (`RECENT_ITERATIONS`), in slots.
    pub period_error_recent_slots_max: Option<f64>,
}

impl JobLearning {
    /// The job's learning from its members' own figures, the first estimates mlccd logged
    /// (by pid), and the slot length.
    pub fn of(members: &[MemberTruth], first: &BTreeMap<u32, FirstEstimate>, tau_s: f64) -> Self {
        let max = |a: Option<f64>, b: f64| Some(a.map_or(b, |a| a.max(b)));
        let mut l = JobLearning::default();
        for m in members.iter().filter(|m| m.bytes_per_iteration > 0.0) {
            l.members += 1;
            let Some(e) = first.get(&m.pid) else {
                continue;
            };
            l.learned += 1;
            l.learned_by_iteration = Some(l.learned_by_iteration.unwrap_or(0).max(e.iteration));
            if let Some(at) = e.at_unix_s.filter(|_| !m.iteration_ends_unix_s.is_empty()) {
                let own = own_iteration(&m.iteration_ends_unix_s, at);
                l.learned_by_own_iteration = Some(l.learned_by_own_iteration.unwrap_or(0).max(own));
                let recent = recent_iteration_s(&m.iteration_ends_unix_s, at);
                if let Some(t) = recent.filter(|_| tau_s > 0.0) {
                    let slots = (e.period_ms / 1e3 - t).abs() / tau_s;
                    l.period_error_recent_slots_max = max(l.period_error_recent_slots_max, slots);
                }
            }
            let bytes_error = (e.bytes_per_iteration / m.bytes_per_iteration - 1.0).abs();
            l.bytes_error_max = max(l.bytes_error_max, bytes_error);
            if let Some(t) = m.mean_iteration_s.filter(|_| tau_s > 0.0) {
                let slots = (e.period_ms / 1e3 - t).abs() / tau_s;
                l.period_error_slots_max = max(l.period_error_slots_max, slots);
            }
        }
        l
    }
}

/// Each process's first estimate in an mlccd log (human lines; a daemon colours them only on
/// a terminal).
pub fn first_estimates(log: &str) -> BTreeMap<u32, FirstEstimate> {
    let mut out = BTreeMap::new();
    for line in log.lines().filter(|l| l.contains(LEARNED_LINE)) {
        let field = |name: &str| -> Option<f64> {
            let key = format!(" {name}=");
            let at = line.find(&key)? + key.len();
            let v: String = line[at..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            v.parse().ok()
        };
        let (Some(pid), Some(iteration), Some(bytes), Some(period)) = (
            field("pid"),
            field("iteration"),
            field("bytes_per_iteration"),
            field("period_ms"),
        ) else {
            continue;
        };
        out.entry(pid as u32).or_insert(FirstEstimate {
            iteration: iteration as u64,
            bytes_per_iteration: bytes,
            period_ms: period,
            at_unix_s: line_time(line),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_estimate_of_each_process_is_read_and_later_ones_and_torn_lines_are_not() {
        let log = "2026-11-29T10:12:07Z INFO mlcc_scheduler::learned: learned a process's iterations; \
             scheduling it pid=23245 iteration=4 bytes_per_iteration=3920048 period_ms=460.0 \
             confidence=0.93\n\
             2026-11-29T10:12:08Z INFO mlcc_scheduler::learned: learning the iterations of a \
             process with no progress file pid=23080\n\
             2026-11-29T10:12:09Z INFO mlcc_scheduler::learned: learned a process's iterations; \
             scheduling it pid=23080 iteration=5 bytes_per_iteration=21120048 period_ms=1670.0 \
             confidence=0.53\n\
             2026-11-29T10:12:19Z INFO mlcc_scheduler::learned: learned a process's iterations; \
             scheduling it pid=23245 iteration=9 bytes_per_iteration=1 period_ms=1.0 \
             confidence=0.9\n\
             2026-11-29T10:12:20Z INFO mlcc_scheduler::learned: learned a process's iterations; \
             scheduling it pid=77 iteration=torn";
        let first = first_estimates(log);
        assert_eq!(first.len(), 2, "{first:?}");
        assert_eq!(
            first[&23245],
            FirstEstimate {
                iteration: 4,
                bytes_per_iteration: 3920048.0,
                period_ms: 460.0,
                at_unix_s: Some(1_795_947_127.0),
            }
        );
        assert_eq!(first[&23080].iteration, 5);
    }

    #[test]
    fn the_period_is_also_held_against_the_iterations_just_before_it_was_learned() {
        // Iterations of 1 s, then of 2 s once another job came: ends at 1..=4, then 6, 8, 10.
        let ends = [1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0];
        assert_eq!(recent_iteration_s(&ends, 0.5), None);
        assert_eq!(
            recent_iteration_s(&ends, 1.5),
            None,
            "no iteration whole yet"
        );
        assert_eq!(recent_iteration_s(&ends, 2.5), Some(1.0));
        assert_eq!(recent_iteration_s(&ends, 4.5), Some(1.0));
        assert_eq!(recent_iteration_s(&ends, 6.0), Some(4.0 / 3.0));
        assert_eq!(recent_iteration_s(&ends, 11.0), Some(2.0));
        let member = MemberTruth {
            pid: 1,
            bytes_per_iteration: 1e6,
            mean_iteration_s: Some(9.0 / 7.0),
            iteration_ends_unix_s: ends.to_vec(),
        };
        let learned_at = |at| {
            let e = FirstEstimate {
                iteration: 3,
                bytes_per_iteration: 1e6,
                period_ms: 2000.0,
                at_unix_s: Some(at),
            };
            JobLearning::of(
                std::slice::from_ref(&member),
                &BTreeMap::from([(1, e)]),
                0.5,
            )
        };
        let l = learned_at(10.5);
        assert!(l.period_error_recent_slots_max.unwrap() < 1e-9, "{l:?}");
        assert!(l.period_error_slots_max.unwrap() > 1.0, "{l:?}");
        let l = learned_at(4.5);
        assert!(
            (l.period_error_recent_slots_max.unwrap() - 2.0).abs() < 1e-9,
            "{l:?}"
        );
        let l = learned_at(1.5);
        assert_eq!(l.period_error_recent_slots_max, None, "{l:?}");
    }

    #[test]
    fn a_log_line_s_utc_time_is_read_and_anything_else_is_not() {
        let at = line_time("2026-12-05T21:57:37.651873Z  INFO mlcc_scheduler::learned: x");
        assert!((at.unwrap() - 1_796_507_857.651873).abs() < 1e-6, "{at:?}");
        assert_eq!(line_time("2000-02-29T00:00:00Z x"), Some(951_782_400.0));
        assert_eq!(line_time("1970-01-01T00:00:00Z"), Some(0.0));
        for torn in [
            "",
            "INFO learned",
            "2026-12-05T21:57:37 no zone",
            "2026-13-05T21:57:37Z",
            "2026-12-05T21:57Z",
            "2026-12-xxT21:57:37Z",
        ] {
            assert_eq!(line_time(torn), None, "{torn:?}");
        }
    }

    #[test]
    fn a_job_is_learned_by_its_latest_member_and_off_by_its_worst() {
        let first = BTreeMap::from([
            (
                1,
                FirstEstimate {
                    iteration: 4,
                    bytes_per_iteration: 21.12e6,
                    period_ms: 1500.0,
                    at_unix_s: Some(1006.0),
                },
            ),
            (
                2,
                FirstEstimate {
                    iteration: 6,
                    bytes_per_iteration: 21.0e6,
                    period_ms: 1440.0,
                    at_unix_s: Some(1009.5),
                },
            ),
        ]);
        // Iterations of 1.5 s from Unix time 1000: the first ends at 1001.5.
        let ends: Vec<f64> = (1..=12).map(|i| 1000.0 + 1.5 * f64::from(i)).collect();
        let member = |pid, b, t| MemberTruth {
            pid,
            bytes_per_iteration: b,
            mean_iteration_s: t,
            iteration_ends_unix_s: ends.clone(),
        };
        let members = [
            member(1, 21.12e6, Some(1.5)),
            member(2, 21.12e6, Some(1.5)),
            member(3, 21.12e6, Some(1.5)),
            // Sent nothing: not a member the learner could have seen.
            member(4, 0.0, None),
        ];
        let l = JobLearning::of(&members, &first, 0.03);
        assert_eq!((l.members, l.learned), (3, 2));
        assert_eq!(l.learned_by_iteration, Some(6));
        // Member 1 at 1006 s was in its 4th iteration (1004.5–1006), member 2 at 1009.5 s in
        // its 7th (1009–1010.5): the job was learned by its own 7th, not the learner's 6th.
        assert_eq!(l.learned_by_own_iteration, Some(7));
        let bytes = l.bytes_error_max.unwrap();
        assert!((bytes - (1.0 - 21.0 / 21.12)).abs() < 1e-12, "{l:?}");
        let slots = l.period_error_slots_max.unwrap();
        assert!((slots - 2.0).abs() < 1e-9, "{l:?}");
        // Against the iterations before: 1.5 s each, the same here.
        let recent = l.period_error_recent_slots_max.unwrap();
        assert!((recent - 2.0).abs() < 1e-9, "{l:?}");
        assert_eq!(
            JobLearning::of(&members, &BTreeMap::new(), 0.03),
            JobLearning {
                members: 3,
                ..JobLearning::default()
            }
        );
    }
}
