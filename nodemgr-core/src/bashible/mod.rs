//! Bashible: the scripts that turn a machine into a node of a NodeGroup and back (docs/deckhouse.md §4,
//! §2 "Cleanup over SSH"), and the group's configuration checksum that the
//! update flow compares (docs/deckhouse.md §3.1, [`crate::update`]).
//!
//! # What is rendered
//! [`Renderer::bundle`] turns a NodeGroup and the [`ClusterContext`] into a [`Bundle`]: an
//! ordered list of named, idempotent step scripts (Deckhouse's `nodegroupbundles`) and their
//! checksum. The steps are:
//!
//! | step | does |
//! |---|---|
//! | `000_node_users.sh` | the group's NodeUsers: creates, updates and removes them ([`customisations`]) |
//! | `001_ca.sh` | cluster CA (`/etc/kubernetes/pki/ca.crt`, `/var/lib/bashible/ca.crt`) and the API endpoints |
//! | `010_os_settings.sh` | kernel modules, sysctls (`vm.swappiness`; `kernel.panic = 0` in a fenced group, 10 elsewhere), swap off (`NoSwap`) or a swap file (`LimitedSwap`) |
//! | `015_fencing_watchdog.sh` | fenced groups only: `softdog` with `soft_margin` = `fencing.watchdog.timeout`, `soft_panic=1` |
//! | `020_containerd.sh` | `/etc/containerd/config.toml` for `Containerd` (format 2) or `ContainerdV2` (format 3): `maxConcurrentDownloads`, systemd cgroups, pause image; absent for `NotManaged` |
//! | `030_kubelet.sh` | kubelet configuration (`maxPods`, `containerLogMaxSize`/`Files`, `seccompDefault`, swap, topology manager, `resourceReservation` Static or Auto), unit file with `rootDir`, node IP from `static.internalNetworkCIDRs` |
//! | `090_cleanup_script.sh` | installs [`keys::CLEANUP_SCRIPT_PATH`] |
//! | `<weight>_<name>` | each NodeGroupConfiguration targeting the group, placed by weight among the above ([`customisations`]) |
//!
//! [`Renderer::bundle_with`] renders with the cluster's NodeGroupConfigurations and NodeUsers
//! ([`Customisations`]); [`Renderer::bundle`] with none. `docs/bundles.md` describes the steps
//! and both kinds for operators.
//!
//! [`Renderer::bootstrap_script`] wraps a bundle into the full bootstrap script (the content of
//! the `manual-bootstrap-for-<group>` Secret): it writes the bootstrap token and the group's
//! registration labels and taints, writes and runs the steps, writes the bootstrap kubeconfig,
//! starts the kubelet, waits for the Node and annotates it with the checksum
//! ([`keys::ANNOTATION_CONFIGURATION_CHECKSUM`]). [`Renderer::cleanup_script`] renders the
//! cleanup script on its own. [`Renderer::render`] does all three at once
//! ([`RenderedBundle`], what an SSH executor runs).
//!
//! # The test root
//! Every path a script touches is `"$BB_ROOT<path>"`. On a node `BB_ROOT` is empty; tests set
//! it to a temporary directory ([`RenderRoot`]), and then every command that would change the
//! live system (`systemctl`, `sysctl`, `modprobe`, `swapoff`, `kubectl annotate`, …) is
//! recorded, shell-quoted, in `$BB_ROOT/.nodemgr-host-commands.log` instead of being run. The
//! steps themselves do not embed the root: they refuse to run unless `BB_ROOT` is set, and the
//! bootstrap script sets it; so the steps, and the checksum, are the same for every root.
//!
//! # Quoting
//! Templates are [`minijinja`] files under `templates/`, compiled into the binary. Every value
//! a template prints is escaped for the file it lands in ([`escape`]): single-quoted in
//! scripts, JSON-encoded in the kubelet configuration and kubeconfig, TOML-encoded in the
//! containerd configuration. Values that land where no quoting exists (kubelet flags and systemd
//! unit lines: `rootDir`, labels, taints, the CRI socket) are checked against a strict syntax
//! instead ([`config`]), and a NUL byte is refused everywhere.
//!
//! # The checksum
//! [`configuration_checksum`] is the SHA-256 over a length-prefixed encoding of the steps'
//! names and contents, in hex: it changes exactly when a step's bytes change. Steps are
//! rendered from [`NodeConfig`], in which every default is filled in and maps are sorted, so
//! the checksum does not depend on field order or on writing a default out. It covers what a
//! node runs and nothing else: not the bootstrap token, not the registration labels and taints
//! (`nodeTemplate` is kept on Node objects live, [`crate::impact`] says its change touches no
//! node), not the root. [`desired_checksums`] gives the checksums of many groups in the shape
//! [`crate::update::plan_updates`] takes, so the value the node writes after bootstrap is the
//! value the update planner compares.
//!
//! # Not rendered (yet)
//! Package installation (kubelet, kubectl and containerd must be installed; the scripts check
//! and say so), a local API proxy in front of several masters (the kubelet uses the first
//! endpoint that answers), GPU settings (`spec.gpu`), the memory manager of the topology
//! manager. The node agent that keeps re-applying bundles is installed by
//! [`Renderer::bootstrap_script_with_agent`] ([`agent_install`]), not by the plain bootstrap
//! script.

pub mod agent_install;
pub mod config;
pub mod customisations;
pub mod escape;
pub mod node_user_report;

use std::collections::BTreeMap;

use minijinja::Environment;
use minijinja::syntax::SyntaxConfig;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::model::{NodeGroup, keys};
use crate::ports::Cause;

pub use agent_install::AgentInstall;
pub use config::{
    ClusterContext, FencingSettings, NodeConfig, Registration, node_config, registration,
};
pub use customisations::{Customisations, Skipped, configuration_counts};

/// Why a group's scripts could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// A NodeGroup field holds a value the scripts cannot carry.
    #[error("{field}: {message}")]
    Field {
        /// Dotted path of the field (`spec.kubelet.rootDir`).
        field: String,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// The cluster context lacks something or holds a bad value.
    #[error("cluster context {field}: {message}")]
    Cluster {
        /// The cluster context field (`apiEndpoints`).
        field: String,
        /// What is wrong and what to do.
        message: String,
        /// The parser's error, when the context does not parse.
        #[source]
        source: Option<Cause>,
    },
    /// The bootstrap token is not of the form Kubernetes accepts.
    #[error("bootstrap token: {0}")]
    Token(String),
    /// The render root is not usable.
    #[error("render root: {0}")]
    Root(String),
    /// A template failed: a bug in nodemgr's templates, not in the input.
    #[error("failed to render template {template}: {message}")]
    Template {
        /// The template.
        template: String,
        /// minijinja's message.
        message: String,
        /// minijinja's error.
        #[source]
        source: Cause,
    },
}

