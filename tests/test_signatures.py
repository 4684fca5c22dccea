"""The signature catalogue: every entry matches real-format lines (bare and in every envelope),
yields the right id and groups, rejects near misses; the loader rejects malformed entries; the
fast path agrees with matching every regex on every line."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checks.signatures import (
    SIGNATURES,
    SignatureError,
    SignatureMatcher,
    identify,
    load_signatures,
    match_line,
)
from nccldoctor.explain import explain
from nccldoctor.model import CATEGORIES, Severity
from nccldoctor.ncclog import expand_inputs

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "signature_lines"
BY_ID = {sig.id: sig for sig in SIGNATURES}


def _examples() -> list[dict]:
    examples = []
    for path in sorted(FIXTURES.glob("*.toml")):
        for entry in tomllib.loads(path.read_text())["example"]:
            examples.append({"groups": {}, "also": [], "near_misses": [], **entry})
    return examples


EXAMPLES = _examples()

# The wrappers a line really arrives in (docs/nccl-log-formats.md#envelope; glog and launchers).
NCCL_ENVELOPES = (
    "{}",
    "node-a:4711:4790 [0] NCCL INFO {}",
    "node-a:4711:4790 [0] misc/socket.cc:480 NCCL WARN {}",
    "[2026-12-02 12:17:57] node-a:4711:4790 [0] transport/net_ib.cc:1296 NCCL WARN {}",
    "[2026-12-02 12:17:57] node-a:4711:4790 [3] misc/socket.cc:58 (socketProgress) NCCL WARN {}",
    "[rank1]: node-b:2268:2301 [1] /build/src/os/linux.cc:293 (ncclOsSocketPollConnect) NCCL WARN {}",
    "0: node-b:2268:2268 [0] NCCL INFO {}",
)
TORCH_ENVELOPES = (
    "{}",
    "[rank0]:[E1202 12:17:57.123456789 ProcessGroupNCCL.cpp:632] {}",
    "0: [E ProcessGroupNCCL.cpp:587] {}",
    "(RayWorkerWrapper pid=1890, ip=198.18.0.3) [rank8]:[E1202 12:17:57.1 ProcessGroupGloo.cpp:144] {}",
)


def _wrapped(example: dict) -> list[str]:
    envelopes = NCCL_ENVELOPES if example["id"].startswith("nccl.") else TORCH_ENVELOPES
    return [envelope.format(example["line"]) for envelope in envelopes]


def _example_id(example: dict) -> str:
    return f"{example['id']}:{example['line'][:40]}"


# --- the catalogue as a whole --------------------------------------------------------------------


def test_catalogue_has_at_least_40_unique_well_formed_entries() -> None:
    assert len(SIGNATURES) >= 40
    assert len({sig.id for sig in SIGNATURES}) == len(SIGNATURES)
    for sig in SIGNATURES:
        assert sig.category in CATEGORIES, sig.id
        assert sig.severity in (Severity.INFO, Severity.WARN, Severity.FAIL), sig.id
        assert sig.id.split(".")[0] == sig.source, sig.id
        assert sig.cause and sig.fix and sig.reference and sig.versions, sig.id


def test_every_shipped_pattern_compiles() -> None:
    """Loading parses each pattern; compiling waits for the first line through the gate, so a
    pattern only the compiler would refuse is found here, not in a user's run."""
    for sig in SIGNATURES:
        assert re.compile(sig.pattern), sig.id


def test_catalogue_covers_the_three_sources() -> None:
    counts = {
        source: sum(sig.source == source for sig in SIGNATURES) for source in ("nccl", "torch")
    }
    assert counts["nccl"] >= 40 and counts["torch"] >= 15
    assert any(sig.source == "gloo" for sig in SIGNATURES)


def test_every_signature_has_an_example_and_every_example_a_signature() -> None:
    example_ids = {example["id"] for example in EXAMPLES}
    assert example_ids == set(BY_ID), (set(BY_ID) - example_ids, example_ids - set(BY_ID))
    for example in EXAMPLES:
        assert set(example["also"]) <= set(BY_ID), example["also"]


