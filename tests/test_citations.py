"""Every citation in the code resolves: a reader can follow it to a file (and anchor) of this
repository, or to NCCL's source.

Scanned: nccldoctor/, checks/, tests/, bench/, templates/ and scripts/ (not the captured
fixtures, which are data, and not this file, which spells the patterns). A citation is a design,
style or log-format note named by file (`docs/design.md#phases`, `nccl-log-formats.md#bootstrap`),
an entry of the known failures (`failures.md F01`, `docs/failures.md#f01`), a `reference/...`
path, a numbered section (`§7.2`), an issue number, or "the contract". A cited file resolves only
inside the repository (a folder beside the checkout is not the reader's). Section numbers, issue
numbers and "the contract" point outside the repository, so they never resolve: cite a file and
an anchor instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.test_docs import markdown_anchors

REPO = Path(__file__).resolve().parent.parent
SCANNED = ("nccldoctor", "checks", "tests", "bench", "templates", "scripts")
SUFFIXES = (".py", ".toml", ".j2", ".md", ".json", ".js", ".css", ".sh")
NOT_SCANNED = (REPO / "tests" / "fixtures", Path(__file__).resolve())

# The notes code cites by file name, with an optional #anchor.
DOC = re.compile(
    r"(?<![\w./-])(?P<path>(?:[\w.-]+/)*(?:DESIGN|design|STYLE|nccl-log-formats|nccl-logs"
    r"|failures|other-tools|[A-Z-]*CONTRACT)\.md)(?:#(?P<anchor>[\w-]+))?"
)
REFERENCE = re.compile(r"(?<![\w.-])(?:[\w.-]+/)*reference/[\w./-]+")
FAILURE = re.compile(r"\bF(\d\d)\b")
SECTION = re.compile(r"§ ?\d+(?:\.\d+)*")
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+\b")
CONTRACT = re.compile(r"\b(?:the (?:cluster )?contract|contract's)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Offender:
    path: str
    line: int
    citation: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.citation!r}: {self.why}"


def _in_repo(path: Path) -> bool:
    """``path`` exists inside the repository (``../shared/DESIGN.md`` exists beside a checkout,
    but a reader of the repository does not have it)."""
    return path.exists() and path.resolve().is_relative_to(REPO)


def _documents(name: str) -> list[Path]:
    """The files a cited path names: relative to the repository or docs/, or a bare name
    anywhere in the repository."""
    if "/" in name:
        return [p for p in (REPO / name, REPO / "docs" / name) if p.is_file() and _in_repo(p)]
    return [p for p in REPO.rglob(name) if ".git" not in p.parts and p.is_file()]


def offenders_in(text: str, where: str) -> list[Offender]:
    """Every citation in ``text`` that does not resolve."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):

        def offend(citation: str, why: str, number: int = number) -> None:
            found.append(Offender(where, number, citation, why))

        cited = []  # spans of document citations: a reference/ path inside one is said once
        for match in DOC.finditer(line):
            cited.append(match.span())
            documents = _documents(match["path"])
            if not documents:
                offend(match[0], "no such file in this repository")
                continue
            anchors = set().union(*(markdown_anchors(d) for d in documents))
            if match["anchor"] and match["anchor"] not in anchors:
                offend(match[0], "no such anchor")
            if match["path"].endswith("failures.md"):
                rest = line[match.end() : match.end() + 80]
                for failure in FAILURE.finditer(rest.split(".")[0]):
                    if f"f{failure[1]}" not in anchors:
                        offend(f"{match[0]} {failure[0]}", "no such failure entry")
        for match in REFERENCE.finditer(line):
            inside = any(start <= match.start() < end for start, end in cited)
            if not inside and not _in_repo(REPO / match[0]):
                offend(match[0], "no such path in this repository")
        for pattern, why in (
            (SECTION, "a section number: cite a file and its #anchor"),
            (ISSUE, "an issue number is not in the repository: cite the file that holds it"),
            (CONTRACT, "no contract document: cite docs/design.md#records or the module"),
        ):
            for match in pattern.finditer(line):
                offend(match[0], why)
    return found


def _scanned_files() -> list[Path]:
    files = []
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file() or "__pycache__" in path.parts:
                continue
            if any(path == skip or skip in path.parents for skip in NOT_SCANNED):
                continue
            files.append(path)
    return files


def test_the_scanner_tells_citations_that_resolve_from_ones_that_do_not() -> None:
    good = (
        "see docs/design.md#phases and nccl-log-formats.md#bootstrap\n"
        "Docker NAT (docs/failures.md#f01; failures.md F02, F20).\n"
        "NCCL's own order (misc/socket.cc, ncclFindInterfaces).\n"
    )
    assert offenders_in(good, "good") == []
    bad = (
        "as the contract says (DESIGN.md, the cluster run)\n"
        "formats: reference/nccl-logs.md §2-§7; reference/tools/x.txt\n"
        "issue 3 keys; docs/design.md#no-such-anchor; failures.md F99\n"
        "../shared/DESIGN.md; ../shared/reference/nccl.md; Issue #12; STYLE.md\n"
    )
    assert [(o.line, o.citation) for o in offenders_in(bad, "bad")] == [
        (1, "DESIGN.md"),
        (1, "the contract"),
        (2, "reference/nccl-logs.md"),
        (2, "reference/tools/x.txt"),
        (2, "§2"),
        (2, "§7"),
        (3, "docs/design.md#no-such-anchor"),
        (3, "failures.md F99"),
        (3, "issue 3"),
        (4, "../shared/DESIGN.md"),
        (4, "STYLE.md"),
        (4, "../shared/reference/nccl.md"),
        (4, "Issue #12"),
    ]


def test_every_citation_in_the_code_resolves() -> None:
    files = _scanned_files()
    assert len(files) > 100, "the scan found too few files"
    offenders = [
        o
        for path in files
        for o in offenders_in(path.read_text(encoding="utf-8", errors="replace"),
                              str(path.relative_to(REPO)))
    ]  # fmt: skip
    assert not offenders, f"{len(offenders)} citations do not resolve:\n" + "\n".join(
        map(str, offenders)
    )