/// Where the scripts put their files: the host (`/`, the default) or a directory standing in
/// for it in tests.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RenderRoot(String);

impl RenderRoot {
    /// The real filesystem root.
    pub fn host() -> Self {
        Self(String::new())
    }

    /// A directory standing in for `/`. `/` itself means the host.
    ///
    /// # Errors
    /// [`RenderError::Root`] for a relative path, a `.`/`..` component or a NUL byte.
    pub fn new(path: &str) -> Result<Self, RenderError> {
        if !path.starts_with('/') {
            return Err(RenderError::Root(format!(
                "{path:?} is not an absolute path; give the directory that stands in for /"
            )));
        }
        if path.contains('\0') || path.split('/').any(|c| c == "." || c == "..") {
            return Err(RenderError::Root(format!(
                "{path:?} holds a NUL byte or a '.'/'..' component; give a plain absolute path"
            )));
        }
        Ok(Self(path.trim_end_matches('/').to_owned()))
    }

    /// The value of `BB_ROOT`: empty for the host.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the real root.
    pub fn is_host(&self) -> bool {
        self.0.is_empty()
    }
}

/// A Kubernetes bootstrap token, `[a-z0-9]{6}.[a-z0-9]{16}`.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken(String);

impl std::fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token id is public, the secret is not.
        let id = self.0.split('.').next().unwrap_or_default();
        write!(f, "BootstrapToken({id}.<redacted>)")
    }
}

impl BootstrapToken {
    /// Checks the token's form.
    ///
    /// # Errors
    /// [`RenderError::Token`] when it is not 6 and 16 lowercase letters or digits joined by a dot.
    pub fn new(token: &str) -> Result<Self, RenderError> {
        let token = token.trim();
        let ok_part = |p: &str, n: usize| {
            p.len() == n
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        match token.split_once('.') {
            Some((id, secret)) if ok_part(id, 6) && ok_part(secret, 16) => {
                Ok(Self(token.to_owned()))
            }
            _ => Err(RenderError::Token(
                "not a Kubernetes bootstrap token: expected 6 and 16 lowercase letters or \
                 digits joined by a dot (e.g. abcdef.0123456789abcdef); create one with \
                 `kubeadm token create`"
                    .into(),
            )),
        }
    }

    /// The token.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One step of a bundle: a standalone, idempotent bash script.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Step {
    /// File name; steps run in lexical order of their names (`030_kubelet.sh`).
    pub name: String,
    /// The script. Needs `BB_ROOT` in the environment (empty on a node).
    pub script: String,
    /// The step's *disruption key*: the value of the settings whose change makes running this
    /// step disruptive (a new container runtime restarts every container). The node agent
    /// asks for a disruption before running the step when the key differs from the one the
    /// step last ran with on that node ([`crate::agent`], `docs/agent.md`); `None` for steps
    /// that never disrupt. Part of the checksum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption_key: Option<String>,
}

impl Step {
    /// A step that never needs a disruption.
    pub fn new(name: impl Into<String>, script: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            script: script.into(),
            disruption_key: None,
        }
    }

    /// The same step with a disruption key.
    pub fn with_disruption_key(mut self, key: impl Into<String>) -> Self {
        self.disruption_key = Some(key.into());
        self
    }
}

/// A group's bundle: the steps a node runs and their checksum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bundle {
    /// The NodeGroup.
    pub group: String,
    /// The steps, in the order they run.
    pub steps: Vec<Step>,
    /// [`configuration_checksum`] of the steps.
    pub checksum: String,
    /// What the steps were rendered from.
    #[serde(skip)]
    pub config: NodeConfig,
    /// What a node registers with (bootstrap only; not in the checksum).
    #[serde(skip)]
    pub registration: Registration,
    /// NodeGroupConfigurations and NodeUsers targeting the group that were left out because
    /// they are invalid (they never break the bundle; report them).
    #[serde(skip)]
    pub skipped: Vec<Skipped>,
    /// The cleanup script body (after its `BB_ROOT=` line).
    #[serde(skip)]
    cleanup_body: String,
}

/// Everything an executor needs to bootstrap and clean a machine of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedBundle {
    /// The steps and their checksum.
    pub bundle: Bundle,
    /// The full bootstrap script (runs the steps and joins).
    pub bootstrap_script: String,
    /// The cleanup script ([`keys::CLEANUP_SCRIPT_PATH`]); run it with
    /// [`keys::CLEANUP_SCRIPT_CONFIRMATION`].
    pub cleanup_script: String,
}

/// What the bootstrap script needs beyond the bundle.
#[derive(Debug, Clone)]
pub struct BootstrapOptions {
    /// Where files go (the host unless testing).
    pub root: RenderRoot,
    /// The token the kubelet joins with.
    pub bootstrap_token: BootstrapToken,
}

/// The configuration checksum of a list of steps: SHA-256, in lowercase hex, over
/// `"nodemgr-bundle-v2\n"` followed, for each step in order, by the name's and the script's
/// byte lengths (u64, little endian) and bytes, then one byte saying whether a disruption key
/// follows (0 or 1) and, if so, its length and bytes. Length prefixes make the encoding
/// unambiguous: two different step lists never encode to the same bytes.
pub fn configuration_checksum(steps: &[Step]) -> String {
    fn part(hasher: &mut Sha256, bytes: &[u8]) {
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    }
    let mut hasher = Sha256::new();
    hasher.update(b"nodemgr-bundle-v2\n");
    for step in steps {
        part(&mut hasher, step.name.as_bytes());
        part(&mut hasher, step.script.as_bytes());
        match &step.disruption_key {
            None => hasher.update([0u8]),
            Some(key) => {
                hasher.update([1u8]);
                part(&mut hasher, key.as_bytes());
            }
        }
    }
    let digest = hasher.finalize();
    let mut hex = String::with_capacity(64);
    for byte in digest.iter() {
        hex.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
        hex.push(char::from_digit(u32::from(byte & 0xf), 16).unwrap_or('0'));
    }
    hex
}

