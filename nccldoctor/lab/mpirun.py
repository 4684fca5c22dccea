"""OpenMPI's ``mpirun`` across network-namespace hosts, for the tests and the benchmark.

mpirun starts its remote daemons (``orted``) through an rsh agent, ``AGENT HOST COMMAND…``, as
it would through ssh. The lab's agent (:func:`write_rsh_agent`) runs the command in HOST's
namespace under HOST's own hostname, so each node's processes see their node. mpirun itself runs
on the first host, under its name, which mpirun then counts as local.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from nccldoctor.lab.netns import NetLab


def write_rsh_agent(lab: NetLab, path: Path) -> Path:
    """An executable ``path``: the rsh agent for ``lab``'s hosts, by name or address."""
    cases = "".join(
        f"    {h.name}|{h.address}) ns={shlex.quote(h.ns)} name={h.name} ;;\n" for h in lab.hosts
    )
    # ssh joins its command words with spaces for the remote shell; so does "$*" here.
    path.write_text(
        "#!/bin/sh\n"
        "# mpirun's rsh agent in the nccldoctor lab: AGENT HOST COMMAND... runs COMMAND in\n"
        "# HOST's network namespace under HOST's hostname (nccldoctor/lab/mpirun.py).\n"
        'host=$1; shift\ncase "$host" in\n'
        f"{cases}"
        '    *) echo "lab rsh agent: no host $host" >&2; exit 255 ;;\n'
        "esac\n"
        'exec ip netns exec "$ns" unshare --uts sh -c \'hostname "$0" && exec sh -c "$1"\' '
        '"$name" "$*"\n'
    )
    path.chmod(0o755)
    return path


def mpirun_argv(
    lab: NetLab, agent: Path, per_node: int, argv: Sequence[str], export: Sequence[str] = ()
) -> list[str]:
    """``mpirun`` of ``argv`` with ``per_node`` processes on each of ``lab``'s hosts, node by
    node (ranks 0..per_node-1 on the first), ``export`` (variable names) passed to each."""
    hosts = ",".join(f"{h.name}:{per_node}" for h in lab.hosts)
    exported = [arg for name in export for arg in ("-x", name)]
    return [
        "mpirun", "--allow-run-as-root", "-np", str(per_node * len(lab.hosts)), "--host", hosts,
        "--map-by", "slot", "--mca", "plm_rsh_agent", str(agent),
        "--mca", "plm_rsh_no_tree_spawn", "1",  # the first host starts every daemon itself
        "--mca", "oob_tcp_if_include", "eth0", *exported, *argv,
    ]  # fmt: skip


def start_mpirun(
    lab: NetLab, argv: Sequence[str], env: Mapping[str, str], **kwargs: object
) -> subprocess.Popen:
    """``argv`` (see :func:`mpirun_argv`) on the first host, under its hostname."""
    first = lab.hosts[0]
    return lab.popen(first, argv, env, hostname=first.name, **kwargs)
