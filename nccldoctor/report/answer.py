"""The banner and the one-paragraph answer of a report document, written into it as ``headline``.

"AllReduce over 4 ranks on 2 nodes used NET/Socket via eth0, GPUDirect RDMA off, 2 channels,
Ring with Simple for ≥ 64 KiB, Tree with LL below. No problems found." The NCCL part is the
ncclog summary's own sentence (``nccl.answer``) when the document has one; otherwise it is built
here from the summary's fields. Everything comes from the document, nothing is measured.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from nccldoctor.forensics.stacks import readable
from nccldoctor.report.shape import items, section, values
from nccldoctor.units import format_bytes

# banner key -> heading; the key is also the CSS class of the HTML banner.
BANNERS = {
    "healthy": "Healthy",
    "warnings": "Warnings",
    "problems": "Problems found",
    "hang": "Hang",
    "incomplete": "Could not run",
}
# The keys `explain` puts at top level; a check report has them under `nccl`.
NCCL_SUMMARY_KEYS = (
    "nccl_version",
    "cuda_version",
    "nranks",
    "nodes",
    "network",
    "interfaces",
    "gdrdma",
    "transports",
    "channels",
    "algorithms",
    "init_complete",
)
_TITLES_NAMED = 3
_NODES_NAMED = 8  # past this, the subject sentence counts the nodes instead of naming them
LINE_MAX = 160  # the verdict line: read in one glance, one terminal line on most screens


def banner(document: dict[str, Any]) -> str:
    """healthy | warnings | problems | hang | incomplete: a hang outranks the rest."""
    if document.get("hang"):
        return "hang"
    if not document.get("completed", True):
        return "incomplete"
    verdict = document.get("verdict", "healthy")
    return verdict if isinstance(verdict, str) and verdict in BANNERS else "problems"


def headline(document: dict[str, Any]) -> dict[str, str]:
    """The document's ``headline``: the banner key, its heading, the one line a person reads
    first, and the answer paragraph."""
    key = banner(document)
    paragraph = answer(document)
    return {
        "banner": key,
        "title": BANNERS[key],
        "line": verdict_line(document, key, paragraph),
        "answer": paragraph,
    }


def verdict_line(document: dict[str, Any], key: str, paragraph: str) -> str:
    """ "Problems found: docker container on a bridge network in a multi-node job → run the
    containers with --network host": the verdict, the root cause and its fix, at most
    ``LINE_MAX`` characters, no source paths. The root cause is the worst problem that no other
    explains, the one that explains most first; without one, the answer's first sentence."""
    findings = items(document.get("findings"))
    explained = Counter(str(f.get("explained_by")) for f in findings if f.get("explained_by"))
    roots = [
        f for f in findings if f.get("severity") in ("fail", "warn") and not f.get("explained_by")
    ]
    heading = f"{BANNERS[key]}: "
    if roots:
        root = max(roots, key=lambda f: (f.get("severity") == "fail", explained[str(f.get("id"))]))
        remedy = _text(root.get("remedy"))
        return heading + _fit(_plain(_text(root.get("title"))), LINE_MAX - len(heading),
                              f" → {remedy}" if remedy else "")  # fmt: skip
    if key == "incomplete":
        aborted = _text(section(document, "run").get("aborted"))
        text = f"the run could not complete: {aborted}" if aborted else "the run did not complete"
        return heading + _fit(_plain(text), LINE_MAX - len(heading))
    first = _plain(paragraph).split(". ")[0].rstrip(".")
    return heading + _fit(first or "no problems found", LINE_MAX - len(heading))


def _plain(text: str) -> str:
    """One readable line (``[/__w/pytorch/…/pair.cc:152]`` and C++ frames gone)."""
    return " ".join(readable(text).split())


def _fit(text: str, width: int, tail: str = "") -> str:
    """``text`` + ``tail`` in ``width`` characters, ``text`` cut (…) where it must be."""
    room = max(width - len(tail), 16)
    return (text if len(text) <= room else text[: room - 1].rstrip() + "…") + tail


