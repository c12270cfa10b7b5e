//! Configuration: a TOML file (`/etc/mlcc/switchd.toml`) and flags of the same names; a flag
//! overrides the file, the file overrides the defaults (docs/design.md §16).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use mlcc_core::load_table::FeedbackMode;
use mlcc_core::slot::SlotConfig;
use mlcc_core::units::parse_duration;
use serde::Deserialize;

pub use mlcc_daemon::tls::{TlsArgs, TlsFiles};
pub use mlcc_daemon::{ConfigError, LogFormat};

pub const DEFAULT_LISTEN: &str = "0.0.0.0:50061";
pub const DEFAULT_METRICS_LISTEN: &str = "0.0.0.0:9461";

fn parse_mode(s: &str) -> Result<FeedbackMode, String> {
    s.parse()
}

fn parse_tau(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

/// Flags of `mlcc-switchd` (serving). Each one overrides the option of the same name in the file.
#[derive(Args, Debug, Default, Clone)]
pub struct ServeArgs {
    /// TOML configuration file; see deploy/switchd.example.toml. Options are the flags' long
    /// names with `_` for `-`.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address the gRPC services (mlcc.v1.Switch, health, reflection) listen on
    /// [default: 0.0.0.0:50061].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Address of the Prometheus endpoint http://ADDR/metrics [default: 0.0.0.0:9461].
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Topology file (TOML) describing hosts, switches and links.
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,
    /// Name of the switch in the topology whose outgoing links this process keeps.
    #[arg(long, value_name = "NAME")]
    pub switch: Option<String>,
    /// Slot length τ, e.g. "30ms" (10ms..=1s) [default: 30ms; the paper: 60ms]. Must match the
    /// schedulers'.
    #[arg(long, value_name = "DURATION", value_parser = parse_tau)]
    pub tau: Option<Duration>,
    /// Planning horizon K in slots (1..=64) [default: 10]. Must match the schedulers'.
    #[arg(long, value_name = "K")]
    pub horizon: Option<usize>,
    /// Whose bookings a flow sees: "all-others" (the paper) or "precedence" (only flows whose
    /// (iteration start, flow id) sorts first) [default: precedence].
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    pub feedback_mode: Option<FeedbackMode>,
    /// Log format [default: human]. The level comes from RUST_LOG (default "info").
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Tokio worker threads [default: one per CPU the process may run on]; 1 runs everything on
    /// the main thread (best when pinned to one core).
    #[arg(long, value_name = "N")]
    pub worker_threads: Option<usize>,
    /// mTLS (deploy/SECURITY.md): with all three set, only clients presenting a certificate
    /// signed by --tls-ca are served.
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// The file form; every field optional so that flags can fill in.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    metrics_listen: Option<SocketAddr>,
    topology: Option<PathBuf>,
    switch: Option<String>,
    tau: Option<String>,
    horizon: Option<usize>,
    feedback_mode: Option<String>,
    log_format: Option<LogFormat>,
    worker_threads: Option<usize>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub metrics_listen: SocketAddr,
    pub topology: PathBuf,
    pub switch: String,
    pub slots: SlotConfig,
    pub feedback_mode: FeedbackMode,
    pub log_format: LogFormat,
    pub worker_threads: Option<usize>,
    /// mTLS files; `None` serves plaintext.
    pub tls: Option<TlsFiles>,
}

impl ServeArgs {
    /// Merges flags over the file (if any) over the defaults, and validates the result.
    pub fn resolve(&self) -> Result<Config, ConfigError> {
        let file = match &self.config {
            Some(p) => mlcc_daemon::read_toml(p)?,
            None => FileConfig::default(),
        };
        let file_tau = file
            .tau
            .as_deref()
            .map(parse_tau)
            .transpose()
            .map_err(|e| ConfigError::Invalid(format!("tau: {e}")))?;
        let file_mode = file
            .feedback_mode
            .as_deref()
            .map(parse_mode)
            .transpose()
            .map_err(|e| ConfigError::Invalid(format!("feedback_mode: {e}")))?;
        let tau = self.tau.or(file_tau).unwrap_or(SlotConfig::mlccd().tau());
        let horizon = self
            .horizon
            .or(file.horizon)
            .unwrap_or(SlotConfig::mlccd().horizon());
        let slots =
            SlotConfig::new(tau, horizon).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let default_addr = |s: &str| {
            s.parse::<SocketAddr>()
                .map_err(|e| ConfigError::Invalid(e.to_string()))
        };
        Ok(Config {
            listen: match self.listen.or(file.listen) {
                Some(a) => a,
                None => default_addr(DEFAULT_LISTEN)?,
            },
            metrics_listen: match self.metrics_listen.or(file.metrics_listen) {
                Some(a) => a,
                None => default_addr(DEFAULT_METRICS_LISTEN)?,
            },
            topology: self
                .topology
                .clone()
                .or(file.topology)
                .ok_or(ConfigError::Missing {
                    what: "topology file",
                    key: "topology",
                    flag: "topology",
                })?,
            switch: self
                .switch
                .clone()
                .or(file.switch)
                .ok_or(ConfigError::Missing {
                    what: "switch name",
                    key: "switch",
                    flag: "switch",
                })?,
            slots,
            feedback_mode: self.feedback_mode.or(file_mode).unwrap_or_default(),
            log_format: self.log_format.or(file.log_format).unwrap_or_default(),
            worker_threads: self.worker_threads.or(file.worker_threads),
            tls: self.tls.resolve(&TlsArgs {
                tls_cert: file.tls_cert,
                tls_key: file.tls_key,
                tls_ca: file.tls_ca,
            })?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (PathBuf, impl Drop) {
        struct Rm(PathBuf);
        impl Drop for Rm {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        let p = std::env::temp_dir().join(format!(
            "mlcc-switchd-config-{}-{}.toml",
            std::process::id(),
            text.len()
        ));
        std::fs::write(&p, text).unwrap();
        (p.clone(), Rm(p))
    }

    #[test]
    fn flags_override_the_file() {
        let (p, _rm) = write(
            "listen = \"127.0.0.1:1\"\ntopology = \"t.toml\"\nswitch = \"sw1\"\ntau = \"20ms\"\nhorizon = 4\nfeedback_mode = \"all-others\"\n",
        );
        let args = ServeArgs {
            config: Some(p),
            horizon: Some(8),
            switch: Some("sw2".into()),
            ..Default::default()
        };
        let c = args.resolve().unwrap();
        assert_eq!(c.listen, "127.0.0.1:1".parse().unwrap());
        assert_eq!(c.switch, "sw2");
        assert_eq!(c.slots.horizon(), 8);
        assert_eq!(c.slots.tau(), Duration::from_millis(20));
        assert_eq!(c.feedback_mode, FeedbackMode::AllOthers);
        assert_eq!(c.topology, PathBuf::from("t.toml"));
    }

    #[test]
    fn errors_say_what_to_fix() {
        let e = ServeArgs::default().resolve().unwrap_err().to_string();
        assert!(e.contains("--topology"), "{e}");
        let (p, _rm) = write("colour = \"blue\"\n");
        let e = ServeArgs {
            config: Some(p),
            ..Default::default()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(e.contains("colour"), "{e}");
        let args = ServeArgs {
            topology: Some("t".into()),
            switch: Some("s".into()),
            horizon: Some(0),
            ..Default::default()
        };
        assert!(args.resolve().unwrap_err().to_string().contains("horizon"));
    }
}
