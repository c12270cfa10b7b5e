//! The switch emulator's state machine: one switch's load table and the request handling around
//! it, without sockets or a clock (the async shell in `grpc.rs` passes the current slot in).
//!
//! Requests are batched (all of a host's flows in one call), so a bad item must not cost the
//! good ones: each item is checked on its own and refused with a reason, the rest still apply.
//! Only faults of the call as a whole (bad host, too many flows) fail the call.

use std::collections::HashSet;
use std::sync::Arc;

use mlcc_core::flow::{FlowId, PrecedenceKey, Rank, validate_id};
use mlcc_core::load_table::{FeedbackMode, LoadTable, Query, TableError, Update};
use mlcc_core::slot::{Slot, SlotConfig};
use mlcc_core::topology::{LinkId, Topology};
use mlcc_proto::MAX_FLOWS_PER_CALL;
use mlcc_proto::v1 as pb;

/// Entries a `Table` call returns when the caller names no limit; enough for an operator, small
/// enough that the reply stays far below the message size limit.
pub const DEFAULT_TABLE_ENTRIES: usize = 10_000;

/// Longest piece of client input echoed back in a rejection, so a hostile request cannot make
/// the reply larger than itself.
const ECHO_BYTES: usize = 128;

/// Why the emulator could not be set up from a topology.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("switch {0:?} is not in the topology")]
    UnknownSwitch(String),
    #[error("{0:?} is a host, not a switch; mlcc-switchd emulates switches")]
    NotASwitch(String),
    #[error("switch {0:?} transmits onto no link, so it has no load table to keep")]
    NoLinks(String),
}

/// A fault of a whole call; the shell maps it to a gRPC status.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RequestError {
    #[error("invalid host name {name:?}: {reason}")]
    InvalidHost { name: String, reason: String },
    #[error("host {0:?} is not in this switch's topology")]
    UnknownHost(String),
    #[error("{got} flows in one call; at most {MAX_FLOWS_PER_CALL} are allowed (split the batch)")]
    TooManyFlows { got: usize },
    #[error("link {0:?} is not one this switch transmits onto")]
    UnknownLink(String),
}

/// One switch's load table plus the name maps the wire needs.
#[derive(Debug)]
pub struct Emulator {
    switch: String,
    slots: SlotConfig,
    mode: FeedbackMode,
    table: LoadTable,
    /// Owned links by wire name.
    by_name: mlcc_core::hash::Map<Arc<str>, LinkId>,
    /// Owned links sorted by name, with capacities, for replies that list them.
    links: Vec<(Arc<str>, LinkId, f64)>,
    hosts: HashSet<String>,
    /// Link ids of the item being handled, kept between calls so a call allocates none.
    scratch: Vec<LinkId>,
}

