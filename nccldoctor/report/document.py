"""The report document: what a run found, as data. Views render it and compute nothing."""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checks import link_causes
from nccldoctor import __version__
from nccldoctor.model import Finding, Severity, worst
from nccldoctor.redact import SEAL_KEY, redact_document, seal
from nccldoctor.report.answer import headline, nccl_summary
from nccldoctor.report.consistency import consistency_table
from nccldoctor.report.links import links_section

if TYPE_CHECKING:  # the facts' modules load only for a report that has nodes: see _node_dicts
    from nccldoctor.facts import NodeFacts

# 2: the document carries its headline and consistency table; 3: every rate names its unit
SCHEMA_VERSION = 3  # (load.upgrade converts older documents)

EXIT_OK = 0  # healthy
EXIT_FAIL = 1  # a finding failed
EXIT_USAGE = 2  # the command line was wrong
EXIT_INCOMPLETE = 3  # the run itself could not complete
# What decided a document's exit_code: its own findings and ``completed``, or the cluster's
# verdict, which every node of a `check` exits with once it hears it from the master.
EXIT_BY_FINDINGS, EXIT_BY_CLUSTER = "findings", "cluster"

SUMMARY_KEYS = ("links", "headline", "consistency")  # built by with_summaries, for the views
# What the loader could not read in a document (load.upgrade); it travels in ``extra`` so a
# re-rendered report still says it.
NOTES_KEY = "load_notes"


@dataclass
class Report:
    kind: str  # preflight | explain | check
    nodes: list[NodeFacts] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    created: str = field(
        default_factory=lambda: _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    )
    tool_version: str = __version__
    schema_version: int = SCHEMA_VERSION
    completed: bool = True  # False when the run itself could not finish
    area_status: dict[str, str] = field(default_factory=dict)  # area -> one-line status info
    # area -> what its status line stands for where it did not pass (model.AreaState)
    area_state: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # kind-specific sections (nccl, phases...)
    # The master's verdict, which a node of a cluster check exits with: None where this report's
    # own findings decide (a node that never heard it, the master's cluster report, any other kind)
    cluster_exit_code: int | None = None

    @property
    def verdict(self) -> str:
        if not self.completed:
            return "incomplete"
        return {Severity.FAIL: "problems", Severity.WARN: "warnings"}.get(
            worst(self.findings), "healthy"
        )

    @property
    def own_exit_code(self) -> int:
        """The exit code this report's own findings and ``completed`` give."""
        if not self.completed:
            return EXIT_INCOMPLETE
        return EXIT_FAIL if worst(self.findings) is Severity.FAIL else EXIT_OK

    @property
    def exit_code(self) -> int:
        """The exit code the run ends with: the cluster's verdict where it decides."""
        return self.own_exit_code if self.cluster_exit_code is None else self.cluster_exit_code

    @property
    def exit_decided_by(self) -> str:
        return EXIT_BY_FINDINGS if self.cluster_exit_code is None else EXIT_BY_CLUSTER

    def to_dict(self) -> dict[str, Any]:
        """The JSON document with secrets redacted: what every view renders."""
        link_causes(self.findings)  # a cause's consequences name it (checks' explains=)
        document = {
            "schema_version": self.schema_version,
            "tool_version": self.tool_version,
            "kind": self.kind,
            "created": self.created,
            "command": self.command,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "exit_decided_by": self.exit_decided_by,
            "completed": self.completed,
            "area_status": self.area_status,
            **({"area_state": self.area_state} if self.area_state else {}),
            "findings": [f.to_dict() for f in self.findings],
            "nodes": _node_dicts(self.nodes),
            **self.extra,
        }
        return with_summaries(redact_document(document), facts=self.nodes)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        # the summaries are rebuilt by to_dict from what they summarise, never carried over
        core = {
            *SUMMARY_KEYS,
            SEAL_KEY,  # the file's, sealed anew by write_report
            "schema_version",
            "tool_version",
            "kind",
            "created",
            "command",
            "verdict",
            "exit_code",
            "exit_decided_by",
            "completed",
            "area_status",
            "area_state",
            "findings",
            "nodes",
        }
        from nccldoctor.facts import NodeFacts, from_dict

        # explain's top-level ``nodes`` is a count of hosts, not node facts: it stays in extra.
        nodes = data.get("nodes", [])
        facts_listed = isinstance(nodes, list) and all(isinstance(n, dict) for n in nodes)
        if not facts_listed:
            core = core - {"nodes"}
        return cls(
            kind=data.get("kind", "unknown"),
            nodes=[from_dict(NodeFacts, n) for n in nodes] if facts_listed else [],
            findings=[Finding.from_dict(f) for f in data.get("findings", [])],
            command=list(data.get("command", [])),
            created=data.get("created", ""),
            tool_version=data.get("tool_version", "unknown"),
            schema_version=int(data.get("schema_version", 1)),
            completed=bool(data.get("completed", True)),
            area_status=dict(data.get("area_status", {})),
            area_state=dict(data.get("area_state", {})),
            extra={k: v for k, v in data.items() if k not in core},
            cluster_exit_code=_cluster_exit_code(data),
        )


