//! The one policy config: every rule of [`super::HostPolicy`] beyond Alg. 1 / Alg. 2 has a
//! field here, and the defaults are mlccd's. Nothing else in the workspace defines them:
//! mlccd's flags and config file override fields, and mlcc-sim's variants are values of it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::load_table::FeedbackMode;
use crate::slot::SlotConfig;

/// What the first component of a flow's precedence key holds: lower claims bandwidth first.
/// Every host and switch of a cluster must use the same rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RankRule {
    /// The slot the flow's iteration started in (docs/design.md §6, the paper): first come, first
    /// served.
    IterationStart,
    /// The job's model bytes (what each iteration moves), smaller first: shortest job first,
    /// which lowers mean JCT where FCFS makes a small job wait behind a large one (measured on
    /// the testbed and in mlcc-sim). Stable over a job's life and the same on every host of
    /// the job, so bookings never reorder mid-iteration; but every job of one model shares a
    /// rank, and the flow id then decides, whatever each job has left.
    #[serde(alias = "job-size")]
    JobBytes,
    /// The bytes the job has sent so far over all its iterations, in size classes: least
    /// attained service first, as Tiresias does for GPU time. Needs no knowledge of the
    /// future; a job's rank grows as it runs, so young jobs overtake old ones.
    AttainedService,
    /// The bytes the job still has to send until it finishes, in size classes: shortest
    /// remaining first (SRPT), the order that minimizes mean completion time. Where a job
    /// states its total iterations (`MLCC_TOTAL_ITERATIONS` in the progress header; the
    /// simulator knows them); a job that does not is ranked by what it has sent so far
    /// ([`RankRule::AttainedService`], same scale).
    RemainingBytes,
    /// [`RankRule::RemainingBytes`] in whole octaves: a job goes before another only with
    /// about half the bytes left or less; between jobs closer than that, the one whose
    /// iteration started first goes first. A job that does not state its total iterations
    /// (one learned from its sockets, or a progress header without it) is ranked as though its
    /// current iteration were its last, by the bytes one iteration moves: of the jobs that say
    /// nothing of their length, those that move less per iteration go first, as Sincronia
    /// serves the smallest coflow first. Ranked by what it had sent so far instead, as
    /// [`RankRule::RemainingBytes`] ranks it, a long job sank below every younger one
    /// (docs/results.md, 2026-12-06). Quarter octaves split two alike jobs a few
    /// iterations apart into strict priority, and where one's communication barely fits in the
    /// other's compute, every slot of lag at a hand-over cost the lower one a whole cycle
    /// (testbed `micro-two-jobs-heavy`). The default; docs/design.md §17 has the figures
    /// against quarter octaves.
    #[default]
    RemainingOctaves,
}

impl RankRule {
    pub const ALL: [RankRule; 5] = [
        RankRule::IterationStart,
        RankRule::JobBytes,
        RankRule::AttainedService,
        RankRule::RemainingBytes,
        RankRule::RemainingOctaves,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RankRule::IterationStart => "iteration-start",
            RankRule::JobBytes => "job-bytes",
            RankRule::AttainedService => "attained-service",
            RankRule::RemainingBytes => "remaining-bytes",
            RankRule::RemainingOctaves => "remaining-octaves",
        }
    }
}

impl fmt::Display for RankRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RankRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // `job-size` was this rule's name before the rank rules moved into core.
        if s == "job-size" {
            return Ok(RankRule::JobBytes);
        }
        RankRule::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = RankRule::ALL.iter().map(|r| r.as_str()).collect();
                format!("unknown rank rule {s:?} (one of: {})", names.join(", "))
            })
    }
}