def nccl_summary(document: dict[str, Any]) -> dict[str, Any]:
    """The NCCL log summary's headline keys: the `nccl` section when it has them, else
    the top-level keys `explain` writes, else {}."""
    nccl = section(document, "nccl")
    if any(k in nccl for k in NCCL_SUMMARY_KEYS):
        return nccl
    if not any(k in document for k in NCCL_SUMMARY_KEYS if k != "nodes"):  # core `nodes` only
        return {}
    return {k: document[k] for k in NCCL_SUMMARY_KEYS if k in document}


def nccl_answer(document: dict[str, Any]) -> str:
    """The log parser's own sentence: top-level ``answer`` (explain) or ``nccl.answer``."""
    candidates = [document.get("answer"), section(document, "nccl").get("answer")]
    return next((c for c in candidates if _text(c)), "")


def answer(document: dict[str, Any]) -> str:
    """The paragraph under the banner: what NCCL chose, then what went wrong (or that nothing did)."""
    summary = nccl_summary(document)
    parsed = nccl_answer(document)
    sentences = [parsed.rstrip(".") + "."] if parsed else [nccl_sentence(summary)]
    if not summary:
        sentences.append(_subject_sentence(document))
    sentences.append(_hang_sentence(document) or _watch_sentence(document))
    sentences += [
        _findings_sentence(document, said=" ".join(sentences)),
        _bandwidth_sentence(document),
    ]
    return _plain(" ".join(s for s in sentences if s))


def nccl_sentence(summary: dict[str, Any]) -> str:
    """ "AllReduce over 4 ranks on 2 nodes used NET/Socket via eth0, ..." ("" without a summary)."""
    if not summary:
        return ""
    algorithms = items(summary.get("algorithms"))
    collective = _text(algorithms[0].get("collective")) if algorithms else ""
    subject = " ".join(
        part
        for part in (
            collective or "NCCL",
            _count(summary.get("nranks"), "rank", "over"),
            _count(_node_count(summary.get("nodes")), "node", "on"),
        )
        if part
    )
    used = [_network(summary)]
    gdr = summary.get("gdrdma")
    if isinstance(gdr, bool):
        used.append(f"GPUDirect RDMA {'on' if gdr else 'off'}")
    if isinstance(summary.get("channels"), int):
        used.append(_count(summary["channels"], "channel"))
    used.append(_algorithms(algorithms))
    sentence = f"{subject} used {', '.join(u for u in used if u)}."
    if summary.get("init_complete") is False:
        sentence += " NCCL init did not complete on every rank."
    return sentence


def _network(summary: dict[str, Any]) -> str:
    network = _text(summary.get("network"))
    name = f"NET/{network}" if network in ("IB", "Socket") else network or "an unknown network"
    interfaces = [i for i in values(summary.get("interfaces")) if isinstance(i, str)]
    return f"{name} via {', '.join(interfaces)}" if interfaces else name


def _algorithms(algorithms: list[dict[str, Any]]) -> str:
    """ "Ring with Simple for ≥ 64 KiB, Tree with LL below" (largest sizes first)."""
    ordered = sorted(algorithms, key=lambda a: -_bytes(a.get("min_bytes")))
    parts = []
    for previous, algo in zip([None, *ordered], ordered, strict=False):
        choice = f"{algo.get('algorithm', '?')} with {algo.get('protocol', '?')}"
        low = _bytes(algo.get("min_bytes"))
        if low:
            choice += f" for ≥ {format_bytes(low)}"
        elif previous is not None:
            choice += " below"
        if algo.get("source") == "tuning-model":
            choice += " (predicted by NCCL's tuning model)"
        parts.append(choice)
    return ", ".join(parts)