const TEMPLATES: &[(&str, &str)] = &[
    ("lib.sh", include_str!("templates/lib.sh.j2")),
    ("step_ca.sh", include_str!("templates/step_ca.sh.j2")),
    (
        "step_os_settings.sh",
        include_str!("templates/step_os_settings.sh.j2"),
    ),
    (
        "step_containerd.sh",
        include_str!("templates/step_containerd.sh.j2"),
    ),
    (
        "step_kubelet.sh",
        include_str!("templates/step_kubelet.sh.j2"),
    ),
    (
        "step_cleanup_script.sh",
        include_str!("templates/step_cleanup_script.sh.j2"),
    ),
    (
        "step_node_users.sh",
        include_str!("templates/step_node_users.sh.j2"),
    ),
    (
        "step_fencing.sh",
        include_str!("templates/step_fencing.sh.j2"),
    ),
    (
        "step_configuration.sh",
        include_str!("templates/step_configuration.sh.j2"),
    ),
    ("cleanup.sh", include_str!("templates/cleanup.sh.j2")),
    ("bootstrap.sh", include_str!("templates/bootstrap.sh.j2")),
    ("modules.conf", include_str!("templates/modules.conf.j2")),
    ("sysctl.conf", include_str!("templates/sysctl.conf.j2")),
    (
        "containerd-v2.toml",
        include_str!("templates/containerd-v2.toml.j2"),
    ),
    (
        "containerd-v3.toml",
        include_str!("templates/containerd-v3.toml.j2"),
    ),
    (
        "kubelet-config.json",
        include_str!("templates/kubelet-config.json.j2"),
    ),
    (
        "kubelet.service",
        include_str!("templates/kubelet.service.j2"),
    ),
    (
        "registration.env",
        include_str!("templates/registration.env.j2"),
    ),
    (
        "bootstrap-kubeconfig.json",
        include_str!("templates/bootstrap-kubeconfig.json.j2"),
    ),
];

/// The built-in step scripts of a bundle: (file name, template), in the order they run. The
/// 3-digit prefix is the step's weight among NodeGroupConfigurations ([`customisations`]).
const STEPS: &[(&str, &str)] = &[
    ("000_node_users.sh", "step_node_users.sh"),
    ("001_ca.sh", "step_ca.sh"),
    ("010_os_settings.sh", "step_os_settings.sh"),
    ("015_fencing_watchdog.sh", "step_fencing.sh"),
    ("020_containerd.sh", "step_containerd.sh"),
    ("030_kubelet.sh", "step_kubelet.sh"),
    ("090_cleanup_script.sh", "step_cleanup_script.sh"),
];

/// Renders bundles, bootstrap and cleanup scripts. Build it once and reuse it: it holds the
/// compiled templates.
#[derive(Debug)]
pub struct Renderer {
    env: Environment<'static>,
}

impl Default for Renderer {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Serialize)]
struct StepFiles<'a> {
    modules: &'a str,
    sysctl: &'a str,
    containerd_config: &'a str,
    kubelet_config: &'a str,
    kubelet_unit: &'a str,
    cleanup_body: &'a str,
}

#[derive(Serialize)]
struct ConfigOnly<'a> {
    config: &'a NodeConfig,
}

#[derive(Serialize)]
struct CleanupContext<'a> {
    config: &'a NodeConfig,
    confirmation: &'a str,
}

#[derive(Serialize)]
struct StepContext<'a> {
    config: &'a NodeConfig,
    files: StepFiles<'a>,
    users: &'a [customisations::UserEntry],
    sudoers: &'a str,
}

#[derive(Serialize)]
struct ConfigurationContext<'a> {
    step: &'a str,
    name: &'a str,
    weight: i64,
    bundles: &'a [String],
    content: &'a str,
}

#[derive(Serialize)]
struct RegistrationContext<'a> {
    registration: &'a Registration,
}

#[derive(Serialize)]
struct KubeconfigContext<'a> {
    endpoint: &'a str,
    token: &'a str,
}

#[derive(Serialize)]
struct BootstrapFiles<'a> {
    registration_env: &'a str,
    bootstrap_kubeconfigs: &'a [String],
}

#[derive(Serialize)]
struct AgentContext {
    binary_url: String,
    binary_path: &'static str,
    ca: Option<String>,
    ca_path: &'static str,
    token: String,
    service_unit: String,
    timer_unit: String,
    progress: String,
}

#[derive(Serialize)]
struct BootstrapContext<'a> {
    agent: Option<AgentContext>,
    root: &'a str,
    group: &'a str,
    checksum: &'a str,
    checksum_annotation: &'a str,
    token: &'a str,
    config: &'a NodeConfig,
    steps: &'a [Step],
    files: BootstrapFiles<'a>,
}

impl Renderer {
    /// Compiles the templates.
    ///
    /// # Panics
    /// Never at run time: the templates are compiled into the crate and a unit test renders
    /// every one of them, so a template that does not parse fails the test suite.
    pub fn new() -> Self {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(true)
            .build();
        if let Ok(syntax) = syntax {
            env.set_syntax(syntax);
        }
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        env.set_auto_escape_callback(escape::auto_escape_for);
        env.set_formatter(escape::format_value);
        for (name, source) in TEMPLATES {
            if let Err(e) = env.add_template(name, source) {
                // A syntax error in a built-in template; reported by every render of it.
                tracing::error!(template = name, error = %e, "bashible template does not compile");
            }
        }
        Self { env }
    }

    fn render_template<S: Serialize>(&self, name: &str, context: S) -> Result<String, RenderError> {
        let template_error = |e: minijinja::Error| RenderError::Template {
            template: name.to_owned(),
            message: format!("{e:#}"),
            source: Cause::new(e),
        };
        let template = self.env.get_template(name).map_err(template_error)?;
        template
            .render(minijinja::Value::from(minijinja::value::Serde(&context)))
            .map_err(template_error)
    }

    /// Renders the built-in steps of `group` and their checksum, without NodeGroupConfigurations
    /// or NodeUsers (the users step then removes the users it created earlier).
    ///
    /// # Errors
    /// As [`Renderer::bundle_with`].
    pub fn bundle(
        &self,
        group: &NodeGroup,
        cluster: &ClusterContext,
    ) -> Result<Bundle, RenderError> {
        self.bundle_with(group, cluster, &Customisations::default())
    }

