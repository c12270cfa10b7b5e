mod cluster;
mod deploy;
mod grafana;
mod mlccctl;
mod monitor;
mod security;
mod tls;
