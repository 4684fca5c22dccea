"""The sweep judged against the link: NIC speed, IB/RoCE port rate, the TCP probe; unknown when
nothing measured it."""

from __future__ import annotations

import json

import pytest

from checks import run_checks
from checks.linkrates import link_budget, port_rate_Gbitps
from nccldoctor.facts.rdma import Hca, IbPort
from nccldoctor.report.document import SUMMARY_KEYS, with_summaries
from nccldoctor.report.links import links_section
from tests.report.builders import node_facts


def _sweep(busbw: float, wire: dict | None = None, backend: str = "nccl") -> dict:
    rows = [
        {"size_bytes": 2**20, "busbw_GBps": busbw / 10},
        {"size_bytes": 2**26, "busbw_GBps": busbw},
    ]
    return {"backend": backend, "rows": rows, "tcp_wire_Gbitps": wire or {}}


def _nodes(ib_rates: tuple[str, ...] = ()):
    nodes = [node_facts("a", "198.18.0.1/24", 1), node_facts("b", "198.18.0.2/24", 1)]
    nodes[1].network.interfaces[1].speed_mbps = 25000  # b's eth0 is the slow one
    for facts in nodes:
        facts.rdma.hcas = [
            Hca(
                name=f"mlx5_{i}", ports=[IbPort(1, state="ACTIVE", rate=r, link_layer="InfiniBand")]
            )
            for i, r in enumerate(ib_rates)
        ]
    return nodes


@pytest.mark.parametrize(
    ("rate", "gbitps"),
    [("200 Gb/sec (4X HDR)", 200.0), ("2.5 Gb/sec (1X SDR)", 2.5), ("", None), ("fast", None)],
)
def test_port_rate_is_read_from_the_kernels_text(rate: str, gbitps: float | None) -> None:
    assert port_rate_Gbitps(rate) == gbitps


def test_socket_far_below_the_slowest_nic_warns_with_the_numbers() -> None:
    budget = link_budget(_nodes(), _sweep(0.2), "Socket")
    assert budget.slowest() == ("b", "eth0", 25.0)
    assert budget.fraction() == pytest.approx(0.2 / (25 / 8))
    (finding,) = run_checks("bandwidth", budget)
    assert (finding.id, finding.severity.value, finding.node) == (
        "run.busbw-below-link",
        "warn",
        "b",
    )
    assert finding.title == "allreduce busbw 200 MB/s = 6% of what eth0's 3.12 GB/s carries (b)"
    assert "NCCL_SOCKET_IFNAME" in finding.fix


def test_the_probe_bounds_a_socket_run_when_it_is_slower_than_the_nic() -> None:
    budget = link_budget(_nodes(), _sweep(1.0, {"a": 9.0, "b": 30.0}), "Socket")
    assert budget.slowest() == ("a", "TCP probe", 9.0)
    assert run_checks("bandwidth", budget) == []  # 1 GB/s of 1.125 GB/s: fine


def test_ib_is_judged_against_every_active_port_together() -> None:
    budget = link_budget(_nodes(("200 Gb/sec (4X HDR)", "200 Gb/sec (4X HDR)")), _sweep(12.0), "IB")
    assert budget.slowest() == ("a", "mlx5_0/1, mlx5_1/1", 400.0)
    (finding,) = run_checks("bandwidth", budget)
    assert finding.title.startswith("allreduce busbw 12.00 GB/s = 24% of what mlx5_0/1, mlx5_1/1's")
    assert "ib_write_bw" in finding.fix
    assert (
        run_checks("bandwidth", link_budget(_nodes(("200 Gb/sec (4X HDR)",)), _sweep(21.0), "IB"))
        == []
    )


