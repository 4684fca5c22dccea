"""`nccldoctor explain` as a library: parse logs, summarise them, judge them with the log rules;
and a ticket's other attachments (nccl-tests output, NCCL RAS output, Flight Recorder dumps,
nccldoctor reports), each kind read by its reader and judged by its scope's rules.

The parser (``ncclog``) reads and records which lines the signature catalogue recognises; the
rules of scope ``logs`` (``checks/logs/``) turn the reading into findings. ``check`` and
``watch`` read their ranks' logs through the same function. ``explain_ticket`` answers across
kinds: the nccl-tests rules see the network NCCL's log lines name and each node's NIC capacity
from the node reports in the same ticket. PyTorch Flight Recorder dumps are matched across ranks
(``forensics/flightrec.py``) and judged by the ``flightrec`` rules; ``watch`` and ``check`` feed
the dumps they collect through ``explain_dumps`` too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from checks import Scope, run_checks
from checks.signatures import identify
from nccldoctor.limits import MAX_DIGITS
from nccldoctor.model import Finding, Severity
from nccldoctor.ncclog import LogSet, Source, explain_logs, parse_sources
from nccldoctor.ncclog.hostfacts import log_hosts
from nccldoctor.ncclog.summary import read_logs
from nccldoctor.report.load import ReportError, load_document_report
from nccldoctor.ticket import Attachment, Ticket, read_text

# nccl-tests and ncclras outputs are small; a file past this is read up to it, and says so
MAX_TEXT_BYTES = 64 << 20
_CUT = f"longer than {MAX_TEXT_BYTES >> 20} MiB: read up to there"

Context = dict[str, Any]  # what one kind's reading lends the others: the log's network, NICs
Analysis = Callable[[list[Attachment], Context], tuple[dict[str, Any], list[Finding]]]


def judge_logs(logs: LogSet) -> list[Finding]:
    """Every logs-scope rule over parsed ``logs``."""
    return run_checks("logs", read_logs(logs))


# The network rules of `check` that a log's Facts can feed (ncclog/hostfacts.py), by scope: the
# same rules judge a pasted log as judge a live node; the others need what a log never shows
# (routes, the master's address, every interface of the host)
LOG_NETWORK_RULES: dict[Scope, tuple[str, ...]] = {
    "node": (
        "container.bridge-network",
        "socket.ifname-missing",
        "socket.ifname-unusable",
        "socket.pick-virtual",
    ),
    "cluster": ("cluster.advertised-address-shared", "cluster.nccl-interface-differs"),
}
_ONE_HOST = "judged as one host of several: the log shows this host only ({host})"


def _quoting(finding: Finding, lines: list[str], *notes: str) -> Finding:
    """``finding`` with the log lines its facts came from as evidence (after ``notes``)."""
    quoted = [f"log: {line.strip()}" for line in lines]
    return replace(finding, evidence=[*notes, *finding.evidence, *quoted])


def judge_log_network(logs: LogSet) -> list[Finding]:
    """The network rules over the Facts each host of ``logs`` shows, each finding quoting the
    lines it stands on. Where the log shows one host and says nothing of where the other
    ranks are, the host is judged as one of several too, as preflight does without a master;
    what only that finds is a warning that says so."""
    hosts = log_hosts(logs)
    findings: list[Finding] = []
    for host in hosts:
        facts = host.facts
        alone = run_checks("node", facts, node=facts.node, only=LOG_NETWORK_RULES["node"])
        findings += [_quoting(f, host.lines) for f in alone]
        if facts.multi_node or host.alone or not facts.network.nccl_pick:
            continue  # judged as it is: the log shows where the job's ranks are
        said = {(f.id, f.title) for f in alone}
        several = run_checks(
            "node", replace(facts, multi_node=True), node=facts.node, only=LOG_NETWORK_RULES["node"]
        )
        findings += [
            _quoting(
                replace(f, severity=min(f.severity, Severity.WARN, key=lambda s: s.rank)),
                host.lines,
                _ONE_HOST.format(host=facts.node),
            )
            for f in several
            if (f.id, f.title) not in said and f.severity in (Severity.WARN, Severity.FAIL)
        ]
    if len(hosts) > 1:
        cluster = run_checks("cluster", [h.facts for h in hosts], only=LOG_NETWORK_RULES["cluster"])
        boots = [line for h in hosts for line in h.lines if "ootstrap" in line or "NET :" in line]
        findings += [_quoting(f, boots) for f in cluster]
    return findings


def explain_dumps(
    dumps: Sequence[tuple[Path, int | None]], log_stops: dict[int, str] | None = None
) -> tuple[dict[str, Any] | None, list[Finding]]:
    """The ``flight_recorder`` section and the flightrec findings of dump files, each with its
    rank (None: the number its file name ends with); (None, []) without any. ``log_stops``:
    where each global rank's NCCL log stops, for the rank the dumps name as missing."""
    if not dumps:
        return None, []
    from nccldoctor.forensics import flightrec  # on demand: see the note on ANALYSES

    analysis = flightrec.Analysis()
    for path, rank in dumps:
        analysis.add_file(path, rank)
    reading = analysis.reading()
    reading.log_stops = dict(log_stops or {})
    return reading.to_dict(), run_checks("flightrec", reading)


