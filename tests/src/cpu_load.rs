//! A synthetic CPU load for a kernel CC's run (`bbr/cpu_load=0.6`): threads at the daemons'
//! priority that burn a given number of cores' worth of CPU, in the bursts of mlcc's 30-ms slots.
//!
//! mlcc's daemons share this testbed's two cores with the jobs and their cross traffic; the
//! kernel CCs run none. A load of the CPU the daemons used (each mlcc run reports it) makes the
//! kernel CC's run carry the same burden, so what mlcc gains from its plans can be told from what
//! its daemons' CPU does to the jobs and the cross traffic around them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often each burner thread wakes: mlcc's default slot, as the daemons' slot loops do.
const PERIOD: Duration = Duration::from_millis(30);

/// The most cores a load may name: well past any testbed machine, short of a typo's thousands.
const MAX_MILLICORES: u32 = 64_000;

/// A CPU load, in thousandths of a core (so a [`crate::cluster::Cc`] stays `Eq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuLoad {
    millicores: u32,
}

impl CpuLoad {
    /// Parses a number of cores: `0.6`, `1`, `1.5`.
    pub fn parse(s: &str) -> Result<CpuLoad, String> {
        let cores: f64 = s
            .parse()
            .map_err(|_| format!("cpu_load: {s:?} is not a number of cores"))?;
        let millicores = (cores * 1000.0).round();
        if !(1.0..=f64::from(MAX_MILLICORES)).contains(&millicores) {
            return Err(format!(
                "cpu_load: {s:?} cores is not between 0.001 and {}",
                MAX_MILLICORES / 1000
            ));
        }
        Ok(CpuLoad {
            millicores: millicores as u32,
        })
    }

    pub fn cores(self) -> f64 {
        f64::from(self.millicores) / 1000.0
    }

    /// Starts the load: one thread per whole or part core, each busy for its share of every
    /// period, at nice `nice` (where the process may set it; otherwise at its own).
    pub fn start(self, nice: i32) -> Burner {
        let threads = self.millicores.div_ceil(1000);
        let share = self.cores() / f64::from(threads);
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..threads)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || burn(share, nice, &stop))
            })
            .collect();
        Burner { stop, threads }
    }
}

/// A running [`CpuLoad`]; stopped when dropped.
pub struct Burner {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<f64>>,
}

impl Burner {
    /// Stops the load and says the CPU time (s) its threads used.
    pub fn stop(mut self) -> f64 {
        self.join()
    }

    fn join(&mut self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        self.threads.drain(..).filter_map(|t| t.join().ok()).sum()
    }
}

impl Drop for Burner {
    fn drop(&mut self) {
        self.join();
    }
}

/// One burner thread: busy for `share` of each period until `stop`; returns its CPU time (s).
fn burn(share: f64, nice: i32, stop: &AtomicBool) -> f64 {
    // Linux keeps a nice value per thread: this sets the calling thread's alone. Without the
    // privilege to raise it the thread burns at the process's priority.
    let _ = rustix::process::setpriority_process(None, nice);
    let busy = PERIOD.mul_f64(share.clamp(0.0, 1.0));
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let began = Instant::now();
        while began.elapsed() < busy {
            std::hint::spin_loop();
        }
        next += PERIOD;
        match next.checked_duration_since(Instant::now()) {
            Some(rest) => std::thread::sleep(rest),
            // Preempted past the period's end: start the next one now rather than catch up.
            None => next = Instant::now(),
        }
    }
    thread_cpu_s()
}

/// CPU time (s) the calling thread has used.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_is_a_positive_number_of_cores() {
        assert_eq!(CpuLoad::parse("0.6").unwrap().cores(), 0.6);
        assert_eq!(CpuLoad::parse("2").unwrap().cores(), 2.0);
        for bad in ["0", "-1", "0.0001", "many", "", "1e9", "NaN", "inf"] {
            assert!(CpuLoad::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_load_burns_about_its_share_and_stops() {
        // At most its share of the time it ran, and a period's busy part per thread of slack
        // (a stop that comes mid-period); a loaded 2-core machine may give it less, but not a
        // fifth of its share.
        let burnt = |cores: &str, threads: usize, ms: u64| {
            let load = CpuLoad::parse(cores).unwrap();
            let began = Instant::now();
            let running = load.start(0);
            assert_eq!(running.threads.len(), threads);
            std::thread::sleep(Duration::from_millis(ms));
            let used = running.stop();
            let most =
                began.elapsed().as_secs_f64() * load.cores() + PERIOD.as_secs_f64() * load.cores();
            let least = ms as f64 / 1000.0 * load.cores() / 5.0;
            assert!(
                (least..=most).contains(&used),
                "{cores}: {used} not in {least}..={most}"
            );
        };
        burnt("0.5", 1, 900);
        // Two threads for a core and a half, each busy three quarters of every period.
        burnt("1.5", 2, 300);
    }
}