# --- each example, bare and enveloped ----------------------------------------------------------


@pytest.mark.parametrize("example", EXAMPLES, ids=_example_id)
def test_example_matches_with_its_id_first_and_its_groups(example: dict) -> None:
    for line in _wrapped(example):
        matches = match_line(line)
        ids = [m.signature.id for m in matches]
        assert ids and ids[0] == example["id"], (line, ids)
        # Only the documented overlaps may match as well (more generic entries, listed in `also`).
        assert set(ids) == {example["id"], *example["also"]}, (line, ids)
        groups = matches[0].groups
        for name, value in example["groups"].items():
            assert groups.get(name) == value, (line, name, groups)
        assert "{" not in matches[0].title, matches[0].title


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e["near_misses"]], ids=_example_id)
def test_near_misses_do_not_match(example: dict) -> None:
    for miss in example["near_misses"]:
        for line in _wrapped({**example, "line": miss}):
            assert example["id"] not in [m.signature.id for m in match_line(line)], line


@pytest.mark.parametrize(
    "line",
    [
        "node-a:4711:4711 [0] NCCL INFO Bootstrap: Using eth0:198.18.0.2<0>",
        "node-a:4711:4790 [0] NCCL INFO Using network IB",
        "node-a:4711:4790 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
        "node-a:4711:4790 [0] NCCL INFO comm 0x55d1c2a0 rank 0 nranks 16 cudaDev 0 busId 18000 - Init COMPLETE",
        "node-a:4711:4790 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so",
        "node-a:4711:4790 [0] NCCL INFO bootstrap.cc:88 -> 3",
        "",
        "Epoch 3/10: 120it [01:24,  1.42it/s, loss=0.312]",
    ],
)
def test_healthy_lines_match_nothing(line: str) -> None:
    assert match_line(line) == []


def test_most_specific_signature_comes_first() -> None:
    line = "NCCL WARN Cuda failure 'CUDA driver version is insufficient for CUDA runtime version'"
    assert [m.signature.id for m in match_line(line)] == [
        "nccl.cuda-driver-insufficient",
        "nccl.cuda-failure",
    ]


def test_match_becomes_a_logs_finding_through_its_registered_rule(tmp_path) -> None:
    line = "NET/IB: Got completion from peer 198.18.1.12<39411> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129  hca mlx5_0"
    log = tmp_path / "rank3.log"
    log.write_text(
        f"node-a:7:7 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 3 nranks 4 cudaDev 0 nvmlDev 0 busId 1000 commId 0x2 - Init COMPLETE\nnode-a:7:7 [0] transport/net_ib.cc:1 NCCL WARN {line}\n"
    )
    _, findings = explain(expand_inputs([str(log)]))
    (finding,) = [f for f in findings if f.id == "nccl.ib-completion-retry-exceeded"]
    line = f"node-a:7:7 [0] transport/net_ib.cc:1 NCCL WARN {line}"
    sig = BY_ID["nccl.ib-completion-retry-exceeded"]
    assert finding.id == sig.id and finding.area == "logs" and finding.category == "ib_error"
    assert finding.severity is Severity.FAIL
    assert (
        finding.title
        == "IB transport retry counter exceeded with peer 198.18.1.12<39411> on mlx5_0 (status 12)"
    )
    assert finding.evidence == [line] and finding.node == "node-a" and finding.rank == 3
    assert finding.fix == f"{sig.cause}\n\n{sig.fix}"
    assert finding.links == list(sig.reference)
    assert finding.to_dict()["category"] == "ib_error"


def test_missing_optional_group_renders_as_question_mark() -> None:
    match = match_line("NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129")[0]
    assert "peer" not in match.groups
    assert match.title == "IB transport retry counter exceeded with peer ? on ? (status 12)"


