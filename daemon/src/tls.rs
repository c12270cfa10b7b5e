//! Optional mutual TLS for the gRPC links between daemons (docs/design.md §16, deploy/SECURITY.md):
//! mlccd → mlcc-switchd and mlccd ↔ mlccd.
//!
//! One set of files per daemon: its certificate chain and key, and the CA that signed every
//! daemon of the cluster. With them a server demands a client certificate signed by that CA
//! (no certificate, or one from another CA, fails the handshake) and a client presents its own
//! and verifies the server's against the same CA and the name or IP it dialled. Without them
//! everything is plaintext, as before. The files are read and parsed once at start-up so a
//! typo is a start-up error naming the file, not a stream of failing connections.

use std::path::{Path, PathBuf};

use clap::Args;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};

use crate::ConfigError;

/// How long a server waits for a client to finish the TLS handshake: a client that connects
/// and stalls must not hold a connection (and its file descriptor) forever.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The mTLS flags both daemons share; each overrides the config-file key of the same name
/// (`tls_cert`, `tls_key`, `tls_ca`). All three or none.
#[derive(Args, Debug, Default, Clone, PartialEq, Eq)]
pub struct TlsArgs {
    /// PEM certificate (chain) this daemon presents, as server and as client. Enables mTLS
    /// together with --tls-key and --tls-ca.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1). Keep it readable by the daemon
    /// only.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificate(s): peers must present a certificate signed by one of them, and
    /// servers must too.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
}

/// Resolved mTLS file paths: present only when all three are configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl TlsArgs {
    /// Flags (`self`) over the file's keys; `None` when none is set, an error when only some
    /// are (half-configured TLS must not silently fall back to plaintext).
    pub fn resolve(&self, file: &TlsArgs) -> Result<Option<TlsFiles>, ConfigError> {
        let cert = self.tls_cert.clone().or_else(|| file.tls_cert.clone());
        let key = self.tls_key.clone().or_else(|| file.tls_key.clone());
        let ca = self.tls_ca.clone().or_else(|| file.tls_ca.clone());
        match (cert, key, ca) {
            (None, None, None) => Ok(None),
            (Some(cert), Some(key), Some(ca)) => Ok(Some(TlsFiles { cert, key, ca })),
            (c, k, a) => {
                let missing: Vec<&str> = [
                    ("tls_cert", c.is_none()),
                    ("tls_key", k.is_none()),
                    ("tls_ca", a.is_none()),
                ]
                .iter()
                .filter(|(_, m)| *m)
                .map(|(n, _)| *n)
                .collect();
                Err(ConfigError::Invalid(format!(
                    "mTLS needs tls_cert, tls_key and tls_ca together; missing {} (or set none for plaintext)",
                    missing.join(", ")
                )))
            }
        }
    }
}

/// Why the TLS files were refused.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {what}", path.display())]
    Pem { path: PathBuf, what: String },
    #[error("{what}: {source}")]
    Transport {
        what: String,
        source: tonic::transport::Error,
    },
}

/// Loaded, validated mTLS material.
#[derive(Clone)]
pub struct Tls {
    identity: Identity,
    ca: Certificate,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.write_str("Tls { .. }")
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn certs_in(path: &Path, pem: &[u8]) -> Result<usize, TlsError> {
    let mut n = 0;
    for c in CertificateDer::pem_slice_iter(pem) {
        c.map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            what: format!("bad PEM certificate: {e}"),
        })?;
        n += 1;
    }
    if n == 0 {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            what: "no PEM certificate in it".into(),
        });
    }
    Ok(n)
}

impl Tls {
    /// Reads and checks the three files: at least one certificate in `cert` and `ca`, one
    /// private key in `key`.
    pub fn load(files: &TlsFiles) -> Result<Tls, TlsError> {
        let cert = read(&files.cert)?;
        certs_in(&files.cert, &cert)?;
        let key = read(&files.key)?;
        PrivateKeyDer::from_pem_slice(&key).map_err(|e| TlsError::Pem {
            path: files.key.clone(),
            what: format!("no usable PEM private key: {e}"),
        })?;
        let ca = read(&files.ca)?;
        certs_in(&files.ca, &ca)?;
        Ok(Tls {
            identity: Identity::from_pem(cert, key),
            ca: Certificate::from_pem(ca),
        })
    }

    /// Server side: present our certificate, require a client certificate signed by the CA.
    pub fn server_config(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(self.identity.clone())
            .client_ca_root(self.ca.clone())
            .client_auth_optional(false)
            .timeout(HANDSHAKE_TIMEOUT)
    }

    /// Client side: present our certificate, trust only the CA; the server's certificate must
    /// name the host or IP the endpoint dials.
    pub fn client_config(&self) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .identity(self.identity.clone())
            .ca_certificate(self.ca.clone())
    }

    /// Applies [`Self::server_config`] to a tonic server builder.
    pub fn apply_server(
        &self,
        builder: tonic::transport::Server,
    ) -> Result<tonic::transport::Server, TlsError> {
        builder
            .tls_config(self.server_config())
            .map_err(|source| TlsError::Transport {
                what: "server TLS configuration".into(),
                source,
            })
    }
}

/// An endpoint for `addr` (`host:port`): `https` with our client certificate when `tls` is
/// given, plaintext `http` otherwise.
pub fn endpoint(addr: &str, tls: Option<&Tls>) -> Result<Endpoint, TlsError> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let ep = Endpoint::from_shared(format!("{scheme}://{addr}")).map_err(|source| {
        TlsError::Transport {
            what: format!("address {addr:?}"),
            source,
        }
    })?;
    match tls {
        None => Ok(ep),
        Some(t) => ep
            .tls_config(t.client_config())
            .map_err(|source| TlsError::Transport {
                what: format!("client TLS for {addr}"),
                source,
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_three_or_none() {
        let none = TlsArgs::default();
        assert_eq!(none.resolve(&none).unwrap(), None);
        let flags = TlsArgs {
            tls_cert: Some("c.pem".into()),
            ..Default::default()
        };
        let file = TlsArgs {
            tls_key: Some("k.pem".into()),
            ..Default::default()
        };
        let e = flags.resolve(&file).unwrap_err().to_string();
        assert!(
            e.contains("missing tls_ca") && !e.contains("tls_key,"),
            "{e}"
        );
        let file = TlsArgs {
            tls_cert: Some("file.pem".into()),
            tls_key: Some("k.pem".into()),
            tls_ca: Some("ca.pem".into()),
        };
        let r = flags.resolve(&file).unwrap().unwrap();
        assert_eq!(r.cert, PathBuf::from("c.pem"), "the flag wins");
        assert_eq!(r.ca, PathBuf::from("ca.pem"));
    }

    #[test]
    fn bad_files_are_named() {
        let d = tempfile_dir();
        let junk = d.join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let files = TlsFiles {
            cert: junk.clone(),
            key: junk.clone(),
            ca: junk.clone(),
        };
        let e = Tls::load(&files).unwrap_err().to_string();
        assert!(
            e.contains("junk.pem") && e.contains("no PEM certificate"),
            "{e}"
        );
        let files = TlsFiles {
            cert: d.join("missing.pem"),
            ..files
        };
        let e = Tls::load(&files).unwrap_err().to_string();
        assert!(e.contains("missing.pem"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("mlcc-daemon-tls-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
