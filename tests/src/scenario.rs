//! Scenario files: they live in mlcc-sim (which simulates them too), see [`mlcc_sim::testbed`].

pub use mlcc_sim::testbed::*;

use std::time::Duration;

/// What a command line changes of how the testbed emulates a scenario's links (`--link-burst`,
/// `--link-classes`), applied over the scenario's own settings.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkOverrides {
    pub burst: Option<Duration>,
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
