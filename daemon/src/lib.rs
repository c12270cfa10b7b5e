//! What every mlcc daemon needs around its own logic, written once so `mlccd` and
//! `mlcc-switchd` report config mistakes, log and expose metrics the same way — and so issue
//! #9's additions (mTLS, socket permissions) land in one place.

use std::path::{Path, PathBuf};

pub mod clock;
pub mod tls;
pub mod unix;

use clap::ValueEnum;
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// How a daemon writes its logs (to stderr, for journald or a container runtime).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Human,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Installs the global `tracing` subscriber; `RUST_LOG` overrides the default `info` filter.
/// Human lines are coloured only on a terminal: journald, a container runtime or a log file
/// would keep the escape codes.
pub fn init_logs(format: LogFormat) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => b.init(),
        LogFormat::Json => b.json().init(),
    }
}

/// Why a daemon's configuration was refused; every message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading config {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("no {what} given: set `{key}` in the config file or pass --{flag}")]
    Missing {
        what: &'static str,
        key: &'static str,
        flag: &'static str,
    },
    #[error("{0}")]
    Invalid(String),
}

/// Reads and parses a TOML config file, naming the file (and the line, via toml) on error.
pub fn read_toml<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Serves `GET /metrics` with whatever `encode` renders (Prometheus/OpenMetrics text) until
/// `shutdown` resolves.
pub async fn serve_metrics<F>(
    listener: tokio::net::TcpListener,
    encode: F,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    F: Fn() -> String + Clone + Send + Sync + 'static,
{
    use axum::http::header::CONTENT_TYPE;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let body = encode();
            async move {
                (
                    [(
                        CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    body,
                )
            }
        }),
    );
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "metrics on http://{addr}/metrics");
    }
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code, reason = "only parsed")]
    struct Cfg {
        listen: String,
    }

    #[test]
    fn config_errors_name_the_file_and_the_problem() {
        let dir = std::env::temp_dir().join(format!("mlcc-daemon-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.toml");
        let e = read_toml::<Cfg>(&missing).unwrap_err().to_string();
        assert!(e.contains("missing.toml"), "{e}");
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "listen = \"x\"\nbogus = 1\n").unwrap();
        let e = read_toml::<Cfg>(&bad).unwrap_err().to_string();
        assert!(e.contains("bad.toml") && e.contains("bogus"), "{e}");
        std::fs::write(&bad, "listen = \"ok\"\n").unwrap();
        assert!(read_toml::<Cfg>(&bad).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