def _node_dicts(nodes: list[NodeFacts]) -> list[dict[str, Any]]:
    """The nodes' facts as JSON. The facts' modules are imported only when there are some: an
    `explain` report has none, and importing them is ~15 ms of its start
    (docs/design.md#explain-start)."""
    if not nodes:
        return []
    from nccldoctor.facts import to_dict

    return [to_dict(n) for n in nodes]


def document_verdict(document: dict[str, Any]) -> str:
    """The verdict a document's ``completed`` and findings give, as :attr:`Report.verdict`
    does; never its ``verdict`` field."""
    if document.get("completed") is False:
        return "incomplete"
    findings = document.get("findings")
    # a stranger's severity may be any JSON value (a list is not hashable): compared as text
    severities = {str(f.get("severity")) for f in findings if isinstance(f, dict)} if isinstance(
        findings, list) else set()  # fmt: skip
    if Severity.FAIL.value in severities:
        return "problems"
    return "warnings" if Severity.WARN.value in severities else "healthy"


def document_exit_code(document: dict[str, Any]) -> int:
    """The exit code a document's ``completed`` and findings give, as :attr:`Report.exit_code`
    does; its ``exit_code`` field only where the cluster's verdict decided it and adds a failure
    to what the findings give: a stranger's file may state a code against its findings (300k
    failing findings under exit_code 0 once exited 0), never one that hides them."""
    if document.get("completed") is False:
        own = EXIT_INCOMPLETE
    else:
        findings = document.get("findings")
        failed = isinstance(findings, list) and any(
            isinstance(f, dict) and f.get("severity") == Severity.FAIL.value for f in findings
        )
        own = EXIT_FAIL if failed else EXIT_OK
    cluster = _cluster_exit_code(document)
    return cluster if own == EXIT_OK and cluster is not None else own


def _cluster_exit_code(document: dict[str, Any]) -> int | None:
    """The cluster's verdict a node's document exits with, None where its findings decide."""
    code = document.get("exit_code")
    if document.get("exit_decided_by") != EXIT_BY_CLUSTER or type(code) is not int:
        return None
    return code if code in (EXIT_OK, EXIT_FAIL, EXIT_INCOMPLETE) else None


def with_summaries(
    document: dict[str, Any], facts: list[NodeFacts] | None = None
) -> dict[str, Any]:
    """``document`` with the sections every view shows as they are: the ``links`` (busbw against
    what the links carry), the ``headline`` (banner and answer) and the ``consistency`` table,
    built from the (redacted) document itself (``facts``: its nodes as objects, when known)."""
    links = links_section(document, nccl_summary(document).get("network"), facts)
    document = {**document, "links": links}
    return {**document, "headline": headline(document), "consistency": consistency_table(document)}


def write_report(report: Report, path: str | Path) -> Path:
    """Write the JSON atomically: a reader never sees half a report."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            # sealed: reading it back (load.read_document) need not redact it again
            out.write(seal(json.dumps(report.to_dict(), indent=1, sort_keys=False)))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_report(path: str | Path) -> Report:
    return Report.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
