use std::path::PathBuf;

/// Why a datapath operation failed; each variant says what the operator can do about it.
#[derive(Debug, thiserror::Error)]
pub enum DatapathError {
    #[error("this kernel cannot run the mlcc datapath: {0}")]
    Unsupported(String),
    #[error("{0} needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN)")]
    NotPrivileged(&'static str),
    #[error("an mlcc datapath is already pinned at {0}; open it, or unload it first")]
    AlreadyLoaded(PathBuf),
    #[error("no mlcc datapath is pinned at {0} (load one first)")]
    NotLoaded(PathBuf),
    #[error("invalid {what}: {why}")]
    Invalid { what: &'static str, why: String },
    #[error("{what}: {source}")]
    Bpf {
        what: String,
        #[source]
        source: libbpf_rs::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{map} holds an entry of unexpected size (not an mlcc map?)")]
    Corrupt { map: &'static str },
}

impl DatapathError {
    pub(crate) fn bpf(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> Self {
        let what = what.into();
        move |source| Self::Bpf { what, source }
    }

    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::Io { what, source }
    }
}
