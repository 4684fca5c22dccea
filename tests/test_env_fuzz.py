"""Any text in the variables NCCL parses, or in a captured `ip -j addr`, is data: never a crash."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from hostfacts import HOSTS, findings
from hypothesis import given, settings
from hypothesis import strategies as st

from checks import all_checks
from nccldoctor.facts import NodeFacts
from nccldoctor.probes import env as env_probe
from nccldoctor.probes import network
from nccldoctor.probes.network import parse_ip_addr_json
from tests.strategies import json_values

PARSED = (
    "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_ALGO", "NCCL_PROTO", "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS", "NCCL_IB_DISABLE", "NCCL_IB_GID_INDEX", "NCCL_SOCKET_FAMILY",
    "TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "GLOO_SOCKET_IFNAME",
)  # fmt: skip
_text = st.text(alphabet=st.sampled_from("^=,:;!_-.0x1aAeEiIlLnNrRtT \t"), max_size=12)
_env_checks = [c.id for c in all_checks("node") if c.area in ("environment", "network", "rdma")]


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(PARSED), _text))
def test_env_values_never_crash_probe_or_checks(env):
    facts = NodeFacts(
        node="fuzz",
        env=env_probe.probe(Path("/nonexistent"), env),
        network=network.probe(HOSTS / "ib-two-hca", env, "198.18.10.12"),
        multi_node=True,
    )
    for check_id in _env_checks:
        findings(check_id, facts)  # asserts that no check crashed


# JSON keyed by the names the reader looks for in `ip -j addr`
_ip_addr_json = json_values(
    st.sampled_from(["ifname", "flags", "mtu", "addr_info", "local", "prefixlen", "family",
                     "linkinfo", "info_kind", "operstate", "ifindex"])
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(_ip_addr_json)
def test_captured_addresses_fail_only_with_known_errors(doc):
    # the errors the probe catches and records as "unreadable"; anything else fails the test
    with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
        parse_ip_addr_json(json.dumps(doc))
