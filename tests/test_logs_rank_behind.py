"""The cross-rank view of PyTorch's SeqNum: the rank whose last completed collective is lowest
is the one behind. Lines in the shapes of open-r1#620 and PyTorch's
Watchdog::runLoop (``[PG ID 0 PG GUID 0(default_pg) Rank N] … last completed work: N``)."""

from __future__ import annotations

from pathlib import Path

from checks import run_checks
from checks.signatures import identify
from nccldoctor.ncclog import parse_source
from nccldoctor.ncclog.summary import read_logs

TIMEOUT = (
    "[rank{r}]:[E424 01:11:21.160832730 ProcessGroupNCCL.cpp:629] [Rank {r}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=BROADCAST, NumelIn=112, "
    "NumelOut=112, Timeout(ms)=1800000) ran for 1800010 milliseconds before timing out."
)
FAILURE = (
    "[rank{r}]:[E424 01:11:21.160 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank "
    "{r}] failure detected by watchdog at work sequence id: {seq} PG status: last enqueued work: "
    "{seq}, last completed work: {done}"
)


def _behind(tmp_path: Path, lines: list[str]) -> list:
    path = tmp_path / "job.log"
    path.write_text("\n".join(lines) + "\n")
    logs = parse_source(str(path), identify=identify)
    return [f for f in run_checks("logs", read_logs(logs)) if f.id == "logs.rank-behind"], logs


def test_the_rank_with_the_lowest_completed_seqnum_is_behind(tmp_path: Path) -> None:
    lines = [TIMEOUT.format(r=r, seq=5) for r in (0, 1, 3)]
    lines.append(TIMEOUT.format(r=2, seq=4))
    found, logs = _behind(tmp_path, lines)
    assert logs.completed_seq == {(None, 0): 4, (None, 1): 4, (None, 2): 3, (None, 3): 4}
    assert len(found) == 1 and found[0].rank == 2
    assert found[0].title.startswith("rank 2 is behind: ")


def test_ranks_that_agree_are_not_behind(tmp_path: Path) -> None:
    found, logs = _behind(tmp_path, [TIMEOUT.format(r=r, seq=9) for r in range(4)])
    assert logs.completed_seq == {(None, r): 8 for r in range(4)} and not found


def test_seqnums_are_compared_within_a_process_group(tmp_path: Path) -> None:
    """SeqNums count per process group (2.3+ name it in every watchdog line): a data-parallel
    group at 40 and a tensor-parallel one at 900 are not one rank behind the other, and the
    rank behind is found in its group."""
    dp = FAILURE.replace("PG ID 0 PG GUID 0(default_pg)", "PG ID 1 PG GUID 3(dp)")
    lines = [FAILURE.format(r=r, seq=901, done=900) for r in range(4)]
    lines += [dp.format(r=r, seq=41, done=40) for r in (0, 1)]
    found, logs = _behind(tmp_path, lines)
    assert logs.completed_seq[("3(dp)", 1)] == 40 and not found
    lines.append(dp.format(r=2, seq=40, done=39))
    found, _ = _behind(tmp_path, lines)
    assert len(found) == 1 and found[0].rank == 2
    assert found[0].title == (
        "rank 2 is behind in process group 3(dp): last completed collective 39, others reached 40"
    )
