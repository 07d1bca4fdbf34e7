//! Reads the EC2 API's XML answers: instances out of `RunInstances` and `DescribeInstances`
//! responses (with the next page's token), and the code and message out of an error body.

use std::collections::BTreeMap;

use nodemgr_core::model::Timestamp;
use nodemgr_core::ports::cloud::{AwsProviderId, TAG_GROUP, TAG_MACHINE, TAG_ZONE};
use nodemgr_core::ports::{CloudInstance, InstanceState};
use serde::Deserialize;

/// An instance as `DescribeInstances` reports it (the fields the adapter and its tests read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ec2Instance {
    /// Instance ID (`i-…`).
    pub instance_id: String,
    /// Instance type.
    pub instance_type: String,
    /// Image.
    pub image_id: String,
    /// Subnet, when in a VPC.
    pub subnet_id: Option<String>,
    /// Availability zone.
    pub zone: String,
    /// State.
    pub state: InstanceState,
    /// Launch time as the API wrote it.
    pub launch_time: Option<String>,
    /// Tags.
    pub tags: BTreeMap<String, String>,
}

impl Ec2Instance {
    /// The provider ID a Node of this instance carries.
    pub fn provider_id(&self) -> String {
        AwsProviderId {
            zone: self.zone.clone(),
            instance_id: self.instance_id.clone(),
        }
        .to_string()
    }

    /// The port's view: group, zone and machine from the tags (the zone from placement when
    /// untagged).
    pub fn to_cloud_instance(&self) -> CloudInstance {
        let tag = |key: &str| self.tags.get(key).cloned().unwrap_or_default();
        CloudInstance {
            provider_id: self.provider_id(),
            instance_id: self.instance_id.clone(),
            group: tag(TAG_GROUP),
            zone: self
                .tags
                .get(TAG_ZONE)
                .cloned()
                .unwrap_or_else(|| self.zone.clone()),
            machine: tag(TAG_MACHINE),
            state: self.state.clone(),
            launched: self
                .launch_time
                .as_deref()
                .and_then(Timestamp::parse_rfc3339),
        }
    }
}

/// One page of instances.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstancePage {
    /// Instances on this page.
    pub instances: Vec<Ec2Instance>,
    /// Token of the next page, `None` on the last.
    pub next_token: Option<String>,
}

/// An API error body's first error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// Code (`RequestLimitExceeded`, `InvalidAMIID.NotFound`, …).
    pub code: String,
    /// Message.
    pub message: String,
}

