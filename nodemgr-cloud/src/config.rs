//! Where the EC2 client connects and with which credentials: from explicit values, from the
//! environment the AWS tools read, or from the cloud provider Secret Deckhouse gives
//! node-manager. Decides nothing else; a missing setting is an error naming what to set.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use nodemgr_core::ports::Cause;

use crate::retry::Backoff;

/// The Secret through which a Deckhouse cloud provider module hands node-manager its cloud
/// connection settings.
pub const CLOUD_PROVIDER_SECRET: &str = "d8-node-manager-cloud-provider";
/// The namespace of [`CLOUD_PROVIDER_SECRET`].
pub const CLOUD_PROVIDER_SECRET_NAMESPACE: &str = "kube-system";

/// Requests in flight at once unless configured otherwise.
pub const DEFAULT_CONCURRENCY: usize = 16;
/// Attempts per API call (the first one included) unless configured otherwise.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

/// An access key.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Access key ID (`AKIA…`).
    pub access_key_id: String,
    /// Secret access key (never printed).
    pub secret_access_key: String,
    /// Session token of temporary credentials.
    pub session_token: Option<String>,
}

impl Credentials {
    /// Long-term credentials.
    pub fn new(access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        Self {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token: None,
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Why a configuration could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A required setting is absent.
    #[error("missing cloud setting: {setting} is not set; {hint}")]
    Missing {
        /// The setting (environment variable or Secret key).
        setting: &'static str,
        /// What to do.
        hint: &'static str,
    },
    /// A setting has a value that cannot be used.
    #[error("invalid cloud setting {setting}: {message}")]
    Invalid {
        /// The setting.
        setting: String,
        /// What is wrong with it.
        message: String,
        /// The parser's or the HTTP client's error, when there is one.
        #[source]
        source: Option<Cause>,
    },
}

/// Everything the EC2 client needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ec2Config {
    /// Base URL of the EC2 API (`https://ec2.<region>.amazonaws.com`, or moto's).
    pub endpoint: String,
    /// Region (signing scope and zone prefix).
    pub region: String,
    /// Access key.
    pub credentials: Credentials,
    /// Attempts per call on throttling, 5xx and connection errors (at least 1).
    pub max_attempts: u32,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Timeout of one HTTP request.
    pub request_timeout: Duration,
    /// Page size of DescribeInstances (`MaxResults`, 5–1000).
    pub page_size: u32,
    /// Device name of the root volume the instance class's disk size applies to.
    pub root_device_name: String,
    /// Whether creation first looks the machine up by its `Name` and group tags (one
    /// `DescribeInstances` per creation). On (the default), one name never has two machines
    /// even where client tokens are not honoured (moto, some EC2-compatible clouds) or a
    /// token has expired; off, idempotency rests on EC2's client token alone and a creation
    /// costs one call instead of two.
    pub lookup_before_create: bool,
    /// Waits between attempts.
    pub backoff: Backoff,
}

impl Ec2Config {
    /// A configuration for AWS's regional endpoint with the defaults.
    pub fn new(region: impl Into<String>, credentials: Credentials) -> Self {
        let region = region.into();
        Self {
            endpoint: format!("https://ec2.{region}.amazonaws.com"),
            region,
            credentials,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            concurrency: DEFAULT_CONCURRENCY,
            request_timeout: Duration::from_secs(30),
            page_size: 1000,
            root_device_name: "/dev/xvda".to_owned(),
            lookup_before_create: true,
            backoff: crate::retry::DEFAULT_BACKOFF,
        }
    }

    /// The same configuration talking to another endpoint (moto, a private cloud).
    #[must_use]
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = endpoint.into();
        self
    }