def test_a_duration_in_a_title_reads_in_human_units() -> None:
    line = (
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, "
        "OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=600000) ran for 600060 "
        "milliseconds before timing out."
    )
    (match,) = [m for m in match_line(line) if m.signature.id == "torch.watchdog-timeout"]
    assert match.groups["ran_for_ms"] == "600060"  # the evidence keeps NCCL's own number
    assert match.title == "collective ALLREDUCE (SeqNum 1580) timed out after 10 min"


# --- the fast path agrees with the slow one ----------------------------------------------------

_PIECES = (
    [e["line"] for e in EXAMPLES]
    + [s.prefilter for s in SIGNATURES]
    + [
        " NCCL WARN ",
        "node-a:1:2 [0] ",
        "\x00",
        "é",
        "12",
        ", ",
        "(",
        "'",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=20)), max_size=4))
def test_fast_path_equals_every_regex_on_every_line(parts: list[str]) -> None:
    line = "".join(parts)
    # a line names its file in its head: not_from / only_from decide as in match_line
    slow = {sig.id for sig in SIGNATURES if re.search(sig.pattern, line) and sig.describes(line)}
    assert {m.signature.id for m in match_line(line)} == slow


def test_gate_fires_on_every_prefilter() -> None:
    for sig in SIGNATURES:
        assert sig.id in {m.signature.id for m in match_line(sig.prefilter)} or not re.search(
            sig.pattern, sig.prefilter
        )
        assert SignatureMatcher((sig,))._gate.search(f"xx {sig.prefilter} yy"), sig.id


@pytest.mark.parametrize("example", EXAMPLES, ids=_example_id)
def test_gate_is_blind_to_digits(example: dict) -> None:
    """The parser asks the gate once per shape of an application line (its digits as 0)."""
    zeros = str.maketrans("123456789", "000000000")
    for line in _wrapped(example):
        assert identify.gate(line.translate(zeros)), line  # type: ignore[attr-defined]


def test_benchmark_runs_and_prints_ratios() -> None:
    out = subprocess.run(
        [sys.executable, "bench/signatures.py", "--lines", "2000"],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert re.search(r"match_line / contains = \d+\.\d+", out), out


# --- load-time validation ----------------------------------------------------------------------

GOOD = {
    "id": "nccl.example-problem",
    "source": "nccl",
    "versions": "2.18+",
    "category": "other",
    "severity": "fail",
    "title": "problem with {thing}",
    "prefilter": "Something broke",
    "pattern": r"Something broke: (?P<thing>\S+)",
    "cause": "why",
    "fix": "what to paste",
    "reference": ["NVIDIA/nccl src/x.cc"],
}


def _toml(entries: list[dict], fragments: dict[str, str] | None = None) -> str:
    def value(v: object) -> str:
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        return "'''" + str(v) + "'''"

    text = ""
    if fragments:
        text += "[fragments]\n" + "".join(f"{k} = {value(v)}\n" for k, v in fragments.items())
    for entry in entries:
        text += "[[signature]]\n" + "".join(f"{k} = {value(v)}\n" for k, v in entry.items())
    return text


def test_a_good_entry_loads_and_matches() -> None:
    (sig,) = load_signatures(_toml([GOOD]))
    match = SignatureMatcher((sig,)).match("x Something broke: eth0 y")[0]
    assert match.groups == {"thing": "eth0"} and match.title == "problem with eth0"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"category": "network_stuff"}, "unknown category"),
        ({"severity": "fatal"}, "unknown severity"),
        ({"source": "mpi", "id": "mpi.example-problem"}, "unknown source"),
        ({"id": "torch.example-problem"}, "id must look like"),
        ({"id": "nccl.Example_Problem"}, "id must look like"),
        ({"pattern": r"Something broke: (?P<thing>\S+"}, "does not compile"),
        ({"pattern": r"(?i)Something broke: (?P<thing>\S+)"}, "inline flags"),
        ({"prefilter": "Something else"}, "prefilter"),
        ({"pattern": r"(?:Something broke)?: (?P<thing>\S+)"}, "prefilter"),
        ({"pattern": r"(?:Something broke|Other): (?P<thing>\S+)"}, "prefilter"),
        ({"pattern": r"Some(?:thing)* broke: (?P<thing>\S+)"}, "prefilter"),
        ({"pattern": r"Something brok[ea]: (?P<thing>\S+)"}, "prefilter"),
        ({"title": "problem with {other}"}, "not named groups"),
        ({"units": {"thing": "furlongs"}}, "units \\['furlongs'\\] are not among"),
        ({"units": {"other": "ms"}}, "units must map named groups"),
        ({"reference": []}, "reference"),
        ({"fix": "  "}, "fix must be"),
        ({"unexpected": "x"}, "unknown keys"),
        ({"not_from": "ras/client_support.cc"}, "not_from"),
        ({"pattern": "{{nothing}}"}, "unknown fragment"),
    ],
)
def test_malformed_entries_are_rejected_at_load(change: dict, message: str) -> None:
    with pytest.raises(SignatureError, match=message):
        load_signatures(_toml([{**GOOD, **change}]))


