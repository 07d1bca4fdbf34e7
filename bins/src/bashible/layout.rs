//! Where the agent reads and writes on a node: Deckhouse's layout under `/var/lib/bashible`
//! (`configuration_checksum`, `first_run`, `bundle_steps/`), the pass lock `/var/lock/bashible`
//! and the kubelet's credentials — all relocated under `--root DIR` when one is given, so a
//! test runs several agents on one machine without touching the host.

use std::path::{Path, PathBuf};

/// The state directory (Deckhouse's).
pub const STATE_DIR: &str = "/var/lib/bashible";
/// The lock one pass holds.
pub const LOCK_FILE: &str = "/var/lock/bashible";
/// The kubelet's kubeconfig once the node has joined.
pub const KUBELET_KUBECONFIG: &str = "/etc/kubernetes/kubelet.conf";

/// The files of one agent, under its root (`/` on a node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    /// The layout under `root`; `None` (or `/`) is the host.
    pub fn new(root: Option<&Path>) -> Self {
        Self {
            root: root.map_or_else(|| PathBuf::from("/"), Path::to_path_buf),
        }
    }

    /// Whether this is the host's own filesystem (no `--root`).
    pub fn is_host(&self) -> bool {
        self.root == Path::new("/")
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `path` (absolute, as on a node) under the root.
    pub fn host_path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// The value the step scripts get as `BB_ROOT`: empty on the host, the root otherwise.
    pub fn bb_root(&self) -> String {
        if self.is_host() {
            String::new()
        } else {
            self.root.to_string_lossy().trim_end_matches('/').to_owned()
        }
    }

    /// `/var/lib/bashible`.
    pub fn state_dir(&self) -> PathBuf {
        self.host_path(STATE_DIR)
    }

    /// A file in the state directory.
    pub fn state_file(&self, name: &str) -> PathBuf {
        self.state_dir().join(name)
    }

    /// `configuration_checksum`: the checksum of the bundle the node last applied completely.
    pub fn checksum_file(&self) -> PathBuf {
        self.state_file("configuration_checksum")
    }

    /// `first_run`: present from bootstrap until the first bundle is applied.
    pub fn first_run_marker(&self) -> PathBuf {
        self.state_file("first_run")
    }

    /// `bundle_steps/`: the steps of the bundle being applied.
    pub fn bundle_steps(&self) -> PathBuf {
        self.state_file("bundle_steps")
    }

    /// The pass lock.
    pub fn lock_file(&self) -> PathBuf {
        self.host_path(LOCK_FILE)
    }

    /// The kubelet's kubeconfig (present once joined).
    pub fn kubelet_kubeconfig(&self) -> PathBuf {
        self.host_path(KUBELET_KUBECONFIG)
    }

    /// The bootstrap token (present until the node has joined).
    pub fn bootstrap_token(&self) -> PathBuf {
        self.state_file("bootstrap-token")
    }

    /// The cluster CA the bootstrap wrote.
    pub fn ca_cert(&self) -> PathBuf {
        self.state_file("ca.crt")
    }

    /// The API endpoints the bootstrap wrote (`host:port` per line).
    pub fn api_endpoints(&self) -> PathBuf {
        self.state_file("api-endpoints")
    }

    /// The bundle server's bearer token the bootstrap wrote.
    pub fn bundle_token(&self) -> PathBuf {
        self.state_file("bundle-token")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_relocates_every_path() {
        let layout = Layout::new(Some(Path::new("/tmp/node-1")));
        assert!(!layout.is_host());
        assert_eq!(layout.bb_root(), "/tmp/node-1");
        assert_eq!(
            layout.checksum_file(),
            Path::new("/tmp/node-1/var/lib/bashible/configuration_checksum")
        );
        assert_eq!(
            layout.lock_file(),
            Path::new("/tmp/node-1/var/lock/bashible")
        );
        assert_eq!(
            layout.kubelet_kubeconfig(),
            Path::new("/tmp/node-1/etc/kubernetes/kubelet.conf")
        );
    }

    #[test]
    fn the_host_layout_is_deckhouses() {
        let layout = Layout::new(None);
        assert!(layout.is_host());
        assert_eq!(layout.bb_root(), "");
        assert_eq!(
            layout.bundle_steps(),
            Path::new("/var/lib/bashible/bundle_steps")
        );
        assert_eq!(
            layout.first_run_marker(),
            Path::new("/var/lib/bashible/first_run")
        );
        assert_eq!(Layout::new(Some(Path::new("/"))), layout);
    }
}
