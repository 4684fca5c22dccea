"""The Kubernetes recipes of docs/launch/kubernetes/, as the API server and the controllers take
them.

Each recipe is valid against its kind's CRD schema as released (tests/fixtures/k8s/), with the
API server's strict field validation (an unknown field is refused, as ``kubectl apply`` does by
default). In every pod the controller would make of it, ``nccldoctor check`` finds the job's
master (the rank-0 pod's name), the node count, its own node rank and the shared token derived
from the job's name, and torchrun after it the same nodes; every variable a recipe sets is read
by nccldoctor, torchrun or NCCL/gloo.

What the controllers put in a pod is written here from their source, at the released versions
the schemas come from (tests/fixtures/k8s/README.md): the names are theirs, not nccldoctor's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import jsonschema
import pytest
import yaml

from nccldoctor.cluster.config import ConfigError, config_from_args
from nccldoctor.cluster.launchers import POD_JOB_IDENTITIES
from nccldoctor.probes.env import probe as env_probe

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "docs" / "launch" / "kubernetes"
SCHEMAS = REPO / "tests" / "fixtures" / "k8s"
KINDS = {"PyTorchJob": "pytorchjob", "JobSet": "jobset", "TrainJob": "trainjob"}
# The kubelet sets these in every container of every pod.
KUBELET_ENV = {"KUBERNETES_SERVICE_HOST": "198.18.0.1", "KUBERNETES_SERVICE_PORT": "443"}
HOST_NETWORK = ("hostNetwork: true", "dnsPolicy: ClusterFirstWithHostNet")


def recipe_text(kind: str) -> str:
    return (RECIPES / f"{KINDS[kind]}.yaml").read_text(encoding="utf-8")


def recipe(kind: str) -> dict:
    return yaml.safe_load(recipe_text(kind))


def strict(schema: object) -> object:
    """A CRD schema as the API server applies it with strict field validation: an object that
    lists its properties and does not preserve unknown fields takes no others."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in ("properties", "$defs"):  # names to schemas, not a schema
            out[key] = {name: strict(s) for name, s in value.items()}
        else:
            out[key] = strict(value)
    closed = "properties" in schema and "additionalProperties" not in schema
    if closed and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@cache