def test_not_from_names_the_files_whose_lines_are_not_the_problem() -> None:
    # NVIDIA/nccl#2397: RAS's client socket failing to bind is not the bootstrap's bind failing
    (sig,) = load_signatures(_toml([{**GOOD, "not_from": ["ras/client_support.cc"]}]))
    ras = "h:1:1 [0] ras/client_support.cc:181 NCCL WARN Something broke: x"
    own = "h:1:1 [0] misc/socket.cc:402 NCCL WARN Something broke: x"
    assert not sig.describes(ras) and sig.describes(own)
    assert load_signatures(_toml([GOOD]))[0].describes(ras)


def test_only_from_names_the_files_whose_lines_alone_are_the_problem() -> None:
    # NVIDIA/nccl#1788: a CUDA failure of transport/nvls.cc is NVLink SHARP's, the same text
    # of another file the generic one; a WARN's message alone names no file
    nvls = "n:1:1 [1] transport/nvls.cc:158 NCCL WARN Cuda failure 1 'invalid argument'"
    other = "n:1:1 [1] enqueue.cc:47 NCCL WARN Cuda failure 'named symbol not found'"
    assert [m.signature.id for m in match_line(nvls)] == ["nccl.nvls-cuda-failure"]
    assert [m.signature.id for m in match_line(other)] == ["nccl.cuda-failure"]
    assert [m.signature.id for m in match_line("Cuda failure 1 'invalid argument'")] == [
        "nccl.cuda-failure"
    ]


def test_missing_key_duplicate_id_and_bad_toml_are_rejected() -> None:
    entry = {k: v for k, v in GOOD.items() if k != "cause"}
    with pytest.raises(SignatureError, match="missing keys"):
        load_signatures(_toml([entry]))
    with pytest.raises(SignatureError, match="duplicate signature id"):
        load_signatures(_toml([GOOD, GOOD]))
    with pytest.raises(SignatureError, match="not valid TOML"):
        load_signatures("[[signature]\n")
    with pytest.raises(SignatureError, match="no \\[\\[signature\\]\\] entries"):
        load_signatures("")


@pytest.mark.parametrize(
    "pattern",
    [
        r"(?:A Something broke here|B Something broke there): (?P<thing>\S+)",
        r"x(?P<g>Something) broke: (?P<thing>\S+)",
        r"(?:ab)+Something broke: (?P<thing>\S+)",
        r"^Something broke\b: (?P<thing>\S+)",
    ],
)
def test_prefilter_implied_through_groups_branches_and_anchors(pattern: str) -> None:
    assert load_signatures(_toml([{**GOOD, "pattern": pattern}]))


def test_fragments_expand() -> None:
    entry = {**GOOD, "pattern": r"{{head}}: (?P<thing>\S+)"}
    (sig,) = load_signatures(_toml([entry], {"head": "Something broke"}))
    assert sig.pattern == r"Something broke: (?P<thing>\S+)"
