//! The node agent's state files: what survives a restart of the agent or a reboot of the node,
//! and the one record nodemgr adds to Deckhouse's layout (the progress record).
//!
//! Everything lives under [`STATE_DIR`] (`/var/lib/bashible`, relocated by the binary's
//! `--root` in tests), with Deckhouse's names so that `cleanup_static_node.sh` and adoption
//! keep working:
//!
//! | file | meaning |
//! |---|---|
//! | [`CHECKSUM_FILE`] | the checksum of the last bundle whose every step succeeded; removed right before the first step of another bundle runs |
//! | [`FIRST_RUN_FILE`] | present until the first apply after the bootstrap finished: that apply asks for no approval |
//! | [`BUNDLE_STEPS_DIR`]`/` | the steps of the bundle being (or last) applied, one file per step |
//! | [`PROGRESS_FILE`] | nodemgr's record: which steps of which bundle finished, and each step's disruption key as it last ran |
//!
//! The agent never reads a file itself: the driver reads them once at start into
//! [`StateFiles`] and carries out the writes the agent orders
//! ([`super::AgentAction::WriteProgress`], …), each before it hands the agent its next input.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Directory of the agent's state on a node.
pub const STATE_DIR: &str = "/var/lib/bashible";
/// File (in [`STATE_DIR`]) holding the checksum of the last fully applied bundle.
pub const CHECKSUM_FILE: &str = "configuration_checksum";
/// Marker file (in [`STATE_DIR`]) the bootstrap leaves for the first apply.
pub const FIRST_RUN_FILE: &str = "first_run";
/// Directory (in [`STATE_DIR`]) of the steps of the bundle being applied.
pub const BUNDLE_STEPS_DIR: &str = "bundle_steps";
/// File (in [`STATE_DIR`]) of the [`Progress`] record, JSON.
pub const PROGRESS_FILE: &str = "nodemgr_progress.json";

/// Why a progress record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The file is not a progress record.
    #[error(
        "failed to parse the progress record {PROGRESS_FILE}: {source}; remove the file to \
         re-run every step of the next bundle"
    )]
    Progress {
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
}

/// nodemgr's record of an apply, kept in [`PROGRESS_FILE`]. Written after every step that
/// succeeds, so that a restarted agent neither re-runs a finished step of the same bundle nor
/// forgets which settings a step last ran with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// Checksum of the bundle `done` refers to (the bundle in [`BUNDLE_STEPS_DIR`]).
    #[serde(default)]
    pub bundle: Option<String>,
    /// Names of the steps of `bundle` that succeeded.
    #[serde(default)]
    pub done: BTreeSet<String>,
    /// Step name → the disruption key ([`crate::bashible::Step::disruption_key`]) the step last
    /// succeeded with on this node. A step whose key differs needs a disruption.
    #[serde(default)]
    pub applied_keys: BTreeMap<String, String>,
}

impl Progress {
    /// Parses the content of [`PROGRESS_FILE`].
    ///
    /// # Errors
    /// [`StateError::Progress`] when the text is not a progress record.
    pub fn parse(text: &str) -> Result<Self, StateError> {
        serde_json::from_str(text).map_err(|source| StateError::Progress { source })
    }

    /// The content of [`PROGRESS_FILE`] (one line of JSON with a trailing newline).
    pub fn to_file(&self) -> String {
        let mut text = serde_json::to_string(self).unwrap_or_default();
        text.push('\n');
        text
    }
}

/// The agent's state files as the driver read them at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateFiles {
    /// Content of [`CHECKSUM_FILE`] (trimmed), `None` when absent or empty.
    pub configuration_checksum: Option<String>,
    /// Whether [`FIRST_RUN_FILE`] exists.
    pub first_run: bool,
    /// The parsed [`PROGRESS_FILE`], `None` when absent. A driver that cannot parse it passes
    /// `None` (and logs [`StateError`]): the agent then re-runs every step of its bundle and
    /// treats every step with a disruption key as disruptive, which is safe.
    pub progress: Option<Progress>,
}

impl StateFiles {
    /// The files of a node that was just bootstrapped: only the first-run marker.
    pub fn first_run() -> Self {
        Self {
            first_run: true,
            ..Self::default()
        }
    }

    /// The files of a node that fully applied the bundle `checksum` whose steps had the
    /// disruption keys `applied_keys` (what the agent leaves after an apply).
    pub fn applied(
        checksum: &str,
        done: BTreeSet<String>,
        applied_keys: BTreeMap<String, String>,
    ) -> Self {
        Self {
            configuration_checksum: Some(checksum.to_owned()),
            first_run: false,
            progress: Some(Progress {
                bundle: Some(checksum.to_owned()),
                done,
                applied_keys,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_round_trips_and_tolerates_missing_fields() {
        let p = Progress {
            bundle: Some("abc".into()),
            done: ["001_a.sh".to_owned()].into(),
            applied_keys: [("020_c.sh".to_owned(), "cri.type=Containerd".to_owned())].into(),
        };
        assert_eq!(Progress::parse(&p.to_file()).unwrap(), p);
        assert_eq!(Progress::parse("{}").unwrap(), Progress::default());
        let err = Progress::parse("not json").unwrap_err().to_string();
        assert!(
            err.contains(PROGRESS_FILE) && err.contains("remove the file"),
            "{err}"
        );
    }
}
