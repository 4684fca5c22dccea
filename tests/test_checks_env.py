"""Each environment check fires on a value that has the problem and stays quiet otherwise."""

from __future__ import annotations

from pathlib import Path

from hostfacts import copy_host, findings, host_facts

from nccldoctor.model import Severity

IB = "ib-two-hca"


def test_unknown_variable_did_you_mean():
    (hit,) = findings("env.unknown-variable", host_facts(IB, {"NCCL_IB_DISABEL": "1"}))
    assert "did you mean NCCL_IB_DISABLE?" in hit.title
    assert hit.fix == "export NCCL_IB_DISABLE=1\nunset NCCL_IB_DISABEL"
    quiet = {"NCCL_IB_DISABLE": "1", "NCCL_BLOCKING_WAIT": "1", "NCCL_DEBUG": "INFO"}
    assert not findings("env.unknown-variable", host_facts(IB, quiet))


def test_malformed_values():
    env = {"NCCL_ALGO": "ring;allreduce:tre", "NCCL_IB_DISABLE": "true", "NCCL_DEBUG": "verbose"}
    hits = {f.title.split("=")[0]: f for f in findings("env.malformed-value", host_facts(IB, env))}
    assert hits["NCCL_ALGO"].severity is Severity.FAIL
    assert hits["NCCL_IB_DISABLE"].severity is Severity.WARN
    assert "effect: NCCL reads it as 0" in hits["NCCL_IB_DISABLE"].evidence
    assert hits["NCCL_DEBUG"].fix == "export NCCL_DEBUG=INFO"
    good = {"NCCL_PROTO": "^LL128;allreduce:LL128", "NCCL_IB_DISABLE": "0x1", "NCCL_DEBUG": "warn"}
    assert not findings("env.malformed-value", host_facts(IB, good))


def test_malformed_torch_switches():
    env = {"TORCH_NCCL_BLOCKING_WAIT": "on", "NCCL_ASYNC_ERROR_HANDLING": "abort"}
    hits = findings("env.malformed-value", host_facts(IB, env))
    assert {f.title.split("=")[0] for f in hits} == set(env)
    assert all(f.severity is Severity.FAIL for f in hits)
    good = {"TORCH_NCCL_BLOCKING_WAIT": "True", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}
    assert not findings("env.malformed-value", host_facts(IB, good))


def test_socket_ifname_ignored():
    (hit,) = findings("env.socket-ifname-ignored", host_facts(IB, {"NCCL_SOCKET_IFNAME": "e"}))
    assert "ignored" in hit.title and "ib0" in hit.evidence[2]
    assert not findings("env.socket-ifname-ignored", host_facts(IB, {"NCCL_SOCKET_IFNAME": "eno1"}))


def test_ib_disabled_costs_more_with_active_hca():
    (hit,) = findings("env.ib-disabled", host_facts(IB, {"NCCL_IB_DISABLE": "1"}))
    assert hit.severity is Severity.WARN and "mlx5_0:1 is ACTIVE" in hit.title
    (info,) = findings("env.ib-disabled", host_facts("hosts-loopback", {"NCCL_IB_DISABLE": "1"}))
    assert info.severity is Severity.INFO
    assert not findings("env.ib-disabled", host_facts(IB, {"NCCL_IB_DISABLE": "0"}))


def test_p2p_and_shm_disabled():
    (p2p,) = findings("env.p2p-disabled", host_facts(IB, {"NCCL_P2P_DISABLE": "1"}))
    assert p2p.fix == "unset NCCL_P2P_DISABLE"
    assert not findings("env.p2p-disabled", host_facts(IB))
    (shm,) = findings("env.shm-disabled", host_facts(IB, {"NCCL_SHM_DISABLE": "1"}))
    assert shm.severity is Severity.INFO
    assert not findings("env.shm-disabled", host_facts(IB, {"NCCL_SHM_DISABLE": "0"}))


def test_debug_subsys_hides_init():
    (hit,) = findings(
        "env.debug-subsys-hides-init", host_facts(IB, {"NCCL_DEBUG_SUBSYS": "NET,GRAPH"})
    )
    assert hit.severity is Severity.WARN and "INIT and BOOTSTRAP" in hit.title
    (inv,) = findings("env.debug-subsys-hides-init", host_facts(IB, {"NCCL_DEBUG_SUBSYS": "^INIT"}))
    assert "INIT" in inv.title
    for quiet in ("INIT,BOOTSTRAP,NET", "ALL", "^COLL"):
        assert not findings(
            "env.debug-subsys-hides-init", host_facts(IB, {"NCCL_DEBUG_SUBSYS": quiet})
        )


def test_from_conf_file(tmp_path: Path):
    root = copy_host(IB, tmp_path)
    (root / "etc/nccl.conf").write_text("NCCL_IB_HCA=mlx5_0\n")
    (hit,) = findings("env.from-conf-file", host_facts(root))
    assert hit.evidence == ["NCCL_IB_HCA=mlx5_0 from /etc/nccl.conf"]
    assert not findings("env.from-conf-file", host_facts(IB, {"NCCL_IB_HCA": "mlx5_0"}))
