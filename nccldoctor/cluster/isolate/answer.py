"""The isolation rounds' answer in a report: the ``isolation`` rules' findings and the document's
``isolation`` section, on the master's own report (the merge carries both to the cluster's)."""

from __future__ import annotations

from checks import run_checks
from nccldoctor.facts.isolation import Isolation
from nccldoctor.report import Report
from nccldoctor.report.isolation import isolation_section


def attach(report: Report, isolation: Isolation) -> None:
    report.findings.extend(run_checks("isolation", isolation))
    report.extra["isolation"] = isolation_section(isolation)
