"""One finding, many nodes: shown once with its nodes in the terminal, the page and JUnit; the
evidence lines that differ per node shown per node under it."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from rich.console import Console

from nccldoctor.model import Finding, Severity
from nccldoctor.report import Report
from nccldoctor.report.grouping import group_findings
from nccldoctor.views.html import render_document_html
from nccldoctor.views.junit import render_document_junit
from nccldoctor.views.terminal import render_terminal

NODES = [f"node-{i}" for i in range(4)]


def _memlock(node: str, soft: str) -> Finding:
    return Finding(
        id="container.memlock-limited",
        category="ib_memlock",
        severity=Severity.FAIL,
        area="container",
        title="memlock limit is too low for InfiniBand registration",
        evidence=["ulimit -l is below 64 MiB", f"soft limit {soft}"],
        fix="docker run --ulimit memlock=-1:-1 ...",
        node=node,
    )


def _document() -> dict:
    findings = [_memlock(n, "64 KiB" if n != "node-3" else "8 MiB") for n in NODES]
    findings.append(
        Finding(
            id="socket.ifname-missing",
            category="interface_selection",
            severity=Severity.WARN,
            area="network",
            title="NCCL_SOCKET_IFNAME names no interface here",
            evidence=["NCCL_SOCKET_IFNAME=ib0"],
            node="node-2",
        )
    )
    return Report(kind="check", findings=findings).to_dict()


def test_groups_name_their_nodes_and_split_the_evidence() -> None:
    memlock, ifname = group_findings(_document())
    assert memlock.nodes == NODES and memlock.several
    assert memlock.evidence == ["ulimit -l is below 64 MiB"]
    assert memlock.per_node == [
        ("node-0, node-1, node-2", ["soft limit 64 KiB"]),
        ("node-3", ["soft limit 8 MiB"]),
    ]
    assert ifname.nodes == ["node-2"] and not ifname.several and ifname.per_node == []


def test_the_same_evidence_everywhere_has_no_per_node_lines() -> None:
    document = Report(kind="check", findings=[_memlock(n, "64 KiB") for n in NODES]).to_dict()
    (group,) = group_findings(document)
    assert group.evidence == ["ulimit -l is below 64 MiB", "soft limit 64 KiB"]
    assert group.per_node == []


def test_terminal_shows_the_finding_once_with_its_nodes() -> None:
    console = Console(width=200, record=True, color_system=None)
    console.print(render_terminal(_document()))
    text = console.export_text()
    title = "memlock limit is too low for InfiniBand registration"
    assert text.count(f"✗ {title}") == 1
    assert f"{title} [node-0, node-1, node-2, node-3]" in text
    assert text.count("ulimit -l is below 64 MiB") == 1
    assert "on node-3:" in text and "soft limit 8 MiB" in text
    assert text.count("docker run --ulimit memlock=-1:-1") == 1


def test_page_shows_the_finding_once_with_its_nodes() -> None:
    page = render_document_html(_document())
    assert page.count('<span class="sev fail">fail</span>memlock limit is too low') == 1
    assert "nodes node-0, node-1, node-2, node-3" in page
    assert '<div class="meta">on node-3:</div><pre class="evidence">soft limit 8 MiB</pre>' in page
    assert " · node node-2" in page  # a finding on one node says "node"


def test_junit_has_one_case_naming_the_nodes() -> None:
    suite = ET.fromstring(render_document_junit(_document())).find("testsuite")
    names = [case.get("name") for case in suite.iter("testcase")]
    assert names == [
        "container.memlock-limited [nodes node-0, node-1, node-2, node-3]",
        "socket.ifname-missing [node node-2]",
    ]
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    failure = suite.find("testcase/failure")
    assert "on node-3:\nsoft limit 8 MiB" in failure.text


def test_a_fix_naming_each_nodes_own_address_keeps_one_finding_in_every_view() -> None:
    """host.hostname-loopback's fix names the node's own address: one finding, each node's
    fix under its name, in the terminal, the page and JUnit."""

    def hosts(node: str, address: str) -> Finding:
        return Finding(
            id="host.hostname-loopback",
            category="interface_selection",
            severity=Severity.FAIL,
            area="network",
            title="hostname resolves to 127.0.1.1: gloo will advertise loopback",
            evidence=["/etc/hosts: 127.0.1.1 host"],
            fix=f"{address} {node}",
            node=node,
        )

    document = Report(
        kind="check", findings=[hosts("node-a", "198.18.0.2"), hosts("node-b", "198.18.0.3")]
    ).to_dict()
    (group,) = group_findings(document)
    assert group.fix == "# on node-a:\n198.18.0.2 node-a\n# on node-b:\n198.18.0.3 node-b"
    console = Console(width=200, record=True, color_system=None)
    console.print(render_terminal(document))
    text = console.export_text()
    assert text.count("    ✗ hostname resolves to 127.0.1.1") == 1 and "# on node-b:" in text
    page = render_document_html(document)
    assert page.count("</span>hostname resolves to 127.0.1.1") == 1 and "198.18.0.3 node-b" in page
    (case,) = ET.fromstring(render_document_junit(document)).find("testsuite").iter("testcase")
    assert "# on node-a:\n198.18.0.2 node-a" in case.find("failure").text
