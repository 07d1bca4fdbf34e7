//! Which failed calls are tried again and how long to wait first: throttling, 5xx and
//! connection errors are retried with exponential backoff and full jitter (a uniformly random
//! wait between zero and `min(cap, base · 2^retry)`), as AWS's SDKs do; the API's other
//! errors become typed [`CloudError`]s at once.

use std::time::Duration;

use nodemgr_core::ports::CloudError;

use crate::response::ApiError;

/// Backoff bounds: the policy is the workspace's one ([`nodemgr_core::backoff::Backoff`]);
/// the adapter draws the jitter ([`Backoff::full_jitter`]).
pub use nodemgr_core::backoff::Backoff;

/// The adapter's default bounds: the first retry within 100 ms, no wait longer than 5 s.
pub const DEFAULT_BACKOFF: Backoff =
    Backoff::new(Duration::from_millis(100), Duration::from_secs(5));

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
            429 => CloudError::throttled(text),
            500.. => CloudError::unavailable(text),
            401 | 403 => CloudError::auth_failed(format!("HTTP{status}"), text),
            _ => CloudError::other(text),
        };
    };
    let code = api.code.as_str();
    let text = format!("{}: {}", api.code, api.message);
    if THROTTLE_CODES.contains(&code) {
        CloudError::throttled(text)
    } else if AUTH_CODES.contains(&code) {
        CloudError::auth_failed(api.code.clone(), api.message.clone())
    } else if CAPACITY_CODES.contains(&code) {
        CloudError::insufficient_capacity(text)
    } else if code.ends_with(".NotFound") && code.starts_with("InvalidInstanceID") {
        CloudError::not_found(text)
    } else if SERVER_CODES.contains(&code) || status >= 500 {
        CloudError::unavailable(text)
    } else {
        CloudError::invalid_request(api.code.clone(), api.message.clone())
    }
}

/// Whether the adapter tries a call again by itself: throttling and unavailability only
/// (capacity and everything else go back to the caller, who may choose another zone).
pub fn retried_here(error: &CloudError) -> bool {
    matches!(
        error,
        CloudError::Throttled { .. } | CloudError::Unavailable { .. }
    )
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
    fn default_waits_grow_from_100ms_to_5s_with_full_jitter() {
        let b = DEFAULT_BACKOFF;
        assert_eq!(b.delay(0), Duration::from_millis(100));
        assert_eq!(b.delay(3), Duration::from_millis(800));
        assert_eq!(b.delay(6), Duration::from_secs(5));
        assert_eq!(b.delay(200), Duration::from_secs(5));
        assert_eq!(b.full_jitter(2, 0.0), Duration::ZERO);
        assert_eq!(b.full_jitter(2, 0.5), Duration::from_millis(200));
        assert!(b.full_jitter(10, 0.999_999) <= Duration::from_secs(5));
    }

    #[test]
    fn codes_become_typed_errors_with_the_message() {
        assert_eq!(
            classify(503, Some(&api("RequestLimitExceeded"))),
            CloudError::throttled("RequestLimitExceeded: RequestLimitExceeded happened")
        );
        assert!(matches!(
            classify(401, Some(&api("AuthFailure"))),
            CloudError::AuthFailed { code, message, .. } if code == "AuthFailure" && message == "AuthFailure happened"
        ));
        assert!(matches!(
            classify(400, Some(&api("InvalidAMIID.NotFound"))),
            CloudError::InvalidRequest { code, .. } if code == "InvalidAMIID.NotFound"
        ));
        assert!(matches!(
            classify(400, Some(&api("InvalidInstanceID.NotFound"))),
            CloudError::NotFound { .. }
        ));
        assert!(matches!(
            classify(500, Some(&api("InsufficientInstanceCapacity"))),
            CloudError::InsufficientCapacity { .. }
        ));
        assert!(matches!(
            classify(500, Some(&api("Weird"))),
            CloudError::Unavailable { .. }
        ));
        assert!(matches!(
            classify(502, None),
            CloudError::Unavailable { .. }
        ));
        assert!(matches!(classify(429, None), CloudError::Throttled { .. }));
        assert!(matches!(classify(404, None), CloudError::Other { .. }));
        assert!(retried_here(&classify(503, None)));
        assert!(!retried_here(&classify(
            400,
            Some(&api("InsufficientInstanceCapacity"))
        )));
    }
}
