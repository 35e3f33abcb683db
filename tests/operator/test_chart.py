"""The Helm chart charts/benchgate, rendered offline through the Helm SDK (helm-python-sdk).

What holds the chart to the rest of benchgate:
- its RBAC is exactly `benchgate.controller.access.required_access(...)` of its mode (no more: least
  privilege; no less: the controller would fail on a 403);
- its ConfigMap carries exactly the variables the controller's settings.py documents, and the
  controller's own parser accepts what it renders;
- every manifest passes the Kubernetes API schema, strictly (unknown fields fail), for the versions
  Chart.yaml's kubeVersion claims; kopf's peering objects, which that schema does not know, pass the
  CRDs the chart ships for them in crds/;
- every pod runs with the restricted-profile security settings;
- values.schema.json refuses bad values, and every value is documented.
The CRDs in files/crds/ are generated from the controller's models: only their identity (group, kind,
names, scope, version) is asserted here, so the tests hold whatever schema they carry.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import jsonschema
import kubernetes_validate
import pytest
import yaml

import benchgate
from benchgate.controller.access import FINALIZER, KFP_ACCESS, PEERING_GROUP, required_access
from benchgate.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "charts" / "benchgate"
SETTINGS_PY = REPO / "src" / "benchgate" / "controller" / "settings.py"

RELEASE = "benchgate"
NAMESPACE = "benchgate-system"
KFP_HOST = "http://ml-pipeline.kubeflow:8888"
SECRET = "benchgate-tokens"
DIGEST = "sha256:" + "ab" * 32

# Values on top of the defaults (kfp.host is added to each). "everything" turns every knob away from
# its default at once, so a pass-through that breaks shows up in validation.
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "crds-off": {"crds": {"enabled": False}},
    "standalone": {"peering": {"enabled": False}},
    "namespaced": {"rbac": {"namespaced": True}},
    "existing-secret": {"existingSecret": SECRET},
    "external-sa": {"serviceAccount": {"create": False, "name": "ci-bot"}, "rbac": {"create": False}},
    "metrics-off": {"metrics": {"enabled": False}, "rbac": {"userRoles": False}},
    "monitoring": {
        "metrics": {
            "port": 9090,
            "serviceMonitor": {"enabled": True, "interval": "1m", "labels": {"release": "prom"}},
        },
        "networkPolicy": {
            "enabled": True,
            "ingressFrom": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
            ],
            "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}],
        },
    },
    "everything": {
        "nameOverride": "bg",
        "replicaCount": 2,
        "peering": {"priority": 5},
        "image": {
            "repository": "registry.example.com/bg/operator",
            "tag": "0.1.0-rc1",
            "digest": DIGEST,
            "pullPolicy": "Always",
        },
        "imagePullSecrets": [{"name": "regcred"}],
        "crds": {"keep": False},
        "kfp": {
            "uiEndpoint": "https://kfp.example.com",
            "experiment": "nightly",
            "namespace": "ml-team",
            "serviceAccountToken": True,
        },
        "mlflow": {"trackingUri": "http://mlflow.mlflow:5000", "uiEndpoint": "https://mlflow.example.com"},
        "controller": {
            "pollSeconds": 2.5,
            "schedulePollSeconds": 60,
            "repairSeconds": 120,
            "maxActivePerNamespace": 0,
        },
        "policy": {
            "repositories": ["https://github.com/acme/", "git@github.com:acme/"],
            "nodeSelectors": [{"pool": "a100"}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "pvcs": {"ml-infra": ["bench-cache"], "*": ["shared-cache"]},
            "promoteNamespaces": ["ml-infra"],
            "promoteScheduleOwnedOnly": True,
            "maxGpusPerNode": 16,
        },
        "existingSecret": SECRET,
        "existingSecretKeys": {"kfpToken": "kfp", "mlflowToken": "mlflow"},
        "serviceAccount": {"name": "bg-controller", "annotations": {"iam.example.com/role": "bg"}},
        "rbac": {"namespaced": True},
        "extraEnv": [
            {"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
            {"name": "REQUESTS_CA_BUNDLE", "value": "/etc/ssl/corp/ca.crt"},
        ],
        "extraVolumes": [{"name": "corp-ca", "configMap": {"name": "corp-ca-bundle"}}],
        "extraVolumeMounts": [{"name": "corp-ca", "mountPath": "/etc/ssl/corp", "readOnly": True}],
        "metrics": {"port": 9100},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": 1, "memory": "1Gi"}},
        "tmpSizeLimit": "",
        "podAnnotations": {"example.com/team": "ml"},
        "podLabels": {"team": "ml"},
        "priorityClassName": "platform-high",
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}
                    ]
                }
            }
        },
    },
}

POD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}
# Kinds of other operators' CRDs, which kubernetes-validate has no schema for (checked field by field).
CUSTOM_KINDS = {"monitoring.coreos.com/v1": "ServiceMonitor"}


def merged(*layers: dict[str, Any]) -> dict[str, Any]:
    """Deep merge, later layers win (what `helm -f a -f b` does with maps)."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            else:
                out[key] = copy.deepcopy(value)
    return out


def with_host(values: dict[str, Any]) -> dict[str, Any]:
    return merged({"kfp": {"host": KFP_HOST}}, values)


@pytest.fixture(scope="module")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(CHART_DIR) as loaded:
        yield loaded


def render_text(chart: helm_python.Chart, values: dict[str, Any]) -> dict[str, str]:
    return chart.render(values, name=RELEASE, namespace=NAMESPACE)