/// The lowest rate mlccd orders per connection (1 Mbit/s). Not 0: a zero rate would freeze the
/// socket for good if mlccd died. And not much lower: the kernel's internal pacing stamps every
/// packet with its earliest departure time, `previous + len / rate`, and a later, higher rate
/// does not move a stamp already taken — at 1 B/s the first 2-segment burst of a held-back flow
/// would push its next departure ~3000 s out. At 125 kB/s a minimum TSO burst (2 segments,
/// ~2.9 kB) waits at most ~23 ms, under half a slot, while a held-back flow takes 0.1 % of a
/// 1 Gbit/s link. The policy plans with it ([`PolicyConfig::rate_floor_per_connection`]) and
/// orders no connection below it ([`super::Connections`]).
pub const RATE_FLOOR_BYTES_PER_SEC: u64 = 125_000;

/// The share of every link's capacity the policy leaves unplanned ([`PolicyConfig::link_headroom`]):
/// 0.36 MB/s of a 1 Gbit/s link, the rate floor of about three held-back connections.
pub const LINK_HEADROOM_SHARE: f64 = 0.003;

/// The most of a link a plan may be told to leave unbooked ([`parse_link_headroom`]): beyond
/// half, the plan would no longer be what schedules the link.
const MAX_LINK_HEADROOM_SHARE: f64 = 0.5;

/// A link headroom as an operator writes it (`mlccd --link-headroom`, `mlcc-sim
/// mlcc/link-headroom=`): a share of each link from 0 to `MAX_LINK_HEADROOM_SHARE`. More than
/// the default leaves capacity to traffic mlcc does not schedule (cross traffic, storage) while
/// training flows hold data, at the cost of the training flows' own rate.
pub fn parse_link_headroom(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|h| (0.0..=MAX_LINK_HEADROOM_SHARE).contains(h))
        .ok_or_else(|| {
            format!("{s:?} is not a share of a link from 0 to {MAX_LINK_HEADROOM_SHARE}")
        })
}

/// What a held flow kept warm is paced at ([`PolicyConfig::warm_resume`],
/// [`PolicyConfig::warm_held`]): this share of the rate it is kept warm for, 2.4 MB/s of a
/// 1 Gbit/s path (a 2-segment burst every 1.2 ms), and never more than
/// [`WARM_MAX_PER_CONNECTION`] per connection.
pub const WARM_SHARE: f64 = 0.02;

/// The most a warm flow is paced at per connection: on a faster path the share would take far
/// more than its stamps need (2 % of 10 Gbit/s is 25 MB/s, unbooked), while 2.5 MB/s already
/// spaces them 1.2 ms apart.
pub const WARM_MAX_PER_CONNECTION: f64 = 2.5e6;

