"""`nccldoctor demo`: the whole check on this one machine, nodes in network namespaces."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from nccldoctor.cli.console import (
    HtmlPath,
    NoHtml,
    abort,
    page_path,
    print_report,
    stderr,
    stdout,
    write_page,
)
from nccldoctor.cli.progress import Progress
from nccldoctor.cluster.timeouts import TimeoutsError, timeouts_from


def demo(
    nodes: Annotated[int, typer.Option(help="How many nodes to simulate.")] = 2,
    procs_per_node: Annotated[int, typer.Option(help="Worker processes per node.")] = 1,
    timeout: Annotated[
        float,
        typer.Option(envvar="NCCLDOCTOR_TIMEOUT", help="Seconds for every wait of the check."),
    ] = 30.0,
    out: Annotated[
        Path, typer.Option(envvar="NCCLDOCTOR_OUT", help="Where the reports and logs go.")
    ] = Path("nccldoctor-demo"),
    loopback: Annotated[
        bool, typer.Option(help="Use the loopback interface even as root.")
    ] = False,
    scenario: Annotated[
        str,
        typer.Option(
            help="plain | docker-bridge (a container per host on Docker's default bridge, the "
            "rendezvous ports published) | docker-host (those containers on --network host)."
        ),
    ] = "plain",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show info findings.")] = False,
    html: HtmlPath = None,
    no_html: NoHtml = False,
) -> None:
    """Run `nccldoctor check` on simulated nodes here (gloo); it exits as check does."""
    from nccldoctor.cluster.rundir import RunFolderError
    from nccldoctor.lab.demo import SCENARIOS, run_demo
    from nccldoctor.lab.netns import NetLabError

    if not 1 <= nodes <= 16 or procs_per_node < 1:
        raise abort("--nodes must be 1..16 and --procs-per-node at least 1")
    if scenario not in SCENARIOS:
        raise abort(f"--scenario {scenario}: one of {', '.join(SCENARIOS)}")
    if scenario != "plain" and loopback:
        raise abort(f"--scenario {scenario} builds namespaces; it cannot run on --loopback")
    try:
        timeouts = timeouts_from(timeout, [], os.environ)
    except TimeoutsError as exc:
        raise abort(str(exc)) from None
    check_args = ["--backend", "gloo", "--procs-per-node", str(procs_per_node),
                  "--timeout", str(timeout)]  # fmt: skip
    try:  # the master's phases on the live line, as `check` shows its own
        with Progress(stderr.real(), timeouts.agent_phase) as shown:
            result = run_demo(nodes, out, check_args, timeouts, os.environ, progress=shown,
                              use_netns=False if loopback else None, scenario=scenario)  # fmt: skip
    except NetLabError as exc:
        raise abort(f"{exc} (try --loopback)", code=3) from None
    except RunFolderError as exc:
        raise abort(str(exc)) from None
    if result.report is None:
        stdout.print(
            f"The check left no cluster report; node logs: {', '.join(map(str, result.node_logs))}"
        )
        raise typer.Exit(3)
    document = result.report.to_dict()
    print_report(document, verbose)
    run = result.report_path.parent.name
    stdout.print(f"Report: {result.report_path} ({result.mode}; each node's output in "
                 f"{out}/node*/{run}.log)")  # fmt: skip
    write_page(document, page_path(html, no_html, result.report_path.with_suffix(".html")))
    raise typer.Exit(result.exit_code)