def explain(
    sources: list[Source],
    jobs: int | None = None,
    progress: Callable[[str], None] | None = None,
    network: bool = False,
) -> tuple[dict[str, Any], list[Finding]]:
    """The report's extra section (the summary and headline) and the findings of ``sources``;
    with ``network``, the network rules judge what the logs show of each host too (where no
    probe read the hosts: a ticket's logs, not a check run's)."""
    logs = parse_sources(sources, jobs=jobs, progress=progress, identify=identify)
    findings = judge_logs(logs) + (judge_log_network(logs) if network else [])
    return explain_logs(logs), findings


# A number Python will not read (ValueError) is in no line of a tool's own
_LONG_NUMBER = re.compile(rf"\d{{{MAX_DIGITS + 1}}}")


def _text(attachment: Attachment) -> tuple[str, bool]:
    try:
        return read_text(attachment.path, MAX_TEXT_BYTES)
    except OSError as exc:
        return f"# unreadable: {exc}", False


def _lines(text: str) -> tuple[list[str], str | None]:
    """The lines of a text output, without those holding a number of more than MAX_DIGITS
    digits, and what was left out (None: nothing)."""
    lines = text.splitlines()
    if not _LONG_NUMBER.search(text):
        return lines, None
    kept = [line for line in lines if not _LONG_NUMBER.search(line)]
    return (
        kept,
        f"{len(lines) - len(kept)} line(s) with a number of more than {MAX_DIGITS} digits left out",
    )


def _nccl_tests(files: list[Attachment], context: Context) -> tuple[dict[str, Any], list[Finding]]:
    from nccldoctor import ncctests  # on demand: see the note on ANALYSES

    runs: list[ncctests.PerfRun] = []
    for f in files:
        text, cut = _text(f)
        left_out = None
        if text.lstrip().startswith("{"):
            read = [ncctests.parse_json(text, f.name)]
        else:
            lines, left_out = _lines(text)
            read = ncctests.parse_text(lines, f.name)
            if left_out and not read:  # every line of it had such a number
                read = [ncctests.PerfRun(f.name)]
        for run in read:
            run.error = run.error or (_CUT if cut else None) or left_out
        runs.extend(read)
    reading = ncctests.PerfReading(runs, context.get("network"), context.get("links", {}))
    section = {"runs": [r.to_dict() for r in runs], "link_GBps": reading.link_GBps}
    return section, run_checks("nccl_tests", reading)


def _ras(files: list[Attachment], context: Context) -> tuple[dict[str, Any], list[Finding]]:
    from nccldoctor import ras  # on demand: see the note on ANALYSES

    reports = []
    for f in files:
        text, cut = _text(f)
        left_out = None
        if text.lstrip().startswith("{"):
            report = ras.parse_json(text, f.name)
        else:
            lines, left_out = _lines(text)
            report = ras.parse_text(lines, f.name)
        report.error = report.error or (_CUT if cut else None) or left_out
        reports.append(report)
    reading = ras.RasReading(reports, *context.get("log_ranks", ({}, {})))
    return {"outputs": [r.to_dict() for r in reports]}, run_checks("ras", reading)


def _flight_recorder(
    files: list[Attachment], context: Context
) -> tuple[dict[str, Any], list[Finding]]:
    section, found = explain_dumps(
        [(Path(f.path), None) for f in files], context.get("world_log_stops")
    )
    return section or {}, found


# The kinds beside the logs, in the order they are read, and what reads each. Each kind's reader
# is imported by its analysis, only when the ticket holds that kind: the RAS reader alone compiles
# some 80 regexes at import, which every run over logs alone, most tickets, would pay
# (docs/design.md#explain-start).
ANALYSES: dict[str, Analysis] = {
    "nccl_tests": _nccl_tests,
    "ras": _ras,
    "flight_recorder": _flight_recorder,
}