/// Knobs of the per-host policy. `Default` is what mlccd runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PolicyConfig {
    pub slots: SlotConfig,
    /// η: weight of the delay a plan imposes on others, against its own completion (Alg. 1).
    /// mlccd's default is 0: Alg. 1 prices a slot by the load booked on it, but the dual price
    /// of a link that is not full is 0, and a full link offers no capacity anyway, so a price
    /// only makes a flow skip the residual of a partly booked slot and leave it idle (measured:
    /// η = 0 is 1-4 % faster on mlcc-sim `--quick`). The paper's η = 1 is the `paper` preset's.
    pub eta: f64,
    pub mode: FeedbackMode,
    pub rank: RankRule,
    /// A flow whose application has handed over less than [`Self::idle_backlog_bytes`] that is
    /// still unacknowledged books nothing and is paced at what its path has free: a PS server
    /// waiting for pushes, a ring step waiting for its predecessor, a worker computing.
    pub idle_books_nothing: bool,
    pub idle_backlog_bytes: f64,
    /// Without a backlog count (a learned job's counters are of bytes acked, not handed over),
    /// a flow none of whose connections sent or had a byte acknowledged during the last slot
    /// holds nothing: paced at the rate floor at least, anything queued would have moved. It is
    /// then idle as [`Self::idle_books_nothing`] says, instead of booking its path at line rate
    /// for bytes it does not have (measured on the testbed, `micro-two-jobs-heavy` with no
    /// progress files: a learned ring computing between iterations booked the shared link for
    /// 0.2-0.4 s while the other job's flow waited at the rate floor).
    pub quiet_is_idle: bool,
    /// A flow whose count says its library holds bytes, but whose connections stood still
    /// during a slot in which it could send (it was planned a rate, or was idle and paced into
    /// what was free) while the count did not grow, is waiting inside its library and is idle
    /// as [`Self::idle_books_nothing`] says. Gloo writes a ring step's chunk only once its
    /// predecessor's has arrived and its peer has posted the receive, but PyTorch's comm hook
    /// counts the whole bucket as handed over at once: such a step booked its uplink at line
    /// rate while it sent nothing, and where two jobs' waiting ranks each held back the rank
    /// the other waited for, both jobs stalled for seconds (testbed `torch-two-jobs`,
    /// docs/notes/2026-12-04-torch-two-jobs-stalls.md).
    pub library_waits_idle: bool,
    /// A ring or broadcast sender that already holds its bytes is not held back by Alg. 2:
    /// peers' progress is a slot stale, and a sender with the data cannot be ahead of its
    /// upstream.
    pub holder_not_held_back: bool,
    /// B_f learns from a slot's delivery only where the flow was path-limited: it delivered
    /// less than `path_limited_share` of its plan and data waited at both ends of the slot.
    /// Off: B_f stays at the path capacity.
    pub delivery_samples: bool,
    pub path_limited_share: f64,
    /// A job's flows leaving one host over the same first link split it in proportion to what
    /// each has left (MADD), so a PS worker's pushes pipeline into every server at once.
    pub split_uplink: bool,
    /// Idle flows and flows whose plan ends this slot are paced beyond their plan, into the
    /// capacity of slot n that nobody booked (shared evenly among such flows per link).
    pub pace_free_capacity: bool,
    /// A finished flow keeps an order (with [`Self::pace_free_capacity`]) instead of being
    /// released to kernel TCP: what its links leave after the local flows that outrank it (split
    /// among its job's finished flows on the link), as its next plan would give it, and never
    /// less than an even share of the link among this host's flows on it. The next iteration's
    /// first bytes, before mlccd's next slot, then leave paced: released, they left as one
    /// unpaced Reno burst of the cwnd the pacer had grown, overran the queue and stalled in loss
    /// recovery (measured on the testbed, `solo-ps`: 1174 segments retransmitted in 12
    /// iterations, 5 of them 0.1-0.2 s slower). Without the even share, a job whose own flows
    /// held the link restarted at the rate floor, and real PS-Lite's request/response rounds
    /// crawled (its namespace test failed two runs in three).
    pub standby_pace: bool,
    /// A flow holding all it has left, when its path carries that in one slot, is paced at the
    /// path's rate: it finishes early in the slot instead of exactly at its end, so what waits
    /// on its last byte (a PS reply to the whole aggregate, a ring's next step) starts within
    /// the slot, and no squeeze on an overbooked link leaves a few bytes — and the whole
    /// iteration — for the next slot, and the next (mlcc-sim: tails of kilobytes crawling at the
    /// rate floor for three slots). Its booking stays what Alg. 1 planned.
    pub flush_tail: bool,
    /// Lowest rate ordered per connection (bytes/s): Linux pacing stamps do not move when the
    /// rate rises, so a lower rate would freeze a held-back flow long after it resumed.
    pub rate_floor_per_connection: f64,
    /// Share of each link's capacity left out of every plan ([`LINK_HEADROOM_SHARE`]). Held-back
    /// flows still send at the rate floor, which nobody books, so a link its plans fill exactly
    /// is overbooked by those floors, and every flow on it delivers a little less than planned.
    /// A flow planned to finish at the end of the slot then leaves a crumb of a few kilobytes,
    /// and the crumb costs its iteration a whole slot, or two where a broadcast waits for it
    /// (mlcc-sim: 3746 B of a VGG16 push, then 3 B of its broadcast, each a slot).
    pub link_headroom: f64,
    /// Peer progress older than this many slots, or of another iteration, is ignored.
    pub peer_stale_slots: u64,
    /// In `precedence` mode, slot n is also planned around the slot-n rates that lower-ranked
    /// flows already committed in slot n (they are sending now and can only yield from n+1).
    /// Needs the committed load in the answers ([`super::LinkObs::committed_now`]). On by
    /// default: a flow that outranks others claims their capacity from the next slot instead of
    /// overbooking the current one (mlcc-sim: 0.6-2 % lower mean JCT on `--quick`, 4 % on
    /// paper-fig15 seed 1).
    pub committed_now: bool,
    /// A PS broadcast judges the pushes into its server by where they will be at the end of
    /// this slot (their last report's F plus their booking for this slot), not where they
    /// were at the end of the last: a broadcast whose data arrives during the slot is not
    /// idle, books what will arrive, and Alg. 2 holds it to that. Without it the broadcast,
    /// its pushes arriving, books nothing in their first slot, and a lower-ranked flow from
    /// the same host takes the whole uplink (mlcc-sim `--quick` seeds 1-5: 1.1-2.2 % lower
    /// mean JCT with it). Ring flows keep last slot's view: projecting them gained nothing in
    /// mlcc-sim and cost 2.5 % on the testbed's two-ring-job `micro-two-jobs-heavy`.
    pub project_upstream: bool,
    /// Under a size-class rank rule, a flow that can finish its iteration within one slot at
    /// its path's rate goes before every flow that cannot. A job whose remaining bytes just
    /// crossed into a lower class than an alike job's otherwise takes the link from that job
    /// with a few megabytes of its step left, and the few megabytes wait a whole
    /// communication phase (testbed `micro-two-jobs-heavy`: 3.9 MB of a ring step held for 7
    /// slots, four iterations of 1.33 s beside 0.90 s). Ranking the last slot first costs the
    /// overtaken flow at most one slot.
    pub last_slot_first: bool,
    /// Within a slot, a flow whose plan ends in it and that holds all it has left sends first,
    /// at what the local flows on the very same links were given, then hands the path back
    /// ([`super::Handover`]): its iteration ends when its bytes are through, not at the
    /// slot's end where Alg. 1's per-slot rate would put its last byte.
    pub handover: bool,
    /// A flow held at the rate floor this slot whose plan gives it more next slot is paced at
    /// [`WARM_SHARE`] of that rate this slot. Linux stamps each packet's departure from the
    /// rate in force when the packet before it left, and a new rate reaches the socket with
    /// the next ACK: a flow paced at the floor (125 kB/s) sends a 2-segment burst every 23 ms,
    /// so when its order is raised it first waits out the stamp of its last burst, then the
    /// stamp its next burst takes at the old rate, 23-46 ms, all of a 30-ms slot (testbed
    /// `paper-small-no-cross`, mlccd's plan trace: a flow raised from the floor delivered a
    /// median 0 % of its new order in that slot, 98 % in steady slots; kept warm, 87 %).
    pub warm_resume: bool,
    /// Every flow with bytes of its iteration left is paced at no less than [`WARM_SHARE`] of
    /// its path's rate, whether the plan holds it back or it waits for data (a ring step for
    /// its predecessor, a broadcast for its pushes): a raise the plan did not announce a slot
    /// ahead (44 % of the raises in that trace: a flow above it finished early, a switch
    /// answered otherwise), or data arriving mid-slot, finds its stamps close too. What it
    /// sends this way, unbooked, is its own data sent early.
    pub warm_held: bool,
    /// How a flow uses the capacity its plan did not book ([`Fill`]).
    pub fill: Fill,
    /// Fill classes beneath the default class (1..=[`MAX_FILL_CLASSES`]); with more than one,
    /// a flow's fill class is its rank compressed onto them ([`PolicyConfig::fill_class_of`]).
    pub fill_classes: u8,
}