def validator(kind: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{KINDS[kind]}.json").read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(strict(schema))


def schema_errors(doc: dict) -> list[str]:
    """What the API server would refuse in ``doc``, one line per error, by the field's path."""
    kind = doc["kind"]
    errors = validator(kind).iter_errors(doc)
    return sorted(f"{'.'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in errors)


@pytest.mark.parametrize("kind", KINDS)
def test_each_recipe_is_valid_against_its_crd(kind):
    doc = recipe(kind)
    schema = json.loads((SCHEMAS / f"{KINDS[kind]}.json").read_text(encoding="utf-8"))
    assert schema["title"] == f"{kind} {doc['apiVersion']}"
    assert schema_errors(doc) == []


def _container(doc: dict) -> dict:
    """The recipe's training container (the one check runs in)."""
    if doc["kind"] == "TrainJob":
        return doc["spec"]["trainer"]
    return next(c for c in _pod_spec(doc)["containers"] if c["name"] == "pytorch")


def _pod_spec(doc: dict) -> dict:
    if doc["kind"] == "PyTorchJob":
        return doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    if doc["kind"] == "JobSet":
        return doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    patch = doc["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    return patch["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


MISTAKES: dict[str, Callable[[dict], object]] = {
    "a misspelled field": lambda d: _container(d).update(envs=_container(d).pop("env")),
    "a field one level too high": lambda d: _pod_spec(d).update(
        volumeMounts=_pod_spec(d)["containers"][0]["volumeMounts"]
    ),
    "a value of the wrong type": lambda d: _pod_spec(d)["volumes"][0].update(emptyDir="Memory"),
    "an env entry without its name": lambda d: _container(d)["env"][0].pop("name"),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_mistake_in_a_recipe_is_refused(kind, mistake):
    """The validation can fail: each mistake a hand edit makes is refused, at its field."""
    doc = recipe(kind)
    MISTAKES[mistake](doc)
    assert schema_errors(doc), mistake


@pytest.mark.parametrize("kind", ["PyTorchJob", "JobSet"])
def test_the_host_network_variant_is_valid_too(kind):
    """Uncommenting the two lines the recipe names gives a valid spec on the host network."""
    text = recipe_text(kind)
    for line in HOST_NETWORK:
        assert text.count(f"# {line}\n") == 1, line
        text = text.replace(f"# {line}\n", f"{line}\n")
    doc = yaml.safe_load(text)
    assert (_pod_spec(doc)["hostNetwork"], _pod_spec(doc)["dnsPolicy"]) == (
        True,
        "ClusterFirstWithHostNet",
    )
    assert schema_errors(doc) == []


def test_a_trainjob_cannot_ask_for_the_host_network():
    """A TrainJob's pod patch has no hostNetwork: the runtime sets it (kubernetes.md says how),
    which is why its recipe does not offer the two lines."""
    doc = recipe("TrainJob")
    assert not any(f"# {line}" in recipe_text("TrainJob") for line in HOST_NETWORK)
    _pod_spec(doc).update(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
    assert any("hostNetwork" in e for e in schema_errors(doc))


# The TrainJob's own rules beyond its schema (trainer v2.3.0 pkg/runtime/framework/plugins/
# jobset/jobset.go and torch/torch.go): a patch's manager is a domain-prefixed path, its
# replicated jobs and containers are the runtime's, the node container's env is not patched,
# and trainer.env leaves the torch plugin's PET_* variables alone.
TORCH_DISTRIBUTED_RUNTIME = {"node": {"node"}}  # manifests/base/runtimes/torch_distributed.yaml
DOMAIN_PREFIXED_PATH = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9/\-._~%!$&'()*+,;=:]+"
)


def test_the_trainjob_meets_the_trainer_webhook():
    doc = recipe("TrainJob")
    for patch in doc["spec"]["runtimePatches"]:
        assert DOMAIN_PREFIXED_PATH.fullmatch(patch["manager"]), patch["manager"]
        for job in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            pod = job["template"]["spec"]["template"]["spec"]
            for container in pod.get("containers", []) + pod.get("initContainers", []):
                assert container["name"] in TORCH_DISTRIBUTED_RUNTIME[job["name"]]
                assert "env" not in container
    trainer_sets = set(trainjob_pods(doc)[0].controller_env)
    assert not {e["name"] for e in doc["spec"]["trainer"]["env"]} & trainer_sets


@dataclass
class Pod:
    """One pod as its controller makes it: what other pods call it, its metadata, the env the
    controller adds to the training container, and the node rank the job means it to have."""

    dns_name: str
    rank: int
    controller_env: dict[str, str]
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


def pytorchjob_pods(doc: dict) -> list[Pod]:
    """Training Operator v1.9.0: pkg/controller.v1/pytorch/envvar.go and master.go; the master's
    Service is ``<job>-master-0``; every pod carries the job-name label
    (pkg/controller.v1/common/job_controller.go)."""
    name, specs = doc["metadata"]["name"], doc["spec"]["pytorchReplicaSpecs"]
    total = sum(spec.get("replicas", 1) for spec in specs.values())
    nproc = doc["spec"].get("nprocPerNode")
    port = next(
        (p["containerPort"] for c in specs["Master"]["template"]["spec"]["containers"]
         for p in c.get("ports", []) if p.get("name") == "pytorchjob-port"),
        23456,
    )  # fmt: skip
    master = f"{name}-master-0"
    pods = []
    for rtype, spec in specs.items():
        for index in range(spec.get("replicas", 1)):
            rank = index + (rtype == "Worker")
            env = {"PYTHONUNBUFFERED": "1", "MASTER_PORT": str(port), "PET_MASTER_PORT": str(port),
                   "MASTER_ADDR": master, "PET_MASTER_ADDR": master,
                   "WORLD_SIZE": str(total * (int(nproc) if nproc and nproc.isdigit() else 1)),
                   "RANK": str(rank), "PET_NODE_RANK": str(rank), "PET_NNODES": str(total)}  # fmt: skip
            if nproc is not None:
                env["PET_NPROC_PER_NODE"] = nproc
            labels = {"training.kubeflow.org/job-name": name,
                      "training.kubeflow.org/replica-type": rtype.lower(),
                      "training.kubeflow.org/replica-index": str(index)}  # fmt: skip
            pods.append(Pod(f"{name}-{rtype.lower()}-{index}", rank, env, labels))
    return pods


def jobset_pods(doc: dict, name: str | None = None) -> list[Pod]:
    """JobSet v0.12.0 (pkg/controllers/jobset_controller.go: labelAndAnnotateObject,
    CoordinatorEndpoint, GetSubdomain) over Kubernetes' Indexed Jobs: pod ``<jobset>-<replicated
    job>-<job index>-<completion index>`` under the JobSet's headless Service; Kubernetes sets
    JOB_COMPLETION_INDEX and the job-completion-index annotation."""
    name = name or doc["metadata"]["name"]
    subdomain = doc["spec"].get("network", {}).get("subdomain") or name
    coordinator = doc["spec"].get("coordinator")
    pods = []
    for job in doc["spec"]["replicatedJobs"]:
        for job_index in range(job.get("replicas", 1)):
            # Every index at once: the check waits for all its nodes together.
            indices = job["template"]["spec"].get("completions", 1)
            assert job["template"]["spec"].get("parallelism", 1) == indices, job["name"]
            for index in range(indices):
                annotations = {"batch.kubernetes.io/job-completion-index": str(index),
                               "jobset.sigs.k8s.io/jobset-name": name}  # fmt: skip
                if coordinator:
                    annotations["jobset.sigs.k8s.io/coordinator"] = (
                        f"{name}-{coordinator['replicatedJob']}-{coordinator.get('jobIndex', 0)}-"
                        f"{coordinator.get('podIndex', 0)}.{subdomain}"
                    )
                labels = {"jobset.sigs.k8s.io/jobset-name": name,
                          "jobset.sigs.k8s.io/replicatedjob-name": job["name"],
                          "jobset.sigs.k8s.io/job-index": str(job_index)}  # fmt: skip
                dns_name = f"{name}-{job['name']}-{job_index}-{index}.{subdomain}"
                env = {"JOB_COMPLETION_INDEX": str(index)}
                pods.append(Pod(dns_name, len(pods), env, labels, annotations))
    return pods


def trainjob_pods(doc: dict) -> list[Pod]:
    """Trainer v2.3.0 on the torch-distributed runtime: a JobSet of the TrainJob's name with
    one replicated job ``node`` of numNodes pods (pkg/runtime/framework/plugins/torch/torch.go:
    the PET_* variables, the master ``<job>-node-0-0.<job>`` on port 29500)."""
    name, trainer = doc["metadata"]["name"], doc["spec"]["trainer"]
    nodes = trainer.get("numNodes", 1)
    jobset = {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"parallelism": nodes, "completions": nodes}}}]}}  # fmt: skip
    pods = jobset_pods(jobset, name)
    for pod in pods:
        pod.controller_env.update(
            PET_NNODES=str(nodes),
            PET_NPROC_PER_NODE=str(trainer.get("numProcPerNode", "auto")),
            PET_NODE_RANK=pod.annotations["batch.kubernetes.io/job-completion-index"],
            PET_MASTER_ADDR=f"{name}-node-0-0.{name}",
            PET_MASTER_PORT="29500",
        )
    return pods