def render(
    chart: helm_python.Chart, variant_values: dict[str, Any], uninstall: bool = False
) -> list[dict[str, Any]]:
    """The rendered Kubernetes objects of a variant (kfp.host set), NOTES.txt left out; the objects of
    the uninstall hook (`pre_delete_hook`) only with `uninstall`, or alone when it is "only"."""
    manifests = render_text(chart, with_host(variant_values))
    objects = [
        doc
        for path, text in sorted(manifests.items())
        if path.endswith((".yaml", ".yml"))
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    if uninstall == "only":
        return [o for o in objects if pre_delete_hook(o)]
    return [o for o in objects if uninstall or not pre_delete_hook(o)]


def pre_delete_hook(obj: dict[str, Any]) -> bool:
    return bool((obj["metadata"].get("annotations") or {}).get("helm.sh/hook") == "pre-delete")


def chart_crds(chart: helm_python.Chart) -> list[dict[str, Any]]:
    """The objects in the chart's crds/, which Helm installs before the templates (and never
    renders, upgrades or deletes)."""
    return [doc for crd in chart.crds for doc in yaml.safe_load_all(crd["data"]) if doc]


def of_kind(objects: list[dict[str, Any]], *kinds: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in kinds]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = of_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def pod_specs(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    specs = []
    for obj in objects:
        if obj["kind"] in POD_KINDS:
            specs.append((f"{obj['kind']}/{obj['metadata']['name']}", obj["spec"]["template"]["spec"]))
        elif obj["kind"] == "CronJob":
            specs.append(
                (f"CronJob/{obj['metadata']['name']}", obj["spec"]["jobTemplate"]["spec"]["template"]["spec"])
            )
        elif obj["kind"] == "Pod":
            specs.append((f"Pod/{obj['metadata']['name']}", obj["spec"]))
    return specs


def controller_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    containers = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["controller"]
    return containers[0]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


# --- Kubernetes versions --------------------------------------------------------------------------


def minor(version: str) -> tuple[int, int]:
    major, minor_, *_ = re.findall(r"\d+", version)
    return int(major), int(minor_)


def claimed_versions() -> list[str]:
    """Every Kubernetes minor that kubernetes-validate ships and Chart.yaml's kubeVersion admits."""
    kube_version = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["kubeVersion"]
    match = re.fullmatch(r">=\s*(\d+\.\d+)\.0-0", kube_version)
    assert match, f"kubeVersion {kube_version!r}: expected a plain lower bound such as '>=1.28.0-0'"
    lowest = minor(match.group(1))
    shipped = sorted({minor(v) for v in kubernetes_validate.utils.all_versions()})
    assert lowest in shipped, f"kubernetes-validate has no schemas for {lowest}: cannot back the claim"
    return [f"{a}.{b}" for a, b in shipped if (a, b) >= lowest]


KUBE_VERSIONS = claimed_versions()
# Every claimed version for the defaults; the oldest and newest for the other variants (a field that
# exists in both exists in between), which keeps the whole file to a few seconds.
ENDS = list(dict.fromkeys((KUBE_VERSIONS[0], KUBE_VERSIONS[-1])))
VALIDATION_CASES = [("defaults", v) for v in KUBE_VERSIONS] + [
    (name, v) for name in VARIANTS if name != "defaults" for v in ENDS
]


# --- Chart metadata, lint ------------------------------------------------------------------------


def test_chart_metadata_matches_benchgate(chart: helm_python.Chart) -> None:
    meta = chart.metadata
    assert meta["apiVersion"] == "v2"
    assert meta["name"] == "benchgate"
    assert meta["version"] == "0.1.0"
    # The default image tag is the appVersion: it must be the version the image is built from.
    assert meta["appVersion"] == benchgate.__version__
    assert chart.values["image"]["repository"] == "ghcr.io/benchgate/operator"


def line_value(pattern: str, text: str, where: str) -> str:
    match = re.search(pattern, text, re.M)
    assert match, f"{where}: no line matches {pattern!r}"
    return match[1]


def test_operator_image_matches_chart() -> None:
    dockerfile = (REPO / "images" / "operator" / "Dockerfile").read_text()
    makefile = (REPO / "Makefile").read_text()
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    # `make images` tags what the chart pulls by default.
    repository = line_value(r"^OPERATOR_IMAGE_REPOSITORY \?= (\S+)$", makefile, "Makefile")
    assert repository == values["image"]["repository"]
    assert "images/operator/Dockerfile -t $(OPERATOR_IMAGE_REPOSITORY):$(VERSION)" in makefile
    # The image's user is the UID the chart runs it as.
    user = line_value(r"^USER (\d+)$", dockerfile, "Dockerfile")
    assert user == str(values["podSecurityContext"]["runAsUser"])
    # The CPU torch wheel at constraints.txt's pin, or pip would replace it with a CUDA build.
    torch_pin = line_value(r"^torch==(\S+)$", (REPO / "constraints.txt").read_text(), "constraints.txt")
    assert line_value(r"^ARG TORCH_VERSION=(\S+)$", dockerfile, "Dockerfile") == torch_pin
    assert "download.pytorch.org/whl/cpu" in dockerfile
    assert '".[operator]"' in dockerfile
    assert 'CMD ["benchgate", "controller"]' in dockerfile


@pytest.mark.parametrize("variant", VARIANTS)
def test_lint_strict_is_clean(variant: str) -> None:
    report = helm_python.lint(
        CHART_DIR,
        with_host(VARIANTS[variant]),
        strict=True,
        namespace=NAMESPACE,
        kube_version=f"v{KUBE_VERSIONS[0]}.0",
    )
    assert report["errors"] == []
    # Severity 2 and 3 are warnings and errors; 1 is "info" (e.g. "icon is recommended").
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


# --- Kubernetes API schema -----------------------------------------------------------------------


def test_validation_is_strict() -> None:
    """Guard for the test below: a misspelt field must fail, or a pass there means nothing."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {
                    "containers": [{"name": "c", "image": "i"}],
                    "securityContext": {"runAsNonroot": True},
                },
            },
        },
    }
    with pytest.raises(kubernetes_validate.ValidationError, match="runAsNonroot"):
        kubernetes_validate.validate(deployment, KUBE_VERSIONS[0], strict=True)


@pytest.mark.parametrize(("variant", "kube_version"), VALIDATION_CASES)
def test_manifests_pass_the_kubernetes_schema(
    chart: helm_python.Chart, variant: str, kube_version: str
) -> None:
    objects = render(chart, VARIANTS[variant], uninstall=True)
    assert objects
    for obj in objects + chart_crds(chart):
        if obj["apiVersion"].startswith(f"{PEERING_GROUP}/"):
            continue  # kopf's kinds are not Kubernetes': test_peering_objects_match_their_crds
        if obj["apiVersion"] in CUSTOM_KINDS:  # no schema in kubernetes-validate: see the tests of each
            assert obj["kind"] == CUSTOM_KINDS[obj["apiVersion"]]
            continue
        # Built-in kinds and the CustomResourceDefinitions (apiextensions.k8s.io/v1) alike.
        kubernetes_validate.validate(obj, kube_version, strict=True)


def test_expected_objects_per_variant(chart: helm_python.Chart) -> None:
    def kinds(variant: str) -> list[str]:
        return sorted(o["kind"] for o in render(chart, VARIANTS[variant]))

    # The controller's ClusterRole and binding, the two user roles; the metrics Service, the helm test
    # Pod; the peering object.
    everything = ["ClusterKopfPeering", "ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding",
                  "ConfigMap", "CustomResourceDefinition", "CustomResourceDefinition", "Deployment", "Pod",
                  "Service", "ServiceAccount"]  # fmt: skip
    without_user_roles = sorted([*(k for k in everything if k != "ClusterRole"), "ClusterRole"])
    assert kinds("defaults") == everything
    assert kinds("crds-off") == [k for k in everything if k != "CustomResourceDefinition"]
    assert kinds("standalone") == [k for k in everything if k != "ClusterKopfPeering"]
    # No cluster-scoped objects in namespaced mode: the controller's Role, no user roles.
    namespaced = {
        "ClusterRole": "Role",
        "ClusterRoleBinding": "RoleBinding",
        "ClusterKopfPeering": "KopfPeering",
    }
    assert kinds("namespaced") == sorted(namespaced.get(k, k) for k in without_user_roles)
    assert kinds("external-sa") == [k for k in everything if "Role" not in k and k != "ServiceAccount"]
    assert kinds("metrics-off") == [k for k in without_user_roles if k not in ("Pod", "Service")]
    assert kinds("monitoring") == sorted([*everything, "NetworkPolicy", "ServiceMonitor"])
    # The chart never holds a token: no Secret in any variant.
    for variant in VARIANTS:
        assert of_kind(render(chart, VARIANTS[variant]), "Secret") == [], variant
    # Namespaced objects land in the release namespace.
    for obj in render(chart, VARIANTS["everything"]):
        if obj["kind"] not in {
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            "ClusterKopfPeering",
        }:
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["kind"]


# --- CRDs ----------------------------------------------------------------------------------------

CRDS = {
    "benchmarkruns.benchgate.dev": ("BenchmarkRun", "benchmarkruns", "br"),
    "benchmarkschedules.benchgate.dev": ("BenchmarkSchedule", "benchmarkschedules", "bs"),
}


def test_crds_are_the_shipped_files_with_labels_and_keep(chart: helm_python.Chart) -> None:
    crds = {c["metadata"]["name"]: c for c in of_kind(render(chart, {}), "CustomResourceDefinition")}
    assert set(crds) == set(CRDS)
    for name, (kind, plural, short) in CRDS.items():
        crd = crds[name]
        spec = crd["spec"]
        assert spec["group"] == "benchgate.dev"
        assert spec["scope"] == "Namespaced"
        assert (spec["names"]["kind"], spec["names"]["plural"]) == (kind, plural)
        assert short in spec["names"]["shortNames"]
        versions = {v["name"]: v for v in spec["versions"]}
        assert versions["v1alpha1"]["served"] and versions["v1alpha1"]["storage"]
        assert "status" in versions["v1alpha1"]["subresources"]
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert crd["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
        # The template parses and re-emits each file to add labels and the annotation: nothing else
        # may change on the way (numbers, strings that look like numbers, nesting).
        shipped = yaml.safe_load((CHART_DIR / "files" / "crds" / f"{name}.yaml").read_text())
        rendered = copy.deepcopy(crd)
        for key in ("labels", "annotations"):
            theirs = shipped["metadata"].pop(key, None) or {}
            ours = rendered["metadata"].pop(key, None) or {}
            assert theirs.keys() <= ours.keys(), f"{name}: the template dropped {key}"
        assert rendered == shipped


def test_the_run_crd_refuses_edits_of_its_spec_by_field(chart: helm_python.Chart) -> None:
    """The API server's own admission refuses spec edits (CEL transition rules, Kubernetes 1.28+): one
    rule for the whole spec, and one on each free-form map naming its field in the refusal."""
    (crd,) = (
        c
        for c in of_kind(render(chart, {}), "CustomResourceDefinition")
        if c["metadata"]["name"] == "benchmarkruns.benchgate.dev"
    )
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert [r["rule"] for r in spec["x-kubernetes-validations"]] == ["self == oldSelf"]
    for field in ("workloadArgs", "config"):
        (rule,) = spec["properties"][field]["x-kubernetes-validations"]
        assert rule["rule"] == "self == oldSelf"
        assert f"spec.{field} is immutable" in rule["message"]


def test_a_missing_crd_file_fails_the_render(tmp_path: Path) -> None:
    copy_dir = tmp_path / "benchgate"
    shutil.copytree(CHART_DIR, copy_dir)
    (copy_dir / "files" / "crds" / "benchmarkschedules.benchgate.dev.yaml").unlink()
    with helm_python.Chart.load(copy_dir) as broken, pytest.raises(helm_python.HelmRenderError) as failure:
        render_text(broken, with_host({}))
    assert "benchmarkschedules.benchgate.dev.yaml is missing" in str(failure.value)
    # Without the CRDs in the release, the files are not needed.
    with helm_python.Chart.load(copy_dir) as broken:
        render_text(broken, with_host(VARIANTS["crds-off"]))


def test_crds_keep_and_enabled_toggles(chart: helm_python.Chart) -> None:
    for crd in of_kind(render(chart, {"crds": {"keep": False}}), "CustomResourceDefinition"):
        assert "helm.sh/resource-policy" not in crd["metadata"].get("annotations", {})
    assert of_kind(render(chart, VARIANTS["crds-off"]), "CustomResourceDefinition") == []


# --- Peering -------------------------------------------------------------------------------------


def test_peering_objects_match_their_crds(chart: helm_python.Chart) -> None:
    """kubernetes_validate knows no kopf kinds: each peering object is checked against the CRD the
    chart ships for it (group, version, kind, scope, schema), with keep-alives as kopf writes them."""
    crds = {
        (crd["spec"]["group"], version["name"], crd["spec"]["names"]["kind"]): (crd, version)
        for crd in chart_crds(chart)
        for version in crd["spec"]["versions"]
        if version["served"]
    }
    assert {kind for _, _, kind in crds} == {"ClusterKopfPeering", "KopfPeering"}
    keep_alive = {
        "benchgate-7d9f-x2x": {"priority": 1234, "lifetime": 60, "lastseen": "2026-11-25T00:00:00+00:00"}
    }
    for namespaced, kind in ((False, "ClusterKopfPeering"), (True, "KopfPeering")):
        (peering,) = of_kind(
            render(chart, {"rbac": {"namespaced": namespaced}}), "ClusterKopfPeering", "KopfPeering"
        )
        assert peering["kind"] == kind
        group, version = peering["apiVersion"].split("/")
        crd, served = crds[(group, version, kind)]
        assert ("namespace" in peering["metadata"]) is (crd["spec"]["scope"] == "Namespaced")
        schema = served["schema"]["openAPIV3Schema"]
        jsonschema.Draft4Validator(schema).validate({**peering, "status": keep_alive})
        with pytest.raises(jsonschema.ValidationError):  # the schema is one that can refuse
            jsonschema.Draft4Validator(schema).validate({**peering, "status": "alive"})


def test_peering_lets_replicas_and_rolling_updates_in(chart: helm_python.Chart) -> None:
    objects = render(chart, VARIANTS["everything"])
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    # The new pod starts before the old one stops: one of the two pauses, by priority.
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    # The peering object is the one the controllers are told to use.
    peering = one(objects, "KopfPeering")["metadata"]
    assert one(objects, "ConfigMap")["data"]["BENCHGATE_PEERING"] == peering["name"]
    assert peering["namespace"] == one(objects, "Deployment")["metadata"]["namespace"]
    # Each pod's identity among its peers is its name; its "auto" priority comes from its uid.
    env = env_of(controller_container(objects))
    assert env["POD_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_UID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.uid"}}

    standalone = render(chart, VARIANTS["standalone"])
    assert one(standalone, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}
    assert one(standalone, "Deployment")["spec"]["replicas"] == 1
    assert one(standalone, "ConfigMap")["data"]["BENCHGATE_PEERING"] == ""
    assert of_kind(standalone, "ClusterKopfPeering", "KopfPeering") == []


# --- The controller Deployment -------------------------------------------------------------------


def test_deployment_defaults(chart: helm_python.Chart) -> None:
    objects = render(chart, {})
    deployment = one(objects, "Deployment")
    # One pod; peered, so an update rolls (test_peering_lets_replicas_and_rolling_updates_in).
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()

    container = controller_container(objects)
    assert container["image"] == f"ghcr.io/benchgate/operator:{benchgate.__version__}"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["command"] == ["benchgate", "controller"]
    assert container["args"] == ["--liveness", "http://0.0.0.0:8080/healthz"]
    probe = container["livenessProbe"]["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert probe["path"] == "/healthz"
    assert ports[probe["port"]] == 8080
    # kopf answers /healthz only once started: the startup probe holds liveness off until then (up to
    # 5 minutes), so liveness needs no fixed initial delay.
    startup = container["startupProbe"]
    assert startup["httpGet"] == container["livenessProbe"]["httpGet"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300
    assert "initialDelaySeconds" not in container["livenessProbe"]
    assert container["resources"] == {
        "requests": {"cpu": "50m", "memory": "128Mi"},
        "limits": {"memory": "256Mi"},
    }
    configmap = one(objects, "ConfigMap")
    assert container["envFrom"] == [{"configMapRef": {"name": configmap["metadata"]["name"]}}]
    # No existingSecret: no token variables at all.
    assert set(env_of(container)) == {"HOME", "POD_ID", "POD_UID"}
    assert pod["spec"]["serviceAccountName"] == one(objects, "ServiceAccount")["metadata"]["name"]


def test_deployment_passes_pod_values_through(chart: helm_python.Chart) -> None:
    values = VARIANTS["everything"]
    objects = render(chart, values)
    pod = one(objects, "Deployment")["spec"]["template"]
    spec = pod["spec"]
    container = controller_container(objects)
    # By digest when one is given: what was verified is what runs; the tag is ignored then.
    assert container["image"] == f"registry.example.com/bg/operator@{DIGEST}"
    tagged = controller_container(render(chart, {"image": {"tag": "0.1.0-rc1"}}))
    assert tagged["image"] == "ghcr.io/benchgate/operator:0.1.0-rc1"
    assert container["imagePullPolicy"] == "Always"
    assert container["resources"] == values["resources"]
    assert env_of(container)["HTTPS_PROXY"] == values["extraEnv"][0]
    assert spec["volumes"][-1] == values["extraVolumes"][0]
    assert container["volumeMounts"][-1] == values["extraVolumeMounts"][0]
    assert spec["imagePullSecrets"] == values["imagePullSecrets"]
    assert spec["nodeSelector"] == values["nodeSelector"]
    assert spec["tolerations"] == values["tolerations"]
    assert spec["affinity"] == values["affinity"]
    assert spec["priorityClassName"] == values["priorityClassName"]
    assert spec["serviceAccountName"] == "bg-controller"
    assert pod["metadata"]["annotations"]["example.com/team"] == "ml"
    assert pod["metadata"]["labels"]["team"] == "ml"
    tmp = next(v for v in spec["volumes"] if v["name"] == "tmp")
    assert tmp == {"name": "tmp", "emptyDir": {}}
    assert (
        one(objects, "ServiceAccount")["metadata"]["annotations"] == values["serviceAccount"]["annotations"]
    )


def test_replicas_spread_across_nodes_and_keep_one_through_a_drain(chart: helm_python.Chart) -> None:
    """A standby is worth having on another node, and a drain takes one controller pod at a time."""
    objects = render(chart, {})
    deployment = one(objects, "Deployment")
    selector = deployment["spec"]["selector"]["matchLabels"]
    # By default: a soft preference for different nodes (one node may still run them all).
    (term,) = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    # One replica: no budget (it would only block the drain).
    assert of_kind(objects, "PodDisruptionBudget") == []
    replicas = render(chart, VARIANTS["everything"])
    budget = one(replicas, "PodDisruptionBudget")
    selector = one(replicas, "Deployment")["spec"]["selector"]["matchLabels"]
    assert budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
    assert budget["metadata"]["namespace"] == NAMESPACE
    # Affinity given: it replaces the default (test_deployment_passes_pod_values_through).


def test_a_settings_change_restarts_the_controller(chart: helm_python.Chart) -> None:
    def checksum(values: dict[str, Any]) -> str:
        return one(render(chart, values), "Deployment")["spec"]["template"]["metadata"]["annotations"][
            "checksum/config"
        ]

    assert checksum({}) == checksum({})
    assert checksum({}) != checksum({"controller": {"pollSeconds": 10}})
    assert checksum({}) != checksum({"kfp": {"experiment": "other"}})


def test_existing_secret_supplies_optional_tokens(chart: helm_python.Chart) -> None:
    env = env_of(controller_container(render(chart, VARIANTS["existing-secret"])))
    assert env["KFP_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": SECRET, "key": "kfpToken", "optional": True}
    }
    assert env["MLFLOW_TRACKING_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": SECRET, "key": "mlflowToken", "optional": True}
    }
    env = env_of(controller_container(render(chart, VARIANTS["everything"])))
    assert env["KFP_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "kfp"
    assert env["MLFLOW_TRACKING_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "mlflow"


# --- Metrics, readiness, helm test, NetworkPolicy ----------------------------------------------


@pytest.mark.parametrize("variant", ["defaults", "monitoring", "everything"])
def test_metrics_port_probe_service_and_setting_agree(chart: helm_python.Chart, variant: str) -> None:
    objects = render(chart, VARIANTS[variant])
    container = controller_container(objects)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    port = int(one(objects, "ConfigMap")["data"]["BENCHGATE_METRICS_PORT"])
    assert ports["metrics"] == port and port != ports["health"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    service = one(objects, "Service")
    (service_port,) = service["spec"]["ports"]
    assert service_port == {"name": "metrics", "port": port, "targetPort": "metrics", "protocol": "TCP"}
    pod_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    # helm test asks the Service for /readyz, in the controller's image.
    (test_pod,) = of_kind(objects, "Pod")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (check,) = test_pod["spec"]["containers"]
    assert check["image"] == container["image"]
    assert f"http://{service['metadata']['name']}:{port}/readyz" in check["command"][-1]


def test_metrics_can_be_turned_off(chart: helm_python.Chart) -> None:
    objects = render(chart, VARIANTS["metrics-off"])
    container = controller_container(objects)
    assert [p["name"] for p in container["ports"]] == ["health"]
    assert "readinessProbe" not in container
    assert one(objects, "ConfigMap")["data"]["BENCHGATE_METRICS_PORT"] == "0"
    from benchgate.controller import settings as settings_module

    data = {**one(objects, "ConfigMap")["data"], "POD_UID": "0b5c1a4e-7f1d-4c2a-9a43-2f0c8c8a6a11"}
    assert settings_module.settings_from_env(data).metrics_port == 0


def test_service_monitor_scrapes_the_metrics_service(chart: helm_python.Chart) -> None:
    assert of_kind(render(chart, {}), "ServiceMonitor") == []
    objects = render(chart, VARIANTS["monitoring"])
    monitor, service = one(objects, "ServiceMonitor"), one(objects, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "1m"}]


def test_network_policy_admits_the_probe_and_metrics_ports_only(chart: helm_python.Chart) -> None:
    assert of_kind(render(chart, {}), "NetworkPolicy") == []
    values = VARIANTS["monitoring"]["networkPolicy"]
    objects = render(chart, VARIANTS["monitoring"])
    policy = one(objects, "NetworkPolicy")["spec"]
    container = controller_container(objects)
    assert (
        policy["podSelector"]["matchLabels"].items()
        <= one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"].items()
    )
    (ingress,) = policy["ingress"]
    assert {p["port"] for p in ingress["ports"]} == {p["name"] for p in container["ports"]}
    assert ingress["from"] == values["ingressFrom"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    dns, *rest = policy["egress"]
    assert {p["port"] for p in dns["ports"]} == {53} and rest == values["egress"]
    # No egress rules given: egress is left alone.
    open_egress = one(render(chart, {"networkPolicy": {"enabled": True}}), "NetworkPolicy")["spec"]
    assert open_egress["policyTypes"] == ["Ingress"] and "egress" not in open_egress


# --- Secure defaults -----------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_pod_runs_restricted(chart: helm_python.Chart, variant: str) -> None:
    objects = render(chart, VARIANTS[variant])
    specs = pod_specs(objects)
    assert specs, "no pod rendered"
    for where, spec in specs:
        pod_sc = spec["securityContext"]
        assert pod_sc["runAsNonRoot"] is True, where
        assert (pod_sc["runAsUser"], pod_sc["runAsGroup"], pod_sc["fsGroup"]) == (10001, 10001, 10001), where
        assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}, where
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for container in spec["containers"] + spec.get("initContainers", []):
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["privileged"] is False, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            assert sc.get("runAsNonRoot", True) is True and sc.get("runAsUser", 10001) != 0, where
            # A read-only root needs a writable HOME: git and MLflow write there.
            assert env_of(container)["HOME"]["value"] == "/tmp", where
            tmp = next(m for m in container["volumeMounts"] if m["mountPath"] == "/tmp")
            assert "emptyDir" in volumes[tmp["name"]], where
    # The API token goes only where it is used: the controller pod, not every user of the account.
    deployment_spec = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert deployment_spec["automountServiceAccountToken"] is True
    for account in of_kind(objects, "ServiceAccount"):
        assert account["automountServiceAccountToken"] is False


# --- RBAC ----------------------------------------------------------------------------------------


def triples(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.mark.parametrize("peering", [True, False])
@pytest.mark.parametrize("namespaced", [False, True])
def test_rbac_is_exactly_the_required_access(
    chart: helm_python.Chart, namespaced: bool, peering: bool
) -> None:
    objects = render(chart, {"rbac": {"namespaced": namespaced}, "peering": {"enabled": peering}})
    role_kind = "Role" if namespaced else "ClusterRole"
    controller_roles = [r for r in of_kind(objects, "Role", "ClusterRole") if not user_role(r)]
    assert [r["kind"] for r in controller_roles] == [role_kind]
    role = controller_roles[0]
    binding = one(objects, f"{role_kind}Binding")
    rules = role["rules"]

    access = required_access(namespaced=namespaced, peering=peering)
    assert triples(rules) == {(a.api_group, a.resource, verb) for a in access for verb in a.verbs}
    for rule in rules:
        # Only what is listed: no wildcards, no resourceNames/nonResourceURLs surprises.
        assert set(rule) == {"apiGroups", "resources", "verbs"}
        assert "*" not in json.dumps(rule)
        assert not {"secrets", "pods", "namespaces"} & set(rule["resources"])

    if namespaced:
        assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE
    else:
        assert "namespace" not in role["metadata"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": role_kind,
        "name": role["metadata"]["name"],
    }
    account = one(objects, "ServiceAccount")["metadata"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": NAMESPACE}
    ]
    # The controller watches exactly where its Role reaches.
    configmap = one(objects, "ConfigMap")
    assert configmap["data"]["BENCHGATE_WATCH_NAMESPACE"] == (NAMESPACE if namespaced else "")


def user_role(role: dict[str, Any]) -> bool:
    return any(k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in role["metadata"]["labels"])


def test_user_roles_aggregate_into_view_and_edit(chart: helm_python.Chart) -> None:
    roles = {r["metadata"]["name"]: r for r in of_kind(render(chart, {}), "ClusterRole") if user_role(r)}
    assert set(roles) == {f"{RELEASE}-view", f"{RELEASE}-edit"}
    view, edit = roles[f"{RELEASE}-view"], roles[f"{RELEASE}-edit"]
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    for aggregate in ("edit", "admin"):
        assert edit["metadata"]["labels"][f"rbac.authorization.k8s.io/aggregate-to-{aggregate}"] == "true"
    resources = {"benchmarkruns", "benchmarkschedules"}
    reads = ("get", "list", "watch")
    assert triples(view["rules"]) == {("benchgate.dev", r, v) for r in resources for v in reads}
    verbs = ("create", "delete", "deletecollection", "patch", "update")
    assert triples(edit["rules"]) == {("benchgate.dev", r, v) for r in resources for v in verbs}
    # People never write a status: that is the controller's record of what happened.
    assert not any("/status" in r for rule in edit["rules"] + view["rules"] for r in rule["resources"])
    assert [r for r in of_kind(render(chart, VARIANTS["metrics-off"]), "ClusterRole") if user_role(r)] == []


@pytest.mark.parametrize("namespaced", [False, True])
def test_kfp_profiles_grant_exactly_the_kfp_calls_and_nothing_of_kubeflow_edit(
    chart: helm_python.Chart, namespaced: bool
) -> None:
    objects = render(chart, {"kfp": {"profiles": ["team-a", "team-b"]}, "rbac": {"namespaced": namespaced}})
    roles = [r for r in of_kind(objects, "Role") if r["metadata"]["name"] == f"{RELEASE}-kfp"]
    bindings = [b for b in of_kind(objects, "RoleBinding") if b["metadata"]["name"] == f"{RELEASE}-kfp"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    granted = {(a.api_group, a.resource, verb) for a in KFP_ACCESS for verb in a.verbs}
    account = one(objects, "ServiceAccount")["metadata"]["name"]
    for role, binding in zip(roles, bindings, strict=True):
        assert triples(role["rules"]) == granted
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": f"{RELEASE}-kfp",
        }
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
    # None by default, and none when the chart creates no RBAC at all.
    assert [r for r in of_kind(render(chart, {}), "Role") if r["metadata"]["name"].endswith("-kfp")] == []
    without_rbac = render(chart, {"kfp": {"profiles": ["team-a"]}, "rbac": {"create": False}})
    assert of_kind(without_rbac, "Role", "RoleBinding") == []


def test_rbac_and_service_account_can_be_left_to_the_user(chart: helm_python.Chart) -> None:
    objects = render(chart, VARIANTS["external-sa"])
    assert (
        of_kind(objects, "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ServiceAccount") == []
    )
    assert one(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "ci-bot"
    default_account = render(chart, {"serviceAccount": {"create": False}})
    assert one(default_account, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "default"


# --- Settings ------------------------------------------------------------------------------------


def documented_settings() -> dict[str, str]:
    """settings.py's docstring table: variable name -> its description's first line."""
    tree = ast.parse(SETTINGS_PY.read_text())
    doc = ast.get_docstring(tree, clean=False) or ""
    # A row: the variable's name at the start of a line, two or more spaces, its description.
    table = dict(re.findall(r"^[ \t]*([A-Z][A-Z0-9_]+) {2,}(.+)$", doc, re.M))
    assert "KFP_HOST" in table, "settings.py's docstring no longer lists the variables"
    return table


def test_configmap_carries_exactly_the_documented_settings(chart: helm_python.Chart) -> None:
    documented = documented_settings()
    # The tokens come from existingSecret, never from the ConfigMap.
    from_secret = {name for name, text in documented.items() if "existingSecret" in text}
    assert from_secret == {"KFP_TOKEN", "MLFLOW_TRACKING_TOKEN"}

    configmap = one(render(chart, {}), "ConfigMap")
    assert set(configmap["data"]) == set(documented) - from_secret
    env = env_of(controller_container(render(chart, VARIANTS["existing-secret"])))
    assert {name for name, e in env.items() if "secretKeyRef" in e.get("valueFrom", {})} == from_secret


def test_controller_parses_what_the_chart_renders(chart: helm_python.Chart) -> None:
    # Imported here: a broken controller module fails this test, not the whole file.
    from benchgate.controller import settings as settings_module
    from benchgate.controller.decide.admin_policy import Policy
    from benchgate.controller.spec.resources import Toleration

    values = VARIANTS["everything"]
    objects = render(chart, values)
    data = one(objects, "ConfigMap")["data"]
    settings = settings_module.settings_from_env(data)
    assert settings.kfp.host == KFP_HOST
    assert settings.experiment == "nightly"
    assert settings.mlflow_uri == values["mlflow"]["trackingUri"]
    assert settings.mlflow_ui == values["mlflow"]["uiEndpoint"]
    assert settings.poll_s == 2.5
    assert settings.schedule_poll_s == 60
    assert settings.repair_s == 120
    assert settings.max_active_per_namespace == 0
    assert settings.watch_namespace == NAMESPACE
    assert settings.kfp.namespace == "ml-team"
    assert settings.policy == Policy(
        repositories=("https://github.com/acme/", "git@github.com:acme/"),
        node_selectors=({"pool": "a100"},),
        tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),),
        pvcs={"ml-infra": ("bench-cache",), "*": ("shared-cache",)},
        promote_namespaces=("ml-infra",),
        promote_schedule_owned_only=True,
        max_gpus_per_node=16,
        default_active_deadline_seconds=21600,  # the chart's default, which the variant keeps
    )
    assert settings.peering_name == one(objects, "KopfPeering")["metadata"]["name"]
    assert settings.peering_priority == 5
    # The defaults parse too, to the controller's own defaults; "auto" priorities need the pod's uid,
    # which the Deployment passes (test_peering_lets_replicas_and_rolling_updates_in).
    data = one(render(chart, {}), "ConfigMap")["data"]
    with pytest.raises(ConfigError, match=r"BENCHGATE_PEERING_PRIORITY.*POD_UID"):
        settings_module.settings_from_env(data)
    uid = "5f0c1b9e-3c1d-4d4a-9a53-0c6f1c4e2b11"
    defaults = settings_module.settings_from_env({**data, "POD_UID": uid})
    assert (defaults.poll_s, defaults.schedule_poll_s, defaults.max_active_per_namespace) == (30, 30, 4)
    assert defaults.repair_s == 300
    assert defaults.watch_namespace == ""
    assert defaults.peering_priority == settings_module.priority_from_uid(uid) >= 1000
    standalone = settings_module.settings_from_env(
        {**one(render(chart, VARIANTS["standalone"]), "ConfigMap")["data"], "POD_UID": uid}
    )
    assert standalone.peering_name == ""
    assert defaults.policy == Policy(max_gpus_per_node=8, default_active_deadline_seconds=21600)


def test_a_projected_service_account_token_reaches_kfps_default_token_path(chart: helm_python.Chart) -> None:
    from benchgate.kfp.api import DEFAULT_SA_TOKEN_PATH

    objects = render(chart, VARIANTS["everything"])
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "kfp-token"]
    (source,) = volume["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "pipelines.kubeflow.org"
    (mount,) = [m for m in controller_container(objects)["volumeMounts"] if m["name"] == "kfp-token"]
    assert f"{mount['mountPath']}/{source['serviceAccountToken']['path']}" == DEFAULT_SA_TOKEN_PATH
    defaults = one(render(chart, {}), "Deployment")["spec"]["template"]["spec"]
    assert [v["name"] for v in defaults["volumes"]] == ["tmp"]


def test_missing_kfp_host_fails_the_render_naming_it(chart: helm_python.Chart) -> None:
    with pytest.raises(helm_python.HelmRenderError, match=r"kfp\.host"):
        render_text(chart, {})
    with pytest.raises(helm_python.HelmRenderError, match=r"kfp\.host"):
        render_text(chart, {"kfp": {"host": ""}})


def test_notes_describe_the_install(chart: helm_python.Chart) -> None:
    notes = render_text(chart, with_host(VARIANTS["namespaced"]))["benchgate/templates/NOTES.txt"]
    assert KFP_HOST in notes
    assert f"watches only namespace {NAMESPACE}" in notes
    # The uninstall order: the runs while the controller can still terminate their KFP runs, then it.
    assert f"helm test {RELEASE} --namespace {NAMESPACE}" in notes
    quiet = render_text(chart, with_host(VARIANTS["metrics-off"]))["benchgate/templates/NOTES.txt"]
    assert "helm test" not in quiet
    deleting = notes.index(f"kubectl delete benchmarkschedules,benchmarkruns --all --namespace {NAMESPACE}")
    assert deleting < notes.index(f"helm uninstall {RELEASE} --namespace {NAMESPACE}")
    # Where to see which controller acts: the peering object the release created.
    assert f"kubectl get kopfpeering {RELEASE} --namespace {NAMESPACE}" in notes
    notes = render_text(chart, with_host({}))["benchgate/templates/NOTES.txt"]
    assert f"kubectl get clusterkopfpeering {RELEASE} -o jsonpath" in notes
    notes = render_text(chart, with_host(VARIANTS["standalone"]))["benchgate/templates/NOTES.txt"]
    assert "peered" not in notes and "kopfpeering" not in notes


@pytest.mark.parametrize("namespaced", [False, True])
def test_uninstall_releases_benchgates_finalizers_first(chart: helm_python.Chart, namespaced: bool) -> None:
    """A pre-delete hook Job runs `benchgate release-finalizers` with the controller's image, under an
    account that may only list, get and patch the two kinds, where the controller reaches."""
    objects = render(chart, {"rbac": {"namespaced": namespaced}}, uninstall="only")
    scope = "Role" if namespaced else "ClusterRole"
    assert sorted(o["kind"] for o in objects) == sorted(["ServiceAccount", scope, f"{scope}Binding", "Job"])
    for obj in objects:
        annotations = obj["metadata"]["annotations"]
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    # The account and its rights exist before the Job runs.
    weights = {o["kind"]: int(o["metadata"]["annotations"]["helm.sh/hook-weight"]) for o in objects}
    assert max(w for k, w in weights.items() if k != "Job") < weights["Job"]
    role = one(objects, scope)
    assert triples(role["rules"]) == {
        ("benchgate.dev", r, v)
        for r in ("benchmarkruns", "benchmarkschedules")
        for v in ("get", "list", "patch")
    }
    assert ("namespace" in role["metadata"]) is namespaced
    job = one(objects, "Job")
    pod = job["spec"]["template"]["spec"]
    account = one(objects, "ServiceAccount")["metadata"]["name"]
    assert pod["serviceAccountName"] == account
    assert one(objects, f"{scope}Binding")["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]
    (container,) = pod["containers"]
    assert container["image"] == controller_container(render(chart, {}))["image"]
    assert container["command"] == ["benchgate", "release-finalizers"]
    assert container.get("args", []) == (["--namespace", NAMESPACE] if namespaced else [])
    assert pod["restartPolicy"] == "Never"
    # Off, or with RBAC left to the user: no hook.
    assert render(chart, {"uninstall": {"releaseFinalizers": False}}, uninstall="only") == []
    assert render(chart, VARIANTS["external-sa"], uninstall="only") == []


def test_the_readme_uninstalls_runs_then_the_release_then_the_crds() -> None:
    readme = (CHART_DIR / "README.md").read_text(encoding="utf-8")
    steps = readme.split("## Uninstall", 1)[1]
    order = [
        steps.index("kubectl delete benchmarkschedules,benchmarkruns"),
        steps.index("helm uninstall"),
        steps.index("kubectl delete crd benchmarkruns.benchgate.dev benchmarkschedules.benchgate.dev"),
    ]
    assert order == sorted(order)
    assert FINALIZER in steps


# --- values.schema.json --------------------------------------------------------------------------


def test_schema_accepts_the_defaults_and_every_variant(chart: helm_python.Chart) -> None:
    assert chart.schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    chart.validate_schema(chart.values)
    for values in VARIANTS.values():
        chart.validate_schema(with_host(values))
    # Set by Helm when the chart is a subchart of another.
    chart.validate_schema({"global": {"imageRegistry": "x"}})


BAD_VALUES = [
    ({"replicaCount": 2, "peering": {"enabled": False}}, "replicaCount"),  # standalone: exactly one
    ({"replicaCount": 0}, "replicaCount"),
    ({"replicaCount": "2"}, "replicaCount"),
    ({"peering": {"enabled": "yes"}}, "enabled"),
    ({"peering": {"priority": "high"}}, "priority"),
    ({"peering": {"priority": -1}}, "priority"),
    ({"peering": {"name": "other"}}, "name"),
    ({"image": {"digest": "abc123"}}, "digest"),
    ({"metrics": {"port": 8080}}, "port"),
    ({"metrics": {"port": 80}}, "port"),
    ({"metrics": {"serviceMonitor": {"interval": "often"}}}, "interval"),
    ({"networkPolicy": {"ingressFrom": {"podSelector": {}}}}, "ingressFrom"),
    ({"extraVolumeMounts": [{"name": "ca", "mountPath": "etc/ca"}]}, "mountPath"),
    ({"extraVolumes": [{"configMap": {"name": "x"}}]}, "extraVolumes"),
    ({"bogus": True}, "bogus"),
    ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
    ({"image": {"tag": 1}}, "tag"),
    ({"image": {"repository": ""}}, "repository"),
    ({"image": {"registry": "x"}}, "registry"),
    ({"imagePullSecrets": ["regcred"]}, "imagePullSecrets"),
    ({"crds": {"enabled": "true"}}, "enabled"),
    ({"kfp": {"host": "ml-pipeline.kubeflow:8888"}}, "host"),
    ({"kfp": {"hots": KFP_HOST}}, "hots"),
    ({"kfp": {"experiment": ""}}, "experiment"),
    ({"mlflow": {"uiEndpoint": "mlflow.example.com"}}, "uiEndpoint"),
    ({"controller": {"pollSeconds": -1}}, "pollSeconds"),
    ({"controller": {"pollSeconds": 0}}, "pollSeconds"),
    ({"controller": {"pollSeconds": "30"}}, "pollSeconds"),
    ({"controller": {"schedulePollSeconds": -5}}, "schedulePollSeconds"),
    ({"controller": {"repairSeconds": 0}}, "repairSeconds"),
    ({"controller": {"maxActivePerNamespace": -1}}, "maxActivePerNamespace"),
    ({"controller": {"maxActivePerNamespace": 1.5}}, "maxActivePerNamespace"),
    ({"existingSecret": "Not_A_Name"}, "existingSecret"),
    ({"existingSecret": {"name": SECRET}}, "existingSecret"),
    ({"existingSecretKeys": {"kfpToken": "a key"}}, "kfpToken"),
    ({"serviceAccount": {"create": "yes"}}, "create"),
    ({"serviceAccount": {"annotations": {"a": 1}}}, "annotations"),
    ({"rbac": {"namespaced": 1}}, "namespaced"),
    ({"rbac": {"clusterWide": True}}, "clusterWide"),
    ({"extraEnv": [{"value": "no name"}]}, "extraEnv"),
    ({"resources": {"limits": {"memory": "lots"}}}, "memory"),
    ({"resources": {"limit": {"memory": "1Gi"}}}, "limit"),
    ({"podSecurityContext": {"runAsNonRoot": "true"}}, "runAsNonRoot"),
    ({"podSecurityContext": {"runAsUser": -1}}, "runAsUser"),
    ({"securityContext": {"readOnlyRootFilesystem": "yes"}}, "readOnlyRootFilesystem"),
    ({"tmpSizeLimit": "big"}, "tmpSizeLimit"),
    ({"nodeSelector": {"pool": True}}, "nodeSelector"),
    ({"tolerations": {"key": "x"}}, "tolerations"),
    ({"policy": {"allowEverything": True}}, "allowEverything"),
    ({"policy": {"repositories": ["github.com/acme"]}}, "repositories"),
    ({"policy": {"repositories": "https://github.com/acme/"}}, "repositories"),
    ({"policy": {"nodeSelectors": [{"pool": 1}]}}, "nodeSelectors"),
    ({"policy": {"tolerations": [{"key": "x", "operator": "In"}]}}, "operator"),
    ({"policy": {"pvcs": {"team-a": "bench-cache"}}}, "pvcs"),
    ({"policy": {"promoteNamespaces": ["Team_A"]}}, "promoteNamespaces"),
    ({"policy": {"promoteScheduleOwnedOnly": "yes"}}, "promoteScheduleOwnedOnly"),
    ({"policy": {"maxGpusPerNode": -1}}, "maxGpusPerNode"),
    ({"policy": {"maxGpusPerNode": 1.5}}, "maxGpusPerNode"),
    ({"policy": {"experiments": {"team-a": "team-a"}}}, "experiments"),
    ({"policy": {"defaultActiveDeadlineSeconds": -1}}, "defaultActiveDeadlineSeconds"),
    ({"policy": {"maxActiveDeadlineSeconds": "1h"}}, "maxActiveDeadlineSeconds"),
    ({"policy": {"acceleratorTypes": "nvidia.com/gpu"}}, "acceleratorTypes"),
    ({"policy": {"maxCpuRequest": 16}}, "maxCpuRequest"),
    ({"policy": {"maxMemoryRequest": "32 GB"}}, "maxMemoryRequest"),
]


@pytest.mark.parametrize(("values", "named"), BAD_VALUES, ids=[json.dumps(v) for v, _ in BAD_VALUES])
def test_schema_rejects_bad_values(chart: helm_python.Chart, values: dict[str, Any], named: str) -> None:
    with pytest.raises(helm_python.HelmValuesError, match=re.escape(named)):
        chart.validate_schema(with_host(values))


def test_render_enforces_the_schema(chart: helm_python.Chart) -> None:
    with pytest.raises(helm_python.HelmValuesError, match="pollSeconds"):
        render_text(chart, with_host({"controller": {"pollSeconds": -1}}))


# --- values.yaml documentation -------------------------------------------------------------------

KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?P<rest>.*)$")


def test_every_value_is_documented() -> None:
    """helm-docs style: each leaf value, or a map that holds it, has a `# --` comment right above.

    The line walk reads block-style maps only, which is how values.yaml is written; the leaf count is
    checked against the parsed YAML so that a value the walk cannot see fails rather than slips by.
    """
    lines = (CHART_DIR / "values.yaml").read_text().splitlines()
    parsed = yaml.safe_load("\n".join(lines))

    def leaves(node: Any, prefix: str = "") -> set[str]:
        if isinstance(node, dict) and node:
            return set().union(*(leaves(v, f"{prefix}{k}.") for k, v in node.items()))
        return {prefix.rstrip(".")}

    def doc_above(index: int) -> str | None:
        """The `# --` comment of the key on lines[index]: the comment block directly above it."""
        text = None
        j = index - 1
        while j >= 0 and lines[j].strip().startswith("#"):
            stripped = lines[j].strip()
            if stripped.startswith("# --"):
                text = stripped[len("# --") :].strip()
            j -= 1
        return text

    stack: list[tuple[int, str, bool]] = []  # (indent, key, documented) of the enclosing maps
    seen: set[str] = set()
    undocumented: list[str] = []
    for index, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = KEY_LINE.match(line)
        # Block lists ("- item") and multi-line strings would hide keys from the walk.
        assert match, f"values.yaml:{index + 1}: {line.strip()!r}: write it as a flow collection or one line"
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k, _ in stack] + [match["key"]])
        documented = doc_above(index)
        if documented == "":
            undocumented.append(f"{path} (empty `# --` comment)")
        covered = bool(documented) or any(d for _, _, d in stack)
        value = match["rest"].split(" #")[0].strip()
        if value:  # a leaf: a scalar, or an inline [] / {} / flow collection
            seen.add(path)
            if not covered:
                undocumented.append(path)
        else:
            stack.append((indent, match["key"], bool(documented)))
    assert undocumented == [], f"values without a `# --` comment: {undocumented}"
    assert seen == leaves(parsed), "values.yaml holds values the line walk did not read"