    /// From the process environment and the shared files, as the AWS CLI reads them: the
    /// variables `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
    /// `AWS_REGION` or `AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL_EC2` or `AWS_ENDPOINT_URL`,
    /// `AWS_MAX_ATTEMPTS`; for what they leave unset, the profile `AWS_PROFILE` (else
    /// `default`) of `~/.aws/credentials` (`AWS_SHARED_CREDENTIALS_FILE`) and `~/.aws/config`
    /// (`AWS_CONFIG_FILE`): `aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`,
    /// `region`, `endpoint_url`, `max_attempts`.
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable or file entry to set or fix.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_sources(
            |name| std::env::var(name).ok(),
            |path| std::fs::read_to_string(path).ok(),
        )
    }

    /// Like [`Ec2Config::from_env`] over variables only (no shared files).
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable to set or fix.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Self::from_sources(lookup, |_| None)
    }

    /// Like [`Ec2Config::from_env`] over any variable lookup and file reader (tests pass maps).
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable or file entry to set or fix.
    pub fn from_sources(
        lookup: impl Fn(&str) -> Option<String>,
        read_file: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let profile = get("AWS_PROFILE");
        let profile_name = profile.clone().unwrap_or_else(|| "default".to_owned());
        let home = get("HOME").unwrap_or_default();
        let credentials_path = get("AWS_SHARED_CREDENTIALS_FILE")
            .unwrap_or_else(|| format!("{home}/.aws/credentials"));
        let config_path = get("AWS_CONFIG_FILE").unwrap_or_else(|| format!("{home}/.aws/config"));
        let credentials_file =
            read_file(&credentials_path).and_then(|text| ini_section(&text, &profile_name));
        let config_section = if profile_name == "default" {
            "default".to_owned()
        } else {
            format!("profile {profile_name}")
        };
        let config_file =
            read_file(&config_path).and_then(|text| ini_section(&text, &config_section));
        if let Some(name) = &profile
            && credentials_file.is_none()
            && config_file.is_none()
        {
            return Err(ConfigError::Invalid {
                setting: "AWS_PROFILE".to_owned(),
                message: format!(
                    "profile {name:?} is in neither {credentials_path} nor {config_path}"
                ),
                source: None,
            });
        }
        let file = |key: &str| {
            credentials_file
                .as_ref()
                .and_then(|s| s.get(key))
                .or_else(|| config_file.as_ref().and_then(|s| s.get(key)))
                .filter(|v| !v.is_empty())
                .cloned()
        };
        let region = get("AWS_REGION")
            .or_else(|| get("AWS_DEFAULT_REGION"))
            .or_else(|| file("region"))
            .ok_or(ConfigError::Missing {
                setting: "AWS_REGION",
                hint: "set AWS_REGION (or AWS_DEFAULT_REGION, or region in ~/.aws/config) to the region of the cluster, e.g. eu-central-1",
            })?;
        let credentials = match get("AWS_ACCESS_KEY_ID") {
            Some(access_key_id) => Credentials {
                access_key_id,
                secret_access_key: get("AWS_SECRET_ACCESS_KEY").ok_or(ConfigError::Missing {
                    setting: "AWS_SECRET_ACCESS_KEY",
                    hint: "set AWS_SECRET_ACCESS_KEY to the secret of AWS_ACCESS_KEY_ID",
                })?,
                session_token: get("AWS_SESSION_TOKEN"),
            },
            None => Credentials {
                access_key_id: file("aws_access_key_id").ok_or(ConfigError::Missing {
                    setting: "AWS_ACCESS_KEY_ID",
                    hint: "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or aws_access_key_id and aws_secret_access_key in the AWS_PROFILE section of ~/.aws/credentials) to an access key allowed to run, describe and terminate instances",
                })?,
                secret_access_key: file("aws_secret_access_key").ok_or(ConfigError::Missing {
                    setting: "aws_secret_access_key",
                    hint: "the profile in ~/.aws/credentials has aws_access_key_id but no aws_secret_access_key",
                })?,
                session_token: file("aws_session_token"),
            },
        };
        let mut config = Self::new(region, credentials);
        if let Some(endpoint) = get("AWS_ENDPOINT_URL_EC2")
            .or_else(|| get("AWS_ENDPOINT_URL"))
            .or_else(|| file("endpoint_url"))
        {
            config.endpoint = endpoint;
        }
        if let Some(attempts) = get("AWS_MAX_ATTEMPTS") {
            config.max_attempts = parse_positive("AWS_MAX_ATTEMPTS", &attempts)?;
        } else if let Some(attempts) = file("max_attempts") {
            config.max_attempts = parse_positive("max_attempts", &attempts)?;
        }
        config.validate()?;
        Ok(config)
    }

    /// From the data of the cloud provider Secret ([`CLOUD_PROVIDER_SECRET`] in
    /// [`CLOUD_PROVIDER_SECRET_NAMESPACE`]), values already base64-decoded as the API client
    /// returns them. Keys read: `region`; the access key as `providerAccessKeyId` and
    /// `providerSecretAccessKey` (the AWS provider's setting names; `accessKeyId` and
    /// `secretAccessKey` also accepted), `sessionToken`, `endpoint` — either as keys of their
    /// own or inside the provider's subtree, the JSON object under the key named by `type` in
    /// lower case (`aws`). Like node-manager, a value may be raw text or a JSON string.
    ///
    /// # Errors
    /// [`ConfigError`] naming the Secret key to set or fix.
    pub fn from_secret(data: &BTreeMap<String, Vec<u8>>) -> Result<Self, ConfigError> {
        let provider = data
            .get("type")
            .map(|raw| secret_text(raw).to_lowercase())
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| "aws".to_owned());
        let nested: BTreeMap<String, serde_json::Value> = match data.get(&provider) {
            Some(bytes) => serde_json::from_slice(bytes).map_err(|e| ConfigError::Invalid {
                setting: format!("{CLOUD_PROVIDER_SECRET} key {provider}"),
                message: format!("not a JSON object: {e}"),
                source: Some(Cause::new(e)),
            })?,
            None => BTreeMap::new(),
        };
        let get = |keys: &[&str]| -> Result<Option<String>, ConfigError> {
            for key in keys {
                if let Some(bytes) = data.get(*key) {
                    if std::str::from_utf8(bytes).is_err() {
                        return Err(ConfigError::Invalid {
                            setting: format!("{CLOUD_PROVIDER_SECRET} key {key}"),
                            message: "not UTF-8".to_owned(),
                            source: None,
                        });
                    }
                    let text = secret_text(bytes);
                    if !text.is_empty() {
                        return Ok(Some(text));
                    }
                }
                if let Some(serde_json::Value::String(text)) = nested.get(*key)
                    && !text.trim().is_empty()
                {
                    return Ok(Some(text.trim().to_owned()));
                }
            }
            Ok(None)
        };
        let region = get(&["region"])?.ok_or(ConfigError::Missing {
            setting: "region",
            hint: "the cloud provider Secret kube-system/d8-node-manager-cloud-provider must carry the key region",
        })?;
        let access_key_id = get(&["providerAccessKeyId", "accessKeyId"])?.ok_or(ConfigError::Missing {
            setting: "providerAccessKeyId",
            hint: "the cloud provider Secret kube-system/d8-node-manager-cloud-provider must carry providerAccessKeyId (check the cloud provider module's settings)",
        })?;
        let secret_access_key =
            get(&["providerSecretAccessKey", "secretAccessKey"])?.ok_or(ConfigError::Missing {
                setting: "providerSecretAccessKey",
                hint: "the cloud provider Secret kube-system/d8-node-manager-cloud-provider must carry providerSecretAccessKey",
            })?;
        let mut config = Self::new(
            region,
            Credentials {
                access_key_id,
                secret_access_key,
                session_token: get(&["sessionToken"])?,
            },
        );
        if let Some(endpoint) = get(&["endpoint"])? {
            config.endpoint = endpoint;
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks the settings a request needs.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for an endpoint that is not an http(s) URL with a host, an empty
    /// region, zero attempts, zero concurrency or a page size outside 5–1000.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |setting: &str, message: String| ConfigError::Invalid {
            setting: setting.to_owned(),
            message,
            source: None,
        };
        let url = reqwest::Url::parse(&self.endpoint).map_err(|e| ConfigError::Invalid {
            setting: "endpoint".to_owned(),
            message: format!("{:?} is not a URL: {e}", self.endpoint),
            source: Some(Cause::new(e)),
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(invalid(
                "endpoint",
                format!("{:?} must be http(s)://host[:port]", self.endpoint),
            ));
        }
        if self.region.trim().is_empty() {
            return Err(invalid("region", "empty".to_owned()));
        }
        if self.max_attempts == 0 {
            return Err(invalid("max_attempts", "must be at least 1".to_owned()));
        }
        if self.concurrency == 0 {
            return Err(invalid("concurrency", "must be at least 1".to_owned()));
        }
        if !(5..=1000).contains(&self.page_size) {
            return Err(invalid(
                "page_size",
                format!("{} is outside 5–1000 (EC2's MaxResults)", self.page_size),
            ));
        }
        Ok(())
    }
}

