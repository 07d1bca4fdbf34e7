//! `/healthz`, `/livez` and `/readyz` as kube-apiserver answers them: `200 ok` (text), or with
//! `?verbose` one `[+]check ok` line per check and `<endpoint> check passed`; `?exclude=NAME`
//! leaves a check out; `/readyz/NAME` asks one check. The emulator's checks are trivially
//! true while it serves, except `shutdown` (in `/readyz`), which fails once shutdown began —
//! as a real API server stops being ready before it stops answering. See `docs/api-emulator.md`.

use std::collections::BTreeMap;

/// Which health endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/healthz` (deprecated upstream, still served).
    Healthz,
    /// `/livez`.
    Livez,
    /// `/readyz`.
    Readyz,
}

impl Endpoint {
    /// Parses the first path segment (`healthz`, `livez`, `readyz`).
    pub fn parse(segment: &str) -> Option<Self> {
        match segment {
            "healthz" => Some(Endpoint::Healthz),
            "livez" => Some(Endpoint::Livez),
            "readyz" => Some(Endpoint::Readyz),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Endpoint::Healthz => "healthz",
            Endpoint::Livez => "livez",
            Endpoint::Readyz => "readyz",
        }
    }

    /// The checks of this endpoint, in kube-apiserver's order (the subset that means something
    /// for an in-memory server).
    fn checks(self) -> &'static [&'static str] {
        match self {
            Endpoint::Healthz | Endpoint::Livez => &["ping", "log", "etcd"],
            Endpoint::Readyz => &[
                "ping",
                "log",
                "etcd",
                "etcd-readiness",
                "informer-sync",
                "shutdown",
            ],
        }
    }
}

/// The answer: HTTP status and a `text/plain` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthAnswer {
    /// 200, 404 (unknown check) or 500 (a check failed).
    pub code: u16,
    /// The body.
    pub body: String,
}

/// Answers `endpoint` (optionally one `check`) given the query and whether shutdown began.
pub fn answer(
    endpoint: Endpoint,
    check: Option<&str>,
    query: &BTreeMap<String, String>,
    shutting_down: bool,
) -> HealthAnswer {
    let passes = |name: &str| !(name == "shutdown" && shutting_down);
    if let Some(check) = check {
        if !endpoint.checks().contains(&check) {
            return HealthAnswer {
                code: 404,
                body: "404 page not found\n".to_owned(),
            };
        }
        return if passes(check) {
            HealthAnswer {
                code: 200,
                body: "ok".to_owned(),
            }
        } else {
            HealthAnswer {
                code: 500,
                body: format!("internal server error: {check} check failed\n"),
            }
        };
    }
    let excluded: Vec<&str> = query
        .get("exclude")
        .map(|e| e.split(',').map(str::trim).collect())
        .unwrap_or_default();
    let verbose = query.contains_key("verbose");
    let mut lines = Vec::new();
    let mut failed = false;
    for name in endpoint.checks() {
        if excluded.contains(name) {
            lines.push(format!("[+]{name} excluded: ok"));
        } else if passes(name) {
            lines.push(format!("[+]{name} ok"));
        } else {
            failed = true;
            lines.push(format!("[-]{name} failed: reason withheld"));
        }
    }
    let endpoint_name = endpoint.name();
    if failed {
        lines.push(format!("{endpoint_name} check failed"));
        return HealthAnswer {
            code: 500,
            body: lines.join("\n") + "\n",
        };
    }
    if verbose {
        lines.push(format!("{endpoint_name} check passed"));
        return HealthAnswer {
            code: 200,
            body: lines.join("\n") + "\n",
        };
    }
    HealthAnswer {
        code: 200,
        body: "ok".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn plain_and_verbose() {
        let plain = answer(Endpoint::Readyz, None, &query(&[]), false);
        assert_eq!((plain.code, plain.body.as_str()), (200, "ok"));
        let verbose = answer(Endpoint::Livez, None, &query(&[("verbose", "")]), false);
        assert_eq!(verbose.code, 200);
        assert!(verbose.body.starts_with("[+]ping ok\n"));
        assert!(verbose.body.ends_with("livez check passed\n"));
    }

    #[test]
    fn readyz_fails_during_shutdown_unless_excluded() {
        let failing = answer(Endpoint::Readyz, None, &query(&[]), true);
        assert_eq!(failing.code, 500);
        assert!(failing.body.contains("[-]shutdown failed: reason withheld"));
        let excluded = answer(
            Endpoint::Readyz,
            None,
            &query(&[("exclude", "shutdown")]),
            true,
        );
        assert_eq!(excluded.code, 200);
        assert_eq!(answer(Endpoint::Livez, None, &query(&[]), true).code, 200);
        assert_eq!(
            answer(Endpoint::Readyz, Some("shutdown"), &query(&[]), true).code,
            500
        );
        assert_eq!(
            answer(Endpoint::Readyz, Some("nope"), &query(&[]), false).code,
            404
        );
    }
}
