"""scripts/gpu-verify.sh: its CPU dry run, and the replay of the archive it leaves.

The dry run (gloo, no NVML) is generated here. A real GPU run's archive dropped into
tests/fixtures/gpu/ (``gpu-verify-gpu.tar.gz``, README.md beside it) is replayed instead: the
parser's facts against what the NCCL lines say, the tuning replay against NCCL's own per-call
choices, the Flight Recorder dumps through the analysis, the preflight facts through the rules.
What only a GPU run holds (NCCL's logs, the duplicate-GPU refusal, NVML) skips on the dry run.
The expectations come from the run's own record (``machine/versions.json``, the manifest) and
from the NCCL lines read with the test's own patterns, never from the code under test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import time
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest

from nccldoctor.explain import explain, explain_dumps
from nccldoctor.forensics.dumphead import looks_like_dump
from nccldoctor.model import Severity
from nccldoctor.ncclog import parse_sources
from nccldoctor.ncclog.inputs import file_sources
from nccldoctor.ncclog.summary import group_comms
from nccldoctor.ncclog.tuning import best
from nccldoctor.preflight import run_preflight

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gpu-verify.sh"
GPU_FIXTURES = Path(__file__).parent / "fixtures" / "gpu"
GPU_ARCHIVES = sorted(GPU_FIXTURES.glob("gpu-verify-*.tar.gz"))
STEPS = ["machine", "preflight", "check", "dup-gpu", "watch-healthy", "watch-stalled", "bare"]
NO_NCCL = "a CPU dry run: gloo ranks print no NCCL lines (tests/fixtures/gpu/ holds no GPU archive)"

# NCCL's own lines (src/init.cc, src/transport.cc, src/enqueue.cc, src/transport/net_socket.cc),
# read here without nccldoctor's parser: the oracle the parser is held to.
VERSION_LINE = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
RING_LINE = re.compile(r"NCCL INFO Channel \d+/(\d+) :(?: +\d+)+\s*$", re.MULTILINE)
VIA_LINE = re.compile(r"\[(?:send|receive)\] via (\S+)")
SOCKET_USING = re.compile(r"NET/Socket : Using (.*)")
# 2.24 and later name the collective, the algorithm and the protocol (upper case: RING, SIMPLE)
PER_CALL = re.compile(r"NCCL INFO (\w+): (\d+) Bytes -> Algo (\w+) proto (\w+)")


@dataclass
class Archive:
    """One unpacked run of scripts/gpu_verify.py (its folder ``gpu-verify/``)."""

    root: Path
    source: str

    @cached_property
    def manifest(self) -> dict:
        return json.loads((self.root / "manifest.json").read_text())

    @cached_property
    def versions(self) -> dict:
        return json.loads((self.root / "machine" / "versions.json").read_text())

    @property
    def gpu(self) -> bool:
        return self.manifest["mode"] == "gpu"

    def step(self, name: str) -> dict:
        return next(s for s in self.manifest["steps"] if s["step"] == name)

    def json(self, relative: str) -> dict:
        return json.loads((self.root / relative).read_text())

    def watch_run(self, step: str) -> Path:
        """The watch's one run folder of ``step`` (OUT/<node>/<run>/)."""
        (run,) = [p for p in (self.root / step / "out" / "node0").iterdir() if not p.is_symlink()]
        return run

    def nccl_logs(self, folder: str) -> list[Path]:
        return sorted((self.root / folder).rglob("nccl.*.log"))


def unpack(archive: Path, into: Path) -> Archive:
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return Archive(into / "gpu-verify", archive.name)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float, str]:
    """The script's CPU dry run: the folder it left, its wall time and its output."""
    out = tmp_path_factory.mktemp("gpu-verify-out")
    started = time.monotonic()
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(out), "--cpu", "--budget-s", "150"],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, time.monotonic() - started, proc.stdout


@pytest.fixture(scope="module")
def archive(request, tmp_path_factory: pytest.TempPathFactory) -> Archive:
    """A real GPU run's archive where tests/fixtures/gpu/ has one, else the dry run's."""
    into = tmp_path_factory.mktemp("gpu-verify-archive")
    if GPU_ARCHIVES:
        return unpack(GPU_ARCHIVES[-1], into)
    out, _, _ = request.getfixturevalue("dry_run")
    return unpack(out / "gpu-verify-cpu.tar.gz", into)


def needs_gpu(archive: Archive) -> None:
    if not archive.gpu:
        pytest.skip(NO_NCCL)


# -- the dry run itself ----------------------------------------------------------------------


