"""`nccldoctor check`: run on every node; proves the nodes can train together, or says where not."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from nccldoctor.cli.console import (
    HtmlPath,
    NoHtml,
    abort,
    divert_stderr,
    page_path,
    print_json,
    print_report,
    stderr,
    stdout,
    write_page,
)
from nccldoctor.cli.progress import Progress, message_text
from nccldoctor.cluster.agent.rendezvous import Joined
from nccldoctor.cluster.config import DEFAULT_PORT, ConfigError, config_from_args
from nccldoctor.cluster.launchers import host_resolves
from nccldoctor.cluster.rundir import RunFolderError, make_run_folder
from nccldoctor.forensics.stacks import without_cpp_frames


def check(
    master: Annotated[
        str | None,
        typer.Option(
            envvar="NCCLDOCTOR_MASTER",
            help="The master node's address (default: MASTER_ADDR, or Slurm's first node).",
        ),
    ] = None,
    nodes: Annotated[
        int | None,
        typer.Option(
            envvar="NCCLDOCTOR_NODES",
            help="How many nodes "
            "(default: from the launcher; else the master waits for a quiet moment).",
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            envvar="NCCLDOCTOR_PORT",
            help=f"The store port (default {DEFAULT_PORT}; the next port is used too).",
        ),
    ] = None,
    node_rank: Annotated[
        int | None,
        typer.Option(
            envvar="NCCLDOCTOR_NODE_RANK",
            help="This node's rank (default: 0 on the node owning --master, others at join).",
        ),
    ] = None,
    procs_per_node: Annotated[
        int | None,
        typer.Option(
            envvar="NCCLDOCTOR_PROCS_PER_NODE",
            help="Worker processes on this node (default: visible GPUs, 1 without).",
        ),
    ] = None,
    backend: Annotated[
        str,
        typer.Option(
            envvar="NCCLDOCTOR_BACKEND", help="auto (nccl with CUDA, gloo without), nccl or gloo."
        ),
    ] = "auto",
    timeout: Annotated[
        float | None,
        typer.Option(
            envvar="NCCLDOCTOR_TIMEOUT",
            help="Seconds for every wait (reach, rendezvous, init, collectives ...).",
        ),
    ] = None,
    phase_timeout: Annotated[
        list[str] | None,
        typer.Option(
            "--phase-timeout",
            help="NAME=SECONDS for one budget (repeatable; env NCCLDOCTOR_TIMEOUT_<NAME>).",
        ),
    ] = None,
    mnist_root: Annotated[
        str | None,
        typer.Option(
            envvar="NCCLDOCTOR_MNIST_ROOT",
            help="Folder with MNIST IDX files (synthetic data otherwise).",
        ),
    ] = None,
    out: Annotated[
        Path,
        typer.Option(
            envvar="NCCLDOCTOR_OUT",
            help="Where the reports and logs go: each run in a new folder OUT/<node>/<run>/, "
            "OUT/<node>/latest the newest.",
        ),
    ] = Path("nccldoctor-check"),
    run_name: Annotated[
        str | None,
        typer.Option(
            envvar="NCCLDOCTOR_RUN_NAME",
            show_default=False,
            help="This run's folder name (default: the start time and a random suffix); "
            "one that exists is refused.",
        ),
    ] = None,
    node_name: Annotated[
        str | None,
        typer.Option(
            envvar="NCCLDOCTOR_NODE_NAME",
            help="This node's name in the report (default: hostname).",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="NCCLDOCTOR_TOKEN",
            show_default=False,
            help="Shared secret every node must present (never written to a report). Default: "
            "derived from the job's id (SLURM_JOB_ID, TORCHELASTIC_RUN_ID, a pod's JOBSET_NAME "
            "or JOB_NAME). Without either, the master trusts its network: anyone who reaches "
            "its ports (--port and the next) can join the check or forge a node's result: make "
            "one (openssl rand -hex 16) and give every node the same.",
        ),
    ] = None,
    isolate: Annotated[
        str,
        typer.Option(
            envvar="NCCLDOCTOR_ISOLATE",
            help="Test the nodes in pairs to name the faulty node or link: auto (when the "
            "all-node run fails, hangs, or a node's link is far slower than the others'), "
            "always, or never. Needs three nodes or more.",
        ),
    ] = "auto",
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show info findings.")] = False,
    html: HtmlPath = None,
    no_html: NoHtml = False,
) -> None:
    """Check that the nodes can train together."""
    from nccldoctor.cluster.agent.node import run_check

    try:
        config = config_from_args(
            master=master,
            nodes=nodes,
            port=port,
            node_rank=node_rank,
            procs_per_node=procs_per_node,
            backend=backend,
            timeout=timeout,
            phase_timeouts=phase_timeout or (),
            mnist_root=mnist_root,
            out=out,
            run_name=run_name,
            token=token,
            node_name=node_name,
            isolate=isolate,
            env=os.environ,
            resolve=host_resolves,
        )
    except ConfigError as exc:
        raise abort(str(exc)) from None
    command = redact_token(["nccldoctor", *sys.argv[1:]])
    live = False if json_out else None  # --json: plain lines, as in a pipe
    me = config.local
    name = f"local-rank{me.local_rank}.log" if me and not me.leader else "agent.log"
    log = config.run_dir / name
    try:
        make_run_folder(config.run_dir, name, f"{' '.join(command)}: run {config.run_name}",
                        latest=me is None or me.leader)  # fmt: skip
    except RunFolderError as exc:
        raise abort(str(exc)) from None
    divert_stderr(log)  # before the console is made: it writes to the terminal's copy
    with Progress(stderr.real(), config.timeouts.agent_phase, live=live) as shown:
        report, path, code = run_check(config, os.environ, command,
                                       progress=lambda m: _progress(m, log, shown))  # fmt: skip
    document = report.to_dict()  # once: redacting a 64-node report is not free
    if json_out:
        print_json(document)
    else:
        print_report(document, verbose)
    if not path.is_file():  # this run's folder is new: a file there is this run's report
        raise abort(f"the report could not be written to {path} (the report line above says why)",
                    code=3)  # fmt: skip
    if not json_out:
        stdout.print(f"Report: {path}")
    differs = cluster_verdict_line(report.own_exit_code, code)
    if differs:  # JSON's stdout is the document alone
        (stderr if json_out else stdout).print(differs)
    # the master's page is the cluster's, a node's its own; named after the JSON, so nodes that
    # share one --out folder keep their pages apart
    # a follower shows its local rank 0's report, whose page that process writes
    if me is None or me.leader or path.stem.endswith(f"-rank{me.rank}"):
        write_page(document, page_path(html, no_html, path.with_suffix(".html")), json_out=json_out)
    raise typer.Exit(code)  # the cluster's verdict: every process of the job exits with it


# what each exit code the cluster's verdict can carry says (cli.EXIT_CODES)
_EXIT_WORDS = {0: "healthy", 1: "problems found", 3: "the run could not complete"}


def cluster_verdict_line(own: int, cluster: int) -> str | None:
    """A node that exits with the cluster's verdict where its own report says otherwise says so
    under that report: it shows this node alone (its part may have gone well), while the master's
    check-cluster.json holds what the other nodes and the isolation rounds found."""
    if own == cluster:
        return None
    mark = "✓" if cluster == 0 else "✗"
    return (
        f"{mark} The cluster's verdict: {_EXIT_WORDS.get(cluster, 'unknown')} (exit {cluster}); "
        f"this node's own report above: {_EXIT_WORDS.get(own, 'unknown')}. What the cluster "
        "found is in check-cluster.json on the master."
    )


def _progress(message: str | Joined, log: Path, shown: Progress) -> None:
    """A phase's line: whole in the node's log, without torch's C++ frames on the terminal."""
    with contextlib.suppress(OSError), open(log, "a", encoding="utf-8") as f:
        f.write(message_text(message) + "\n")
    shown(message if isinstance(message, Joined) else without_cpp_frames(message))


def redact_token(argv: list[str]) -> list[str]:
    """The command line for the report, without the shared secret."""
    redacted, hide = [], False
    for arg in argv:
        if hide:
            redacted.append("***")
            hide = False
        elif arg == "--token":
            redacted.append(arg)
            hide = True
        elif arg.startswith("--token="):
            redacted.append("--token=***")
        else:
            redacted.append(arg)
    return redacted