/// The most fill classes a policy uses: commodity switches have 8 strict-priority queues, one
/// of which the default class keeps.
pub const MAX_FILL_CLASSES: u8 = 7;

/// How a flow uses capacity its plan did not book. A slotted, distributed plan acts only at
/// the next slot boundary: what it did not book in a slot (a flow above finishing early, data
/// arriving mid-slot, a host's plan made with last slot's bookings) stays idle meanwhile
/// unless something beneath the plan takes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fill {
    /// Nothing beneath the plan: a flow sends at its enforced rate, in the network's default
    /// class.
    #[default]
    Off,
    /// The plan's rate in the default class, every byte beyond it in a fill class beneath it,
    /// at whatever rate the network leaves (the switches serve the default class first).
    Excess,
    /// A flow the plan gives a rate this slot is paced as with fill off; a flow it gives none
    /// (held back, idle, finished and on standby) sends all it holds in a fill class, unpaced.
    Unbooked,
    /// One class, no switch support: every flow with bytes waiting beyond its plan is paced at
    /// its plan plus an even share of what nobody booked on its path in slot n, as
    /// [`PolicyConfig::pace_free_capacity`] paces idle flows.
    Scavenge,
}

impl Fill {
    pub const ALL: [Fill; 4] = [Fill::Off, Fill::Excess, Fill::Unbooked, Fill::Scavenge];

