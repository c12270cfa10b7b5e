//! Scenario files: they live in mlcc-sim (which simulates them too), see [`mlcc_sim::testbed`].

pub use mlcc_sim::testbed::*;

use std::time::Duration;

/// How the testbed emulates links, beside what the scenario says: the command line's
/// `--link-burst` and `--link-classes` (`run`, `up`, `figure`), applied over the scenario's own.
#[derive(clap::Args, Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkOverrides {
    /// Every emulated link's token bucket, as line time (e.g. `4ms`, the bucket of the figures
    /// measured before 2026-11-26's eleventh round) [default: the scenario's `link_burst`, else
    /// 2ms].
    #[arg(long = "link-burst", value_name = "DURATION", value_parser = mlcc_core::units::parse_duration)]
    pub burst: Option<Duration>,
    /// Fill classes every port serves beneath its default class, strict priority on DSCP 1..=N
    /// (0: TBF alone, the ports of the figures measured before 2026-11-27) [default: the
    /// scenario's `link_classes`, else 7]. Unmarked traffic meets the same queue either way.
    #[arg(long = "link-classes", value_name = "N")]
    pub classes: Option<u8>,
}

impl LinkOverrides {
    /// Applies the overrides to `scn`, after checking them as a scenario file's are checked.
    pub fn apply(&self, scn: &mut Scenario) -> Result<(), String> {
        if let Some(b) = self.burst {
            scn.link_burst = check_link_burst(b).map_err(|e| format!("--link-burst: {e}"))?;
        }
        if let Some(n) = self.classes {
            scn.link_classes = check_link_classes(n).map_err(|e| format!("--link-classes: {e}"))?;
        }
        Ok(())
    }

    /// The flags that set them, for a results page's command line (empty when none is set).
    pub fn flags(&self) -> String {
        let mut s = String::new();
        if let Some(b) = self.burst {
            s += &format!(" --link-burst {}ms", b.as_secs_f64() * 1e3);
        }
        if let Some(n) = self.classes {
            s += &format!(" --link-classes {n}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_apply_over_the_scenario_and_name_their_flags() {
        let mut scn = Scenario::find("paper-small").unwrap();
        let before = (scn.link_burst, scn.link_classes);
        LinkOverrides::default().apply(&mut scn).unwrap();
        assert_eq!((scn.link_burst, scn.link_classes), before);
        assert_eq!(LinkOverrides::default().flags(), "");
        let o = LinkOverrides {
            burst: Some(Duration::from_micros(1500)),
            classes: Some(0),
        };
        o.apply(&mut scn).unwrap();
        assert_eq!(scn.link_burst, Duration::from_micros(1500));
        assert_eq!(scn.link_classes, 0);
        assert_eq!(o.flags(), " --link-burst 1.5ms --link-classes 0");
        let zero = LinkOverrides {
            burst: Some(Duration::ZERO),
            classes: None,
        };
        let e = zero.apply(&mut scn).unwrap_err();
        assert!(e.starts_with("--link-burst"), "{e}");
    }
}