def _subject_sentence(document: dict[str, Any]) -> str:
    """ "Check of 2 ranks on vm, backend gloo." for a document without an NCCL summary."""
    names = [_text(n.get("node")) for n in items(document.get("nodes"))]
    names = [n for n in names if n]
    kind = _text(document.get("kind")).capitalize() or "Report"
    cluster = section(document, "cluster")
    ranks = _count(cluster.get("world_size") or None, "rank")
    backend = _text(section(document, "bandwidth").get("backend") or cluster.get("backend"))
    where = ", ".join(names) if len(names) <= _NODES_NAMED else f"{len(names)} nodes"
    subject = " on ".join(p for p in (ranks, where) if p)
    if not subject:
        return ""
    return f"{kind} of {subject}" + (f", backend {backend}." if backend else ".")


def _hang_sentence(document: dict[str, Any]) -> str:
    hang = document.get("hang")
    if not isinstance(hang, dict):
        return ""
    stuck = items(hang.get("stuck"))
    phase = hang.get("phase") or "an unknown phase"
    where = "; ".join(
        f"rank {s.get('rank')} on {s.get('node')}"
        + (f" in {s['phase']}" if s.get("phase") not in (None, phase) else "")
        for s in stuck[:_TITLES_NAMED]
    )
    sentence = f"The run hung in {phase}" + (f" ({where})." if where else ".")
    verdict = _text(hang.get("verdict")).rstrip(".")
    return f"{sentence} {verdict[:1].upper()}{verdict[1:]}." if verdict else sentence


def _watch_sentence(document: dict[str, Any]) -> str:
    """`nccldoctor watch`'s own verdict on the job (when it did not hang)."""
    watch = document.get("watch")
    return _text(watch.get("verdict")) if isinstance(watch, dict) else ""


def _findings_sentence(document: dict[str, Any], said: str = "") -> str:
    """ "2 problems: A; B." Titles already ``said`` in the paragraph are counted, not repeated."""
    findings = items(document.get("findings"))
    for severity, noun in (("fail", "problem"), ("warn", "warning")):
        of_severity = [f for f in findings if f.get("severity") == severity]
        # one title per cause: a rule that fired on several nodes, or what a cause explains,
        # is not another problem to read about
        found = list(dict.fromkeys(_plain(str(f.get("title", ""))) for f in of_severity
                                   if not f.get("explained_by")))  # fmt: skip
        following = sum(1 for f in of_severity if f.get("explained_by"))
        verb = "follows" if following == 1 else "follow"
        also = f" ({following} more {verb} from {'it' if len(found) == 1 else 'them'})" if (
            following) else ""  # fmt: skip
        if found and all(t.rstrip(".") in said for t in found):
            return f"{_count(len(found), noun).capitalize()}{also}."
        titles = [t for t in found if t.rstrip(".") not in said] if said else found
        if titles:
            named = "; ".join(str(t).rstrip(".") for t in titles[:_TITLES_NAMED])
            more = len(titles) - _TITLES_NAMED
            tail = f"; and {more} more" if more > 0 else ""
            return f"{_count(len(found), noun).capitalize()}: {named}{tail}{also}."
    if not document.get("completed", True):
        aborted = _text(section(document, "run").get("aborted"))
        return (
            f"The run could not complete: {aborted}." if aborted else "The run could not complete."
        )
    return "No problems found."


def _bandwidth_sentence(document: dict[str, Any]) -> str:
    """The largest busbw against the slowest relevant link (the document's ``links``)."""
    sentence = _text(section(document, "links").get("sentence"))
    return f"{sentence[:1].upper()}{sentence[1:]}." if sentence else ""


def _node_count(nodes: Any) -> int | None:
    if isinstance(nodes, int):
        return nodes
    return len(nodes) if isinstance(nodes, list) else None


def _count(n: Any, noun: str, preposition: str = "") -> str:
    if not isinstance(n, int) or isinstance(n, bool):
        return ""
    words = f"{n} {noun}{'s' if n != 1 else ''}"
    return f"{preposition} {words}".strip()


def _bytes(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
