#!/usr/bin/env python3
"""The official Kubernetes Python client against the API emulator.

Usage: client_smoke.py KUBECONFIG

Lists, watches (watch.Watch().stream, which sends ?watch=True), patches (strategic merge, the
client's default for a dict body, and JSON merge) and evicts a pod (refused with 429 while a
PodDisruptionBudget forbids it, accepted once it is gone), and lists custom objects. Prints one
line per step; exits non-zero (with a traceback) on the first failure.
"""

import sys
import threading
import time

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException


def pod(name, labels):
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, namespace="default", labels=labels),
        spec=client.V1PodSpec(containers=[client.V1Container(name="app", image="nginx")], node_name="w1"),
    )


def main():
    config.load_kube_config(config_file=sys.argv[1])
    core = client.CoreV1Api()
    policy = client.PolicyV1Api()

    core.create_namespaced_pod("default", pod("first", {"app": "web"}))
    pods = core.list_namespaced_pod("default", label_selector="app=web")
    assert [p.metadata.name for p in pods.items] == ["first"], pods.items
    print("list: ok")

    # Watch: a pod created while the stream is open arrives as ADDED.
    def create_later():
        time.sleep(1)
        core.create_namespaced_pod("default", pod("second", {"app": "web"}))

    threading.Thread(target=create_later, daemon=True).start()
    w = watch.Watch()
    seen = []
    for event in w.stream(core.list_namespaced_pod, "default", timeout_seconds=60):
        seen.append((event["type"], event["object"].metadata.name))
        if ("ADDED", "second") in seen:
            w.stop()
    assert ("ADDED", "first") in seen and ("ADDED", "second") in seen, seen
    print("watch: ok")

    # Strategic merge patch (the client's choice for a dict): containers merge by name.
    patched = core.patch_namespaced_pod(
        "first", "default", {"metadata": {"labels": {"tier": "front"}},
                             "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}})
    assert patched.metadata.labels == {"app": "web", "tier": "front"}, patched.metadata.labels
    assert [c.image for c in patched.spec.containers] == ["nginx:1.27"], patched.spec.containers
    print("strategic merge patch: ok")

    # JSON merge patch (this client version has no per-call content type: the generic call).
    merged = core.api_client.call_api(
        "/api/v1/namespaces/{namespace}/pods/{name}", "PATCH",
        path_params={"namespace": "default", "name": "first"},
        header_params={"Content-Type": "application/merge-patch+json", "Accept": "application/json"},
        body={"metadata": {"labels": {"tier": None}}},
        response_type="V1Pod", auth_settings=["BearerToken"], _return_http_data_only=True)
    assert merged.metadata.labels == {"app": "web"}, merged.metadata.labels
    print("merge patch: ok")

    # JSON patch (the client's choice for a list body).
    jsonpatched = core.patch_namespaced_pod(
        "first", "default", [{"op": "add", "path": "/metadata/labels/tier", "value": "back"}])
    assert jsonpatched.metadata.labels == {"app": "web", "tier": "back"}, jsonpatched.metadata.labels
    print("json patch: ok")

    # Eviction: refused while a budget allows no disruption (the pods run and are ready, as a
    # kubelet would report through the status subresource), accepted once it is gone.
    for name in ["first", "second"]:
        core.patch_namespaced_pod_status(name, "default", {"status": {
            "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
    budget = client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1PodDisruptionBudgetSpec(
            max_unavailable=0, selector=client.V1LabelSelector(match_labels={"app": "web"})))
    policy.create_namespaced_pod_disruption_budget("default", budget)
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="first", namespace="default"))
    try:
        core.create_namespaced_pod_eviction("first", "default", eviction)
        raise AssertionError("the eviction should have been refused by the budget")
    except ApiException as error:
        assert error.status == 429, (error.status, error.body)
    policy.delete_namespaced_pod_disruption_budget("web", "default")
    core.create_namespaced_pod_eviction("first", "default", eviction)
    remaining = [p.metadata.name for p in core.list_namespaced_pod("default").items]
    assert remaining == ["second"], remaining
    print("eviction: ok")

    custom = client.CustomObjectsApi()
    items = custom.list_cluster_custom_object("apiextensions.k8s.io", "v1", "customresourcedefinitions")["items"]
    assert isinstance(items, list)
    print("custom objects: ok")


if __name__ == "__main__":
    main()
