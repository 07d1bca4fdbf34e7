//! The machine controller's settings file (`--machines-config FILE`): the cloud's zones and the
//! instance classes NodeGroups name in `cloudInstances.classReference`.
//!
//! ```yaml
//! zones: [eu-west-1a, eu-west-1b]
//! concurrency: 16            # cloud calls at once (default 16)
//! creationTimeout: 20m       # a machine without a Node by then is replaced (default 20m)
//! standbyImage: registry.k8s.io/pause:3.9   # the standby-holder pods' image (this default)
//! classes:
//!   - kind: AWSInstanceClass
//!     name: small
//!     cpu: 4                 # what the scaling policies plan with
//!     memoryGiB: 16
//!     instanceType: m5.xlarge
//!     imageId: ami-0abcdef1234567890
//!     subnets: {eu-west-1a: subnet-1, eu-west-1b: subnet-2}
//!     securityGroups: [sg-1]
//!     rootDiskGiB: 30
//!     tags: {team: infra}
//! ```
//!
//! The EC2 connection comes from the AWS environment variables (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL_EC2`, …) or, with
//! `--cloud-credentials secret`, from the cloud provider Secret
//! (`kube-system/d8-node-manager-cloud-provider`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail};
use nodemgr_core::machines::MachineConfig;
use nodemgr_core::scaling::ScalingConfig;
use nodemgr_k8s::controllers::machines::{MachineClass, MachineSettings};
use serde::Deserialize;

use crate::duration_flag as duration;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MachinesFile {
    zones: Vec<String>,
    #[serde(default)]
    concurrency: Option<usize>,
    #[serde(default)]
    creation_timeout: Option<String>,
    #[serde(default)]
    standby_image: Option<String>,
    classes: Vec<ClassFile>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ClassFile {
    kind: String,
    name: String,
    cpu: i64,
    #[serde(rename = "memoryGiB")]
    memory_gib: i64,
    instance_type: String,
    image_id: String,
    #[serde(default)]
    subnets: BTreeMap<String, String>,
    #[serde(default)]
    security_groups: Vec<String>,
    #[serde(default, rename = "rootDiskGiB")]
    root_disk_gib: Option<u32>,
    #[serde(default)]
    tags: BTreeMap<String, String>,
}

/// Reads the machine controller's settings from `path`.
///
/// # Errors
/// An unreadable file, a field of the wrong type or unknown, no zones, a class without an
/// instance type, image or a positive size.
pub fn settings(path: &Path, period: Duration) -> anyhow::Result<MachineSettings> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the machines config {}", path.display()))?;
    let file: MachinesFile = serde_saphyr::from_str(&text)
        .map_err(|e| anyhow::anyhow!("machines config {}: {e}", path.display()))?;
    if file.zones.is_empty() {
        bail!(
            "machines config {}: zones: name at least one zone of the cloud",
            path.display()
        );
    }
    let mut classes = Vec::new();
    for (i, c) in file.classes.iter().enumerate() {
        let at = format!(
            "machines config {}: classes[{i}] ({})",
            path.display(),
            c.name
        );
        if c.name.is_empty() || c.kind.is_empty() {
            bail!("{at}: kind and name are required (what cloudInstances.classReference names)");
        }
        if c.cpu <= 0 || c.memory_gib <= 0 {
            bail!("{at}: cpu and memoryGiB must be positive (the size scaling plans with)");
        }
        if c.instance_type.is_empty() || c.image_id.is_empty() {
            bail!("{at}: instanceType and imageId are required");
        }
        classes.push(MachineClass {
            scaling: nodemgr_core::scaling::InstanceClass::new(
                &c.kind,
                &c.name,
                c.cpu,
                c.memory_gib,
            ),
            cloud: nodemgr_core::ports::cloud::InstanceClass {
                instance_type: c.instance_type.clone(),
                image_id: c.image_id.clone(),
                subnets: c.subnets.clone(),
                security_groups: c.security_groups.clone(),
                root_disk_gib: c.root_disk_gib,
                tags: c.tags.clone(),
            },
        });
    }
    let mut config = MachineConfig::default();
    if let Some(t) = &file.creation_timeout {
        config.creation_timeout = duration(t).map_err(|e| {
            anyhow::anyhow!("machines config {}: creationTimeout: {e}", path.display())
        })?;
    }
    Ok(MachineSettings {
        period,
        config,
        scaling: ScalingConfig::default(),
        classes,
        zones: file.zones,
        bootstrap: None,
        concurrency: file
            .concurrency
            .unwrap_or(nodemgr_cloud::config::DEFAULT_CONCURRENCY)
            .max(1),
        standby_image: file.standby_image.unwrap_or_else(|| {
            nodemgr_k8s::controllers::machines::DEFAULT_STANDBY_IMAGE.to_owned()
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_reads_and_mistakes_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("machines.yaml");
        let doc: String = include_str!("machines.rs")
            .lines()
            .skip_while(|l| !l.starts_with("//! ```yaml"))
            .skip(1)
            .take_while(|l| !l.starts_with("//! ```"))
            .map(|l| {
                format!(
                    "{}\n",
                    l.trim_start_matches("//!").strip_prefix(' ').unwrap_or("")
                )
            })
            .collect();
        std::fs::write(&path, doc).unwrap();
        let s = settings(&path, Duration::from_secs(10)).unwrap();
        assert_eq!(s.zones, ["eu-west-1a", "eu-west-1b"]);
        assert_eq!(s.classes[0].cloud.subnets["eu-west-1b"], "subnet-2");
        assert_eq!(s.classes[0].scaling.name, "small");
        assert_eq!(s.config.creation_timeout, Duration::from_secs(1200));

        std::fs::write(&path, "zones: [a]\nclasses:\n  - {kind: K, name: n, cpu: 0, memoryGiB: 1, instanceType: t, imageId: i}\n").unwrap();
        let e = settings(&path, Duration::from_secs(10)).unwrap_err();
        assert!(
            e.to_string()
                .contains("classes[0] (n): cpu and memoryGiB must be positive"),
            "{e}"
        );
        std::fs::write(&path, "zones: [a]\nclases: []\n").unwrap();
        let e = settings(&path, Duration::from_secs(10)).unwrap_err();
        assert!(e.to_string().contains("clases"), "{e}");
    }
}
