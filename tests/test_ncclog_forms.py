"""Every form a log takes on its way into a ticket gives the facts the clean
rank files give: the 2.18 two-rank fixture, wrapped the way launchers, terminals, web pages and
Markdown wrap it."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

from nccldoctor.ncclog import expand_inputs, explain_logs, parse_source, parse_sources

FIXTURE = Path(__file__).parent / "fixtures" / "logs" / "v2.18-socket-2node"
FACTS = ("nccl_version", "network", "gdrdma", "nranks", "interfaces", "init_complete")
APP = [
    "Epoch 1/10:  42%|████▏     | 420/1000 [01:02<01:26,  6.71it/s, loss=0.412]",
    "UserWarning: torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly.",
    "step 120 | loss 2.3412 | lr 3.0e-04 | 812 tokens/s",
]


def _ranks() -> list[list[str]]:
    return [p.read_text().splitlines() for p in sorted(FIXTURE.glob("*.log"))]


def _interleave(prefix: Callable[[int, int, str], str]) -> list[str]:
    """Both ranks' lines alternating, an application line after every third, each prefixed."""
    out: list[str] = []
    ranks = _ranks()
    for i in range(max(map(len, ranks))):
        for r, lines in enumerate(ranks):
            if i < len(lines):
                out.append(prefix(r, i, lines[i]))
        if i % 3 == 0:
            out.append(prefix(0, i, APP[i % len(APP)]))
    return out


FORMS: dict[str, Callable[[], bytes]] = {
    "torchrun [rankN]:": lambda: "\n".join(_interleave(lambda r, i, t: f"[rank{r}]:{t}")).encode(),
    "torchrun [defaultN]:": lambda: "\n".join(
        _interleave(lambda r, i, t: f"[default{r}]:{t}")
    ).encode(),
    "slurm N: ": lambda: "\n".join(_interleave(lambda r, i, t: f"{r}: {t}")).encode(),
    "mpirun [1,N]<stdout>:": lambda: "\n".join(
        _interleave(lambda r, i, t: f"[1,{r}]<stdout>:{t}")
    ).encode(),
    "ISO timestamps": lambda: "\n".join(
        _interleave(lambda r, i, t: f"2024-05-01T10:00:{i % 60:02d}.123456+00:00 {t}")
    ).encode(),
    "kubernetes": lambda: "\n".join(
        _interleave(lambda r, i, t: f"2024-05-01T10:00:00.123Z stdout F {t}")
    ).encode(),
    "syslog": lambda: "\n".join(
        _interleave(lambda r, i, t: f"May  1 10:00:00 node-a python[4711]: {t}")
    ).encode(),
    "doubled timestamps": lambda: "\n".join(
        _interleave(lambda r, i, t: f"[2024-05-01 10:00:00] 2024-05-01 10:00:00,123 {t}")
    ).encode(),
    "markdown fence and bold": lambda: (
        "Here is my log:\n```\n"
        + "\n".join(_interleave(lambda r, i, t: f"**{t}**" if i % 5 == 0 else t))
        + "\n```\n"
    ).encode(),
    "line numbers of a web page": lambda: "\n".join(
        f"{n + 1:>5}  {t}" for n, t in enumerate(_interleave(lambda r, i, t: t))
    ).encode(),
    "CRLF": lambda: "\r\n".join(_interleave(lambda r, i, t: t)).encode(),
    "ANSI colours": lambda: "\n".join(
        _interleave(lambda r, i, t: f"\x1b[32m{t}\x1b[0m" if r else f"\x1b[1;33m[rank0]:\x1b[0m{t}")
    ).encode(),
    "NUL bytes": lambda: "\n".join(_interleave(lambda r, i, t: f"\0\0{t}")).encode() + b"\0" * 64,
    "tqdm glued": lambda: "\n".join(
        _interleave(lambda r, i, t: (APP[0] + "\r" + t) if i % 4 == 0 else t)
    ).encode(),
    "first and last line cut": lambda: "\n".join(_interleave(lambda r, i, t: t))[17:-9].encode(),
    "gzip": lambda: gzip.compress("\n".join(_interleave(lambda r, i, t: t)).encode()),
    "nodes concatenated": lambda: "\n".join(
        ["==> node-a.log <=="] + _ranks()[0] + ["", "==> node-b.log <=="] + _ranks()[1]
    ).encode(),
}


def _facts(path: Path) -> dict:
    extra = explain_logs(parse_source(str(path)))
    return {k: extra[k] for k in FACTS}


@pytest.fixture(scope="module")
def clean() -> dict:
    extra = explain_logs(parse_sources(expand_inputs([str(FIXTURE)]), jobs=1))
    return {k: extra[k] for k in FACTS}


@pytest.mark.parametrize("form", FORMS)
def test_form_gives_the_clean_facts(form: str, clean: dict, tmp_path: Path) -> None:
    path = tmp_path / "pasted.log"
    path.write_bytes(FORMS[form]())
    assert _facts(path) == clean
    assert clean["nranks"] == 2 and clean["init_complete"] is True
