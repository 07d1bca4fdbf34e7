//! What every long-running nodemgr binary shares to be operated: logging in text or JSON
//! ([`logging`]), the `/metrics` + `/healthz` server of the node agents ([`server`]), TLS for
//! it ([`tls`]) and the Kubernetes authorization of scrapes ([`auth`]). The text format of
//! `/metrics` is negotiated by `nodemgr_k8s::exposition`. See `docs/observability.md`.

pub mod auth;
pub mod logging;
pub mod server;
pub mod tls;