    /// Renders the steps of `group` with the NodeGroupConfigurations and NodeUsers that target
    /// it, and their checksum. Invalid ones are left out and listed in [`Bundle::skipped`];
    /// they never make the bundle fail.
    ///
    /// # Errors
    /// See [`node_config`] and [`registration`]; [`RenderError::Template`] only for a bug in
    /// the built-in templates.
    pub fn bundle_with(
        &self,
        group: &NodeGroup,
        cluster: &ClusterContext,
        customisations: &Customisations,
    ) -> Result<Bundle, RenderError> {
        let config = node_config(group, cluster)?;
        let registration = registration(group)?;
        let only = ConfigOnly { config: &config };
        let modules = self.render_template("modules.conf", &only)?;
        let sysctl = self.render_template("sysctl.conf", &only)?;
        let containerd_config = match config.cri.config_version {
            2 => self.render_template("containerd-v2.toml", &only)?,
            3 => self.render_template("containerd-v3.toml", &only)?,
            _ => String::new(),
        };
        let kubelet_config = self.render_template("kubelet-config.json", &only)?;
        let kubelet_unit = self.render_template("kubelet.service", &only)?;
        let cleanup_body = self.render_template(
            "cleanup.sh",
            CleanupContext {
                config: &config,
                confirmation: keys::CLEANUP_SCRIPT_CONFIRMATION,
            },
        )?;
        let (users, mut skipped) =
            customisations::user_entries(&customisations.users, group.name());
        let sudoers = customisations::sudoers(&users);
        let context = StepContext {
            users: &users,
            sudoers: &sudoers,
            config: &config,
            files: StepFiles {
                modules: &modules,
                sysctl: &sysctl,
                containerd_config: &containerd_config,
                kubelet_config: &kubelet_config,
                kubelet_unit: &kubelet_unit,
                cleanup_body: &cleanup_body,
            },
        };
        let mut steps = Vec::with_capacity(STEPS.len());
        for (name, template) in STEPS {
            if *template == "step_containerd.sh" && !config.cri.managed {
                continue;
            }
            if *template == "step_fencing.sh" && config.fencing.is_none() {
                continue;
            }
            let step = Step::new(*name, self.render_template(template, &context)?);
            // A different runtime reinstalls it and restarts every container (the impact
            // matrix's `cri.type` row); its other settings are changed in place.
            steps.push(if *template == "step_containerd.sh" {
                step.with_disruption_key(format!("cri.type={}", config.cri.kind))
            } else {
                step
            });
        }
        let reserved: Vec<&str> = STEPS.iter().map(|(name, _)| *name).collect();
        let (configurations, skipped_configurations) = customisations::configuration_steps(
            &customisations.configurations,
            group.name(),
            &reserved,
        );
        skipped.extend(skipped_configurations);
        for c in &configurations {
            steps.push(Step {
                name: c.step.clone(),
                script: self.render_template(
                    "step_configuration.sh",
                    ConfigurationContext {
                        step: &c.step,
                        name: &c.name,
                        weight: c.weight,
                        bundles: &c.bundles,
                        content: &c.content,
                    },
                )?,
                // A NodeGroupConfiguration script says nothing about disruptions.
                disruption_key: None,
            });
        }
        // Built-in and configuration steps interleave by name: weight, then name.
        steps.sort_by(|a, b| a.name.cmp(&b.name));
        let checksum = configuration_checksum(&steps);
        Ok(Bundle {
            group: group.name().to_owned(),
            steps,
            checksum,
            config,
            registration,
            skipped,
            cleanup_body,
        })
    }

    /// The full bootstrap script of a bundle.
    ///
    /// # Errors
    /// [`RenderError::Template`] only for a bug in the built-in templates.
    pub fn bootstrap_script(
        &self,
        bundle: &Bundle,
        options: &BootstrapOptions,
    ) -> Result<String, RenderError> {
        self.bootstrap_script_with_agent(bundle, options, None)
    }

