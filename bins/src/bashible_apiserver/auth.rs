//! Bearer tokens of `bashible-apiserver`: which token may read which groups.
//!
//! A token file has one grant per line, `TOKEN GROUP[,GROUP...]` or `TOKEN *` (every group);
//! blank lines and lines starting with `#` are skipped. `--token TOKEN=GROUPS` adds a grant
//! from the command line (for development: a token on a command line is visible to every
//! local user).

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, bail};

/// The groups a token may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every group.
    All,
    /// These groups.
    Groups(BTreeSet<String>),
}

impl Scope {
    /// Whether the scope covers `group`.
    pub fn allows(&self, group: &str) -> bool {
        match self {
            Self::All => true,
            Self::Groups(groups) => groups.contains(group),
        }
    }
}

/// One token and its scope.
#[derive(Clone, PartialEq, Eq)]
pub struct Grant {
    token: String,
    /// What the token may read.
    pub scope: Scope,
    /// When the grant ends (a bootstrap token's expiration); `None`: never.
    pub expires: Option<std::time::SystemTime>,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("token", &"<redacted>")
            .field("scope", &self.scope)
            .finish()
    }
}

fn parse_scope(text: &str) -> anyhow::Result<Scope> {
    if text == "*" {
        return Ok(Scope::All);
    }
    let groups: BTreeSet<String> = text
        .split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(str::to_owned)
        .collect();
    if groups.is_empty() {
        bail!("no group after the token; write `TOKEN group1,group2` or `TOKEN *`");
    }
    Ok(Scope::Groups(groups))
}

fn check_token(token: &str) -> anyhow::Result<()> {
    if token.len() < 16 || !token.bytes().all(|b| b.is_ascii_graphic()) {
        bail!(
            "a token must be at least 16 printable characters without spaces (e.g. the output \
             of `openssl rand -hex 32`)"
        );
    }
    Ok(())
}

impl Grant {
    /// The token, for the one use that hands it on: a group's bootstrap script, which
    /// installs the node agent with the token of a grant naming exactly that group.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// Parses `TOKEN=GROUPS` (the `--token` flag).
    ///
    /// # Errors
    /// No `=`, a short token, or no group.
    pub fn from_flag(text: &str) -> anyhow::Result<Self> {
        let (token, scope) = text
            .split_once('=')
            .context("--token takes TOKEN=GROUP[,GROUP...] or TOKEN=*")?;
        check_token(token)?;
        Ok(Self {
            token: token.to_owned(),
            scope: parse_scope(scope)?,
            expires: None,
        })
    }

    /// A grant of `group` to a NodeGroup's bootstrap token (`id.secret`), until `expires`
    /// (cluster mode: a node still bootstrapping reads its group's bundle with it).
    pub fn bootstrap_token(token: &str, group: &str, expires: std::time::SystemTime) -> Self {
        Self {
            token: token.to_owned(),
            scope: Scope::Groups(std::iter::once(group.to_owned()).collect()),
            expires: Some(expires),
        }
    }
}

/// Reads a token file.
///
/// # Errors
/// An unreadable file, or a malformed line (named by number).
pub fn read_token_file(path: &Path) -> anyhow::Result<Vec<Grant>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read token file {}", path.display()))?;
    let mut grants = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let place = format!("{}:{}", path.display(), number + 1);
        let mut parts = line.split_whitespace();
        let (Some(token), Some(scope), None) = (parts.next(), parts.next(), parts.next()) else {
            bail!("{place}: expected `TOKEN GROUP[,GROUP...]` or `TOKEN *`");
        };
        check_token(token).with_context(|| place.clone())?;
        grants.push(Grant {
            token: token.to_owned(),
            scope: parse_scope(scope).with_context(|| place.clone())?,
            expires: None,
        });
    }
    Ok(grants)
}

