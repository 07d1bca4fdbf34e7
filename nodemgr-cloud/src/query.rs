//! The EC2 Query API requests (version 2016-11-15) the adapter sends, as form parameters:
//! which parameters a machine creation, a termination and a group listing become. Pure.

use base64::Engine as _;
use nodemgr_core::ports::cloud::{TAG_GROUP, TAG_MACHINE, TAG_ZONE};
use nodemgr_core::ports::{CloudError, CreateInstance};

/// The Query API version.
pub const API_VERSION: &str = "2016-11-15";

/// The instance states a listing asks for: every state but `terminated`.
pub const LIVE_STATES: [&str; 5] = ["pending", "running", "stopping", "stopped", "shutting-down"];

/// An EC2 action the adapter calls (one API call counter each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// `RunInstances`.
    RunInstances,
    /// `TerminateInstances`.
    TerminateInstances,
    /// `DescribeInstances`.
    DescribeInstances,
}

impl Action {
    /// Every action.
    pub const ALL: [Action; 3] = [
        Action::RunInstances,
        Action::TerminateInstances,
        Action::DescribeInstances,
    ];

    /// The API's name.
    pub fn name(self) -> &'static str {
        match self {
            Action::RunInstances => "RunInstances",
            Action::TerminateInstances => "TerminateInstances",
            Action::DescribeInstances => "DescribeInstances",
        }
    }
}

/// One request: an action and its parameters (without `Action` and `Version`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The action.
    pub action: Action,
    /// Parameters in order.
    pub params: Vec<(String, String)>,
}

impl Query {
    fn new(action: Action) -> Self {
        Self {
            action,
            params: Vec::new(),
        }
    }

    fn push(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.params.push((key.into(), value.into()));
    }

    /// The form body: `Action`, `Version`, then the parameters, URL-encoded.
    pub fn body(&self) -> String {
        let mut form = reqwest::Url::parse("http://form.invalid/").map_or_else(
            |_| String::new(),
            |mut url| {
                url.query_pairs_mut()
                    .append_pair("Action", self.action.name())
                    .append_pair("Version", API_VERSION)
                    .extend_pairs(self.params.iter());
                url.query().unwrap_or_default().to_owned()
            },
        );
        // SigV4 and EC2 expect %20 for spaces, not the form encoding's '+'.
        form = form.replace('+', "%20");
        form
    }

    /// The value of a parameter (tests).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// `RunInstances` for one machine: MinCount = MaxCount = 1, the client token, the zone, the
/// subnet of that zone when the class names one (else the zone's default subnet), security
/// groups, the root disk, the bootstrap script as user data, and the tags naming group, zone
/// and machine followed by the class's tags (which cannot override those three).
pub fn run_instances(request: &CreateInstance, root_device_name: &str) -> Query {
    let class = &request.class;
    let mut q = Query::new(Action::RunInstances);
    q.push("ImageId", &class.image_id);
    q.push("InstanceType", &class.instance_type);
    q.push("MinCount", "1");
    q.push("MaxCount", "1");
    q.push("ClientToken", &request.client_token);
    q.push("Placement.AvailabilityZone", &request.zone);
    if let Some(subnet) = class.subnets.get(&request.zone) {
        q.push("SubnetId", subnet);
    }
    for (i, group) in class.security_groups.iter().enumerate() {
        q.push(format!("SecurityGroupId.{}", i + 1), group);
    }
    if let Some(gib) = class.root_disk_gib {
        q.push("BlockDeviceMapping.1.DeviceName", root_device_name);
        q.push("BlockDeviceMapping.1.Ebs.VolumeSize", gib.to_string());
        q.push("BlockDeviceMapping.1.Ebs.DeleteOnTermination", "true");
    }
    if !request.user_data.is_empty() {
        q.push(
            "UserData",
            base64::engine::general_purpose::STANDARD.encode(request.user_data.as_bytes()),
        );
    }
    let own = [
        (TAG_GROUP, request.group.as_str()),
        (TAG_ZONE, request.zone.as_str()),
        (TAG_MACHINE, request.machine.as_str()),
    ];
    let extra = class
        .tags
        .iter()
        .filter(|(k, _)| !own.iter().any(|(own, _)| own == k))
        .map(|(k, v)| (k.as_str(), v.as_str()));
    q.push("TagSpecification.1.ResourceType", "instance");
    for (i, (key, value)) in own.into_iter().chain(extra).enumerate() {
        q.push(format!("TagSpecification.1.Tag.{}.Key", i + 1), key);
        q.push(format!("TagSpecification.1.Tag.{}.Value", i + 1), value);
    }
    q
}

/// EC2's limit on user data, before base64.
pub const MAX_USER_DATA_BYTES: usize = 16 * 1024;

/// Checks what EC2 would refuse in a creation, before any call: an empty image, instance type
/// or zone, and user data over [`MAX_USER_DATA_BYTES`].
///
/// # Errors
/// [`CloudError::InvalidRequest`] with code `InvalidParameterValue` naming the field.
pub fn check_run_instances(request: &CreateInstance) -> Result<(), CloudError> {
    let invalid = |message: String| {
        Err(CloudError::invalid_request(
            "InvalidParameterValue",
            message,
        ))
    };
    for (field, value) in [
        ("instance class image", &request.class.image_id),
        ("instance class instance type", &request.class.instance_type),
        ("zone", &request.zone),
    ] {
        if value.trim().is_empty() {
            return invalid(format!("machine {}: the {field} is empty", request.machine));
        }
    }
    if request.user_data.len() > MAX_USER_DATA_BYTES {
        return invalid(format!(
            "machine {}: the bootstrap script is {} bytes, EC2 takes at most {MAX_USER_DATA_BYTES} bytes of user data; bootstrap with a smaller script that fetches the rest",
            request.machine,
            request.user_data.len()
        ));
    }
    Ok(())
}

/// `TerminateInstances` of one instance.
pub fn terminate_instances(instance_id: &str) -> Query {
    let mut q = Query::new(Action::TerminateInstances);
    q.push("InstanceId.1", instance_id);
    q
}

/// A `DescribeInstances` filter: a name and the values any of which matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// Filter name (`tag:Name`, `instance-state-name`, …).
    pub name: String,
    /// Values.
    pub values: Vec<String>,
}