    /// The full bootstrap script of a bundle that also installs the node agent `agent`
    /// (its binary from the bundle server, its token, its systemd service and timer, and the
    /// agent's progress record of the steps the script ran), so the node keeps applying its
    /// group's bundle after the bootstrap.
    ///
    /// # Errors
    /// [`RenderError::Template`] only for a bug in the built-in templates.
    pub fn bootstrap_script_with_agent(
        &self,
        bundle: &Bundle,
        options: &BootstrapOptions,
        agent: Option<&AgentInstall>,
    ) -> Result<String, RenderError> {
        let agent = agent.map(|agent| AgentContext {
            binary_url: agent.binary_url(),
            binary_path: agent_install::AGENT_BINARY_PATH,
            ca: agent.ca().map(str::to_owned),
            ca_path: agent_install::AGENT_CA_PATH,
            token: agent.bundle_token().to_owned(),
            service_unit: agent.service_unit(&bundle.group),
            timer_unit: agent.timer_unit(),
            progress: crate::agent::Progress {
                bundle: Some(bundle.checksum.clone()),
                done: bundle.steps.iter().map(|s| s.name.clone()).collect(),
                applied_keys: bundle
                    .steps
                    .iter()
                    .filter_map(|s| Some((s.name.clone(), s.disruption_key.clone()?)))
                    .collect(),
            }
            .to_file(),
        });
        let registration_env = self.render_template(
            "registration.env",
            RegistrationContext {
                registration: &bundle.registration,
            },
        )?;
        let kubeconfigs = bundle
            .config
            .api_endpoints
            .iter()
            .map(|endpoint| {
                self.render_template(
                    "bootstrap-kubeconfig.json",
                    KubeconfigContext {
                        endpoint,
                        token: options.bootstrap_token.as_str(),
                    },
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.render_template(
            "bootstrap.sh",
            BootstrapContext {
                agent,
                root: options.root.as_str(),
                group: &bundle.group,
                checksum: &bundle.checksum,
                checksum_annotation: keys::ANNOTATION_CONFIGURATION_CHECKSUM,
                token: options.bootstrap_token.as_str(),
                config: &bundle.config,
                steps: &bundle.steps,
                files: BootstrapFiles {
                    registration_env: &registration_env,
                    bootstrap_kubeconfigs: &kubeconfigs,
                },
            },
        )
    }

    /// The cleanup script of a bundle's group, for files under `root`: the same script the
    /// bootstrap installs at [`keys::CLEANUP_SCRIPT_PATH`].
    pub fn cleanup_script(&self, bundle: &Bundle, root: &RenderRoot) -> String {
        cleanup_with_root(&bundle.cleanup_body, root)
    }

    /// The cleanup script of `group` for files under `root`, without a cluster context (the
    /// cleanup needs only the group's `kubelet.rootDir` and CRI type): what `nodemgr render
    /// cleanup` prints.
    ///
    /// # Errors
    /// As [`node_config`] for the group's own fields.
    pub fn cleanup_script_of(
        &self,
        group: &NodeGroup,
        root: &RenderRoot,
    ) -> Result<String, RenderError> {
        let config = config::derive(group, &ClusterContext::default())?;
        let body = self.render_template(
            "cleanup.sh",
            CleanupContext {
                config: &config,
                confirmation: keys::CLEANUP_SCRIPT_CONFIRMATION,
            },
        )?;
        Ok(cleanup_with_root(&body, root))
    }

    /// Bundle, bootstrap script and cleanup script of `group` at once.
    ///
    /// # Errors
    /// As [`Renderer::bundle`].
    pub fn render(
        &self,
        group: &NodeGroup,
        cluster: &ClusterContext,
        options: &BootstrapOptions,
    ) -> Result<RenderedBundle, RenderError> {
        self.render_with(group, cluster, &Customisations::default(), options)
    }

    /// Bundle (with `customisations`, see [`Renderer::bundle_with`]), bootstrap script and
    /// cleanup script of `group` at once.
    ///
    /// # Errors
    /// As [`Renderer::bundle_with`].
    pub fn render_with(
        &self,
        group: &NodeGroup,
        cluster: &ClusterContext,
        customisations: &Customisations,
        options: &BootstrapOptions,
    ) -> Result<RenderedBundle, RenderError> {
        let bundle = self.bundle_with(group, cluster, customisations)?;
        let bootstrap_script = self.bootstrap_script(&bundle, options)?;
        let cleanup_script = self.cleanup_script(&bundle, &options.root);
        Ok(RenderedBundle {
            bundle,
            bootstrap_script,
            cleanup_script,
        })
    }
}

fn cleanup_with_root(body: &str, root: &RenderRoot) -> String {
    format!(
        "#!/usr/bin/env bash\nBB_ROOT={}{body}",
        escape::shell_quote(root.as_str())
    )
}

/// The checksums of many groups, keyed by group name: the `desired_checksums` argument of
/// [`crate::update::plan_updates`]. A group that cannot be rendered is left out (the planner
/// then skips it, as it skips a group whose checksum is unknown) and reported in `errors`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DesiredChecksums {
    /// Group name to configuration checksum.
    pub checksums: BTreeMap<String, String>,
    /// Groups that could not be rendered, and why.
    pub errors: Vec<(String, RenderError)>,
}

/// Renders every group (without NodeGroupConfigurations or NodeUsers) and collects its
/// checksum.
pub fn desired_checksums(
    renderer: &Renderer,
    groups: &[NodeGroup],
    cluster: &ClusterContext,
) -> DesiredChecksums {
    desired_checksums_with(renderer, groups, cluster, &Customisations::default())
}

/// Renders every group with `customisations` ([`Renderer::bundle_with`]) and collects its
/// checksum. Skipped NodeGroupConfigurations and NodeUsers do not make a group fail.
pub fn desired_checksums_with(
    renderer: &Renderer,
    groups: &[NodeGroup],
    cluster: &ClusterContext,
    customisations: &Customisations,
) -> DesiredChecksums {
    let mut out = DesiredChecksums::default();
    for group in groups {
        match renderer.bundle_with(group, cluster, customisations) {
            Ok(bundle) => {
                out.checksums.insert(bundle.group, bundle.checksum);
            }
            Err(e) => out.errors.push((group.name().to_owned(), e)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::impact::impact_of;
    use crate::model::{
        ApprovalMode, Chaos, ChaosMode, ContainerdSettings, Cri, CriType, Disruptions, Kubelet,
        LimitedSwap, MemorySwap, NodeGroupSpec, NodeTemplate, NodeType, NotManagedCri, ObjectMeta,
        ResourceReservation, ResourceReservationMode, StaticInstances, StaticReservation,
        StaticSettings, SwapBehavior, TopologyManager, TopologyManagerPolicy, TopologyManagerScope,
        Update, parse_node_group,
    };
    use proptest::prelude::*;
    use serde_json::Value;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn cluster() -> ClusterContext {
        ClusterContext {
            api_endpoints: vec!["10.0.0.1:6443".into()],
            ca_cert: CA.into(),
            ..ClusterContext::default()
        }
    }

    fn named(spec: NodeGroupSpec) -> NodeGroup {
        NodeGroup {
            api_version: "deckhouse.io/v1".into(),
            kind: "NodeGroup".into(),
            metadata: ObjectMeta {
                name: Some("g".into()),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
        }
    }

    #[test]
    fn every_template_compiles() {
        let renderer = Renderer::new();
        for (name, _) in TEMPLATES {
            assert!(
                renderer.env.get_template(name).is_ok(),
                "{name} does not compile"
            );
        }
    }

    #[test]
    fn the_standalone_cleanup_is_the_bundles() {
        let renderer = Renderer::new();
        let mut spec = NodeGroupSpec::default();
        spec.kubelet.get_or_insert_default().root_dir = Some("/data/k".into());
        let group = named(spec);
        let root = RenderRoot::new("/tmp/r").unwrap();
        let bundle = renderer.bundle(&group, &cluster()).unwrap();
        let standalone = renderer.cleanup_script_of(&group, &root).unwrap();
        assert_eq!(standalone, renderer.cleanup_script(&bundle, &root));
        assert!(standalone.contains("'/data/k'"));
        assert!(standalone.starts_with("#!/usr/bin/env bash\nBB_ROOT='/tmp/r'\n"));
    }

    #[test]
    fn checksum_is_hex_sha256_and_length_prefixed() {
        let step = |name: &str, script: &str| Step::new(name, script);
        let sum = configuration_checksum(&[step("a", "bc")]);
        assert_eq!(sum.len(), 64);
        assert!(
            sum.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        // Moving bytes between name and script, or between steps, changes the checksum.
        assert_ne!(sum, configuration_checksum(&[step("ab", "c")]));
        assert_ne!(
            configuration_checksum(&[step("a", "b"), step("c", "d")]),
            configuration_checksum(&[step("a", "bc"), step("", "d")])
        );
        assert_ne!(sum, configuration_checksum(&[]));
    }

    #[test]
    fn only_node_settings_change_the_checksum() {
        let renderer = Renderer::new();
        let base = renderer
            .bundle(&named(NodeGroupSpec::default()), &cluster())
            .unwrap();
        let mut spec = NodeGroupSpec {
            node_type: Some(NodeType::Static),
            ..NodeGroupSpec::default()
        };
        spec.disruptions = Some(Disruptions {
            approval_mode: Some(ApprovalMode::Manual),
            ..Disruptions::default()
        });
        spec.node_template = Some(NodeTemplate {
            labels: Some([("a".to_owned(), "b".to_owned())].into()),
            ..NodeTemplate::default()
        });
        spec.static_instances = Some(StaticInstances {
            count: Some(4),
            ..StaticInstances::default()
        });
        let other = renderer.bundle(&named(spec), &cluster()).unwrap();
        assert_eq!(base.checksum, other.checksum);
        assert_ne!(base.registration, other.registration);

        let mut spec = NodeGroupSpec::default();
        spec.kubelet.get_or_insert_default().max_pods = Some(99);
        let changed = renderer.bundle(&named(spec), &cluster()).unwrap();
        assert_ne!(base.checksum, changed.checksum);
    }

    /// Paths of the spec the bundle renders onto the node (impact's rule paths); everything
    /// else (chaos, disruptions, update, nodeTemplate, staticInstances, …) is not.
    fn is_node_path(path: &str) -> bool {
        ["cri", "kubelet", "kubernetesVersion", "static"]
            .iter()
            .any(|p| path == *p || path.starts_with(&format!("{p}.")))
    }

    fn opt<T: std::fmt::Debug + Clone + 'static>(
        s: impl Strategy<Value = T> + 'static,
    ) -> BoxedStrategy<Option<T>> {
        prop_oneof![Just(None), s.prop_map(Some)].boxed()
    }

    prop_compose! {
        fn arb_kubelet()(
            max_pods in opt(prop_oneof![Just(110_i64), Just(150)]),
            root_dir in opt(prop_oneof![Just("/var/lib/kubelet".to_owned()), Just("/data/kubelet".to_owned())]),
            log_size in opt(prop_oneof![Just("50Mi".to_owned()), Just("10Mi".to_owned())]),
            log_files in opt(prop_oneof![Just(4_i64), Just(6)]),
            seccomp in opt(any::<bool>()),
            reservation in opt(0..3_u8),
            topology in opt((any::<bool>(), 0..2_u8, 0..2_u8)),
            limited_swap in any::<bool>(),
            swappiness in opt(prop_oneof![Just(60_i64), Just(10)]),
        ) -> Kubelet {
            Kubelet {
                max_pods,
                root_dir,
                container_log_max_size: log_size,
                container_log_max_files: log_files,
                seccomp_default: seccomp,
                resource_reservation: reservation.map(|r| match r {
                    0 => ResourceReservation { mode: Some(ResourceReservationMode::Off), static_: None },
                    1 => ResourceReservation { mode: Some(ResourceReservationMode::Auto), static_: None },
                    _ => ResourceReservation {
                        mode: Some(ResourceReservationMode::Static),
                        static_: Some(StaticReservation { cpu: Some("500m".into()), ..StaticReservation::default() }),
                    },
                }),
                // Policy and scope only matter (and are only written) when enabled.
                topology_manager: topology.map(|(enabled, policy, scope)| TopologyManager {
                    enabled: Some(enabled),
                    policy: (enabled && policy == 1).then_some(TopologyManagerPolicy::BestEffort),
                    scope: (enabled && scope == 1).then_some(TopologyManagerScope::Pod),
                }),
                memory_swap: (limited_swap || swappiness.is_some()).then(|| MemorySwap {
                    swap_behavior: limited_swap.then_some(SwapBehavior::LimitedSwap),
                    swappiness,
                    limited_swap: limited_swap.then(|| LimitedSwap { size: Some("4G".into()) }),
                }),
            }
        }
    }

    prop_compose! {
        fn arb_spec()(
            cri in opt((0..3_u8, opt(1..6_i64))),
            kubelet in opt(arb_kubelet()),
            version in opt(prop_oneof![Just("1.32".to_owned()), Just("1.34".to_owned())]),
            cidrs in opt(prop_oneof![Just(vec!["10.0.0.0/8".to_owned()]), Just(vec!["192.168.0.0/16".to_owned()])]),
            chaos in opt(any::<bool>()),
            manual in opt(any::<bool>()),
            max_concurrent in opt(1..4_i64),
            label in opt("[a-z]{1,3}"),
            count in opt(0..5_i64),
            drain_timeout in opt(60..600_i64),
        ) -> NodeGroupSpec {
            NodeGroupSpec {
                node_type: Some(NodeType::Static),
                cri: cri.map(|(kind, downloads)| {
                    let settings = downloads.map(|n| ContainerdSettings { max_concurrent_downloads: Some(n) });
                    match kind {
                        0 => Cri { type_: Some(CriType::Containerd), containerd: settings, ..Cri::default() },
                        1 => Cri { type_: Some(CriType::ContainerdV2), containerd_v2: settings, ..Cri::default() },
                        _ => Cri {
                            type_: Some(CriType::NotManaged),
                            not_managed: downloads.map(|_| NotManagedCri { cri_socket_path: Some("/run/crio/crio.sock".into()) }),
                            ..Cri::default()
                        },
                    }
                }),
                kubelet,
                kubernetes_version: version,
                static_: cidrs.map(|c| StaticSettings { internal_network_cidrs: Some(c) }),
                chaos: chaos.map(|on| Chaos { mode: Some(if on { ChaosMode::DrainAndDelete } else { ChaosMode::Disabled }), period: None }),
                disruptions: manual.map(|m| Disruptions {
                    approval_mode: Some(if m { ApprovalMode::Manual } else { ApprovalMode::Automatic }),
                    ..Disruptions::default()
                }),
                update: max_concurrent.map(|n| Update { max_concurrent: Some(crate::model::IntOrString::Int(n)) }),
                node_template: label.map(|l| NodeTemplate { labels: Some([("team".to_owned(), l)].into()), ..NodeTemplate::default() }),
                static_instances: count.map(|c| StaticInstances { count: Some(c), label_selector: None }),
                node_drain_timeout_second: drain_timeout,
                ..NodeGroupSpec::default()
            }
        }
    }

    /// Writes a JSON value with every object's keys in an order chosen by `seed`.
    fn json_in_order(value: &Value, seed: u64, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                let n = entries.len();
                if n > 1 {
                    entries.rotate_left((seed as usize) % n);
                    if seed % 2 == 1 {
                        entries.reverse();
                    }
                }
                out.push('{');
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&serde_json::to_string(k).unwrap());
                    out.push(':');
                    json_in_order(v, seed / 3 + i as u64, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    json_in_order(v, seed, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }

    #[test]
    fn fenced_groups_get_softdog_and_stay_halted_after_a_panic() {
        let renderer = Renderer::new();
        let plain = renderer
            .bundle(&named(NodeGroupSpec::default()), &cluster())
            .unwrap();
        let os = |b: &Bundle| {
            b.steps
                .iter()
                .find(|s| s.name == "010_os_settings.sh")
                .unwrap()
                .script
                .clone()
        };
        assert!(os(&plain).contains("kernel.panic = 10\n"));
        assert!(
            !plain
                .steps
                .iter()
                .any(|s| s.name == "015_fencing_watchdog.sh")
        );
        let spec = NodeGroupSpec {
            fencing: Some(crate::model::Fencing {
                mode: Some(crate::model::FencingMode::Watchdog),
                watchdog: Some(crate::model::WatchdogSettings {
                    timeout: Some("2m".into()),
                }),
            }),
            ..NodeGroupSpec::default()
        };
        let fenced = renderer.bundle(&named(spec.clone()), &cluster()).unwrap();
        assert!(os(&fenced).contains("kernel.panic = 0\n"));
        assert!(!os(&fenced).contains("kernel.panic = 10"));
        let step = fenced
            .steps
            .iter()
            .find(|s| s.name == "015_fencing_watchdog.sh")
            .unwrap();
        assert!(
            step.script
                .contains("options softdog soft_margin=120 soft_panic=1")
        );
        assert!(
            step.script
                .contains("bb_host modprobe softdog soft_margin='120' soft_panic=1")
        );
        assert_ne!(plain.checksum, fenced.checksum);

        let mut bad = spec;
        if let Some(f) = bad.fencing.as_mut() {
            f.watchdog = Some(crate::model::WatchdogSettings {
                timeout: Some("100000s".into()),
            });
        }
        match renderer.bundle(&named(bad), &cluster()) {
            Err(RenderError::Field { field, .. }) => {
                assert_eq!(field, "spec.fencing.watchdog.timeout");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_invalid_customisation_is_skipped_not_fatal() {
        use crate::model::{NodeGroupConfiguration, NodeGroupConfigurationSpec, NodeUser};
        let renderer = Renderer::new();
        let customisations = Customisations {
            configurations: vec![NodeGroupConfiguration {
                metadata: ObjectMeta {
                    name: Some("no-suffix".into()),
                    ..ObjectMeta::default()
                },
                spec: NodeGroupConfigurationSpec {
                    content: Some("echo".into()),
                    ..NodeGroupConfigurationSpec::default()
                },
                ..NodeGroupConfiguration::default()
            }],
            users: vec![NodeUser::default()],
        };
        let plain = renderer
            .bundle(&named(NodeGroupSpec::default()), &cluster())
            .unwrap();
        let with = renderer
            .bundle_with(
                &named(NodeGroupSpec::default()),
                &cluster(),
                &customisations,
            )
            .unwrap();
        assert_eq!(plain.checksum, with.checksum);
        let kinds: Vec<&str> = with.skipped.iter().map(|s| s.kind).collect();
        assert_eq!(kinds, ["NodeUser", "NodeGroupConfiguration"]);
        assert!(
            with.skipped[1].to_string().contains("metadata.name"),
            "{}",
            with.skipped[1]
        );
    }

    fn arb_configuration() -> impl Strategy<Value = crate::model::NodeGroupConfiguration> {
        use crate::model::{NodeGroupConfiguration, NodeGroupConfigurationSpec};
        (
            0..3_usize,
            opt(prop_oneof![Just(5_i64), Just(50), Just(100), Just(200)]),
            prop_oneof![Just("a\n"), Just("b\n"), Just("echo 'x'\n")],
            opt(prop_oneof![
                Just(vec!["g".to_owned()]),
                Just(vec!["other".to_owned()]),
                Just(vec!["*".to_owned()]),
                Just(vec!["other".to_owned(), "g".to_owned()]),
            ]),
            opt(prop_oneof![
                Just(vec!["*".to_owned()]),
                Just(vec!["debian".to_owned()])
            ]),
        )
            .prop_map(|(name, weight, content, node_groups, bundles)| {
                NodeGroupConfiguration {
                    api_version: "deckhouse.io/v1alpha1".into(),
                    kind: "NodeGroupConfiguration".into(),
                    metadata: ObjectMeta {
                        name: Some(["one.sh", "two.sh", "three.sh"][name].into()),
                        ..ObjectMeta::default()
                    },
                    spec: NodeGroupConfigurationSpec {
                        content: Some(content.into()),
                        weight,
                        node_groups,
                        bundles,
                    },
                }
            })
    }

    /// What of a configuration reaches group `g`'s nodes: nothing unless it targets `g`; else
    /// its step name (weight and name), content and OS bundles.
    fn seen_by_g(
        c: &crate::model::NodeGroupConfiguration,
    ) -> Option<(String, String, Vec<String>)> {
        c.targets_group("g").then(|| {
            let bundles = c.bundles();
            let bundles = if bundles.iter().any(|b| b == "*") {
                Vec::new()
            } else {
                bundles
            };
            (
                customisations::configuration_step_name(c),
                c.spec.content.clone().unwrap_or_default(),
                bundles,
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// A group's checksum changes exactly when a configuration targeting it (before or
        /// after the edit) changes in what reaches its nodes: content, weight, name, OS
        /// bundles, or whether it targets the group. Edits of configurations for other groups
        /// leave it unchanged.
        #[test]
        fn checksum_follows_exactly_the_targeted_configurations(
            before in proptest::collection::vec(arb_configuration(), 0..4),
            after in proptest::collection::vec(arb_configuration(), 0..4),
        ) {
            let renderer = Renderer::new();
            let group = named(NodeGroupSpec::default());
            let unique = |list: Vec<crate::model::NodeGroupConfiguration>| {
                let mut seen = std::collections::BTreeSet::new();
                list.into_iter().filter(|c| seen.insert(c.name().to_owned())).collect::<Vec<_>>()
            };
            let (before, after) = (unique(before), unique(after));
            let sum = |configurations: &[crate::model::NodeGroupConfiguration]| {
                renderer
                    .bundle_with(&group, &cluster(), &Customisations {
                        configurations: configurations.to_vec(),
                        users: Vec::new(),
                    })
                    .unwrap()
                    .checksum
            };
            let view = |list: &[crate::model::NodeGroupConfiguration]| {
                let mut v: Vec<_> = list.iter().filter_map(seen_by_g).collect();
                v.sort();
                v
            };
            prop_assert_eq!(sum(&before) == sum(&after), view(&before) == view(&after));
        }

        /// Invalid NodeGroupConfigurations and NodeUsers never break a bundle: it renders, lists
        /// each targeting one as skipped, and is exactly the bundle of the valid ones.
        #[test]
        fn invalid_customisations_are_left_out_and_nothing_else_changes(
            names in proptest::collection::btree_set(prop_oneof![
                Just("a.sh"), Just("b.sh"), Just("no-suffix"), Just("Bad.sh"), Just("c.sh")
            ], 0..5),
            weights in proptest::collection::vec(opt(prop_oneof![Just(-1_i64), Just(7), Just(100), Just(1000)]), 5),
            contents in proptest::collection::vec(prop_oneof![Just(""), Just("echo x"), Just("a\0b")], 5),
            uids in proptest::collection::vec(prop_oneof![Just(0_i64), Just(1001), Just(1002), Just(70_000)], 0..4),
        ) {
            use crate::model::{NodeGroupConfiguration, NodeGroupConfigurationSpec, NodeUser, NodeUserSpec};
            use crate::validate::{validate_node_group_configuration, validate_node_user};
            let configurations: Vec<NodeGroupConfiguration> = names
                .iter()
                .enumerate()
                .map(|(i, name)| NodeGroupConfiguration {
                    metadata: ObjectMeta { name: Some((*name).into()), ..ObjectMeta::default() },
                    spec: NodeGroupConfigurationSpec {
                        content: Some(contents[i].into()),
                        weight: weights[i],
                        ..NodeGroupConfigurationSpec::default()
                    },
                    ..NodeGroupConfiguration::default()
                })
                .collect();
            let users: Vec<NodeUser> = uids
                .iter()
                .enumerate()
                .map(|(i, uid)| NodeUser {
                    metadata: ObjectMeta { name: Some(format!("user{i}")), ..ObjectMeta::default() },
                    spec: NodeUserSpec { uid: Some(*uid), ..NodeUserSpec::default() },
                    ..NodeUser::default()
                })
                .collect();
            let renderer = Renderer::new();
            let group = named(NodeGroupSpec::default());
            let all = Customisations { configurations: configurations.clone(), users: users.clone() };
            let bundle = renderer.bundle_with(&group, &cluster(), &all).unwrap();
            let mut seen_uids = std::collections::BTreeSet::new();
            let valid = Customisations {
                configurations: configurations
                    .into_iter()
                    .filter(|c| validate_node_group_configuration(c).is_empty())
                    .collect(),
                users: users
                    .into_iter()
                    .filter(|u| validate_node_user(u).is_empty() && seen_uids.insert(u.spec.uid))
                    .collect(),
            };
            let invalid = names.len() + uids.len() - valid.configurations.len() - valid.users.len();
            prop_assert_eq!(bundle.skipped.len(), invalid);
            let only_valid = renderer.bundle_with(&group, &cluster(), &valid).unwrap();
            prop_assert!(only_valid.skipped.is_empty());
            prop_assert_eq!(bundle.steps, only_valid.steps);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// The checksum changes exactly when the bundle changes, and the bundle changes exactly
        /// when a setting written onto the node changes (impact's `cri`, `kubelet`,
        /// `kubernetesVersion`, `static` rows), whatever happens to the other fields.
        #[test]
        fn checksum_changes_exactly_with_node_settings(a in arb_spec(), b in arb_spec()) {
            let renderer = Renderer::new();
            let bundle_a = renderer.bundle(&named(a.clone()), &cluster()).unwrap();
            let bundle_b = renderer.bundle(&named(b.clone()), &cluster()).unwrap();
            prop_assert_eq!(
                bundle_a.checksum == bundle_b.checksum,
                bundle_a.steps == bundle_b.steps
            );
            let impact = impact_of(&a, &b);
            let node_change: Vec<&str> = impact
                .changes
                .iter()
                .map(|c| c.path.as_str())
                .filter(|p| is_node_path(p))
                .collect();
            prop_assert_eq!(
                bundle_a.checksum != bundle_b.checksum,
                !node_change.is_empty(),
                "impact: {:?}", impact.changes
            );
        }

        /// The checksum does not depend on the order fields are written in.
        #[test]
        fn checksum_is_stable_across_field_order(spec in arb_spec(), seed in any::<u64>()) {
            let renderer = Renderer::new();
            let group = named(spec);
            let json = serde_json::to_value(&group).unwrap();
            let mut text = String::new();
            json_in_order(&json, seed, &mut text);
            let reparsed = parse_node_group(&text).unwrap();
            prop_assert_eq!(
                renderer.bundle(&group, &cluster()).unwrap().checksum,
                renderer.bundle(&reparsed, &cluster()).unwrap().checksum
            );
        }

        /// Writing a default out changes nothing.
        #[test]
        fn explicit_defaults_keep_the_checksum(spec in arb_spec()) {
            let renderer = Renderer::new();
            let mut explicit = spec.clone();
            let kubelet = explicit.kubelet.get_or_insert_default();
            kubelet.root_dir.get_or_insert_with(|| "/var/lib/kubelet/".into());
            kubelet.container_log_max_size.get_or_insert_with(|| "50Mi".into());
            kubelet.container_log_max_files.get_or_insert(4);
            kubelet.max_pods.get_or_insert(120);
            kubelet.resource_reservation.get_or_insert(ResourceReservation {
                mode: Some(ResourceReservationMode::Auto),
                static_: None,
            });
            explicit.cri.get_or_insert_with(|| Cri { type_: Some(CriType::Containerd), ..Cri::default() });
            prop_assert_eq!(
                renderer.bundle(&named(spec), &cluster()).unwrap().checksum,
                renderer.bundle(&named(explicit), &cluster()).unwrap().checksum
            );
        }
    }
}