/// Compares in time independent of where the inputs differ (for equal lengths).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0_u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What a request's credentials allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// No `Authorization: Bearer` header: 401.
    Missing,
    /// A token nobody granted: 401.
    Unknown,
    /// A known token with these scopes (a token may have several grants).
    Granted(Vec<Scope>),
}

impl Access {
    /// Whether the access covers `group`.
    pub fn allows(&self, group: &str) -> bool {
        matches!(self, Self::Granted(scopes) if scopes.iter().any(|s| s.allows(group)))
    }

    /// Whether the access covers every group (a `*` grant).
    pub fn covers_all(&self) -> bool {
        matches!(self, Self::Granted(scopes) if scopes.contains(&Scope::All))
    }
}

/// Decides what the `Authorization` header value allows now.
pub fn access(grants: &[Grant], authorization: Option<&str>) -> Access {
    access_at(grants, authorization, std::time::SystemTime::now())
}

/// Decides what the `Authorization` header value allows at `now`: an expired grant is as
/// unknown as a wrong token.
pub fn access_at(
    grants: &[Grant],
    authorization: Option<&str>,
    now: std::time::SystemTime,
) -> Access {
    let Some(token) = authorization
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim)
    else {
        return Access::Missing;
    };
    // Every grant is compared, so the time does not reveal which one matched.
    let scopes: Vec<Scope> = grants
        .iter()
        .filter(|g| constant_time_eq(g.token.as_bytes(), token.as_bytes()))
        .filter(|g| g.expires.is_none_or(|end| now < end))
        .map(|g| g.scope.clone())
        .collect();
    if scopes.is_empty() {
        Access::Unknown
    } else {
        Access::Granted(scopes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T1: &str = "0123456789abcdef0123";
    const T2: &str = "fedcba9876543210fedc";

    #[test]
    fn token_file_grants_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, format!("# nodes\n\n{T1} worker,gpu\n{T2} *\n")).unwrap();
        let grants = read_token_file(&path).unwrap();
        assert_eq!(
            grants[0].scope,
            Scope::Groups(["gpu".to_owned(), "worker".to_owned()].into())
        );
        assert_eq!(grants[1].scope, Scope::All);
        assert!(!format!("{grants:?}").contains(T1));

        std::fs::write(&path, format!("{T1}\n")).unwrap();
        let err = read_token_file(&path).unwrap_err().to_string();
        assert!(
            err.contains("tokens:1") && err.contains("TOKEN GROUP"),
            "{err}"
        );
        std::fs::write(&path, "short worker\n").unwrap();
        assert!(format!("{:#}", read_token_file(&path).unwrap_err()).contains("16 printable"));
    }

    #[test]
    fn access_is_missing_unknown_or_scoped() {
        let grants = vec![
            Grant::from_flag(&format!("{T1}=worker")).unwrap(),
            Grant::from_flag(&format!("{T2}=*")).unwrap(),
        ];
        assert_eq!(access(&grants, None), Access::Missing);
        assert_eq!(access(&grants, Some("Basic abc")), Access::Missing);
        assert_eq!(access(&grants, Some("Bearer nope")), Access::Unknown);
        let worker = access(&grants, Some(&format!("Bearer {T1}")));
        assert!(worker.allows("worker"));
        assert!(!worker.allows("gpu"));
        assert!(access(&grants, Some(&format!("Bearer {T2}"))).allows("gpu"));
        assert!(Grant::from_flag("no-equals-sign-here").is_err());
        let start = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000);
        let bootstrap = vec![Grant::bootstrap_token(
            "abcdef.0123456789abcdef",
            "metal",
            start,
        )];
        let header = Some("Bearer abcdef.0123456789abcdef");
        assert!(
            access_at(
                &bootstrap,
                header,
                start - std::time::Duration::from_secs(1)
            )
            .allows("metal")
        );
        assert_eq!(
            access_at(&bootstrap, header, start),
            Access::Unknown,
            "expired"
        );
        assert!(Grant::from_flag(&format!("{T1}=")).is_err());
    }
}
