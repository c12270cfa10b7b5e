//! What a switch port that trusts DSCP does, in tc: the link's rate and queue as one shaper, and
//! beneath it strict priority between the default class and the fill classes (mlcc's bytes beyond
//! their plan, marked by [`crate::KernelDatapath::attach_marker`]). This kernel has no `prio`
//! qdisc: TBF shapes the link as a plain port would, and an HTB child whose classes never throttle
//! (each may take twice the link, from a bucket as deep as TBF's) serves them in `prio` order, a
//! byte FIFO each. Unmarked traffic meets the very queue TBF alone would give it.

use std::time::Duration;

use crate::rate::Dscp;

/// The DSCP of fill class `class` (0 is served first among them): the Lower-Effort code point
/// (RFC 8622) and the ones after it.
pub fn fill_dscp(class: u8) -> Option<Dscp> {
    Dscp::new(1u8.checked_add(class)?)
}

/// The fill class a DSCP marks, the inverse of [`fill_dscp`].
pub fn fill_class(dscp: Dscp) -> u8 {
    dscp.get() - 1
}

/// The link a set of classes shapes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Port {
    /// Line rate, bits/s.
    pub bits_per_sec: u64,
    /// Token bucket of the shaper, bytes.
    pub burst_bytes: u64,
    /// How long a full queue takes to drain at line rate (TBF's `latency`).
    pub latency: Duration,
}

impl Port {
    /// The bytes each class's FIFO holds: what TBF's own queue holds for this `latency`, so the
    /// default class meets the same queue as under TBF alone.
    pub fn queue_bytes(&self) -> u64 {
        (self.bits_per_sec as f64 / 8.0 * self.latency.as_secs_f64()) as u64 + self.burst_bytes
    }

    /// The `tc` commands (arguments after `tc`) that set up device `dev` as this port with
    /// `fill_classes` fill classes beneath the default one (0: TBF alone, today's port).
    pub fn tc_commands(&self, dev: &str, fill_classes: u8) -> Vec<Vec<String>> {
        let rate = format!("{}bit", self.bits_per_sec);
        let bucket = self.burst_bytes.to_string();
        let mut cmds = vec![args(&[
            "qdisc",
            "add",
            "dev",
            dev,
            "root",
            "handle",
            "1:",
            "tbf",
            "rate",
            &rate,
            "burst",
            &bucket,
            "latency",
            &format!("{}us", self.latency.as_micros()),
        ])];
        if fill_classes == 0 {
            return cmds;
        }
        let never = format!("{}bit", self.bits_per_sec.saturating_mul(2));
        let limit = self.queue_bytes().to_string();
        cmds.push(args(&[
            "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "htb", "default", "1",
        ]));
        for class in 0..=fill_classes {
            let id = format!("10:{}", class + 1);
            cmds.push(args(&[
                "class",
                "add",
                "dev",
                dev,
                "parent",
                "10:",
                "classid",
                &id,
                "htb",
                "rate",
                &never,
                "ceil",
                &never,
                // HTB's own bucket defaults to 1250 bytes on a high-resolution clock (`tc class
                // show`), below one segment, so it would throttle, and wait for a timer, between
                // the segments TBF lets through at once; with TBF's bucket it never does.
                "burst",
                &bucket,
                "cburst",
                &bucket,
                "prio",
                &class.to_string(),
                "quantum",
                "65536",
            ]));
            cmds.push(args(&[
                "qdisc", "add", "dev", dev, "parent", &id, "bfifo", "limit", &limit,
            ]));
            if class == 0 {
                continue;
            }
            let Some(dscp) = fill_dscp(class - 1) else {
                continue;
            };
            let tos = format!("{:#04x}", dscp.get() << 2);
            cmds.push(args(&[
                "filter", "add", "dev", dev, "parent", "10:", "protocol", "ip", "prio", "1", "u32",
                "match", "ip", "dsfield", &tos, "0xfc", "flowid", &id,
            ]));
        }
        cmds
    }
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port() -> Port {
        Port {
            bits_per_sec: 1_000_000_000,
            burst_bytes: 250_000,
            latency: Duration::from_millis(5),
        }
    }

    #[test]
    fn fill_classes_take_the_lower_effort_code_points() {
        assert_eq!(fill_dscp(0).map(Dscp::get), Some(1));
        assert_eq!(fill_dscp(6).map(Dscp::get), Some(7));
        assert_eq!(fill_dscp(63), None);
        for class in 0..7 {
            assert_eq!(fill_dscp(class).map(fill_class), Some(class));
        }
    }

    #[test]
    fn without_fill_classes_the_port_is_tbf_alone() {
        let c = port().tc_commands("eth0", 0);
        assert_eq!(c.len(), 1);
        assert_eq!(
            c[0].join(" "),
            "qdisc add dev eth0 root handle 1: tbf rate 1000000000bit burst 250000 latency 5000us"
        );
        // TBF's own queue at this latency: 5 ms at line rate plus the bucket.
        assert_eq!(port().queue_bytes(), 625_000 + 250_000);
    }

    #[test]
    fn each_fill_class_is_served_after_the_ones_before_it_from_its_dscp() {
        let c = port().tc_commands("p1", 2);
        let lines: Vec<String> = c.iter().map(|a| a.join(" ")).collect();
        // The default class first (prio 0), then fill classes 0 and 1 (prio 1, 2).
        assert!(
            lines
                .iter()
                .any(|l| l.contains("classid 10:1 htb") && l.contains("prio 0"))
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("classid 10:3 htb") && l.contains("prio 2"))
        );
        // DSCP 1 and 2 (TOS 0x04, 0x08) to the fill classes; everything else to the default.
        assert!(
            lines
                .iter()
                .any(|l| l.contains("dsfield 0x04 0xfc flowid 10:2"))
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("dsfield 0x08 0xfc flowid 10:3"))
        );
        assert!(lines.iter().any(|l| l.contains("htb default 1")));
        // No class throttles below TBF: each may take twice the link, from a bucket as deep as
        // TBF's, so what TBF lets through at once never waits for HTB's timer.
        let classes: Vec<&String> = lines.iter().filter(|l| l.contains(" htb rate ")).collect();
        assert_eq!(classes.len(), 3);
        for l in classes {
            assert!(l.contains("rate 2000000000bit ceil 2000000000bit"), "{l}");
            assert!(l.contains("burst 250000 cburst 250000"), "{l}");
        }
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.contains("bfifo limit 875000"))
                .count(),
            3
        );
    }
}
