//! Tokens the agent holds (the bundle server's bearer token, the bootstrap token): read from
//! files, never from the command line, and never printed — `Debug` and `Display` show
//! `<redacted>`, so a token cannot reach a log line by accident.

use std::path::{Path, PathBuf};

/// Why a token file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The file could not be read.
    #[error("cannot read the token file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no token, or one with spaces or control characters in it.
    #[error(
        "the token file {path} {problem}; write the token alone on one line (printable \
         characters, no spaces)"
    )]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: &'static str,
    },
}

/// A token whose value is never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Secret {
    /// Reads a token from `path`: the file's text without surrounding whitespace.
    ///
    /// # Errors
    /// [`SecretError::Read`] when the file cannot be read, [`SecretError::Malformed`] when it is
    /// empty or the token holds a space or a control character.
    pub fn read_from(path: &Path) -> Result<Self, SecretError> {
        let text = std::fs::read_to_string(path).map_err(|source| SecretError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(text.trim()).map_err(|problem| SecretError::Malformed {
            path: path.to_owned(),
            problem,
        })
    }

    fn parse(text: &str) -> Result<Self, &'static str> {
        if text.is_empty() {
            return Err("is empty");
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("holds a space, a control or a non-ASCII character");
        }
        Ok(Self(text.to_owned()))
    }

    /// The token, for the one place that sends it (an `Authorization` header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints_its_value() {
        let secret = Secret::parse("s3cr3t-token-value").expect("a valid token");
        assert_eq!(format!("{secret:?}"), "Secret(<redacted>)");
        assert_eq!(format!("{secret}"), "<redacted>");
        assert_eq!(secret.expose(), "s3cr3t-token-value");
    }

    #[test]
    fn token_files_are_trimmed_and_checked() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("token");
        std::fs::write(&path, "abc.def\n").expect("write");
        assert_eq!(
            Secret::read_from(&path).expect("a token").expose(),
            "abc.def"
        );
        std::fs::write(&path, "  \n").expect("write");
        let empty = Secret::read_from(&path).expect_err("empty").to_string();
        assert!(empty.contains("is empty"), "{empty}");
        std::fs::write(&path, "two words").expect("write");
        assert!(Secret::read_from(&path).is_err());
        let missing = Secret::read_from(&dir.path().join("none"))
            .expect_err("missing")
            .to_string();
        assert!(missing.contains("cannot read the token file"), "{missing}");
    }
}