/// Why a body could not be read.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unreadable EC2 response: {0}")]
pub struct ParseError(#[from] pub quick_xml::DeError);

#[derive(Debug, Deserialize, Default)]
struct Items<T> {
    #[serde(rename = "item", default = "Vec::new")]
    items: Vec<T>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawInstance {
    instance_id: String,
    #[serde(default)]
    instance_type: String,
    #[serde(default)]
    image_id: String,
    #[serde(default)]
    subnet_id: Option<String>,
    #[serde(default)]
    placement: Option<RawPlacement>,
    #[serde(default)]
    instance_state: Option<RawState>,
    #[serde(default)]
    launch_time: Option<String>,
    #[serde(default)]
    tag_set: Option<Items<RawTag>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPlacement {
    #[serde(default)]
    availability_zone: String,
}

#[derive(Debug, Deserialize)]
struct RawState {
    #[serde(default)]
    name: String,
}

#[derive(Debug, Deserialize)]
struct RawTag {
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawReservation {
    #[serde(default)]
    instances_set: Option<Items<RawInstance>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawDescribe {
    #[serde(default)]
    reservation_set: Option<Items<RawReservation>>,
    #[serde(default)]
    next_token: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRun {
    #[serde(default)]
    instances_set: Option<Items<RawInstance>>,
}

#[derive(Debug, Deserialize)]
struct RawErrorBody {
    #[serde(rename = "Errors", default)]
    errors: Option<RawErrors>,
    // Some services answer `<ErrorResponse><Error>…` without the `Errors` wrapper.
    #[serde(rename = "Error", default)]
    error: Option<RawError>,
}

#[derive(Debug, Deserialize)]
struct RawErrors {
    #[serde(rename = "Error", default = "Vec::new")]
    errors: Vec<RawError>,
}

#[derive(Debug, Deserialize)]
struct RawError {
    #[serde(rename = "Code", default)]
    code: String,
    #[serde(rename = "Message", default)]
    message: String,
}

impl From<RawInstance> for Ec2Instance {
    fn from(raw: RawInstance) -> Self {
        Self {
            instance_id: raw.instance_id,
            instance_type: raw.instance_type,
            image_id: raw.image_id,
            subnet_id: raw.subnet_id.filter(|s| !s.is_empty()),
            zone: raw
                .placement
                .map(|p| p.availability_zone)
                .unwrap_or_default(),
            state: InstanceState::parse(&raw.instance_state.map(|s| s.name).unwrap_or_default()),
            launch_time: raw.launch_time,
            tags: raw
                .tag_set
                .map(|t| t.items.into_iter().map(|t| (t.key, t.value)).collect())
                .unwrap_or_default(),
        }
    }
}

fn parse<T: for<'de> Deserialize<'de>>(body: &str) -> Result<T, ParseError> {
    Ok(quick_xml::de::from_str(body)?)
}

/// Instances and the next token of a `DescribeInstancesResponse`.
///
/// # Errors
/// [`ParseError`] when the body is not one.
pub fn describe_instances(body: &str) -> Result<InstancePage, ParseError> {
    let raw: RawDescribe = parse(body)?;
    let instances = raw
        .reservation_set
        .map(|r| r.items)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|r| r.instances_set.map(|i| i.items).unwrap_or_default())
        .map(Ec2Instance::from)
        .collect();
    Ok(InstancePage {
        instances,
        next_token: raw.next_token.filter(|t| !t.is_empty()),
    })
}

/// The instances of a `RunInstancesResponse`.
///
/// # Errors
/// [`ParseError`] when the body is not one.
pub fn run_instances(body: &str) -> Result<Vec<Ec2Instance>, ParseError> {
    let raw: RawRun = parse(body)?;
    Ok(raw
        .instances_set
        .map(|i| i.items)
        .unwrap_or_default()
        .into_iter()
        .map(Ec2Instance::from)
        .collect())
}

/// The first error of an error body (`<Response><Errors><Error>…`), `None` when the body has
/// none.
pub fn api_error(body: &str) -> Option<ApiError> {
    let raw: RawErrorBody = parse(body).ok()?;
    let error = raw
        .errors
        .and_then(|e| e.errors.into_iter().next())
        .or(raw.error)?;
    (!error.code.is_empty()).then_some(ApiError {
        code: error.code,
        message: error.message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DESCRIBE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>8f7724cf</requestId>
  <reservationSet>
    <item>
      <reservationId>r-1</reservationId>
      <groupSet/>
      <instancesSet>
        <item>
          <instanceId>i-1</instanceId>
          <imageId>ami-1</imageId>
          <instanceState><code>16</code><name>running</name></instanceState>
          <instanceType>m5.large</instanceType>
          <launchTime>2026-11-24T08:38:21.000Z</launchTime>
          <placement><groupName/><availabilityZone>eu-west-1a</availabilityZone></placement>
          <subnetId>subnet-a</subnetId>
          <blockDeviceMapping><item><deviceName>/dev/xvda</deviceName></item></blockDeviceMapping>
          <tagSet>
            <item><key>node.deckhouse.io/group</key><value>worker</value></item>
            <item><key>node.deckhouse.io/zone</key><value>eu-west-1a</value></item>
            <item><key>Name</key><value>worker-abc-1</value></item>
          </tagSet>
        </item>
        <item>
          <instanceId>i-2</instanceId>
          <instanceState><code>0</code><name>pending</name></instanceState>
          <placement><availabilityZone>eu-west-1b</availabilityZone></placement>
        </item>
      </instancesSet>
    </item>
  </reservationSet>
  <nextToken>page-2</nextToken>
</DescribeInstancesResponse>"#;

    #[test]
    fn describe_reads_instances_tags_and_the_next_token() {
        let page = describe_instances(DESCRIBE).unwrap();
        assert_eq!(page.next_token.as_deref(), Some("page-2"));
        assert_eq!(page.instances.len(), 2);
        let first = &page.instances[0];
        assert_eq!(first.instance_type, "m5.large");
        assert_eq!(first.subnet_id.as_deref(), Some("subnet-a"));
        let cloud = first.to_cloud_instance();
        assert_eq!(cloud.provider_id, "aws:///eu-west-1a/i-1");
        assert_eq!(cloud.group, "worker");
        assert_eq!(cloud.machine, "worker-abc-1");
        assert_eq!(cloud.state, InstanceState::Running);
        assert_eq!(
            cloud.launched.map(Timestamp::to_rfc3339).as_deref(),
            Some("2026-11-24T08:38:21Z")
        );
        let second = page.instances[1].to_cloud_instance();
        assert_eq!(second.zone, "eu-west-1b");
        assert_eq!(second.state, InstanceState::Pending);
        assert_eq!(second.launched, None);
    }

    proptest::proptest! {
        #[test]
        fn tags_with_any_text_survive_the_xml(
            tags in proptest::collection::btree_map("[^\\x00-\\x1f]{1,12}", "[^\\x00-\\x1f]{0,24}", 0..6),
        ) {
            use quick_xml::escape::escape;
            let items: String = tags
                .iter()
                .map(|(k, v)| format!("<item><key>{}</key><value>{}</value></item>", escape(k.as_str()), escape(v.as_str())))
                .collect();
            let body = format!(
                "<DescribeInstancesResponse><reservationSet><item><instancesSet><item>\
                 <instanceId>i-1</instanceId><placement><availabilityZone>z</availabilityZone></placement>\
                 <tagSet>{items}</tagSet></item></instancesSet></item></reservationSet></DescribeInstancesResponse>"
            );
            let page = describe_instances(&body).unwrap();
            proptest::prop_assert_eq!(&page.instances[0].tags, &tags);
        }
    }

    #[test]
    fn empty_and_last_pages() {
        let page = describe_instances(
            "<DescribeInstancesResponse><requestId>x</requestId><reservationSet/></DescribeInstancesResponse>",
        )
        .unwrap();
        assert_eq!(page, InstancePage::default());
        assert!(describe_instances("not xml <").is_err());
    }

    #[test]
    fn run_reads_the_created_instance() {
        let body = r#"<RunInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <reservationId>r-1</reservationId><groupSet/>
  <instancesSet><item><instanceId>i-9</instanceId><instanceState><code>0</code><name>pending</name></instanceState>
  <placement><availabilityZone>eu-west-1c</availabilityZone></placement></item></instancesSet>
</RunInstancesResponse>"#;
        let instances = run_instances(body).unwrap();
        assert_eq!(instances.len(), 1);
        assert_eq!(instances[0].provider_id(), "aws:///eu-west-1c/i-9");
    }

    #[test]
    fn errors_of_ec2_and_of_other_services() {
        let ec2 = r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>ea966190</RequestID></Response>"#;
        assert_eq!(
            api_error(ec2),
            Some(ApiError {
                code: "RequestLimitExceeded".into(),
                message: "Request limit exceeded.".into()
            })
        );
        let other = "<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message></Error></ErrorResponse>";
        assert_eq!(api_error(other).unwrap().code, "Throttling");
        assert_eq!(api_error("<html>bad gateway</html>"), None);
        assert_eq!(api_error(""), None);
    }
}
