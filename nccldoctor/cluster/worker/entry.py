"""The worker process's entry points: ``python -m nccldoctor.cluster.worker.entry --config PATH``
(:func:`main`), or a child just forked from the agent, which has torch loaded already
(:func:`forked_main`). Either reads the config the agent wrote and runs the rank's phases
(worker/rank.py). Exit status: 0 all good, 1 a check failed (wrong results, replicas differ),
3 error or timeout.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import os
import signal
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from nccldoctor.cluster.torchstart import preload_torch
from nccldoctor.cluster.worker.config import WorkerConfig
from nccldoctor.cluster.worker.rank import EXIT_ERROR, Worker
from nccldoctor.cluster.worker.workerwatch import block_stop_signals


def forked_main(config_path: str, env: Mapping[str, str], log_path: Path) -> NoReturn:
    """The worker in a child just forked from the agent (launcher.ForkedWorker); never returns.

    The child first becomes what ``python -m nccldoctor.cluster.worker.entry --config`` would be:
    its own session, stdin /dev/null, stdout and stderr the rank's log, exactly the worker env of
    the launcher (early enough: torch reads RANK, MASTER_* and GLOO_SOCKET_IFNAME when the process group is
    made, NCCL its NCCL_* at its own init, src/debug.cc ncclDebugInit and src/bootstrap.cc
    bootstrapNetInit), and none of the agent's descriptors: the store's and the gate's listening
    sockets held here would outlive the agent. The agent's objects stay alive and
    uncollected (gc.freeze) until ``os._exit``, so no finaliser of theirs runs in this process.
    """
    code = EXIT_ERROR
    try:
        os.setsid()
        for sig in (signal.SIGINT, signal.SIGTERM):  # not the agent's handlers (still blocked)
            signal.signal(sig, signal.SIG_DFL)
        gc.collect()  # the agent's garbage closes its descriptors now, before they are reused
        gc.freeze()
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - lives until os._exit
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(env)
        if env.get("PYTHONFAULTHANDLER"):  # read at interpreter start, which was the agent's
            faulthandler.enable()
        code = main(["--config", config_path])
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    block_stop_signals()  # first, before torch starts any thread (see workerwatch)
    parser = argparse.ArgumentParser(prog="python -m nccldoctor.cluster.worker.entry")
    parser.add_argument("--config", required=True, help="the worker config JSON the agent wrote")
    args = parser.parse_args(argv)
    try:
        config = WorkerConfig.read(args.config)
    except (OSError, ValueError) as exc:  # no rank_dir to write a result into: say it on stderr
        print(f"nccldoctor worker: bad config {args.config}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    worker = Worker(config, os.environ)
    if worker.setup_error is None:  # a refused run needs no torch
        preload_torch()
    code = worker.run()
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is on disk (result.json replaced atomically, events flushed per line, NCCL's
    # debug file line-buffered). Interpreter shutdown with torch loaded took 0.7-1.4 s on a
    # loaded 2-core machine, and a broken process group can hang it: skip it.
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