/// A Secret value as text: a JSON string's content, else the bytes as UTF-8, trimmed.
fn secret_text(raw: &[u8]) -> String {
    match serde_json::from_slice::<String>(raw) {
        Ok(text) => text.trim().to_owned(),
        Err(_) => String::from_utf8_lossy(raw).trim().to_owned(),
    }
}

/// The top-level `key = value` pairs of section `[name]` of an INI file as the AWS tools write
/// them (`#`/`;` comments; indented lines belong to a nested block and are skipped). `None`
/// when the section is absent.
fn ini_section(text: &str, name: &str) -> Option<BTreeMap<String, String>> {
    let mut found = None;
    let mut current: Option<&mut BTreeMap<String, String>> = None;
    for line in text.lines() {
        if line.starts_with([' ', '\t']) {
            continue;
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = None;
            if section.trim() == name {
                current = Some(found.get_or_insert_with(BTreeMap::new));
            }
            continue;
        }
        if let (Some(map), Some((key, value))) = (current.as_deref_mut(), line.split_once('=')) {
            map.insert(key.trim().to_owned(), value.trim().to_owned());
        }
    }
    found
}

fn parse_positive(setting: &str, text: &str) -> Result<u32, ConfigError> {
    match text.trim().parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(ConfigError::Invalid {
            setting: setting.to_owned(),
            message: format!("{text:?} is not a positive whole number"),
            source: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.get(name).cloned()
    }

    #[test]
    fn environment_like_the_aws_cli() {
        let config = Ec2Config::from_lookup(lookup(&[
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "AKIA1"),
            ("AWS_SECRET_ACCESS_KEY", "s3cr3t"),
            ("AWS_SESSION_TOKEN", "tok"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:5000"),
            ("AWS_MAX_ATTEMPTS", "3"),
        ]))
        .unwrap();
        assert_eq!(config.region, "eu-west-1");
        assert_eq!(config.endpoint, "http://127.0.0.1:5000");
        assert_eq!(config.credentials.session_token.as_deref(), Some("tok"));
        assert_eq!(config.max_attempts, 3);
        assert!(!format!("{config:?}").contains("s3cr3t"));

        let config = Ec2Config::from_lookup(lookup(&[
            ("AWS_REGION", "us-east-2"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "AKIA1"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("AWS_ENDPOINT_URL", "http://generic:1"),
            ("AWS_ENDPOINT_URL_EC2", "http://ec2-only:2"),
        ]))
        .unwrap();
        assert_eq!(config.region, "us-east-2");
        assert_eq!(config.endpoint, "http://ec2-only:2");
        assert_eq!(config.max_attempts, DEFAULT_MAX_ATTEMPTS);
        assert_eq!(
            Ec2Config::new("us-east-2", Credentials::new("a", "b")).endpoint,
            "https://ec2.us-east-2.amazonaws.com"
        );
    }

    #[test]
    fn missing_or_bad_environment_names_the_variable() {
        let err = Ec2Config::from_lookup(lookup(&[("AWS_ACCESS_KEY_ID", "a")])).unwrap_err();
        assert!(err.to_string().contains("AWS_REGION"), "{err}");
        let err =
            Ec2Config::from_lookup(lookup(&[("AWS_REGION", "r"), ("AWS_ACCESS_KEY_ID", "a")]))
                .unwrap_err();
        assert!(err.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{err}");
        let err = Ec2Config::from_lookup(lookup(&[
            ("AWS_REGION", "r"),
            ("AWS_ACCESS_KEY_ID", "a"),
            ("AWS_SECRET_ACCESS_KEY", "b"),
            ("AWS_MAX_ATTEMPTS", "zero"),
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("AWS_MAX_ATTEMPTS"), "{err}");
        let err = Ec2Config::from_lookup(lookup(&[
            ("AWS_REGION", "r"),
            ("AWS_ACCESS_KEY_ID", "a"),
            ("AWS_SECRET_ACCESS_KEY", "b"),
            ("AWS_ENDPOINT_URL", "ftp://x"),
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("endpoint"), "{err}");
    }

    #[test]
    fn shared_files_fill_what_the_environment_leaves() {
        let files: BTreeMap<&str, &str> = [
            (
                "/home/op/.aws/credentials",
                "[default]\naws_access_key_id = AKIADEF\naws_secret_access_key = def\n\n# ops\n[ops]\naws_access_key_id=AKIAOPS\naws_secret_access_key=ops\naws_session_token=tok\n",
            ),
            (
                "/home/op/.aws/config",
                "[default]\nregion = eu-west-1\n[profile ops]\nregion = us-east-2\nmax_attempts = 7\ns3 =\n  endpoint_url = http://s3-only:1\nendpoint_url = http://ec2.ops:9000\n",
            ),
        ]
        .into();
        let read = |path: &str| files.get(path).map(|s| (*s).to_owned());

        let config = Ec2Config::from_sources(lookup(&[("HOME", "/home/op")]), read).unwrap();
        assert_eq!(config.credentials, Credentials::new("AKIADEF", "def"));
        assert_eq!(config.region, "eu-west-1");
        assert_eq!(config.endpoint, "https://ec2.eu-west-1.amazonaws.com");

        let config = Ec2Config::from_sources(
            lookup(&[("HOME", "/home/op"), ("AWS_PROFILE", "ops")]),
            read,
        )
        .unwrap();
        assert_eq!(config.credentials.access_key_id, "AKIAOPS");
        assert_eq!(config.credentials.session_token.as_deref(), Some("tok"));
        assert_eq!(config.region, "us-east-2");
        assert_eq!(config.max_attempts, 7);
        assert_eq!(config.endpoint, "http://ec2.ops:9000");

        // The environment wins over the files.
        let config = Ec2Config::from_sources(
            lookup(&[
                ("HOME", "/home/op"),
                ("AWS_REGION", "ap-south-1"),
                ("AWS_ACCESS_KEY_ID", "AKIAENV"),
                ("AWS_SECRET_ACCESS_KEY", "env"),
            ]),
            read,
        )
        .unwrap();
        assert_eq!(config.credentials, Credentials::new("AKIAENV", "env"));
        assert_eq!(config.region, "ap-south-1");

        let err = Ec2Config::from_sources(
            lookup(&[("HOME", "/home/op"), ("AWS_PROFILE", "nope")]),
            read,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("AWS_PROFILE") && err.to_string().contains("nope"),
            "{err}"
        );
        let err = Ec2Config::from_sources(lookup(&[("HOME", "/nowhere")]), read).unwrap_err();
        assert!(err.to_string().contains("AWS_REGION"), "{err}");
    }

    #[test]
    fn unparsable_settings_keep_the_parser_error_as_the_source() {
        let data: BTreeMap<String, Vec<u8>> = [
            ("type".to_owned(), b"aws".to_vec()),
            ("aws".to_owned(), b"{not json".to_vec()),
        ]
        .into_iter()
        .collect();
        let err = Ec2Config::from_secret(&data).unwrap_err();
        assert!(err.to_string().contains("not a JSON object"), "{err}");
        let json = std::error::Error::source(&err)
            .and_then(|e| e.downcast_ref::<Cause>())
            .and_then(|c| c.get().downcast_ref::<serde_json::Error>());
        assert!(json.is_some(), "{err:?}");

        let mut config = Ec2Config::new("r", Credentials::new("a", "b"));
        config.endpoint = "not a url".into();
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("is not a URL"), "{err}");
        assert!(std::error::Error::source(&err).is_some(), "{err:?}");
    }

    #[test]
    fn secret_flat_or_nested() {
        let data = |pairs: &[(&str, &str)]| -> BTreeMap<String, Vec<u8>> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
                .collect()
        };
        let config = Ec2Config::from_secret(&data(&[
            ("type", "aws"),
            ("region", "eu-central-1"),
            ("providerAccessKeyId", "AKIA2"),
            ("providerSecretAccessKey", "sec\n"),
        ]))
        .unwrap();
        assert_eq!(config.region, "eu-central-1");
        assert_eq!(config.credentials, Credentials::new("AKIA2", "sec"));
        assert_eq!(config.endpoint, "https://ec2.eu-central-1.amazonaws.com");

        let config = Ec2Config::from_secret(&data(&[
            ("type", "\"AWS\""),
            ("region", "\"eu-central-1\""),
            (
                "aws",
                r#"{"providerAccessKeyId":"AKIA3","providerSecretAccessKey":"x","endpoint":"http://moto:5000"}"#,
            ),
        ]))
        .unwrap();
        assert_eq!(config.credentials.access_key_id, "AKIA3");
        assert_eq!(config.region, "eu-central-1", "a JSON string is unquoted");
        assert_eq!(config.endpoint, "http://moto:5000");

        let err = Ec2Config::from_secret(&data(&[("region", "r"), ("providerAccessKeyId", "a")]))
            .unwrap_err();
        assert!(err.to_string().contains("providerSecretAccessKey"), "{err}");
        let err = Ec2Config::from_secret(&data(&[("region", "r"), ("aws", "{")])).unwrap_err();
        assert!(err.to_string().contains("key aws"), "{err}");
    }
}