    pub fn as_str(self) -> &'static str {
        match self {
            Fill::Off => "off",
            Fill::Excess => "excess",
            Fill::Unbooked => "unbooked",
            Fill::Scavenge => "scavenge",
        }
    }
}

impl fmt::Display for Fill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Fill {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Fill::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Fill::ALL.iter().map(|r| r.as_str()).collect();
                format!("unknown fill {s:?} (one of: {})", names.join(", "))
            })
    }
}

impl PolicyConfig {
    pub fn new(slots: SlotConfig) -> Self {
        PolicyConfig {
            slots,
            eta: 0.0,
            mode: FeedbackMode::default(),
            rank: RankRule::default(),
            idle_books_nothing: true,
            idle_backlog_bytes: 64.0 * 1024.0,
            quiet_is_idle: true,
            library_waits_idle: true,
            holder_not_held_back: true,
            delivery_samples: true,
            path_limited_share: 0.9,
            split_uplink: true,
            pace_free_capacity: true,
            standby_pace: true,
            flush_tail: true,
            rate_floor_per_connection: RATE_FLOOR_BYTES_PER_SEC as f64,
            link_headroom: LINK_HEADROOM_SHARE,
            peer_stale_slots: 2,
            committed_now: true,
            project_upstream: true,
            last_slot_first: true,
            handover: true,
            warm_resume: true,
            warm_held: true,
            fill: Fill::Off,
            fill_classes: 1,
        }
    }

    /// The paper's system as published: iteration-start ranks, η = 1, Alg. 1 and Alg. 2 alone
    /// (no idle, holder, split, pacing, tail, rate-floor, headroom, committed-slot, last-slot
    /// or hand-over rules).
    pub fn paper(slots: SlotConfig, mode: FeedbackMode) -> Self {
        PolicyConfig {
            mode,
            eta: 1.0,
            rank: RankRule::IterationStart,
            idle_books_nothing: false,
            quiet_is_idle: false,
            library_waits_idle: false,
            holder_not_held_back: false,
            split_uplink: false,
            pace_free_capacity: false,
            standby_pace: false,
            flush_tail: false,
            committed_now: false,
            project_upstream: false,
            last_slot_first: false,
            handover: false,
            warm_resume: false,
            warm_held: false,
            rate_floor_per_connection: 0.0,
            link_headroom: 0.0,
            ..PolicyConfig::new(slots)
        }
    }