fn clip(s: &str) -> String {
    if s.len() <= ECHO_BYTES {
        return s.to_string();
    }
    let mut end = ECHO_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn reject(
    index: usize,
    flow: &str,
    link: &str,
    reason: pb::RejectReason,
    msg: String,
) -> pb::Rejection {
    pb::Rejection {
        index: index as u32,
        flow_id: clip(flow),
        link: clip(link),
        reason: reason as i32,
        message: msg,
    }
}

fn reason_of(e: &TableError) -> pb::RejectReason {
    use pb::RejectReason as R;
    match e {
        TableError::UnknownLink(_) => R::UnknownLink,
        TableError::TooManyRates { .. } => R::TooManyRates,
        TableError::NotFinite { .. } => R::NotFinite,
        TableError::Negative { .. } => R::Negative,
        TableError::TooLarge { .. } => R::TooLarge,
        TableError::FirstSlotOutOfWindow { .. } => R::SlotOutOfWindow,
        TableError::KeyMismatch { .. } => R::Unspecified,
    }
}

impl Emulator {
    /// The emulator of `switch` in `topo`, owning the links the switch transmits onto.
    pub fn new(
        topo: &Topology,
        switch: &str,
        slots: SlotConfig,
        mode: FeedbackMode,
        now: Slot,
    ) -> Result<Self, SetupError> {
        let node = topo
            .node_by_name(switch)
            .ok_or_else(|| SetupError::UnknownSwitch(switch.to_string()))?;
        if !topo.node(node).is_switch() {
            return Err(SetupError::NotASwitch(switch.to_string()));
        }
        let owned = topo.links_owned_by(node);
        if owned.is_empty() {
            return Err(SetupError::NoLinks(switch.to_string()));
        }
        let mut links: Vec<(Arc<str>, LinkId, f64)> = owned
            .iter()
            .map(|&l| {
                let link = topo.link(l);
                (Arc::from(link.name.as_str()), l, link.capacity.0)
            })
            .collect();
        links.sort_by(|a, b| a.0.cmp(&b.0));
        let table = LoadTable::new(
            slots.horizon(),
            now,
            owned.iter().map(|&l| (l, topo.link(l).capacity)),
        )
        .answering(mode);
        Ok(Emulator {
            switch: switch.to_string(),
            slots,
            mode,
            table,
            by_name: links.iter().map(|(n, l, _)| (n.clone(), *l)).collect(),
            links,
            hosts: topo.hosts().map(|h| topo.node(h).name.clone()).collect(),
            scratch: Vec::new(),
        })
    }

    pub fn switch_name(&self) -> &str {
        &self.switch
    }

    pub fn slots(&self) -> SlotConfig {
        self.slots
    }

    pub fn mode(&self) -> FeedbackMode {
        self.mode
    }

    /// The underlying table, e.g. for `check_invariants` in tests.
    pub fn table(&self) -> &LoadTable {
        &self.table
    }

    /// Moves the table to slot `now` (expiry, history). Backwards is ignored. O(1): links
    /// catch up when touched or swept ([`Self::settle_some`]).
    pub fn advance(&mut self, now: Slot) {
        self.table.advance(now);
    }

    /// Catches up at most `max` links that lag the current slot; true when none is left.
    pub fn settle_some(&mut self, max: usize) -> bool {
        self.table.settle_some(max)
    }

    /// Per owned link, sorted by name: (name, entries, load booked for the current slot).
    pub fn link_stats(&self) -> Vec<(Arc<str>, usize, f64)> {
        let now = self.table.now();
        self.links
            .iter()
            .map(|(name, l, _)| {
                (
                    name.clone(),
                    self.table.entry_count(*l).unwrap_or(0),
                    self.table.load(*l, now).unwrap_or(0.0),
                )
            })
            .collect()
    }

    fn check_call(&self, host: &str, flows: usize) -> Result<(), RequestError> {
        if flows > MAX_FLOWS_PER_CALL {
            return Err(RequestError::TooManyFlows { got: flows });
        }
        validate_id(host).map_err(|e| RequestError::InvalidHost {
            name: clip(host),
            reason: e.to_string(),
        })?;
        if !self.hosts.contains(host) {
            return Err(RequestError::UnknownHost(clip(host)));
        }
        Ok(())
    }

    /// Resolves an item's flow id and links, or says why the item is refused.
    fn resolve(
        &self,
        index: usize,
        flow: &str,
        links: &[String],
        out: &mut Vec<LinkId>,
    ) -> Result<FlowId, pb::Rejection> {
        let id = FlowId::new(flow).map_err(|e| {
            reject(
                index,
                flow,
                "",
                pb::RejectReason::InvalidFlowId,
                format!("flow id: {e}"),
            )
        })?;
        if links.is_empty() {
            return Err(reject(
                index,
                flow,
                "",
                pb::RejectReason::NoLinks,
                "the item names no link".to_string(),
            ));
        }
        out.clear();
        for name in links {
            match self.by_name.get(name.as_str()) {
                Some(&l) => out.push(l),
                None => {
                    return Err(reject(
                        index,
                        flow,
                        name,
                        pb::RejectReason::UnknownLink,
                        format!(
                            "unknown link {:?}: switch {} transmits onto none by that name",
                            clip(name),
                            self.switch
                        ),
                    ));
                }
            }
        }
        Ok(id)
    }

    /// `FetchFeedback`: per flow per link, the capacity and the load booked in slots
    /// `req.slot..req.slot+K` by everything except that flow and the asking host's own entries.
    /// Takes the request by value: its flow ids and link names move into the reply, uncopied.
    pub fn fetch_feedback(
        &mut self,
        now: Slot,
        req: pb::FetchFeedbackRequest,
    ) -> Result<pb::FetchFeedbackReply, RequestError> {
        self.check_call(&req.host, req.flows.len())?;
        self.table.advance(now);
        let pb::FetchFeedbackRequest { host, slot, flows } = req;
        let from = if slot == 0 { now } else { Slot(slot) };
        let k = self.slots.horizon();
        let mut reply = pb::FetchFeedbackReply {
            switch_slot: now.0,
            from_slot: from.0,
            flows: Vec::with_capacity(flows.len()),
            rejected: Vec::new(),
            // Stamped by the gRPC layer, which owns the clock.
            switch_unix_ns: 0,
        };
        let mut ids = std::mem::take(&mut self.scratch);
        for (index, q) in flows.into_iter().enumerate() {
            let flow = match self.resolve(index, &q.flow_id, &q.links, &mut ids) {
                Ok(f) => f,
                Err(r) => {
                    reply.rejected.push(r);
                    continue;
                }
            };
            let key = PrecedenceKey::new(Rank(q.rank), flow.clone());
            let query = Query {
                flow: &flow,
                key: &key,
                exclude_publisher: Some(&host),
            };
            let mut links = Vec::with_capacity(ids.len());
            let mut failed = None;
            for (&l, name) in ids.iter().zip(q.links) {
                let mut load = vec![0.0; k];
                let answered = if q.committed {
                    (self.table)
                        .feedback_committed(l, &query, self.mode, from, &mut load)
                        .map(Some)
                } else {
                    (self.table)
                        .feedback(l, &query, self.mode, from, &mut load)
                        .map(|()| None)
                };
                match answered {
                    Ok(committed) => links.push(pb::LinkLoad {
                        link: name,
                        capacity_bytes_per_sec: self.table.capacity(l).map(|c| c.0).unwrap_or(0.0),
                        load_bytes_per_sec: load,
                        committed_bytes_per_sec: committed,
                    }),
                    Err(e) => {
                        failed = Some(reject(
                            index,
                            &q.flow_id,
                            &name,
                            reason_of(&e),
                            e.to_string(),
                        ));
                        break;
                    }
                }
            }
            match failed {
                Some(r) => reply.rejected.push(r),
                None => reply.flows.push(pb::FlowFeedback {
                    flow_id: q.flow_id,
                    links,
                }),
            }
        }
        self.scratch = ids;
        Ok(reply)
    }

    /// `UpdateSchedule`: replaces each item's entry on each of its links (publisher = the
    /// request's host), or withdraws it with `done`. An item applies on all its links or on none,
    /// so a switch never holds half of a plan.
    pub fn update_schedule(
        &mut self,
        now: Slot,
        req: &pb::UpdateScheduleRequest,
    ) -> Result<pb::UpdateScheduleReply, RequestError> {
        self.check_call(&req.host, req.flows.len())?;
        self.table.advance(now);
        let mut reply = pb::UpdateScheduleReply {
            switch_slot: now.0,
            accepted: 0,
            rejected: Vec::new(),
        };
        let mut ids = std::mem::take(&mut self.scratch);
        'items: for (index, item) in req.flows.iter().enumerate() {
            let flow = match self.resolve(index, &item.flow_id, &item.links, &mut ids) {
                Ok(f) => f,
                Err(r) => {
                    reply.rejected.push(r);
                    continue;
                }
            };
            let key = PrecedenceKey::new(Rank(item.rank), flow.clone());
            let update = Update {
                flow: &flow,
                publisher: &req.host,
                first_slot: Slot(item.first_slot),
                rates: &item.rates_bytes_per_sec,
                key: &key,
                done: item.done,
            };
            for (&l, name) in ids.iter().zip(&item.links) {
                if let Err(e) = self.table.validate(l, &update) {
                    reply.rejected.push(reject(
                        index,
                        &item.flow_id,
                        name,
                        reason_of(&e),
                        e.to_string(),
                    ));
                    continue 'items;
                }
            }
            for (&l, name) in ids.iter().zip(&item.links) {
                // Validated above; an error here would be a table bug, still reported, not a panic.
                if let Err(e) = self.table.update(l, &update) {
                    reply.rejected.push(reject(
                        index,
                        &item.flow_id,
                        name,
                        reason_of(&e),
                        e.to_string(),
                    ));
                    continue 'items;
                }
            }
            reply.accepted += 1;
        }
        self.scratch = ids;
        Ok(reply)
    }

    pub fn describe(&self, now: Slot) -> pb::DescribeReply {
        pb::DescribeReply {
            switch_name: self.switch.clone(),
            links: self
                .links
                .iter()
                .map(|(name, _, cap)| pb::LinkInfo {
                    link: name.to_string(),
                    capacity_bytes_per_sec: *cap,
                })
                .collect(),
            slot_ns: self.slots.tau_ns(),
            horizon: self.slots.horizon() as u32,
            feedback_mode: match self.mode {
                FeedbackMode::AllOthers => pb::FeedbackMode::AllOthers,
                FeedbackMode::Precedence => pb::FeedbackMode::Precedence,
            } as i32,
            switch_slot: now.0,
            max_flows_per_call: MAX_FLOWS_PER_CALL as u32,
            max_message_bytes: mlcc_proto::MAX_MESSAGE_BYTES as u64,
        }
    }

    /// `Table`: the entries of one link or of all, in precedence order, for operators.
    pub fn table_rows(
        &mut self,
        now: Slot,
        req: &pb::TableRequest,
    ) -> Result<pb::TableReply, RequestError> {
        self.table.advance(now);
        let selected: Vec<&(Arc<str>, LinkId, f64)> = if req.link.is_empty() {
            self.links.iter().collect()
        } else {
            let found = self.links.iter().find(|(n, _, _)| **n == *req.link);
            vec![found.ok_or_else(|| RequestError::UnknownLink(clip(&req.link)))?]
        };
        let mut budget = match req.max_entries {
            0 => DEFAULT_TABLE_ENTRIES,
            n => n as usize,
        };
        let k = self.slots.horizon() as u64;
        let mut reply = pb::TableReply {
            switch_slot: now.0,
            links: Vec::with_capacity(selected.len()),
            truncated: false,
        };
        for (name, l, cap) in selected {
            let entries = self.table.entries(*l).unwrap_or_default();
            let take = entries.len().min(budget);
            budget -= take;
            reply.truncated |= take < entries.len();
            reply.links.push(pb::LinkTable {
                link: name.to_string(),
                capacity_bytes_per_sec: *cap,
                load_bytes_per_sec: (0..k)
                    .map(|i| self.table.load(*l, now.plus(i)).unwrap_or(0.0))
                    .collect(),
                max_recent_load_bytes_per_sec: self.table.max_recent_load(*l).unwrap_or(0.0),
                entry_count: entries.len() as u32,
                entries: entries
                    .into_iter()
                    .take(take)
                    .map(|(f, e)| pb::TableEntry {
                        flow_id: f.to_string(),
                        publisher: e.publisher.clone(),
                        first_slot: e.first_slot.0,
                        rates_bytes_per_sec: e.rates.clone(),
                        rank: e.key.rank.0,
                        refreshed_slot: e.refreshed.0,
                    })
                    .collect(),
            });
        }
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlcc_core::units::BytesPerSec;

    fn emu(mode: FeedbackMode) -> Emulator {
        let topo = Topology::single_switch(3, BytesPerSec(1000.0)).unwrap();
        let slots = SlotConfig::new(std::time::Duration::from_millis(20), 4).unwrap();
        Emulator::new(&topo, "sw1", slots, mode, Slot(100)).unwrap()
    }

    fn item(flow: &str, link: &str, rates: &[f64]) -> pb::ScheduleItem {
        pb::ScheduleItem {
            flow_id: flow.into(),
            links: vec![link.into()],
            first_slot: 100,
            rates_bytes_per_sec: rates.to_vec(),
            rank: 1,
            done: false,
        }
    }

    #[test]
    fn setup_errors_name_the_problem() {
        let topo = Topology::single_switch(2, BytesPerSec(1000.0)).unwrap();
        let s = SlotConfig::paper();
        let m = FeedbackMode::AllOthers;
        let e = Emulator::new(&topo, "nope", s, m, Slot(0)).unwrap_err();
        assert!(e.to_string().contains("\"nope\""), "{e}");
        let e = Emulator::new(&topo, "h1", s, m, Slot(0)).unwrap_err();
        assert!(e.to_string().contains("host"), "{e}");
    }

    #[test]
    fn a_bad_item_does_not_block_good_ones() {
        let mut e = emu(FeedbackMode::AllOthers);
        let req = pb::UpdateScheduleRequest {
            host: "h1".into(),
            slot: 100,
            flows: vec![
                item("a", "sw1->h2", &[10.0]),
                item("b", "sw1->h9", &[10.0]),
                item("c", "sw1->h2", &[f64::NAN]),
                item("", "sw1->h2", &[1.0]),
            ],
        };
        let r = e.update_schedule(Slot(100), &req).unwrap();
        assert_eq!(r.accepted, 1);
        let reasons: Vec<i32> = r.rejected.iter().map(|r| r.reason).collect();
        use pb::RejectReason as R;
        assert_eq!(
            reasons,
            vec![
                R::UnknownLink as i32,
                R::NotFinite as i32,
                R::InvalidFlowId as i32
            ]
        );
        assert_eq!(r.rejected[0].link, "sw1->h9");
        e.table().check_invariants().unwrap();
    }

    #[test]
    fn call_level_faults_fail_the_call() {
        let mut e = emu(FeedbackMode::AllOthers);
        let mut req = pb::FetchFeedbackRequest {
            host: "h7".into(),
            ..Default::default()
        };
        assert_eq!(
            e.fetch_feedback(Slot(100), req.clone()),
            Err(RequestError::UnknownHost("h7".into()))
        );
        req.host = "bad\nhost".into();
        assert!(matches!(
            e.fetch_feedback(Slot(100), req.clone()),
            Err(RequestError::InvalidHost { .. })
        ));
        req.host = "h1".into();
        req.flows = vec![Default::default(); MAX_FLOWS_PER_CALL + 1];
        assert!(matches!(
            e.fetch_feedback(Slot(100), req.clone()),
            Err(RequestError::TooManyFlows { .. })
        ));
    }

    #[test]
    fn long_input_is_clipped_in_replies() {
        let long = "é".repeat(200);
        let c = clip(&long);
        assert!(c.len() <= ECHO_BYTES + "…".len());
    }
}
