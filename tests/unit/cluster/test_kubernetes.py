"""scripts/kubernetes/pytorchjob.yaml: valid against the PyTorchJob CRD's schema, and the plan its pods make."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tests.unit.cluster.plans import make_plan

REPO = Path(__file__).resolve().parents[3]
MANIFEST = REPO / "scripts/kubernetes/pytorchjob.yaml"
SCHEMA = Path(__file__).with_name("pytorchjob-schema.yaml")
TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": (int, float)}


def schema_errors(schema: dict, value: object, where: str = "") -> list[str]:
    """What in `value` breaks an OpenAPI v3 structural schema, as far as the cut schema goes.

    The subset Kubernetes uses for CRDs: type, properties (a key not among them is refused, as
    `kubectl apply` does with strict field validation), required, items, additionalProperties, enum,
    anyOf and x-kubernetes-int-or-string. jsonschema is not in the dev lock, hence this.
    """
    if schema.get("x-kubernetes-int-or-string"):
        return [] if isinstance(value, (int, str)) and not isinstance(value, bool) else [f"{where}: not int or string"]
    if "anyOf" in schema and all(schema_errors(option, value, where) for option in schema["anyOf"]):
        return [f"{where}: matches no anyOf option"]
    kind = schema.get("type")
    if kind and (not isinstance(value, TYPES[kind]) or (kind in ("integer", "number") and isinstance(value, bool))):
        return [f"{where}: {type(value).__name__}, not {kind}"]
    errors = [f"{where}: {value!r} not in {schema['enum']}"] if "enum" in schema and value not in schema["enum"] else []
    if isinstance(value, dict):
        errors += [f"{where}.{key}: required" for key in schema.get("required", ()) if key not in value]
        properties, extra = schema.get("properties"), schema.get("additionalProperties")
        for key, item in value.items():
            if properties is not None and key in properties:
                errors += schema_errors(properties[key], item, f"{where}.{key}")
            elif isinstance(extra, dict):
                errors += schema_errors(extra, item, f"{where}.{key}")
            elif properties is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
                errors.append(f"{where}.{key}: unknown field")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            errors += schema_errors(schema["items"], item, f"{where}[{index}]")
    return errors


@pytest.fixture(scope="module")
def manifest() -> dict:
    return yaml.safe_load(MANIFEST.read_text())


def test_the_manifest_is_a_valid_pytorchjob(manifest):
    assert (manifest["apiVersion"], manifest["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert schema_errors(yaml.safe_load(SCHEMA.read_text()), manifest) == []


def test_the_cut_schema_still_refuses_a_misspelt_key_and_a_wrong_type(manifest):
    schema, manifest = yaml.safe_load(SCHEMA.read_text()), copy.deepcopy(manifest)
    container = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    bad = {**manifest, "spec": {**manifest["spec"], "runPolicy": {"cleanPodPolicy": "None", "ttlSecondAfter": 1}}}
    assert schema_errors(schema, bad) == [".spec.runPolicy.ttlSecondAfter: unknown field"]
    container["ports"][0]["containerPort"] = "23456"
    assert schema_errors(schema, manifest) == [
        f".spec.pytorchReplicaSpecs.{replica}.template.spec.containers[0].ports[0].containerPort: str, not integer"
        for replica in ("Master", "Worker")  # one pod template for both (a YAML anchor)
    ]


def test_what_the_operator_needs_beyond_the_schema(manifest):
    """pkg/controller.v1/pytorch: MASTER_ADDR and RANK only with a Master replica, the port named
    pytorchjob-port in the container named pytorch; and zerokit's own settings in that container."""
    replicas = manifest["spec"]["pytorchReplicaSpecs"]
    assert set(replicas) == {"Master", "Worker"} and replicas["Master"]["replicas"] == 1
    assert "elasticPolicy" not in manifest["spec"]  # PET_NNODES would be a range: refused
    for replica in replicas.values():
        (container,) = replica["template"]["spec"]["containers"]
        assert container["name"] == "pytorch"
        assert [p["name"] for p in container["ports"]] == ["pytorchjob-port"]
        env = {item["name"]: item["value"] for item in container["env"]}
        assert env["ZEROKIT_LAUNCHER"] == "kubeflow"
        assert int(env["ZEROKIT_NPROC_PER_NODE"]) == container["resources"]["limits"]["nvidia.com/gpu"]


def pod_environ(manifest: dict, replica: str, index: int) -> dict[str, str]:
    """The variables the operator (release-1.9, envvar.go and master.go) and the kubelet give a pod."""
    specs = manifest["spec"]["pytorchReplicaSpecs"]
    (container,) = specs[replica]["template"]["spec"]["containers"]
    nodes = sum(spec["replicas"] for spec in specs.values())
    rank = index + (1 if replica == "Worker" else 0)
    master = f"{manifest['metadata']['name']}-master-0"
    port = str(container["ports"][0]["containerPort"])
    return {
        **{item["name"]: item["value"] for item in container["env"]},
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "HOSTNAME": f"{manifest['metadata']['name']}-{replica.lower()}-{index}",
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": master,
        "PET_MASTER_ADDR": master,
        "MASTER_PORT": port,
        "PET_MASTER_PORT": port,
        "WORLD_SIZE": str(nodes),  # nodes x nprocPerNode, which the manifest leaves at "auto" (1)
        "RANK": str(rank),
        "PET_NODE_RANK": str(rank),
        "PET_NPROC_PER_NODE": "auto",
        "PET_NNODES": str(nodes),
    }


def test_each_pod_starts_its_nodes_ranks(manifest):
    (container,) = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert container["command"] == ["launch"]
    p = make_plan(container["args"], pod_environ(manifest, "Worker", 0))
    assert (p.mode, p.environment, p.nnodes, p.node_rank, p.world_size) == ("spawn", "kubeflow", 2, 1, 8)
    assert (p.main_address, p.main_port) == ("zerokit-master-0", 23456)
    assert [c.env["RANK"] for c in p.commands] == ["4", "5", "6", "7"]
    assert p.commands[0].argv[-5:] == ("train", "--config", "zero3", "--output-dir", "/data/runs/zerokit")
