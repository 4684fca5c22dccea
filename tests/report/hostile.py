"""A report whose every user-controlled string is hostile: XSS payloads and secrets."""

from __future__ import annotations

from nccldoctor.model import Finding, Severity
from nccldoctor.report import Report
from tests.report.builders import (
    CREATED,
    bandwidth_section,
    cluster_section,
    nccl_section,
    node_facts,
    phases_section,
    ranks_section,
)

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
PAYLOADS = (SCRIPT, IMG)
# Secret values that must never appear in any output (each is unique text).
SECRETS = {
    "HF_TOKEN": "hf_s3cr3tTokenValue",
    "WANDB_API_KEY": "wandbKey0123456789",
    "AWS_SECRET_ACCESS_KEY": "awsSecretValue42",
    "DB_PASSWORD": "hunter2hunter2",
    "GOOGLE_APPLICATION_CREDENTIALS": "/secret/creds.json",
    "NCCL_AUTH_COOKIE": "cookieValue777",
}
URL_PASSWORD = "urlPassw0rd"
URL = f"https://alice:{URL_PASSWORD}@pypi.example.org/simple"


def hostile() -> Report:
    evil_node = f"node{IMG}"
    facts = node_facts(evil_node, "198.18.0.1/24", 1)
    facts.network.interfaces[1].name = f"eth{SCRIPT}"
    facts.env.variables.update(SECRETS)
    facts.env.variables["PIP_INDEX_URL"] = URL
    facts.env.variables["NCCL_SOCKET_IFNAME"] = IMG
    other = node_facts("node-b", "198.18.0.2/24", 1)
    ranks = ranks_section([evil_node, "node-b"], 1)
    ranks[0]["last_nccl_lines"] += [
        f"{evil_node}:1:1 [0] NCCL INFO {SCRIPT}",
        f"{evil_node}:1:1 [0] misc/socket.cc:1 NCCL WARN {IMG} HF_TOKEN={SECRETS['HF_TOKEN']}",
        f"pip install --index-url {URL} torch",
    ]
    nccl = nccl_section(2, 1)
    nccl["interfaces"] = [f"eth{SCRIPT}"]
    cluster = cluster_section([evil_node, "node-b"], 1)
    return Report(
        kind="check",
        nodes=[facts, other],
        findings=[
            Finding(
                id="network.evil",
                category="interface_selection",
                severity=Severity.FAIL,
                area="network",
                node=evil_node,
                title=f"interface eth{SCRIPT} on {evil_node}",
                evidence=[IMG, f"WANDB_API_KEY={SECRETS['WANDB_API_KEY']}", URL],
                fix=f"export NCCL_SOCKET_IFNAME={SCRIPT}",
                links=["javascript:alert(1)", URL],
            ),
            Finding(
                id="env.warn",
                category="env_config",
                severity=Severity.WARN,
                area="environment",
                title=IMG,
                evidence=[SCRIPT],
            ),
        ],
        command=[
            "env",
            f"HF_TOKEN={SECRETS['HF_TOKEN']}",
            "nccldoctor",
            "check",
            "--master",
            IMG,
            URL,
        ],
        created=CREATED,
        area_status={"network": f"eth{SCRIPT} → {IMG}"},
        extra={
            "nccl": nccl,
            "phases": phases_section([evil_node, "node-b"], 1, stop={1: ("init", "fail")}),
            "bandwidth": {**bandwidth_section(2, 5.0), "tcp_wire_Gbitps": {evil_node: 1.2}},
            "cluster": cluster,
            "ranks": ranks,
            "hang": {
                "phase": "init",
                "stuck": [{"node": evil_node, "rank": 0, "phase": SCRIPT, "last_nccl_line": IMG}],
                "verdict": SCRIPT,
            },
            "mnist": None,
        },
    )