PODS = {"PyTorchJob": pytorchjob_pods, "JobSet": jobset_pods, "TrainJob": trainjob_pods}
FIELD_PATH = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


def recipe_env(container: dict, pod: Pod) -> dict[str, str]:
    """The container's own env as the kubelet resolves it in ``pod`` (the downward API)."""
    env = {}
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = entry["value"]
            continue
        path = entry["valueFrom"]["fieldRef"]["fieldPath"]
        match = FIELD_PATH.fullmatch(path)
        assert match, f"{entry['name']}: fieldRef {path} is not a label or annotation"
        where = pod.labels if match[1] == "labels" else pod.annotations
        assert match[2] in where, f"{entry['name']}: the controller sets no {path}"
        env[entry["name"]] = where[match[2]]
    return env


def pod_envs(kind: str, doc: dict | None = None) -> list[tuple[Pod, dict[str, str]]]:
    doc = doc or recipe(kind)
    container = _container(doc)
    out = []
    for pod in PODS[kind](doc):
        own = recipe_env(container, pod)
        assert not own.keys() & pod.controller_env.keys(), "the recipe sets the controller's"
        out.append((pod, {**KUBELET_ENV, **pod.controller_env, **own}))
    return out


def check_sees(env: dict[str, str]) -> tuple | str:
    """What ``nccldoctor check`` makes of a pod's env (no flags, as the recipes run it)."""
    try:
        c = config_from_args(env=env, run_name="recipe")
    except ConfigError as exc:
        return str(exc)
    return (c.launcher, c.master, c.port, c.nodes, c.node_rank, c.token, c.token_from)


def commands(container: dict) -> list[list[str]]:
    """The recipe's ``bash -c`` script as its commands' argv, ``exec`` dropped."""
    argv = container["command"] + container.get("args", [])
    assert argv[:2] == ["bash", "-c"] and len(argv) == 3, argv
    return [[w for w in shlex.split(part) if w != "exec"] for part in argv[2].split("&&")]


@pytest.mark.parametrize("kind", KINDS)
def test_check_finds_the_job_in_every_pod(kind):
    """Flagless: the master is the rank-0 pod, each pod its own rank, every pod the same token,
    derived from the job's name (which another job does not share)."""
    doc = recipe(kind)
    assert commands(_container(doc))[0] == ["nccldoctor", "check"]
    pods = pod_envs(kind, doc)
    ranks = sorted(pod.rank for pod, _ in pods)
    assert ranks == list(range(len(pods))) and len(pods) > 1
    master = next(pod.dns_name for pod, _ in pods if pod.rank == 0)
    tokens = set()
    for pod, env in pods:
        seen = check_sees(env)
        assert seen[:5] == ("kubernetes", master, seen[2], len(pods), pod.rank), (pod, seen)
        assert seen[6] in POD_JOB_IDENTITIES and seen[5], seen
        tokens.add(seen[5])
    assert len(tokens) == 1
    other = dict(doc, metadata={"name": "other"})
    assert check_sees(pod_envs(kind, other)[0][1])[5] not in tokens