def test_the_dry_run_leaves_one_archive_of_every_step(dry_run, tmp_path):
    out, elapsed, stdout = dry_run
    assert [p.name for p in out.iterdir()] == ["gpu-verify-cpu.tar.gz"]
    run = unpack(out / "gpu-verify-cpu.tar.gz", tmp_path)
    manifest = run.manifest
    assert (manifest["mode"], manifest["backend"]) == ("cpu", "gloo")
    assert [s["step"] for s in manifest["steps"]] == STEPS
    assert manifest["wall_s"] < manifest["budget_s"] and manifest["wall_s"] <= elapsed
    assert run.step("dup-gpu")["skipped"].startswith("needs CUDA")
    assert "skipped" in run.step("bare")  # a baseline for timings a dry run does not take
    assert not [s for s in manifest["steps"] if "error" in s or s.get("timed_out")], manifest
    # netns where the suite runs as root: a healthy cluster; on loopback the master's address
    # is loopback, which the check rightly reports (exit 1)
    expected = 0 if run.step("check")["network"] == "netns" else 1
    assert [n["rc"] for n in run.step("check")["nodes"]] == [expected, expected]
    assert (run.step("watch-healthy")["rc"], run.step("watch-stalled")["rc"]) == (0, 3)
    # the performance note's numbers, read from the check's report
    numbers = manifest["numbers"]
    assert numbers["allreduce_busbw_GBps"] > 0 and numbers["check_wall_s"] > 0
    assert numbers["tcp_probe_Gbitps"]["node1"] > 0  # node1 probes the master
    # everything each step wrote, and nothing but files, folders and links
    for wanted in ("machine/versions.json", "machine/ip-addr.stdout", "preflight/preflight.json",
                   "preflight/tree/proc/self/mountinfo", "preflight/tree/run/nccldoctor/ip-addr.json",
                   "check/node0/run/check-cluster.json", "check/node1/run/check-node1.json",
                   "check/node0/run/rank0/worker.log", "check/node1/run/rank1/events.jsonl",
                   "check/node0.stdout", "watch-healthy/watch.stderr"):  # fmt: skip
        assert (run.root / wanted).is_file(), wanted
    for step in ("watch-healthy", "watch-stalled"):
        assert (run.watch_run(step) / "report.json").is_file()
    assert len(list(run.watch_run("watch-stalled").glob("fr.*.pkl"))) == 2
    assert all(p.is_file() or p.is_dir() or p.is_symlink() for p in run.root.rglob("*"))
    assert f"gpu-verify: {out / 'gpu-verify-cpu.tar.gz'}" in stdout
    steps = ", ".join(f"{s['step']} {s['wall_s']:.1f}" for s in manifest["steps"])
    print(f"dry run: {elapsed:.1f} s ({steps})")


# -- the replay: any archive -----------------------------------------------------------------


def test_the_preflight_tree_judges_as_the_machine_did(archive):
    """The captured tree through the probes and rules: no finding the live preflight did not
    have (the tree misses only what no file holds: NVML, the Python packages, statvfs)."""
    live = archive.json("preflight/preflight.json")
    [node] = live["nodes"]
    report = run_preflight(root=archive.root / "preflight" / "tree", env=node["env"]["variables"])
    replayed = {f.id for f in report.findings if f.severity in (Severity.WARN, Severity.FAIL)}
    assert replayed <= {f["id"] for f in live["findings"]}, replayed
    [facts] = report.nodes
    assert facts.container.ipc_namespace == node["container"]["ipc_namespace"]
    assert facts.container.shm_size_bytes == node["container"]["shm_size_bytes"]
    assert facts.network.hostname == node["network"]["hostname"]
    live_if = {i["name"]: i["ipv4"] for i in node["network"]["interfaces"]}
    tree_if = {i.name: i.ipv4 for i in facts.network.interfaces}
    assert {n: a for n, a in tree_if.items() if n in live_if} == {
        n: a for n, a in live_if.items() if n in tree_if
    }
    assert "lo" in tree_if


def test_the_check_ran_both_nodes_to_the_end(archive):
    cluster = archive.json("check/node0/run/check-cluster.json")
    assert cluster["completed"] is True and cluster["hang"] is None
    assert cluster["cluster"]["backend"] == archive.manifest["backend"]
    assert [(r["rank"], r["node"], r["state"]) for r in cluster["ranks"]] == [
        (0, "node0", "ok"),
        (1, "node1", "ok"),
    ]
    rows = cluster["bandwidth"]["rows"]
    assert rows and all(r["wrong"] == 0 and r["busbw_GBps"] > 0 for r in rows)
    assert cluster["mnist"]["params_identical"] is True


