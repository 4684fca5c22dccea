"""A run's own folder: ``<out>/<node>/<run>/`` (docs/design.md#run-folder).

Each invocation of `nccldoctor check` (and of `watch`) makes a new folder and reads back only
what it wrote there (its log, its ranks' folders with their events, results, stacks, NCCL logs
and dumps, its reports): a rerun in the same ``--out`` after a fix is judged on its own files, and checks that
share one ``--out`` at the same time (nodes on one NFS folder, two ports on one machine) never see
each other's. The node's name comes first because nodes may share ``--out``; the run's name is
this invocation's own, made before anything is heard from the master (the agent logs from its
first line), so node folders of one cluster run carry their own names and the cluster report
names every node's report path. ``<out>/<node>/latest`` points at the newest run local rank 0
started there.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import time
from pathlib import Path

LATEST = "latest"
# A name a folder can have on every file system the nodes may share: no separator, no dot first.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=+-]{0,99}")


class RunFolderError(Exception):
    """The run's folder cannot be made or written to; the message says which and why."""


def new_run_name() -> str:
    """The start time (a listing sorts by it) and a random suffix (two starts in one second)."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def bad_run_name(name: str) -> str | None:
    """Why ``name`` cannot name a run's folder, or None when it can."""
    if name == LATEST:
        return f"{LATEST!r} is the link to the newest run"
    if not _NAME.fullmatch(name):
        return "expected up to 100 letters, digits and . _ - = +, not starting with a dot or dash"
    return None


def make_run_folder(folder: Path, log: str, header: str, *, latest: bool) -> None:
    """Make ``folder`` (``<out>/<node>/<run>``), write ``header`` as the first line of the
    file ``log`` in it, and with ``latest`` point ``<out>/<node>/latest`` at it.

    The folder must be new: one that exists holds another run's files, which this run would
    read back as its own. The first line is written and flushed here so that a full disk or a
    read-only mount stops the check before it starts, not at its report.

    Raises:
        RunFolderError: the folder exists, a parent is a file, or it cannot be written.
    """
    out = folder.parent.parent
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir()
    except OSError as exc:
        if isinstance(exc, FileExistsError) and folder.is_dir():
            raise RunFolderError(
                f"{folder} already holds a run; give another --run-name, or leave it out "
                "for a new one"
            ) from None
        raise cannot_write(out, folder, exc) from None
    try:
        with open(folder / log, "x", encoding="utf-8") as f:
            f.write(header + "\n")
    except OSError as exc:
        # nothing of this run is left to be taken for one: a full disk's empty log and folder
        with contextlib.suppress(OSError):
            (folder / log).unlink(missing_ok=True)
            folder.rmdir()
        raise cannot_write(out, folder, exc) from None
    if latest:
        _point_latest(folder)


def cannot_write(out: Path, path: Path, exc: OSError) -> RunFolderError:
    """The error for ``path`` under the user's ``out`` that could not be made or written:
    which file is in the way, or the system's reason (read-only, no space, no permission)."""
    in_the_way = next((p for p in (path, *path.parents) if p.exists() or p.is_symlink()), None)
    if in_the_way is not None and not in_the_way.is_dir():
        why = f"{in_the_way} is a file" + ("" if in_the_way == path else f" ({path})")
    else:
        why = f"{exc.strerror or exc} ({path})"
    return RunFolderError(f"cannot write this run's files under --out {out}: {why}")


def _point_latest(folder: Path) -> None:
    """``latest`` beside ``folder``, replaced in one step (a reader never finds it missing). A
    file system without links, or a ``latest`` that is a folder, leaves it as it was: the
    check prints its report's path."""
    link = folder.parent / LATEST
    staged = folder.parent / f".{LATEST}.{os.getpid()}.{secrets.token_hex(3)}"
    try:
        os.symlink(folder.name, staged)
        os.replace(staged, link)
    except OSError:
        with contextlib.suppress(OSError):
            staged.unlink(missing_ok=True)
