//! What a bootstrap script needs to install the node agent (`bashible`) so a bootstrapped
//! node keeps applying its group's bundle: where to download the binary and fetch bundles
//! (the bundle server's URL), the token to do so, and the agent's systemd units (a oneshot
//! service and a timer starting it every minute, as Deckhouse's bashible timer).
//!
//! The URL lands in a unit's `ExecStart=` line, where nothing can be quoted: it is checked
//! against a strict syntax instead. The token is written to a 0600 file and sent from it,
//! never on a command line.
//!
//! Over HTTPS with a certificate no public CA signed (bashible-apiserver's cluster mode, whose
//! certificate is self-signed unless the operator provides one), the script carries the
//! certificate to trust ([`AgentInstall::with_ca`]): it writes it to [`AGENT_CA_PATH`], the
//! download's `curl --cacert` and the agent's `--bundle-server-ca` both use that file.

use super::RenderError;

/// Where the agent binary is installed on a node.
pub const AGENT_BINARY_PATH: &str = "/opt/nodemgr/bin/bashible";
/// The bundle server's path serving the agent binary.
pub const AGENT_BINARY_URL_PATH: &str = "/v1/agent/bashible";
/// Where the bundle server's CA (the certificates the agent trusts) is written on a node.
pub const AGENT_CA_PATH: &str = "/etc/nodemgr/bundle-server-ca.crt";

/// The node agent a bootstrap script installs.
#[derive(Clone, PartialEq, Eq)]
pub struct AgentInstall {
    bundle_server: String,
    bundle_token: String,
    ca: Option<String>,
}

impl std::fmt::Debug for AgentInstall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentInstall")
            .field("bundle_server", &self.bundle_server)
            .field("bundle_token", &"<redacted>")
            .field("ca", &self.ca.is_some())
            .finish()
    }
}

