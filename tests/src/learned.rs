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
}

/// What a member said of itself.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberTruth {
    pub pid: u32,
    pub bytes_per_iteration: f64,
    /// Its mean iteration time; none for a member that does not time iterations (a PS server).
    pub mean_iteration_s: Option<f64>,
}

/// One job's learning in one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct JobLearning {
    /// Members that sent bytes, and those of them the learner stood behind.
    pub members: usize,
    pub learned: usize,
    /// The latest iteration in which a member was first learned.
    pub learned_by_iteration: Option<u64>,
    /// The largest |learned / true − 1| of bytes per iteration over the learned members.
    pub bytes_error_max: Option<f64>,
    /// The largest |learned period − the member's mean iteration time|, in slots.
    pub period_error_slots_max: Option<f64>,
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
                period_ms: 460.0
            }
        );
        assert_eq!(first[&23080].iteration, 5);
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
                },
            ),
            (
                2,
                FirstEstimate {
                    iteration: 6,
                    bytes_per_iteration: 21.0e6,
                    period_ms: 1440.0,
                },
            ),
        ]);
        let member = |pid, b, t| MemberTruth {
            pid,
            bytes_per_iteration: b,
            mean_iteration_s: t,
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
        let bytes = l.bytes_error_max.unwrap();
        assert!((bytes - (1.0 - 21.0 / 21.12)).abs() < 1e-12, "{l:?}");
        let slots = l.period_error_slots_max.unwrap();
        assert!((slots - 2.0).abs() < 1e-9, "{l:?}");
        assert_eq!(
            JobLearning::of(&members, &BTreeMap::new(), 0.03),
            JobLearning {
                members: 3,
                ..JobLearning::default()
            }
        );
    }
}