impl Filter {
    /// A filter.
    pub fn new(
        name: impl Into<String>,
        values: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            name: name.into(),
            values: values.into_iter().map(Into::into).collect(),
        }
    }

    /// Machines carrying tag `key` = `value`.
    pub fn tag(key: &str, value: &str) -> Self {
        Self::new(format!("tag:{key}"), [value])
    }

    /// Machines that are not terminated.
    pub fn live() -> Self {
        Self::new("instance-state-name", LIVE_STATES)
    }
}

/// One page of `DescribeInstances` by filters.
pub fn describe_instances(filters: &[Filter], page_size: u32, next_token: Option<&str>) -> Query {
    let mut q = Query::new(Action::DescribeInstances);
    for (i, filter) in filters.iter().enumerate() {
        q.push(format!("Filter.{}.Name", i + 1), &filter.name);
        for (j, value) in filter.values.iter().enumerate() {
            q.push(format!("Filter.{}.Value.{}", i + 1, j + 1), value);
        }
    }
    q.push("MaxResults", page_size.to_string());
    if let Some(token) = next_token {
        q.push("NextToken", token);
    }
    q
}

/// `DescribeInstances` of one instance by ID (no paging: EC2 refuses MaxResults with IDs).
pub fn describe_instance(instance_id: &str) -> Query {
    let mut q = Query::new(Action::DescribeInstances);
    q.push("InstanceId.1", instance_id);
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemgr_core::ports::InstanceClass;
    use nodemgr_core::ports::cloud::client_token;

    fn request() -> CreateInstance {
        let class = InstanceClass {
            instance_type: "m5.large".into(),
            image_id: "ami-1".into(),
            subnets: [("eu-west-1a".to_owned(), "subnet-a".to_owned())].into(),
            security_groups: vec!["sg-1".into(), "sg-2".into()],
            root_disk_gib: Some(50),
            tags: [
                ("team".to_owned(), "infra".to_owned()),
                ("Name".to_owned(), "spoof".to_owned()),
            ]
            .into(),
        };
        CreateInstance {
            group: "worker".into(),
            zone: "eu-west-1a".into(),
            machine: "worker-abc12-x7k2p".into(),
            class,
            user_data: "#!/bin/sh\necho hi\n".into(),
            client_token: client_token("worker-abc12-x7k2p"),
        }
    }

    #[test]
    fn run_instances_carries_the_whole_class() {
        let q = run_instances(&request(), "/dev/xvda");
        assert_eq!(q.get("MinCount"), Some("1"));
        assert_eq!(q.get("MaxCount"), Some("1"));
        assert_eq!(
            q.get("ClientToken"),
            Some(client_token("worker-abc12-x7k2p").as_str())
        );
        assert_eq!(q.get("Placement.AvailabilityZone"), Some("eu-west-1a"));
        assert_eq!(q.get("SubnetId"), Some("subnet-a"));
        assert_eq!(q.get("SecurityGroupId.2"), Some("sg-2"));
        assert_eq!(q.get("BlockDeviceMapping.1.Ebs.VolumeSize"), Some("50"));
        assert_eq!(q.get("UserData"), Some("IyEvYmluL3NoCmVjaG8gaGkK"));
        let tags: Vec<(&str, &str)> = (1..=4)
            .map(|i| {
                (
                    q.get(&format!("TagSpecification.1.Tag.{i}.Key")).unwrap(),
                    q.get(&format!("TagSpecification.1.Tag.{i}.Value")).unwrap(),
                )
            })
            .collect();
        assert_eq!(
            tags,
            [
                (TAG_GROUP, "worker"),
                (TAG_ZONE, "eu-west-1a"),
                (TAG_MACHINE, "worker-abc12-x7k2p"),
                ("team", "infra"),
            ]
        );
        assert_eq!(q.get("TagSpecification.1.Tag.5.Key"), None);
    }

    #[test]
    fn what_ec2_would_refuse_is_refused_before_any_call() {
        assert_eq!(check_run_instances(&request()), Ok(()));
        let mut big = request();
        big.user_data = "x".repeat(MAX_USER_DATA_BYTES + 1);
        let err = check_run_instances(&big).unwrap_err();
        assert!(err.to_string().contains("16385 bytes"), "{err}");
        big.user_data.pop();
        assert_eq!(check_run_instances(&big), Ok(()));
        let mut no_image = request();
        no_image.class.image_id.clear();
        assert!(
            check_run_instances(&no_image)
                .unwrap_err()
                .to_string()
                .contains("image")
        );
    }

    #[test]
    fn zone_without_subnet_or_disk_leaves_them_to_the_provider() {
        let mut req = request();
        req.zone = "eu-west-1b".into();
        req.class.root_disk_gib = None;
        req.user_data.clear();
        let q = run_instances(&req, "/dev/xvda");
        assert_eq!(q.get("SubnetId"), None);
        assert_eq!(q.get("BlockDeviceMapping.1.DeviceName"), None);
        assert_eq!(q.get("UserData"), None);
    }

    #[test]
    fn listing_filters_and_pages() {
        let q = describe_instances(
            &[Filter::tag(TAG_GROUP, "worker"), Filter::live()],
            5,
            Some("t1"),
        );
        assert_eq!(q.get("Filter.1.Name"), Some("tag:node.deckhouse.io/group"));
        assert_eq!(q.get("Filter.1.Value.1"), Some("worker"));
        assert_eq!(q.get("Filter.2.Name"), Some("instance-state-name"));
        assert_eq!(q.get("Filter.2.Value.5"), Some("shutting-down"));
        assert!(q.params.iter().all(|(_, v)| v != "terminated"));
        assert_eq!(q.get("MaxResults"), Some("5"));
        assert_eq!(q.get("NextToken"), Some("t1"));
        let body = q.body();
        assert!(body.starts_with("Action=DescribeInstances&Version=2016-11-15&Filter.1.Name=tag%3Anode.deckhouse.io%2Fgroup"), "{body}");
    }

    fn decode(body: &str) -> Vec<(String, String)> {
        reqwest::Url::parse(&format!("http://x.invalid/?{body}"))
            .unwrap()
            .query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    }

    proptest::proptest! {
        #[test]
        fn bodies_decode_to_exactly_the_parameters(
            params in proptest::collection::vec((".{0,12}", ".{0,24}"), 0..8)
        ) {
            let q = Query { action: Action::RunInstances, params: params.clone() };
            let mut expected = vec![
                ("Action".to_owned(), "RunInstances".to_owned()),
                ("Version".to_owned(), API_VERSION.to_owned()),
            ];
            expected.extend(params);
            proptest::prop_assert_eq!(decode(&q.body()), expected);
        }

        #[test]
        fn machines_always_carry_their_own_tags_first_and_every_class_tag_once(
            tags in proptest::collection::btree_map(
                proptest::prop_oneof![
                    proptest::strategy::Just(TAG_GROUP.to_owned()),
                    proptest::strategy::Just(TAG_MACHINE.to_owned()),
                    "[a-zA-Z0-9:/._-]{1,16}",
                ],
                ".{0,16}",
                0..6,
            ),
        ) {
            let mut req = request();
            req.class.tags = tags.clone();
            let q = run_instances(&req, "/dev/xvda");
            let mut seen = Vec::new();
            for i in 1.. {
                let Some(key) = q.get(&format!("TagSpecification.1.Tag.{i}.Key")) else { break };
                let value = q.get(&format!("TagSpecification.1.Tag.{i}.Value")).unwrap();
                seen.push((key.to_owned(), value.to_owned()));
            }
            proptest::prop_assert_eq!(&seen[0], &(TAG_GROUP.to_owned(), "worker".to_owned()));
            proptest::prop_assert_eq!(&seen[1], &(TAG_ZONE.to_owned(), "eu-west-1a".to_owned()));
            proptest::prop_assert_eq!(&seen[2], &(TAG_MACHINE.to_owned(), "worker-abc12-x7k2p".to_owned()));
            let keys: std::collections::BTreeSet<&String> = seen.iter().map(|(k, _)| k).collect();
            proptest::prop_assert_eq!(keys.len(), seen.len(), "a key twice: {:?}", seen);
            for (key, value) in &tags {
                if ![TAG_GROUP, TAG_ZONE, TAG_MACHINE].contains(&key.as_str()) {
                    proptest::prop_assert!(seen.contains(&(key.clone(), value.clone())), "{} missing", key);
                }
            }
        }
    }

    #[test]
    fn bodies_encode_spaces_as_percent_20() {
        let mut q = Query::new(Action::TerminateInstances);
        q.push("X", "a b+c");
        assert!(q.body().ends_with("&X=a%20b%2Bc"), "{}", q.body());
    }
}
