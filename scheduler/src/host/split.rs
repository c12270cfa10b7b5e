//! How a whole splits over parts by what each carried: a process's bytes over its flow groups,
//! a group's over its sockets; and where a socket's count starts when an iteration begins.

/// Where a socket's acked count stood when a new iteration began, seen from the first slot
/// that noticed it: the old iteration's baseline moved on by what the old iteration sent
/// (`last_bytes`, the progress file's share), but never beyond what is acked by now, and no
/// further back than this iteration's enqueued bytes allow (`enqueued`: an iteration cannot
/// have had more acked than handed over, which also bounds drift from bytes the library does
/// not count, such as message headers).
pub(super) fn iteration_baseline(
    old: u64,
    acked_now: u64,
    last_bytes: f64,
    enqueued: Option<f64>,
) -> u64 {
    let mut b = if last_bytes > 0.0 {
        old.saturating_add(last_bytes as u64)
    } else {
        acked_now
    };
    if let Some(e) = enqueued {
        b = b.max(acked_now.saturating_sub(e.max(0.0) as u64));
    }
    b.min(acked_now)
}

/// How a whole (a process's bytes over its groups, a group's over its sockets) splits over parts
/// that carried `carried` bytes each (`None`: unknown, no datapath counters): the parts without
/// counters take an even share each, those with counters split the rest in proportion to what
/// they carried, evenly while none has carried anything. The shares sum to 1 (empty: none).
///
/// Counters are cumulative since each connection opened: what a part has carried so far is the
/// best guide to what it carries now, and unlike this iteration's counts it does not follow
/// the rates this very split sets. A connection that carries only control traffic (PS-Lite's
/// to and from its scheduler, ZMQ's connections that only receive) takes about nothing.
pub(super) fn shares(carried: &[Option<u64>]) -> Vec<f64> {
    let n = carried.len() as f64;
    let known = carried.iter().filter(|c| c.is_some()).count() as f64;
    let total: f64 = carried.iter().flatten().map(|&c| c as f64).sum();
    carried
        .iter()
        .map(|c| match c {
            None => 1.0 / n,
            Some(_) if total <= 0.0 => 1.0 / n,
            Some(c) => known / n * (*c as f64 / total),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Accounts::split` gives a lone group everything without asking: that must be what the
    /// shares come to, whatever the group carried.
    #[test]
    fn a_lone_part_takes_the_whole() {
        for carried in [None, Some(0), Some(1), Some(7_777_777), Some(u64::MAX)] {
            assert_eq!(shares(&[carried]), [1.0], "{carried:?}");
        }
    }

    #[test]
    fn parts_share_by_what_they_carried() {
        assert_eq!(shares(&[Some(3), Some(1)]), [0.75, 0.25]);
        assert_eq!(shares(&[None, Some(0), Some(0)]), [1.0 / 3.0; 3]);
        assert!(shares(&[]).is_empty());
    }
}