def torchrun_sees(argv: list[str], env: dict[str, str], monkeypatch) -> tuple:
    """What torchrun makes of ``argv`` in a pod's env: its parser reads PET_* from os.environ."""
    from torch.distributed.argparse_util import env as env_option
    from torch.distributed.run import get_args_parser, get_rdzv_endpoint, parse_min_max_nnodes

    with monkeypatch.context() as m:
        for name in [n for n in os.environ if n.startswith("PET_")]:
            m.delenv(name)
        for name, value in env.items():
            m.setenv(name, value)
        parser = get_args_parser()
        args = parser.parse_args(argv[1:])
    reads = {f"PET_{a.dest.upper()}" for a in parser._actions if isinstance(a, env_option)}
    nodes = parse_min_max_nnodes(args.nnodes)
    return reads, (nodes, args.node_rank, args.nproc_per_node, get_rdzv_endpoint(args))


@pytest.mark.parametrize("kind", KINDS)
def test_torchrun_after_the_check_sees_the_same_nodes(kind, monkeypatch):
    doc = recipe(kind)
    (torchrun,) = [c for c in commands(_container(doc))[1:] if c[0] == "torchrun"]
    for _pod, env in pod_envs(kind, doc):
        _, (nodes, rank, _, endpoint) = torchrun_sees(torchrun, env, monkeypatch)
        seen = check_sees(env)
        assert (nodes, rank, endpoint.split(":")[0]) == ((seen[3], seen[3]), seen[4], seen[1])


def probe_reads(name: str, env: dict[str, str], root: Path) -> bool:
    """nccldoctor's env probe takes ``name`` as NCCL or gloo read it: a value that parses, of a
    name NCCL knows (the probe calls an unknown NCCL_* name a problem) or whose value the probe
    parses into a fact (GLOO_SOCKET_IFNAME: the interfaces)."""
    probed = env_probe(root, env)
    if name not in probed.variables or any(p.name == name for p in probed.problems):
        return False
    if name.startswith("NCCL_"):
        return True
    without = env_probe(root, {k: v for k, v in env.items() if k != name})
    records = {"variables": {}, "effective": {}, "sources": {}}
    return dataclasses.replace(probed, **records) != dataclasses.replace(without, **records)


@pytest.mark.parametrize("kind", KINDS)
def test_every_variable_a_recipe_sets_is_read(kind, monkeypatch, tmp_path):
    """Left out, it changes what check or torchrun makes of the pod; or it is NCCL's or gloo's
    and nccldoctor's env probe finds its value right."""
    doc = recipe(kind)
    (torchrun,) = [c for c in commands(_container(doc))[1:] if c[0] == "torchrun"]
    pod, env = pod_envs(kind, doc)[-1]
    reads, before = torchrun_sees(torchrun, env, monkeypatch)
    for name in recipe_env(_container(doc), pod):
        without = {k: v for k, v in env.items() if k != name}
        by_check = check_sees(without) != check_sees(env)
        by_torchrun = name in reads and torchrun_sees(torchrun, without, monkeypatch)[1] != before
        by_nccl = probe_reads(name, env, tmp_path)
        assert by_check or by_torchrun or by_nccl, f"{kind} sets {name}, which nothing reads"


def test_the_preflight_init_container_looks_like_the_training_container():
    """Same image, capabilities, GPUs and mounts, or preflight checks another container."""
    pod = _pod_spec(recipe("PyTorchJob"))
    (preflight,) = pod["initContainers"]
    same = ("image", "securityContext", "resources", "volumeMounts")
    assert {k: preflight[k] for k in same} == {k: _container(recipe("PyTorchJob"))[k] for k in same}


@pytest.mark.parametrize("kind", ["PyTorchJob", "JobSet"])
def test_torchrun_starts_one_process_per_gpu_the_pod_asks_for(kind, monkeypatch):
    doc = recipe(kind)
    (torchrun,) = [c for c in commands(_container(doc))[1:] if c[0] == "torchrun"]
    _, env = pod_envs(kind, doc)[0]
    _, (_, _, nproc, _) = torchrun_sees(torchrun, env, monkeypatch)
    assert int(nproc) == _container(doc)["resources"]["limits"]["nvidia.com/gpu"]