impl AgentInstall {
    /// Checks the bundle server URL (`http://` or `https://`, then host, port and path made of
    /// letters, digits and `.-_:/`) and the token (printable, no spaces).
    ///
    /// # Errors
    /// [`RenderError::Cluster`] naming what is wrong.
    pub fn new(bundle_server: &str, bundle_token: &str) -> Result<Self, RenderError> {
        let rest = bundle_server
            .strip_prefix("http://")
            .or_else(|| bundle_server.strip_prefix("https://"));
        let url_ok = rest.is_some_and(|r| {
            !r.is_empty()
                && r.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-_:/".contains(&b))
        });
        if !url_ok {
            return Err(RenderError::Cluster {
                field: "bundleServer".into(),
                message: format!(
                    "{bundle_server:?} is not a plain http:// or https:// URL (host, port, path; \
                     no spaces, quotes or query)"
                ),
                source: None,
            });
        }
        if bundle_token.is_empty() || !bundle_token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(RenderError::Cluster {
                field: "bundleToken".into(),
                message: "the bundle server's token must be printable characters without spaces"
                    .into(),
                source: None,
            });
        }
        Ok(Self {
            bundle_server: bundle_server.trim_end_matches('/').to_owned(),
            bundle_token: bundle_token.to_owned(),
            ca: None,
        })
    }

    /// The same, trusting the PEM certificates `ca` (the bundle server's CA, or its
    /// self-signed certificate) instead of the node's system CAs.
    ///
    /// # Errors
    /// [`RenderError::Cluster`] when `ca` holds no `-----BEGIN CERTIFICATE-----` block, or
    /// anything but printable ASCII and line breaks.
    pub fn with_ca(mut self, ca: &str) -> Result<Self, RenderError> {
        let printable = ca
            .bytes()
            .all(|b| b.is_ascii_graphic() || b == b' ' || b == b'\n' || b == b'\r');
        if !printable || !ca.contains("-----BEGIN CERTIFICATE-----") {
            return Err(RenderError::Cluster {
                field: "bundleServerCA".into(),
                message: "the bundle server's CA must be PEM certificates \
                          (`-----BEGIN CERTIFICATE-----` blocks)"
                    .into(),
                source: None,
            });
        }
        let mut pem = ca.replace("\r\n", "\n");
        if !pem.ends_with('\n') {
            pem.push('\n');
        }
        self.ca = Some(pem);
        Ok(self)
    }

    /// The PEM certificates the node trusts the bundle server by, if not the system's.
    pub fn ca(&self) -> Option<&str> {
        self.ca.as_deref()
    }

    /// The bundle server's URL (no trailing slash).
    pub fn bundle_server(&self) -> &str {
        &self.bundle_server
    }

    /// The token nodes read bundles with.
    pub fn bundle_token(&self) -> &str {
        &self.bundle_token
    }

    /// Where the binary is downloaded from.
    pub fn binary_url(&self) -> String {
        format!("{}{AGENT_BINARY_URL_PATH}", self.bundle_server)
    }

    /// `bashible.service`: one pass of the agent for the group.
    pub fn service_unit(&self, group: &str) -> String {
        format!(
            "# nodemgr node agent: one pass (a timer starts it every minute).\n\
             [Unit]\n\
             Description=nodemgr node agent (bashible): applies NodeGroup {group}'s bundle\n\
             Wants=network-online.target\n\
             After=network-online.target\n\
             \n\
             [Service]\n\
             Type=oneshot\n\
             ExecStart={AGENT_BINARY_PATH} --bundle-server {} --group {group}{}\n",
            self.bundle_server,
            if self.ca.is_some() {
                format!(" --bundle-server-ca {AGENT_CA_PATH}")
            } else {
                String::new()
            }
        )
    }

    /// `bashible.timer`: starts the service a minute after boot and a minute after each pass.
    pub fn timer_unit(&self) -> String {
        "# nodemgr node agent: a pass every minute, as Deckhouse's bashible timer.\n\
         [Unit]\n\
         Description=run the nodemgr node agent every minute\n\
         \n\
         [Timer]\n\
         OnBootSec=1min\n\
         OnUnitInactiveSec=1min\n\
         \n\
         [Install]\n\
         WantedBy=timers.target\n"
            .to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_that_a_unit_line_cannot_carry_are_refused() {
        for bad in [
            "ftp://x",
            "http://",
            "http://a b",
            "http://a;rm -rf /",
            "http://a?x=1",
            "10.0.0.1:9600",
        ] {
            assert!(AgentInstall::new(bad, "token-0123456789").is_err(), "{bad}");
        }
        assert!(AgentInstall::new("http://10.0.0.1:9600", "two words").is_err());
        let ok = AgentInstall::new("https://bashible.example:9600/", "token-0123456789")
            .expect("a plain URL");
        assert_eq!(
            ok.binary_url(),
            "https://bashible.example:9600/v1/agent/bashible"
        );
        assert!(ok.service_unit("worker").contains(
            "ExecStart=/opt/nodemgr/bin/bashible --bundle-server https://bashible.example:9600 --group worker\n"
        ));
        assert!(!format!("{ok:?}").contains("token-0123456789"));
        assert_eq!(ok.ca(), None);
    }

    #[test]
    fn a_ca_is_pem_certificates_and_the_unit_trusts_its_file() {
        let plain = AgentInstall::new("https://10.0.0.5:9600", "token-0123456789").expect("valid");
        for bad in [
            "",
            "not a certificate",
            "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n",
            "-----BEGIN CERTIFICATE-----\n\u{0}\n-----END CERTIFICATE-----\n",
            "-----BEGIN CERTIFICATE-----\n$(reboot)\u{7}\n-----END CERTIFICATE-----\n",
        ] {
            assert!(plain.clone().with_ca(bad).is_err(), "{bad:?}");
        }
        let pinned = plain
            .with_ca("-----BEGIN CERTIFICATE-----\r\nMIIB\r\n-----END CERTIFICATE-----")
            .expect("PEM");
        assert_eq!(
            pinned.ca(),
            Some("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
        );
        assert!(pinned.service_unit("worker").contains(
            "ExecStart=/opt/nodemgr/bin/bashible --bundle-server https://10.0.0.5:9600 --group worker --bundle-server-ca /etc/nodemgr/bundle-server-ca.crt\n"
        ));
    }
}