def test_unknown_rates_and_gloo_are_not_judged() -> None:
    nodes = _nodes()
    for facts in nodes:
        facts.network.interfaces[1].speed_mbps = None
    unknown = link_budget(nodes, _sweep(0.01), "Socket")
    assert unknown.slowest() is None and unknown.fraction() is None
    assert run_checks("bandwidth", unknown) == []
    assert run_checks("bandwidth", link_budget(_nodes(), _sweep(0.01, backend="gloo"), None)) == []
    assert link_budget(_nodes(), _sweep(0.01), None).slowest() is None  # transport unknown


def test_a_probe_that_measured_less_than_the_busbw_is_left_out_of_the_budget() -> None:
    """8 Gbit/s of busbw went over a's link, so a's 2.6 Gbit/s probe under-measured it: the
    budget is b's eth0, and the probe is named as a lower bound."""
    budget = link_budget(_nodes(), _sweep(1.0, {"a": 2.6, "b": 30.0}), "Socket")
    assert budget.slowest() == ("b", "eth0", 25.0)
    assert budget.fraction() == pytest.approx(1.0 / (25 / 8))
    assert budget.probe_below() == ("a", 2.6)
    section = links_section({"bandwidth": _sweep(1.0, {"a": 2.6, "b": 30.0})}, "Socket", _nodes())
    assert section["probe_below"] == {"node": "a", "Gbitps": 2.6}
    assert section["sentence"].startswith("allreduce busbw 1.00 GB/s at 64 MiB = 32% of what eth0")
    assert section["sentence"].endswith(
        "; the 325 MB/s the TCP probe measured (a) is below it: a lower bound, not compared"
    )


def test_a_busbw_above_the_slowest_nic_rating_is_not_a_percentage_of_it() -> None:
    """b's eth0 says 25 Gbit/s (3.12 GB/s); 4 GB/s did not cross it at that rating."""
    section = links_section({"bandwidth": _sweep(4.0, {"a": 40.0, "b": 40.0})}, "Socket", _nodes())
    assert "%" not in section["sentence"]
    assert section["sentence"].startswith(
        "allreduce busbw 4.00 GB/s at 64 MiB, above the 3.12 GB/s eth0 is rated for (b): "
    )


def test_a_probe_below_the_busbw_with_no_other_rate_gives_no_fraction() -> None:
    nodes = _nodes()
    for facts in nodes:
        facts.network.interfaces[1].speed_mbps = None
    budget = link_budget(nodes, _sweep(0.5, {"a": 2.6, "b": 2.0}), "Socket")
    assert budget.slowest() is None and budget.fraction() is None
    assert budget.probe_below() == ("b", 2.0)
    assert run_checks("bandwidth", budget) == []


def test_a_loopback_demo_does_not_give_the_busbw_as_a_percentage_of_the_probe(fixtures) -> None:
    """`nccldoctor demo --loopback`'s report as it wrote it (tests/fixtures/reports/
    check-demo-loopback.json): gloo's allreduce reached 1.27 GB/s between the two simulated
    nodes, the TCP probe on the same loopback measured 2.65 Gbit/s (331 MB/s); it said "= 383%
    of the 331 MB/s the TCP probe measured". Its summaries are built again, as check builds them."""
    written = json.loads((fixtures / "reports" / "check-demo-loopback.json").read_text())
    assert "= 383% of the 331 MB/s the TCP probe measured" in written["links"]["sentence"]
    document = with_summaries({k: v for k, v in written.items() if k not in SUMMARY_KEYS})
    links = document["links"]
    assert links["fraction"] is None and links["slowest"] is None
    assert links["probe_below"] == {"node": "node1", "Gbitps": 2.649}
    sentence = (
        "allreduce busbw 1.27 GB/s at 1 MiB, more than the 331 MB/s the TCP probe measured "
        "(node1): the probe read low, its rate is a lower bound of the link, so the busbw is "
        "not compared with it"
    )
    assert links["sentence"] == sentence
    answer = document["headline"]["answer"]
    assert f"{sentence[:1].upper()}{sentence[1:]}." in answer
    assert "%" not in answer
