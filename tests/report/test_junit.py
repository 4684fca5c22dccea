"""JUnit XML: one case per finding and per phase, failures where CI must fail, valid XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from nccldoctor.views.junit import render_document_junit, render_junit
from tests.report.conftest import fixture_document
from tests.report.scenarios import SCENARIOS


def _cases(xml: str) -> dict[str, ET.Element]:
    root = ET.fromstring(xml)
    return {f"{c.get('classname')}::{c.get('name')}": c for c in root.iter("testcase")}


def test_every_scenario_is_valid_junit_with_consistent_counts(scenario: str) -> None:
    root = ET.fromstring(render_junit(SCENARIOS[scenario]()))
    assert root.tag == "testsuites"
    for suite in [root, *root.findall("testsuite")]:
        cases = list(suite.iter("testcase"))
        assert int(suite.get("tests")) == len(cases)
        assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases)
        assert int(suite.get("skipped")) == sum(c.find("skipped") is not None for c in cases)


def test_failed_check_cases() -> None:
    cases = _cases(render_document_junit(fixture_document("failed-check")))
    nat = cases["nccldoctor.network::reach.nat-detected [node node-b]"]
    assert nat.find("failure").get("type") == "docker_network"
    assert "docker run --network host" in nat.find("failure").text
    warn = cases["nccldoctor.cluster::cluster.driver-differs"]
    assert warn.find("failure") is None
    assert warn.find("skipped").get("message").startswith("warning: NVIDIA driver differs")
    init = cases["nccldoctor.phase::init [rank 2, node node-b]"]
    assert init.find("failure").get("message") == "init failed: RuntimeError: NCCL error"
    assert init.get("time") == "0.900"
    assert cases["nccldoctor.phase::init [rank 0, node node-a]"].find("failure") is None
    assert cases["nccldoctor.phase::preflight [agent, node node-a]"].find("failure") is None


def test_healthy_check_has_no_failure() -> None:
    root = ET.fromstring(render_document_junit(fixture_document("healthy-check")))
    assert root.get("failures") == "0" and int(root.get("tests")) > 20


def test_hang_timeout_and_incomplete_run_fail() -> None:
    doc = fixture_document("hang-check")
    doc["completed"] = False
    doc["phases"].append(
        {"node": "node-b", "rank": 1, "phase": "ddp", "status": "running", "started": None}
    )
    doc["phases"].append({"node": "node-b", "rank": 1, "phase": "checksum", "status": "skipped"})
    cases = _cases(render_document_junit(doc))
    assert (
        cases["nccldoctor.phase::bandwidth [rank 1, node node-b]"].find("failure").get("type")
        == "timeout"
    )
    assert (
        cases["nccldoctor.phase::ddp [rank 1, node node-b]"].find("failure").get("message")
        == "ddp never finished"
    )
    assert cases["nccldoctor.phase::checksum [rank 1, node node-b]"].find("skipped") is not None
    assert cases["nccldoctor.run::run.completed"].find("failure") is not None


def test_control_characters_and_markup_survive_as_text() -> None:
    doc = {
        "kind": "check",
        "findings": [
            {
                "id": "x",
                "severity": "fail",
                "title": "bad \x00\x1b[31m <b>&",
                "evidence": ["\ud800 ok"],
                "area": "logs",
            }
        ],
    }
    xml = render_document_junit(doc)
    failure = ET.fromstring(xml).find(".//failure")
    assert failure.get("message") == "bad \ufffd\ufffd[31m <b>&"
    assert "\ufffd ok" in failure.text


def test_control_characters_in_node_and_rank_do_not_break_the_case_name() -> None:
    # found by hypothesis (tests/report/test_robust.py): the name is built from these values
    doc = {"kind": "check", "findings": [{"id": "x", "severity": "ok", "title": "t",
                                          "node": "n\x01", "rank": "\x1f"}]}  # fmt: skip
    case = ET.fromstring(render_document_junit(doc)).find(".//testcase")
    assert case.get("name") == "x [node n\ufffd, rank \ufffd]"


def test_no_phases_no_phase_suite() -> None:
    root = ET.fromstring(render_document_junit(fixture_document("preflight")))
    assert [s.get("name") for s in root.findall("testsuite")] == ["nccldoctor.preflight.findings"]
