//! The command-line flags that describe the cluster settings validation depends on, shared by
//! `nodemgr validate` and `nodemgr-webhook` so both spell them alike.

use std::collections::BTreeSet;

use clap::Args;
use nodemgr_core::validate::ValidationContext;

/// Cluster settings as flags.
#[derive(Debug, Clone, Default, Args)]
pub struct SettingsFlags {
    /// A taint key Deckhouse components tolerate besides the built-in ones
    /// (global.modules.placement.customTolerationKeys); repeat for several.
    #[arg(long = "custom-toleration-key", value_name = "KEY")]
    pub custom_toleration_keys: Vec<String>,
    /// A zone of the cloud provider's configuration; when given, cloudInstances.zones must be
    /// among them. Repeat for several.
    #[arg(long = "zone", value_name = "ZONE")]
    pub zones: Vec<String>,
    /// Length of the cluster prefix of a Cloud cluster (0–63); when given, NodeGroup names are
    /// checked against the 63-character machine name limit.
    #[arg(long, value_name = "LEN", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=63))]
    pub cluster_prefix_len: Option<usize>,
}

impl SettingsFlags {
    /// The validation context the flags describe.
    pub fn context(&self) -> ValidationContext {
        ValidationContext {
            cluster_prefix_len: self.cluster_prefix_len,
            known_zones: (!self.zones.is_empty())
                .then(|| self.zones.iter().cloned().collect::<BTreeSet<_>>()),
            custom_toleration_keys: self.custom_toleration_keys.clone(),
            ..ValidationContext::default()
        }
    }
}
