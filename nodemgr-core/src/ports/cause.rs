//! What caused a port error: the adapter's own error (a `kube::Error`, an AWS SDK error, an
//! `io::Error` of the SSH connection), kept type-erased so the core does not depend on any
//! adapter's crate, and how to print an error with its whole chain of causes.
//!
//! The port errors ([`super::ClusterError`], [`super::CloudError`],
//! [`super::RemoteShellError`]) keep their kinds (callers decide on the kind) and carry the
//! adapter's error as their [`std::error::Error::source`] when there is one. Their `Display`
//! stays the one-line message users see; [`ErrorChain`] prints the message followed by every
//! cause that adds something to it (`docs/observability.md` §6.1).

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

/// The underlying error of a port error, type-erased and shared (`Clone`).
///
/// It is transparent: it displays as the wrapped error and its
/// [`source`](std::error::Error::source) is the wrapped error's source, so a chain walked
/// through it shows the adapter's errors exactly once. Two causes are equal when they display
/// the same text (the port errors derive `PartialEq`; an error type cannot be compared
/// otherwise once erased).
#[derive(Clone)]
pub struct Cause(Arc<dyn StdError + Send + Sync + 'static>);

impl Cause {
    /// Wraps `error`.
    pub fn new(error: impl StdError + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }

    /// Wraps an error that is already boxed.
    pub fn from_boxed(error: Box<dyn StdError + Send + Sync + 'static>) -> Self {
        Self(Arc::from(error))
    }

    /// A cause that is only a message: a failure reported by a simulator, a test double or an
    /// embedder that has no error type of its own.
    pub fn msg(message: impl Into<String>) -> Self {
        Self::new(Message(message.into()))
    }

    /// The wrapped error, to downcast it (`cause.get().downcast_ref::<kube::Error>()`).
    pub fn get(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.0
    }
}

/// The error of [`Cause::msg`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Message(String);

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl StdError for Cause {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for Cause {}

/// Displays an error followed by its causes (`error: cause: cause of the cause`), for logs,
/// Events and status messages that must say what really went wrong.
///
/// A cause whose text the line already contains is skipped: adapters that paste their error
/// into the message (kept for the messages users already know) and also keep it as the source
/// do not print it twice.
///
/// # Examples
/// ```
/// use nodemgr_core::ports::{ClusterError, ErrorChain};
///
/// let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
/// let error = ClusterError::unavailable("listing nodes").with_source(io);
/// assert_eq!(error.to_string(), "cluster API unavailable: listing nodes");
/// assert_eq!(
///     ErrorChain(&error).to_string(),
///     "cluster API unavailable: listing nodes: connection refused"
/// );
/// ```
#[derive(Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn StdError + 'a));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = self.0.to_string();
        let mut next = self.0.source();
        // A chain is finite in practice; the bound guards against a cyclic `source()`.
        for _ in 0..32 {
            let Some(cause) = next else { break };
            let text = cause.to_string();
            if !text.is_empty() && !line.contains(&text) {
                line.push_str(": ");
                line.push_str(&text);
            }
            next = cause.source();
        }
        f.write_str(&line)
    }
}

impl fmt::Debug for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Cause);

    #[derive(Debug, thiserror::Error)]
    #[error("middle: {0}")]
    struct Middle(String, #[source] std::io::Error);

    #[test]
    fn a_cause_is_transparent_in_the_chain() {
        let io = std::io::Error::other("disk on fire");
        let error = Outer(Cause::new(Middle("x".into(), io)));
        assert_eq!(
            error.source().map(ToString::to_string).as_deref(),
            Some("middle: x")
        );
        // The io error is reached through the cause, once.
        assert_eq!(
            ErrorChain(&error).to_string(),
            "outer: middle: x: disk on fire"
        );
        let downcast = error.0.get().downcast_ref::<Middle>().map(|m| m.0.as_str());
        assert_eq!(downcast, Some("x"));
    }

    #[test]
    fn text_already_in_the_line_is_not_repeated() {
        #[derive(Debug, thiserror::Error)]
        #[error("listing nodes: {0}")]
        struct Pasted(#[source] std::io::Error);
        let error = Pasted(std::io::Error::other("timed out"));
        assert_eq!(ErrorChain(&error).to_string(), "listing nodes: timed out");
    }

    /// A chain of errors, each with the next as its source.
    #[derive(Debug)]
    struct Link(String, Option<Box<Link>>);

    impl fmt::Display for Link {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl StdError for Link {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            self.1.as_deref().map(|l| l as &(dyn StdError + 'static))
        }
    }

    fn chain(texts: &[String]) -> Option<Link> {
        texts.iter().rev().fold(None, |next, text| {
            Some(Link(text.clone(), next.map(Box::new)))
        })
    }

    proptest::proptest! {
        /// The chain starts with the error's own text and holds the text of every cause.
        #[test]
        fn the_chain_shows_the_error_and_every_cause(
            texts in proptest::collection::vec("[a-z ]{0,12}", 1..6),
        ) {
            let Some(top) = chain(&texts) else { return Ok(()) };
            let line = ErrorChain(&top).to_string();
            proptest::prop_assert!(line.starts_with(&texts[0]), "{line}");
            for text in &texts {
                proptest::prop_assert!(line.contains(text.as_str()), "{text:?} in {line:?}");
            }
        }

        /// Keeping a cause changes neither the kind nor the text of a port error: callers
        /// decide and users read exactly as before (`docs/observability.md` §6.1).
        #[test]
        fn a_source_changes_neither_kind_nor_text(kind in 0usize..5, message in ".{0,20}", cause in ".{0,20}") {
            let plain = [
                super::super::ClusterError::not_found(message.clone()),
                super::super::ClusterError::conflict(message.clone()),
                super::super::ClusterError::too_many_requests(message.clone()),
                super::super::ClusterError::unavailable(message.clone()),
                super::super::ClusterError::other(message.clone()),
            ][kind].clone();
            let caused = plain.clone().with_source(std::io::Error::other(cause.clone()));
            proptest::prop_assert_eq!(plain.to_string(), caused.to_string());
            proptest::prop_assert_eq!(plain.is_retryable(), caused.is_retryable());
            proptest::prop_assert_eq!(plain.is_not_found(), caused.is_not_found());
            proptest::prop_assert_eq!(plain.message(), caused.message());
            proptest::prop_assert!(plain.source().is_none());
            proptest::prop_assert_eq!(
                caused.source().map(ToString::to_string),
                Some(cause.clone())
            );
            let cloud = super::super::CloudError::unavailable(message.clone());
            let caused = cloud.clone().with_source(std::io::Error::other(cause));
            proptest::prop_assert_eq!(cloud.to_string(), caused.to_string());
            proptest::prop_assert_eq!(cloud.is_retryable(), caused.is_retryable());
        }
    }

    #[test]
    fn causes_compare_by_text() {
        let a = Cause::new(std::io::Error::other("same"));
        let b = Cause::new(std::fmt::Error);
        assert_eq!(a, Cause::new(std::io::Error::other("same")));
        assert_ne!(a, b);
    }
}
