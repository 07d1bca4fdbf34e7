//! Injected latency: watch events delivered late (per resource) and requests answered late
//! (per verb and resource), so a test can reproduce a client whose cache lags behind the
//! writes it makes, or a slow API server.
//!
//! A delayed watch still behaves as kube-apiserver's does when its watch cache falls behind:
//! every watcher receives the events of its resource in resourceVersion order, none is lost
//! or reordered, and a BOOKMARK never claims a resourceVersion beyond the last event the
//! watcher was sent. Lists and gets are answered from the current state (a quorum read, as
//! kube-apiserver serves a list without `resourceVersion=0`); only the watch streams lag.
//! A delay applies to events that happen after it is set.

use std::collections::BTreeMap;
use std::time::Duration;

/// A delay added before the API answers matching requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestDelay {
    /// Verb to match (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, …);
    /// `None` matches every verb.
    pub verb: Option<String>,
    /// Resource to match: a plural (`nodes`) or plural/subresource (`pods/eviction`); `None`
    /// matches every resource.
    pub resource: Option<String>,
    /// How long to wait before handling the request.
    pub delay: Duration,
}

impl RequestDelay {
    /// Delays every request by `delay`; narrow it with the builders.
    pub fn new(delay: Duration) -> Self {
        Self {
            verb: None,
            resource: None,
            delay,
        }
    }

    /// Only requests with this verb.
    pub fn verb(mut self, verb: &str) -> Self {
        self.verb = Some(verb.to_owned());
        self
    }

    /// Only requests on this resource (`nodes`, `pods/eviction`).
    pub fn resource(mut self, resource: &str) -> Self {
        self.resource = Some(resource.to_owned());
        self
    }

    fn matches(&self, verb: &str, resource: &str) -> bool {
        self.verb.as_deref().is_none_or(|v| v == verb)
            && self.resource.as_deref().is_none_or(|r| r == resource)
    }
}

/// The latency settings of an emulator (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Latency {
    /// Delay of watch events by resource plural (`nodes`, `leases`); `*` applies to every
    /// resource without an entry of its own.
    watch_events: BTreeMap<String, Duration>,
    /// Request delays; the first matching one applies.
    requests: Vec<RequestDelay>,
}

/// The key of [`Latency::watch_delay`] that stands for every resource.
pub const ANY_RESOURCE: &str = "*";

impl Latency {
    /// Delays the watch events of `resource` (a plural, or [`ANY_RESOURCE`]) by `delay`;
    /// `Duration::ZERO` removes the delay.
    pub fn set_watch_delay(&mut self, resource: &str, delay: Duration) {
        if delay.is_zero() {
            self.watch_events.remove(resource);
        } else {
            self.watch_events.insert(resource.to_owned(), delay);
        }
    }

    /// How late the watch events of `resource` are delivered.
    pub fn watch_delay(&self, resource: &str) -> Duration {
        self.watch_events
            .get(resource)
            .or_else(|| self.watch_events.get(ANY_RESOURCE))
            .copied()
            .unwrap_or_default()
    }

    /// Adds a request delay (after the ones already set: the first matching one applies).
    pub fn add_request_delay(&mut self, delay: RequestDelay) {
        self.requests.push(delay);
    }

    /// How long a request with `verb` on `resource` waits before it is handled.
    pub fn request_delay(&self, verb: &str, resource: &str) -> Duration {
        self.requests
            .iter()
            .find(|d| d.matches(verb, resource))
            .map(|d| d.delay)
            .unwrap_or_default()
    }

    /// Removes every delay.
    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_delays_fall_back_to_the_wildcard() {
        let mut latency = Latency::default();
        assert_eq!(latency.watch_delay("nodes"), Duration::ZERO);
        latency.set_watch_delay(ANY_RESOURCE, Duration::from_millis(100));
        latency.set_watch_delay("nodes", Duration::from_secs(3));
        assert_eq!(latency.watch_delay("nodes"), Duration::from_secs(3));
        assert_eq!(latency.watch_delay("pods"), Duration::from_millis(100));
        latency.set_watch_delay("nodes", Duration::ZERO);
        assert_eq!(latency.watch_delay("nodes"), Duration::from_millis(100));
    }

    #[test]
    fn the_first_matching_request_delay_applies() {
        let mut latency = Latency::default();
        latency.add_request_delay(
            RequestDelay::new(Duration::from_millis(50))
                .verb("patch")
                .resource("nodes"),
        );
        latency.add_request_delay(RequestDelay::new(Duration::from_millis(5)));
        assert_eq!(
            latency.request_delay("patch", "nodes"),
            Duration::from_millis(50)
        );
        assert_eq!(
            latency.request_delay("get", "nodes"),
            Duration::from_millis(5)
        );
        latency.clear();
        assert_eq!(latency.request_delay("patch", "nodes"), Duration::ZERO);
    }
}