    /// The named starting points of a configuration: `mlccd` (the defaults, [`Self::new`]) and
    /// `paper` (the paper as published, [`Self::paper`], with its all-others feedback).
    pub const PRESETS: [&'static str; 2] = ["mlccd", "paper"];

    /// The preset `name` (one of [`Self::PRESETS`]).
    pub fn preset(name: &str, slots: SlotConfig) -> Option<Self> {
        match name {
            "mlccd" => Some(PolicyConfig::new(slots)),
            "paper" => Some(PolicyConfig::paper(slots, FeedbackMode::AllOthers)),
            _ => None,
        }
    }

    /// The rules that can be switched off, by name, for ablations (`mlcc-sim --policies
    /// mlcc-no-<rule>`).
    pub const RULES: [&'static str; 17] = [
        "idle",
        "quiet-idle",
        "library-waits",
        "holder",
        "delivery-samples",
        "split-uplink",
        "pace-free",
        "standby",
        "flush-tail",
        "rate-floor",
        "headroom",
        "committed-now",
        "project-upstream",
        "last-slot-first",
        "handover",
        "warm-resume",
        "warm-held",
    ];

    /// This config with rule `name` (one of [`Self::RULES`]) set to `on`.
    pub fn with_rule(mut self, name: &str, on: bool) -> Option<Self> {
        match name {
            "idle" => self.idle_books_nothing = on,
            "quiet-idle" => self.quiet_is_idle = on,
            "library-waits" => self.library_waits_idle = on,
            "holder" => self.holder_not_held_back = on,
            "delivery-samples" => self.delivery_samples = on,
            "split-uplink" => self.split_uplink = on,
            "pace-free" => self.pace_free_capacity = on,
            "standby" => self.standby_pace = on,
            "flush-tail" => self.flush_tail = on,
            "rate-floor" => {
                self.rate_floor_per_connection = if on {
                    RATE_FLOOR_BYTES_PER_SEC as f64
                } else {
                    0.0
                }
            }
            "headroom" => self.link_headroom = if on { LINK_HEADROOM_SHARE } else { 0.0 },
            "committed-now" => self.committed_now = on,
            "project-upstream" => self.project_upstream = on,
            "last-slot-first" => self.last_slot_first = on,
            "handover" => self.handover = on,
            "warm-resume" => self.warm_resume = on,
            "warm-held" => self.warm_held = on,
            _ => return None,
        }
        Some(self)
    }
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig::new(SlotConfig::paper())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_headroom_is_a_share_from_none_to_half_a_link() {
        assert_eq!(parse_link_headroom("0"), Ok(0.0));
        assert_eq!(parse_link_headroom("0.1"), Ok(0.1));
        assert_eq!(parse_link_headroom("0.5"), Ok(MAX_LINK_HEADROOM_SHARE));
        for bad in ["-0.1", "0.51", "NaN", "inf", "10%", ""] {
            let e = parse_link_headroom(bad).unwrap_err();
            assert!(e.contains("share of a link"), "{bad}: {e}");
        }
    }

    #[test]
    fn rank_rules_parse_by_name_and_the_old_name_still_works() {
        for r in RankRule::ALL {
            assert_eq!(r.as_str().parse::<RankRule>(), Ok(r));
        }
        assert_eq!("job-size".parse::<RankRule>(), Ok(RankRule::JobBytes));
        assert!("fifo".parse::<RankRule>().unwrap_err().contains("one of"));
    }

    #[test]
    fn presets_are_the_defaults_and_the_paper() {
        let slots = SlotConfig::paper();
        assert_eq!(
            PolicyConfig::preset("mlccd", slots),
            Some(PolicyConfig::new(slots))
        );
        let paper = PolicyConfig::preset("paper", slots).unwrap();
        assert_eq!(paper, PolicyConfig::paper(slots, FeedbackMode::AllOthers));
        assert_eq!(paper.rank, RankRule::IterationStart);
        assert!(PolicyConfig::preset("fast", slots).is_none());
    }

    #[test]
    fn every_rule_can_be_switched_off_by_name() {
        let on = PolicyConfig::default();
        for r in PolicyConfig::RULES {
            let off = on.with_rule(r, false).unwrap();
            assert_ne!(off, on.with_rule(r, true).unwrap(), "{r}");
        }
        assert!(on.with_rule("nope", false).is_none());
    }
}