def test_the_stalled_rank_is_named_and_its_dumps_agree(archive):
    run = archive.watch_run("watch-stalled")
    report = json.loads((run / "report.json").read_text())
    assert report["watch"]["hung"] is True
    hang = next(f for f in report["findings"] if f["id"] == "watch.hang")
    assert hang["rank"] == 1 and "rank 1" in report["watch"]["verdict"]
    dumps = rank_dumps(run)
    assert sorted(dumps) == [0, 1]
    reading, findings = explain_dumps([(path, rank) for rank, path in dumps.items()])
    [group] = [g for g in reading["groups"] if g["divergences"]]
    assert group["divergences"][0]["missing"] == [1]  # rank 1 never issued what rank 0 waits in
    missing = next(f for f in findings if f.id == "flightrec.ranks-missing")
    assert missing.rank == 1


def rank_dumps(run: Path) -> dict[int, Path]:
    """Each rank's Flight Recorder dump in a watch run's folder: the one watch asked for
    (``fr.<pid>.pkl``, the rank from the process record beside it), else the one PyTorch wrote
    at its collective timeout (``fr_trace_rank_<rank>``, debugenv.py's TORCH_FR_DUMP_TEMP_FILE)."""
    dumps: dict[int, Path] = {}
    for path in sorted(run.iterdir(), key=lambda p: p.name.startswith("fr_trace_rank_")):
        if not path.is_file() or not looks_like_dump(path.read_bytes()[:64]):
            continue
        if path.name.startswith("fr_trace_rank_"):
            rank = int(path.name.removeprefix("fr_trace_rank_"))
        else:
            pid = path.name.split(".")[1]
            rank = int(json.loads((run / f"proc.{pid}.json").read_text())["rank"])
        dumps.setdefault(rank, path)
    return dumps


def test_the_healthy_job_passes_through_watch(archive):
    report = json.loads((archive.watch_run("watch-healthy") / "report.json").read_text())
    assert report["watch"]["exit_code"] == 0 and report["watch"]["hung"] is False
    assert not [f for f in report["findings"] if f["severity"] in ("warn", "fail")]
    assert sorted(r["rank"] for r in report["ranks"]) == [0, 1]


# -- the replay: what only a GPU run holds ---------------------------------------------------


def oracle(logs: list[Path]) -> dict:
    """What the NCCL lines themselves say, read with this file's patterns."""
    text = "\n".join(p.read_text(errors="replace") for p in logs)
    interfaces = {
        name
        for using in SOCKET_USING.findall(text)
        for name in re.findall(r"\[\d+\]([^:\s]+):", using)
    }
    return {
        "versions": set(VERSION_LINE.findall(text)),
        "channels": Counter(int(n) for n in RING_LINE.findall(text)),
        "transports": set(VIA_LINE.findall(text)),
        "interfaces": interfaces,
        "calls": [(f, int(b), a.upper(), p.upper()) for f, b, a, p in PER_CALL.findall(text)],
    }


def test_the_parser_reads_the_check_logs_as_nccl_wrote_them(archive):
    needs_gpu(archive)
    logs = archive.nccl_logs("check")
    assert len(logs) >= 2, "each node's rank writes its NCCL_DEBUG_FILE"
    said = oracle(logs)
    extra, _ = explain(file_sources(logs), jobs=1)
    assert said["versions"] == {archive.versions["torch_nccl"]}
    assert extra["nccl_version"] == archive.versions["torch_nccl"]
    assert (extra["nranks"], extra["nodes"]) == (2, 2)
    # two hosts to NCCL (NCCL_HOSTID): sockets between them, on the interface towards the master
    assert extra["network"] == "Socket"
    assert set(extra["interfaces"]) == said["interfaces"]
    assert set(extra["transports"]) == said["transports"]
    assert all(t.startswith("NET/Socket") for t in said["transports"])
    assert extra["channels"] == said["channels"].most_common(1)[0][0]
    assert extra["init_complete"] is True


def test_the_check_report_says_sockets_towards_the_master(archive):
    """The node report's own NCCL section: the transport, the interface and an algorithm per
    size, with the busbw of the sweep beside it."""
    needs_gpu(archive)
    towards_master = "eth0" if archive.step("check")["network"] == "netns" else "lo"
    for node in ("node0", "node1"):
        report = archive.json(f"check/{node}/run/check-{node}.json")
        nccl = report["nccl"]
        assert (nccl["network"], nccl["interfaces"]) == ("Socket", [towards_master])
        assert nccl["transports"] and all(t.startswith("NET/Socket") for t in nccl["transports"])
        assert {r["collective"] for r in nccl["algorithms"]} >= {"AllReduce"}
    # a healthy machine: nothing to report but what the run made so (a loopback master) or the
    # machine's /etc/hosts says (its hostname on 127.x, as the captured tree holds it)
    cluster = archive.json("check/node0/run/check-cluster.json")
    problems = {f["id"] for f in cluster["findings"] if f["severity"] in ("warn", "fail")}
    expected = {"master.loopback"} if towards_master == "lo" else set()
    [node] = archive.json("preflight/preflight.json")["nodes"]
    hosts = (archive.root / "preflight" / "tree" / "etc" / "hosts").read_text().splitlines()
    if any(
        line.startswith("127.") and node["network"]["hostname"] in line.split()[1:]
        for line in hosts
    ):
        expected.add("host.hostname-loopback")
    assert problems <= expected, problems


