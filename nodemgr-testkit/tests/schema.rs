//! Custom resources are pruned, defaulted and validated against their CRD's schema, checked
//! with the real kubectl: `kubectl apply` (which sends `fieldValidation=Strict`) refuses an
//! unknown field with kube-apiserver's strict-decoding message, `--validate=warn` turns it into
//! a `Warning:`, `--validate=false` drops it silently; defaults show on `kubectl get -o yaml`;
//! a value the schema forbids — or a CEL rule refuses, transition rules against the live object —
//! is a 422 naming the field.
//!
//! kubectl comes from `NODEMGR_KUBECTL` or `PATH` (`scripts/install.d/30-kubectl.sh`); these
//! tests FAIL when it is missing, unless `NODEMGR_SKIP_KUBECTL=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

mod common;

use common::Api;
use common::real_clients::Kubectl;
use nodemgr_testkit::Emulator;
use serde_json::json;

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.io
spec:
  group: example.io
  scope: Cluster
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              required: [kind]
              x-kubernetes-validations:
                - rule: "self.replicas <= 5 || self.kind == 'Large'"
                  message: only Large gadgets may have more than 5 replicas
              properties:
                selector:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
                  x-kubernetes-validations:
                    - rule: self == oldSelf
                      message: selector may be added, never changed
                kind: {type: string, enum: [Small, Large]}
                replicas: {type: integer, minimum: 0, maximum: 10, default: 1}
                update:
                  type: object
                  default: {}
                  properties:
                    maxConcurrent: {x-kubernetes-int-or-string: true, default: 1}
                    window: {type: string, pattern: '^[0-9]+m$'}
                taints:
                  type: array
                  maxItems: 2
                  items: {type: object, properties: {key: {type: string}}}
            status:
              type: object
              x-kubernetes-preserve-unknown-fields: true
"#;

fn gadget(name: &str, spec: &str) -> String {
    format!("apiVersion: example.io/v1\nkind: Gadget\nmetadata:\n  name: {name}\nspec:\n{spec}")
}

