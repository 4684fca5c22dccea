"""NCCL's list grammar, strtoll, NCCL_ALGO/PROTO parsing and interface order, as NCCL does them."""

from __future__ import annotations

import pytest

from nccldoctor.nccl.rules import (
    NCCL_ALGOS,
    NCCL_PROTOS,
    Candidate,
    algo_proto_errors,
    default_pick,
    find_interfaces,
    if_list_matches,
    parse_if_list,
    strtoll,
)


def test_prefix_list_matches_longer_names():
    eth = parse_if_list("eth")
    assert [n for n in ("eth0", "eth10", "ens3") if if_list_matches(eth, n)] == ["eth0", "eth10"]


def test_exact_and_exclude_flags_in_nccl_order():
    assert if_list_matches(parse_if_list("=eth0"), "eth0")
    assert not if_list_matches(parse_if_list("=eth0"), "eth01")
    excl = parse_if_list("^=docker0")
    assert excl.exclude and excl.exact
    assert not if_list_matches(excl, "docker0") and if_list_matches(excl, "docker01")
    # "=^" is not "^=": the = comes first, so "^docker0" is a name to match exactly
    assert parse_if_list("=^docker0").entries == ["^docker0"]


def test_ports_and_empty_entries():
    parsed = parse_if_list("mlx5_0:1,,mlx5_1")
    assert parsed.entries == ["mlx5_0", "mlx5_1"]
    assert parsed.ports == {"mlx5_0": 1}
    assert if_list_matches(parsed, "mlx5_0", 1) and not if_list_matches(parsed, "mlx5_0", 2)
    assert if_list_matches(parsed, "mlx5_1", 2)


def test_weird_value_from_the_issue():
    parsed = parse_if_list("^,=,")
    # ^ is the exclude flag; ",=," has no leading "=", so "=" becomes a name prefix
    assert parsed.exclude and not parsed.exact and parsed.entries == ["="]
    assert if_list_matches(parsed, "eth0")  # nothing starts with "=", so nothing is excluded


def test_empty_list_matches_all_or_none():
    assert if_list_matches(parse_if_list("=,"), "eth0")
    assert not if_list_matches(parse_if_list("^="), "eth0")


def test_one_character_is_ignored():
    assert parse_if_list("e").ignored and not parse_if_list("e0").ignored


@pytest.mark.parametrize(
    ("text", "number", "whole"),
    [("1", 1, True), ("0x10", 16, True), ("010", 8, True), ("-2", -2, True),
     ("true", 0, False), ("1x", 1, False), ("", 0, False), (" 7", 7, True)],
)  # fmt: skip
def test_strtoll_like_c(text, number, whole):
    assert strtoll(text) == (number, whole)


def test_algo_and_proto_lists():
    assert algo_proto_errors("ring,tree", NCCL_ALGOS) == []
    assert algo_proto_errors("^LL128;allreduce:LL128", NCCL_PROTOS) == []
    assert algo_proto_errors("RING;AllReduce:^tree", NCCL_ALGOS) == []
    assert "unrecognized element" in algo_proto_errors("rign", NCCL_ALGOS)[0]
    assert "unrecognized prefix" in algo_proto_errors("allreduse:ring", NCCL_ALGOS)[0]
    assert "must have a prefix" in algo_proto_errors("ring;tree", NCCL_ALGOS)[0]


def _cands(*specs: tuple[str, bool, str]) -> list[Candidate]:
    return [Candidate(n, running, (addr,) if addr else ()) for n, running, addr in specs]


def test_default_order_prefers_ib_then_skips_docker_and_lo():
    cands = _cands(
        ("lo", True, "127.0.0.1/8"), ("docker0", True, "172.17.0.1/16"),
        ("eth0", True, "198.18.0.2/24"), ("ib0", True, "198.18.2.2/24"),
    )  # fmt: skip
    assert default_pick(cands, None) == ("ib0", "198.18.2.2/24")
    assert default_pick(cands[:3], None) == ("eth0", "198.18.0.2/24")
    assert default_pick(cands[:2], None) == ("docker0", "172.17.0.1/16")
    assert default_pick(cands[:1], None) == ("lo", "127.0.0.1/8")


def test_not_running_and_family_filters():
    cands = [
        Candidate("eth0", False, ("198.18.0.2/24",)),
        Candidate("eth1", True, (), ("fd00::2/64",)),
        Candidate("eth2", True, ("198.18.1.2/24",)),
    ]
    # IPv4 addresses come first in getifaddrs() order, so eth2 wins without a family filter
    assert default_pick(cands, None) == ("eth2", "198.18.1.2/24")
    assert default_pick(cands, "AF_INET6") == ("eth1", "fd00::2/64")
    assert find_interfaces(cands, parse_if_list("eth0"), None, 16) == []


def test_comm_id_subnet_hint():
    cands = _cands(("eth0", True, "198.18.0.2/24"), ("eth1", True, "198.18.1.2/24"))
    assert default_pick(cands, None, "198.18.1.9:29500") == ("eth1", "198.18.1.2/24")