def test_the_logged_algorithm_per_size_is_the_parsers(archive):
    needs_gpu(archive)
    logs = archive.nccl_logs("check")
    calls = oracle(logs)["calls"]
    assert calls, "NCCL_DEBUG_SUBSYS with TUNING prints one line per call (NCCL >= 2.20)"
    extra, _ = explain(file_sources(logs), jobs=1)
    logged = {(r["collective"], r["algorithm"].upper(), r["protocol"].upper()):
              (r["min_bytes"], r["max_bytes"]) for r in extra["algorithms"] if r["source"] == "log"}  # fmt: skip
    expected: dict[tuple[str, str, str], tuple[int, int]] = {}
    for func, nbytes, algo, proto in calls:
        lo, hi = expected.get((func, algo, proto), (nbytes, nbytes))
        expected[func, algo, proto] = (min(lo, nbytes), max(hi, nbytes))
    assert logged == expected


def test_the_tuning_replay_picks_what_nccl_picked(archive):
    """NCCL's cost model redone from its printed table (ncclog/tuning.py) against the choice
    NCCL logged for each call of the check's rank 0."""
    needs_gpu(archive)
    logs = parse_sources(file_sources(archive.nccl_logs("check")), jobs=1)
    [main, *_] = group_comms(logs)
    source = main.tuning_source()
    assert source is not None and source.tuning.rows, "the TUNING table is printed at init"
    calls = oracle(archive.nccl_logs("check"))["calls"]
    assert calls, "NCCL_DEBUG_SUBSYS with TUNING prints one line per call (NCCL >= 2.20)"
    wrong = []
    for func, nbytes, algo, proto in calls:
        pick = best(source.tuning.rows.get(func, {}), func, nbytes, main.topology())
        if pick is None or (pick[0].upper(), pick[1].upper()) != (algo, proto):
            wrong.append((func, nbytes, (algo, proto), pick))
    assert not wrong, wrong[:10]


def test_two_ranks_on_one_gpu_are_refused_and_named(archive):
    needs_gpu(archive)
    run = archive.watch_run("dup-gpu")
    logs = archive.nccl_logs("dup-gpu")
    assert any("Duplicate GPU detected" in p.read_text(errors="replace") for p in logs)
    report = json.loads((run / "report.json").read_text())
    assert report["watch"]["exit_code"] != 0
    assert "nccl.duplicate-gpu" in {f["id"] for f in report["findings"]}


def test_a_gpu_archive_comes_with_its_readme(archive):
    """The machine, driver, torch and NCCL versions of the kept run, as the run recorded them."""
    needs_gpu(archive)
    readme = (GPU_FIXTURES / "README.md").read_text()
    [node] = archive.json("preflight/preflight.json")["nodes"]
    for what in (node["gpu"]["driver_version"], archive.versions["torch"],
                 archive.versions["torch_nccl"], *[g["name"] for g in archive.versions["gpus"]]):  # fmt: skip
        assert what in readme, what


def test_the_gpu_machine_preflight_is_healthy(archive):
    needs_gpu(archive)
    live = archive.json("preflight/preflight.json")
    [node] = live["nodes"]
    assert node["gpu"]["nvml_available"] is True
    assert [d["name"] for d in node["gpu"]["devices"]] == [
        g["name"] for g in archive.versions["gpus"]
    ]
    # alone, with no master named, preflight says what it could not judge: nothing else
    assert {f["id"] for f in live["findings"] if f["severity"] in ("warn", "fail")} <= {
        "preflight.judged-alone"
    }


def test_the_gpu_watch_logs_say_sockets_between_the_ranks(archive):
    needs_gpu(archive)
    logs = archive.nccl_logs("watch-healthy")
    said = oracle(logs)
    extra, _ = explain(file_sources(logs), jobs=1)
    assert said["transports"] and all(t.startswith("NET/Socket") for t in said["transports"])
    assert set(extra["transports"]) == said["transports"]