async fn setup() -> Option<(Emulator, Kubectl)> {
    let emulator = Emulator::start().await.unwrap();
    let kubectl = Kubectl::new(emulator.kubeconfig_path())?;
    let crd = kubectl.manifest("crd.yaml", CRD);
    kubectl.run(&["apply", "-f", &crd]).await;
    Some((emulator, kubectl))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_refuses_unknown_fields_under_strict_and_warns_or_drops_otherwise() {
    let Some((emulator, kubectl)) = setup().await else {
        return;
    };
    let typo = kubectl.manifest(
        "typo.yaml",
        &gadget(
            "g1",
            "  kind: Small\n  update:\n    maxConcurent: 2\n  foo: bar\n",
        ),
    );
    let out = kubectl.fail(&["apply", "-f", &typo]).await;
    assert!(
        out.stderr.contains(r#"Gadget in version "v1" cannot be handled as a Gadget: strict decoding error: unknown field "spec.foo", unknown field "spec.update.maxConcurent""#),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("(BadRequest)"), "{}", out.stderr);
    assert!(emulator.get("example.io/v1", "Gadget", "", "g1").is_none());

    let out = kubectl
        .run(&["apply", "--validate=warn", "-f", &typo])
        .await;
    assert!(
        out.stderr.contains(r#"Warning: unknown field "spec.foo""#),
        "{}",
        out.stderr
    );
    let stored = emulator.get("example.io/v1", "Gadget", "", "g1").unwrap();
    assert!(
        stored["spec"].get("foo").is_none(),
        "unknown fields are pruned: {stored}"
    );
    assert!(stored["spec"]["update"].get("maxConcurent").is_none());

    let out = kubectl
        .run(&["apply", "--validate=false", "-f", &typo])
        .await;
    assert!(!out.stderr.contains("Warning"), "{}", out.stderr);

    // Duplicate keys in a JSON body (kubectl's YAML parser refuses them itself; raw clients
    // can send them): an error under Strict, a warning by default, for built-in kinds too.
    let api = Api::new(emulator.url());
    let raw = r#"{"apiVersion": "example.io/v1", "kind": "Gadget", "metadata": {"name": "dup"}, "spec": {"kind": "Small", "replicas": 1, "replicas": 2}}"#;
    let send = |query: &'static str, path: &'static str, body: &'static str| {
        api.http
            .post(format!("{}{path}{query}", emulator.url()))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let strict = send(
        "?fieldValidation=Strict",
        "/apis/example.io/v1/gadgets",
        raw,
    )
    .await
    .unwrap();
    assert_eq!(strict.status().as_u16(), 400);
    let status: serde_json::Value = strict.json().await.unwrap();
    assert_eq!(
        status["message"],
        r#"Gadget in version "v1" cannot be handled as a Gadget: strict decoding error: duplicate field "spec.replicas""#
    );
    let warned = send("", "/apis/example.io/v1/gadgets", raw).await.unwrap();
    assert_eq!(warned.status().as_u16(), 201);
    let warning = warned
        .headers()
        .get("warning")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(warning, r#"299 - "duplicate field \"spec.replicas\"""#);
    let config_map =
        r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "name": "d"}}"#;
    let strict = send(
        "?fieldValidation=Strict",
        "/api/v1/namespaces/default/configmaps",
        config_map,
    )
    .await
    .unwrap();
    assert_eq!(strict.status().as_u16(), 400);

    // Server-side apply under Strict words it as the field manager does.
    let ssa = kubectl.manifest("ssa.yaml", &gadget("g2", "  kind: Small\n  bar: 1\n"));
    let out = kubectl.fail(&["apply", "--server-side", "-f", &ssa]).await;
    assert!(
        out.stderr
            .contains("failed to create typed patch object (/g2; example.io/v1, Kind=Gadget): .spec.bar: field not declared in schema"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defaults_show_on_kubectl_get_and_invalid_values_are_422_naming_the_field() {
    let Some((emulator, kubectl)) = setup().await else {
        return;
    };
    let plain = kubectl.manifest("plain.yaml", &gadget("g", "  kind: Large\n"));
    kubectl.run(&["apply", "-f", &plain]).await;
    let yaml = kubectl
        .run(&["get", "gadget", "g", "-o", "yaml"])
        .await
        .stdout;
    assert!(yaml.contains("replicas: 1"), "{yaml}");
    assert!(yaml.contains("maxConcurrent: 1"), "{yaml}");

    let invalid = kubectl.manifest(
        "invalid.yaml",
        &gadget("h", "  kind: Medium\n  replicas: 11\n  update:\n    maxConcurrent: true\n    window: 5h\n  taints: [{key: a}, {key: b}, {key: c}]\n"),
    );
    let out = kubectl.fail(&["apply", "-f", &invalid]).await;
    for expected in [
        r#"The Gadget "h" is invalid: "#,
        r#"spec.kind: Unsupported value: "Medium": supported values: "Small", "Large""#,
        "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10",
        r#"spec.update.maxConcurrent: Invalid value: "boolean": spec.update.maxConcurrent in body must be of type integer,string: "boolean""#,
        r#"spec.update.window: Invalid value: "5h": spec.update.window in body should match '^[0-9]+m$'"#,
        "spec.taints: Too many: 3: must have at most 2 items",
    ] {
        assert!(
            out.stderr.contains(expected),
            "missing {expected:?} in\n{}",
            out.stderr
        );
    }
    let missing = kubectl.manifest("missing.yaml", &gadget("i", "  replicas: 2\n"));
    let out = kubectl.fail(&["apply", "-f", &missing]).await;
    assert!(
        out.stderr.contains("spec.kind: Required value"),
        "{}",
        out.stderr
    );

    // The Status carries the causes with their field paths.
    let api = Api::new(emulator.url());
    let (code, status) = api
        .post("/apis/example.io/v1/gadgets", &json!({"apiVersion": "example.io/v1", "kind": "Gadget", "metadata": {"name": "j"}, "spec": {"kind": "Small", "replicas": -1}}))
        .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["causes"][0]["field"], "spec.replicas");
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "FieldValueInvalid"
    );

    // CEL rules, a transition rule included: a selector may be added, never changed.
    let many = kubectl.manifest("many.yaml", &gadget("k", "  kind: Small\n  replicas: 7\n"));
    let out = kubectl.fail(&["apply", "-f", &many]).await;
    assert!(
        out.stderr.contains(
            "spec: Invalid value: \"object\": only Large gadgets may have more than 5 replicas"
        ),
        "{}",
        out.stderr
    );
    let added = kubectl.manifest(
        "added.yaml",
        &gadget("g", "  kind: Large\n  selector: {role: db}\n"),
    );
    kubectl.run(&["apply", "-f", &added]).await;
    let changed = kubectl.manifest(
        "changed.yaml",
        &gadget("g", "  kind: Large\n  selector: {role: web}\n"),
    );
    let out = kubectl.fail(&["apply", "-f", &changed]).await;
    assert!(
        out.stderr.contains(
            "spec.selector: Invalid value: \"object\": selector may be added, never changed"
        ),
        "{}",
        out.stderr
    );

    // The status subresource is validated too, but a main-resource write keeps the live status.
    let (code, _) = api
        .patch(
            "/apis/example.io/v1/gadgets/g/status",
            "application/merge-patch+json",
            &json!({"status": {"anything": 1}}),
        )
        .await;
    assert_eq!(code, 200);
}

mod property {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    fn crd() -> Value {
        serde_saphyr::from_str(CRD).unwrap()
    }

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-3i64..14).prop_map(|n| json!(n)),
            prop_oneof![Just("Small"), Just("Large"), Just("5m"), Just("x")].prop_map(|s| json!(s)),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("kind"),
                        Just("replicas"),
                        Just("update"),
                        Just("maxConcurrent"),
                        Just("window"),
                        Just("taints"),
                        Just("key"),
                        Just("foo")
                    ],
                    inner,
                    0..5
                )
                .prop_map(|m| Value::Object(
                    m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
                )),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Whatever a client sends, the store holds only objects valid against the schema,
        /// without undeclared fields; a refused write (4xx) changes nothing.
        #[test]
        fn only_valid_pruned_objects_are_stored(spec in any_json(), strict in any::<bool>()) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let emulator = Emulator::start().await.unwrap();
                emulator.seed(crd()).unwrap();
                let api = Api::new(emulator.url());
                let before = emulator.resource_version();
                let query = if strict { "?fieldValidation=Strict" } else { "" };
                let (code, body) = api
                    .post(&format!("/apis/example.io/v1/gadgets{query}"), &json!({"apiVersion": "example.io/v1", "kind": "Gadget", "metadata": {"name": "p"}, "spec": spec}))
                    .await;
                let schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
                match emulator.get("example.io/v1", "Gadget", "", "p") {
                    Some(stored) => {
                        prop_assert_eq!(code, 201, "{}", body);
                        let errors = nodemgr_testkit::structural::validate(&schema, &stored);
                        prop_assert!(errors.is_empty(), "stored an invalid object {}: {:?}", stored, errors);
                        prop_assert!(nodemgr_testkit::structural::prune(&schema, &mut stored.clone()).is_empty(), "undeclared fields stored: {}", stored);
                    }
                    None => {
                        prop_assert!((400..500).contains(&code), "{} {}", code, body);
                        prop_assert_eq!(emulator.resource_version(), before);
                    }
                }
                Ok(())
            })?;
        }
    }
}
