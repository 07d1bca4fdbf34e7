//! Parse a NodeGroup manifest and validate it the way Deckhouse's schema and webhook would,
//! printing every error with its field path.
//!
//! `cargo run -p nodemgr-examples --example nodegroup_validate`

use nodemgr_core::model::parse_documents;
use nodemgr_core::validate::{ValidationContext, validate_document};

const MANIFEST: &str = r#"
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata:
  name: gpu
spec:
  nodeType: CloudEphemeral
  cloudInstances:
    classReference: {kind: AWSInstanceClass, name: p3}
    minPerZone: 4
    maxPerZone: 2
  nodeTemplate:
    taints:
      - {key: dedicated, value: gpu, effect: NoSchedul}
  disruptions:
    approvalMode: Automatic
    automatic:
      windows: [{from: "25:00", to: "04:00"}]
"#;

fn main() -> anyhow::Result<()> {
    let ctx = ValidationContext::default();
    for doc in parse_documents(MANIFEST)? {
        let errors = validate_document(doc.value, &ctx);
        println!("document {}: {} error(s)", doc.index, errors.len());
        for error in errors {
            println!("  {error}");
        }
    }
    Ok(())
}
