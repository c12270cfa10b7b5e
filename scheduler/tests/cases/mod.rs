mod cluster;
mod deploy;
mod grafana;
mod mlccctl;
mod monitor;
mod peers;
mod security;
mod tls;
