"""The consistency table flags a cell only where a registered rule judged it, quoting the rule."""

from __future__ import annotations

from checks import get_check, run_cluster_checks
from nccldoctor.report import Report
from nccldoctor.report.consistency import COLUMN_RULES, COLUMNS, consistency_table
from tests.report.builders import node_facts
from tests.report.scenarios import SCENARIOS


def test_every_column_is_judged_by_a_registered_cross_node_rule() -> None:
    assert set(COLUMN_RULES) == {key for key, _ in COLUMNS}
    for rule in COLUMN_RULES.values():
        check = get_check(rule)
        assert check is not None and check.scope == "cluster", rule


def test_the_real_cross_node_rule_flags_the_torch_column_on_every_node() -> None:
    nodes = [node_facts("node-a", "198.18.0.1/24", 1), node_facts("node-b", "198.18.0.2/24", 1,
                                                                   torch="2.5.1")]  # fmt: skip
    report = Report(kind="check", nodes=nodes, findings=run_cluster_checks(nodes))
    rows = report.to_dict()["consistency"]["rows"]
    assert [row["cells"]["torch"] for row in rows] == ["2.6.0", "2.5.1"]
    assert all(row["flags"].keys() == {"torch"} for row in rows)
    assert rows[0]["flags"]["torch"].startswith("torch version differs between nodes")


def test_differing_values_without_a_finding_are_not_flagged() -> None:
    """The table compares nothing itself: no finding, no flag (views and tables never judge)."""
    document = SCENARIOS["failed-check"]().to_dict()
    document["findings"] = []
    rows = consistency_table(document)["rows"]
    assert {row["cells"]["driver"] for row in rows} == {"550.54.15", "535.161.08"}
    assert all(row["flags"] == {} for row in rows)
    assert rows[1]["address"] == "172.17.0.2 (seen as 198.18.0.2)"


def test_missing_nodes_get_a_row() -> None:
    document = SCENARIOS["failed-check"]().to_dict()
    document["cluster"]["missing_nodes"] = ["node-c"]
    rows = consistency_table(document)["rows"]
    assert rows[-1]["node"] == "node-c" and rows[-1]["missing"] is True