def _node_links(files: list[Attachment]) -> tuple[dict[str, float], list[tuple[str, str]]]:
    """Each node's NIC capacity (GB/s) from the node reports in the ticket, and the reports that
    could not be read."""
    if not files:
        return {}, []
    from nccldoctor import ncctests  # on demand: see the note on ANALYSES

    links: dict[str, float] = {}
    unread: list[tuple[str, str]] = []
    for f in files:
        try:
            report = load_document_report(f.path)
        except ReportError as exc:
            unread.append((f.name, str(exc).removeprefix(f"{f.path}: ")))
            continue
        for node in report.nodes:
            rates = [p.rate for h in node.rdma.hcas for p in h.ports if p.state == "ACTIVE"]
            speeds = [
                i.speed_mbps or 0 for i in node.network.interfaces if i.kind == "physical" and i.up
            ]
            capacity = ncctests.link_GBps(rates, speeds)
            if capacity is not None:
                links[node.network.hostname or node.node] = capacity
    return links, unread


def _log_ranks(summary: Any) -> tuple[dict[tuple[int, int], str], dict[tuple[int, int], str]]:
    """Where each rank's log stops and the host it ran on, by (communicator hash, rank), from
    the log summary."""
    last: dict[tuple[int, int], str] = {}
    hosts: dict[tuple[int, int], str] = {}
    for comm in (summary or {}).get("communicators") or []:
        try:
            comm_hash = int(comm.get("comm_id"), 16)
        except (TypeError, ValueError):
            continue
        for rank in comm.get("ranks") or []:
            if not isinstance(rank.get("rank"), int):
                continue
            if rank.get("last_line"):
                last[(comm_hash, rank["rank"])] = rank["last_line"]
            if rank.get("host"):
                hosts[(comm_hash, rank["rank"])] = str(rank["host"])
    return last, hosts


def _world_log_stops(summary: Any) -> dict[int, str]:
    """Where each global rank's NCCL log stops: the last line of each rank of the logs' one
    communicator that spans the most ranks (the default process group's, whose NCCL ranks are
    the global ranks); nothing when two communicators are that size (which is the world's is
    then not known)."""
    comms = [c for c in (summary or {}).get("communicators") or [] if isinstance(c, dict)]
    sizes = [c.get("nranks") for c in comms if isinstance(c.get("nranks"), int)]
    if not sizes or sizes.count(max(sizes)) != 1:
        return {}
    (world,) = (c for c in comms if c.get("nranks") == max(sizes))
    return {
        r["rank"]: r["last_line"]
        for r in world.get("ranks") or []
        if isinstance(r, dict) and isinstance(r.get("rank"), int) and r.get("last_line")
    }


def explain_ticket(
    ticket: Ticket, jobs: int | None = None, progress: Callable[[str], None] | None = None
) -> tuple[dict[str, Any], list[Finding]]:
    """The report's extra sections (today's log keys, one section per other kind, what was
    found of each) and the findings of every attachment of ``ticket``."""
    logs = ticket.of_kind("logs")
    others = any(ticket.of_kind(kind) for kind in (*ANALYSES, "reports"))
    extra: dict[str, Any] = {}
    findings: list[Finding] = []
    if logs or not others:
        extra, findings = explain(
            [Source(f.path, f.size) for f in logs], jobs, progress, network=True
        )
    links, unread = _node_links(ticket.of_kind("reports"))
    context: Context = {
        "network": extra.get("network"),
        "links": links,
        "log_ranks": _log_ranks(extra.get("nccl")),
        "world_log_stops": _world_log_stops(extra.get("nccl")),
    }
    for kind, analyse in ANALYSES.items():
        files = ticket.of_kind(kind)
        if not files:
            continue
        section, found = analyse(files, context)
        extra[kind] = {"files": [f.name for f in files], **section}
        findings.extend(found)
    extra["attachments"] = {**ticket.summary(), "unread_reports": [f"{n}: {w}" for n, w in unread]}
    for name, why in unread:  # the ticket.not-read finding names them with the rest
        ticket.skip(name, why)
    findings.extend(run_checks("ticket", ticket))
    name = ticket.namer()
    return _named(extra, name), [
        replace(f, title=name(f.title), evidence=[name(e) for e in f.evidence], fix=name(f.fix))
        for f in findings
    ]


def _named(value: Any, name: Callable[[str], str]) -> Any:
    """``value`` (a report section) with every text's paths as ``name`` gives them."""
    if isinstance(value, str):
        return name(value)
    if isinstance(value, list):
        return [_named(v, name) for v in value]
    if isinstance(value, dict):
        return {k: _named(v, name) for k, v in value.items()}
    return value
