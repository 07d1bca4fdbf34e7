//! Fault injection: make the next N requests matching a verb and resource fail with a chosen
//! status (409, 429, 500…), so tests can check that controllers retry instead of losing work.

use serde_json::json;

use crate::status::ApiError;

/// A rule: the next `times` requests matching `verb` and `resource` fail with `code`.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// Verb to match (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`); `None` matches every verb.
    pub verb: Option<String>,
    /// Resource to match: a plural (`nodes`) or plural/subresource (`pods/eviction`,
    /// `nodegroups/status`); `None` matches every resource.
    pub resource: Option<String>,
    /// HTTP status to answer (409, 429, 500, 503…).
    pub code: u16,
    /// How many matching requests fail before the rule expires.
    pub times: usize,
}

impl Fault {
    /// A rule failing the next matching request with `code`; narrow it with the builders.
    pub fn new(code: u16) -> Self {
        Fault {
            verb: None,
            resource: None,
            code,
            times: 1,
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

    /// Fail this many matching requests.
    pub fn times(mut self, times: usize) -> Self {
        self.times = times;
        self
    }

    /// Whether the rule applies to a request.
    pub fn matches(&self, verb: &str, resource: &str) -> bool {
        self.times > 0
            && self.verb.as_deref().is_none_or(|v| v == verb)
            && self.resource.as_deref().is_none_or(|r| r == resource)
    }

    /// The error the rule answers with, shaped as kube-apiserver would send it.
    pub fn error(&self, resource: &str) -> ApiError {
        let message = format!("injected fault for {resource}");
        match self.code {
            409 => ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {resource}: the object has been modified; please apply your changes to the latest version and try again ({message})"
                ),
            ),
            429 => {
                let mut e = ApiError::new(429, "TooManyRequests", format!("the server has received too many requests and has asked us to try again later ({message})"))
                    .with_details(json!({}));
                e.retry_after = Some(1);
                e
            }
            500 => ApiError::internal(format!("Internal error occurred: {message}")),
            503 => ApiError::new(
                503,
                "ServiceUnavailable",
                format!("the server is currently unable to handle the request ({message})"),
            ),
            504 => ApiError::new(
                504,
                "Timeout",
                format!(
                    "the server was unable to return a response in the time allotted ({message})"
                ),
            ),
            404 => ApiError::new(404, "NotFound", message),
            code => ApiError::new(code, "Unknown", message),
        }
    }
}

/// Finds the first live rule matching the request, uses one of its shots, and returns the
/// error to answer.
pub fn take_fault(rules: &mut Vec<Fault>, verb: &str, resource: &str) -> Option<ApiError> {
    let index = rules.iter().position(|f| f.matches(verb, resource))?;
    rules[index].times -= 1;
    let error = rules[index].error(resource);
    if rules[index].times == 0 {
        rules.remove(index);
    }
    Some(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_fire_the_given_number_of_times() {
        let mut rules = vec![Fault::new(409).verb("patch").resource("nodes").times(2)];
        assert!(take_fault(&mut rules, "get", "nodes").is_none());
        assert!(take_fault(&mut rules, "patch", "pods").is_none());
        assert_eq!(take_fault(&mut rules, "patch", "nodes").unwrap().code, 409);
        assert_eq!(
            take_fault(&mut rules, "patch", "nodes").unwrap().reason,
            "Conflict"
        );
        assert!(take_fault(&mut rules, "patch", "nodes").is_none());
        assert!(rules.is_empty());
    }
}
