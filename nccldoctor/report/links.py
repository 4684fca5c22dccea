"""The document's ``links``: what each node's links carry and the largest busbw against the
slowest relevant one, as the bandwidth section and the answer state it.

Built from the node facts and the bandwidth section by ``checks/linkrates.py`` (the same budget
the ``bandwidth`` rules judge); this module only writes it down. Whether the fraction is too low
is the rule's call (``run.busbw-below-link``), not this one's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nccldoctor.report.shape import items, section
from nccldoctor.units import UNKNOWN, format_bytes, format_GBps, format_link_rate

if TYPE_CHECKING:
    from checks.linkrates import LinkBudget
    from nccldoctor.facts import NodeFacts


def links_section(
    document: dict[str, Any], network: Any, facts: list[NodeFacts] | None = None
) -> dict[str, Any] | None:
    """``{transport, expected, nodes: [{node, links: [{kind, name, Gbitps, source}]}], slowest,
    busbw_GBps, size_bytes, fraction, probe_below, sentence}``; None without a bandwidth sweep.
    ``probe_below``: the slowest TCP probe that measured less than the busbw. ``facts``:
    the nodes as objects when the caller has them (read from the document otherwise)."""
    bandwidth = section(document, "bandwidth")
    if not bandwidth:
        return None
    # only a document with a sweep needs the budget and the facts' modules: every report is
    # summarised, and an `explain` one has neither (docs/design.md#explain-start)
    from checks.linkrates import EXPECTED, link_budget

    if facts is None:
        facts = _facts(document)
    budget = link_budget(facts, bandwidth, network)
    slowest = budget.slowest()
    fraction = budget.fraction()
    low_probe = budget.probe_below()
    return {
        "transport": budget.transport,
        "expected": EXPECTED[budget.transport][2] if budget.transport else None,
        "nodes": [
            {
                "node": n.node,
                "links": [
                    {"kind": k.kind, "name": k.name, "Gbitps": k.Gbitps, "source": k.source}
                    for k in n.links
                ],
            }
            for n in budget.nodes
        ],
        "slowest": {"node": slowest[0], "link": slowest[1], "Gbitps": slowest[2]}
        if slowest
        else None,
        "busbw_GBps": budget.busbw_GBps,
        "size_bytes": budget.size_bytes,
        "fraction": round(fraction, 4) if fraction is not None else None,
        "probe_below": {"node": low_probe[0], "Gbitps": low_probe[1]} if low_probe else None,
        "sentence": _sentence(budget.busbw_GBps, budget.size_bytes, slowest, fraction, budget),
    }


def _facts(document: dict[str, Any]) -> list[NodeFacts]:
    from nccldoctor.facts import NodeFacts, from_dict

    facts = []
    for entry in items(document.get("nodes")):
        try:
            facts.append(from_dict(NodeFacts, entry))
        except (TypeError, ValueError, KeyError, AttributeError):
            continue  # a node whose facts cannot be read has no known links
    return facts


def _sentence(busbw: Any, size: Any, slowest: Any, fraction: Any, budget: LinkBudget) -> str:
    """ "allreduce busbw 1.40 GB/s at 64 MiB = 9% of what eth0's 12.50 GB/s carries (node-b)"."""
    from checks.linkrates import of_what, percent

    if busbw is None:
        return ""
    head = f"allreduce busbw {format_GBps(busbw)} at {format_bytes(size)}"
    if budget.transport is None:
        return f"{head}; the transport NCCL used is unknown, so is the link it is bounded by"
    # a probe below the busbw read low: named as a lower bound, never as a share of the link
    low = budget.probe_below()
    probe = f"the {format_link_rate(low[1])} the TCP probe measured ({low[0]})" if low else ""
    if slowest is None or fraction is None:
        if low:
            return (
                f"{head}, more than {probe}: the probe read low, its rate is a lower bound of "
                "the link, so the busbw is not compared with it"
            )
        return f"{head}; what the links carry is {UNKNOWN} (no NIC speed, port rate or TCP probe)"
    node, link, gbitps = slowest
    if fraction > 1:  # more than a link carries never crossed it at that rate
        sentence = (
            f"{head}, above the {format_link_rate(gbitps)} {link} is rated for ({node}): that "
            "rating is not what the link carries (a virtual NIC's nominal speed), or the "
            "traffic took another path"
        )
    else:
        sentence = (
            f"{head} = {percent(fraction)} {of_what(link, format_link_rate(gbitps))} ({node})"
        )
    return f"{sentence}; {probe} is below it: a lower bound, not compared" if low else sentence
