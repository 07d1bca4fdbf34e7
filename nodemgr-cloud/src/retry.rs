//! Which failed calls are tried again and how long to wait first: throttling, 5xx and
//! connection errors are retried with exponential backoff and full jitter (a uniformly random
//! wait between zero and `min(cap, base · 2^retry)`), as AWS's SDKs do; the API's other
//! errors become typed [`CloudError`]s at once.

use std::time::Duration;

use nodemgr_core::ports::CloudError;

use crate::response::ApiError;

/// Backoff bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Ceiling of the first retry's wait.
    pub base: Duration,
    /// Largest wait.
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(5),
        }
    }
}

impl Backoff {
    /// The longest wait before retry number `retry` (0 for the first retry).
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The wait before retry number `retry`: `ceiling(retry)` scaled by `unit` in `[0, 1)`
    /// (a uniform random number; the caller draws it).
    pub fn wait(&self, retry: u32, unit: f64) -> Duration {
        self.ceiling(retry).mul_f64(unit.clamp(0.0, 1.0))
    }
}

/// Error codes meaning "slow down".
const THROTTLE_CODES: [&str; 5] = [
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "SlowDown",
];
/// Error codes meaning the credentials are wrong or lack a permission.
const AUTH_CODES: [&str; 8] = [
    "AuthFailure",
    "UnauthorizedOperation",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "OptInRequired",
    "Blocked",
    "ExpiredToken",
];
/// Error codes meaning no capacity for the request right now.
const CAPACITY_CODES: [&str; 4] = [
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
];
/// Error codes of a server-side failure.
const SERVER_CODES: [&str; 4] = [
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
];

/// The typed error of an HTTP answer that was not a success: `status` and, when the body had
/// one, the API's error.
pub fn classify(status: u16, api: Option<&ApiError>) -> CloudError {
    let Some(api) = api else {
        let text = format!("HTTP {status} without an API error body");
        return match status {
            429 => CloudError::Throttled(text),
            500.. => CloudError::Unavailable(text),
            401 | 403 => CloudError::AuthFailed {
                code: format!("HTTP{status}"),
                message: text,
            },
            _ => CloudError::Other(text),
        };
    };
    let code = api.code.as_str();
    let text = format!("{}: {}", api.code, api.message);
    if THROTTLE_CODES.contains(&code) {
        CloudError::Throttled(text)
    } else if AUTH_CODES.contains(&code) {
        CloudError::AuthFailed {
            code: api.code.clone(),
            message: api.message.clone(),
        }
    } else if CAPACITY_CODES.contains(&code) {
        CloudError::InsufficientCapacity(text)
    } else if code.ends_with(".NotFound") && code.starts_with("InvalidInstanceID") {
        CloudError::NotFound(text)
    } else if SERVER_CODES.contains(&code) || status >= 500 {
        CloudError::Unavailable(text)
    } else {
        CloudError::InvalidRequest {
            code: api.code.clone(),
            message: api.message.clone(),
        }
    }
}

/// Whether the adapter tries a call again by itself: throttling and unavailability only
/// (capacity and everything else go back to the caller, who may choose another zone).
pub fn retried_here(error: &CloudError) -> bool {
    matches!(error, CloudError::Throttled(_) | CloudError::Unavailable(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: &str) -> ApiError {
        ApiError {
            code: code.into(),
            message: format!("{code} happened"),
        }
    }

    #[test]
    fn waits_grow_to_the_cap_with_full_jitter() {
        let b = Backoff::default();
        assert_eq!(b.ceiling(0), Duration::from_millis(100));
        assert_eq!(b.ceiling(3), Duration::from_millis(800));
        assert_eq!(b.ceiling(6), Duration::from_secs(5));
        assert_eq!(b.ceiling(200), Duration::from_secs(5));
        assert_eq!(b.wait(2, 0.0), Duration::ZERO);
        assert_eq!(b.wait(2, 0.5), Duration::from_millis(200));
        assert!(b.wait(10, 0.999_999) <= Duration::from_secs(5));
    }

    proptest::proptest! {
        #[test]
        fn waits_never_exceed_their_ceiling_nor_the_cap(
            base_ms in 1u64..1000, cap_ms in 1u64..60_000, retry in 0u32..100, unit in 0.0f64..1.0
        ) {
            let b = Backoff { base: Duration::from_millis(base_ms), cap: Duration::from_millis(cap_ms) };
            proptest::prop_assert!(b.wait(retry, unit) <= b.ceiling(retry));
            proptest::prop_assert!(b.ceiling(retry) <= b.cap);
            proptest::prop_assert!(b.ceiling(retry) <= b.ceiling(retry + 1));
        }
    }

    #[test]
    fn codes_become_typed_errors_with_the_message() {
        assert_eq!(
            classify(503, Some(&api("RequestLimitExceeded"))),
            CloudError::Throttled("RequestLimitExceeded: RequestLimitExceeded happened".into())
        );
        assert!(matches!(
            classify(401, Some(&api("AuthFailure"))),
            CloudError::AuthFailed { code, message } if code == "AuthFailure" && message == "AuthFailure happened"
        ));
        assert!(matches!(
            classify(400, Some(&api("InvalidAMIID.NotFound"))),
            CloudError::InvalidRequest { code, .. } if code == "InvalidAMIID.NotFound"
        ));
        assert!(matches!(
            classify(400, Some(&api("InvalidInstanceID.NotFound"))),
            CloudError::NotFound(_)
        ));
        assert!(matches!(
            classify(500, Some(&api("InsufficientInstanceCapacity"))),
            CloudError::InsufficientCapacity(_)
        ));
        assert!(matches!(
            classify(500, Some(&api("Weird"))),
            CloudError::Unavailable(_)
        ));
        assert!(matches!(classify(502, None), CloudError::Unavailable(_)));
        assert!(matches!(classify(429, None), CloudError::Throttled(_)));
        assert!(matches!(classify(404, None), CloudError::Other(_)));
        assert!(retried_here(&classify(503, None)));
        assert!(!retried_here(&classify(
            400,
            Some(&api("InsufficientInstanceCapacity"))
        )));
    }
}
