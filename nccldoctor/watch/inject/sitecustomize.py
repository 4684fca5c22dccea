"""Loaded by every Python process that `nccldoctor watch` starts (it is first on PYTHONPATH).

It leaves the user's program untouched and only makes it observable from outside:
- ``proc.<pid>.json``: which rank this process is, so the watcher can name it;
- SIGUSR1 dumps every thread's Python stack to ``stacks.<pid>.txt`` (faulthandler works from
  the signal handler itself, so it answers even while the main thread sits inside a collective);
- writing to the FIFO ``fr.<pid>.fifo`` makes a daemon thread dump PyTorch's Flight Recorder to
  ``fr.<pid>.pkl`` (the collective sequence numbers show which rank is behind);
- an uncaught exception is also written to ``error.<pid>.txt`` before the usual hook runs;
- a torch older than 2.6 gets the Flight Recorder's size under its old name too (the watcher sets
  only ``TORCH_FR_BUFFER_SIZE``: a newer torch warns on every rank when the old one is set).
Then the next ``sitecustomize`` on the path, if any, is run, so a user's own one still works.
"""

import os

_WATCH_DIR = os.environ.get("NCCLDOCTOR_WATCH_DIR")


def _install(watch_dir: str) -> None:
    import atexit
    import faulthandler
    import json
    import signal
    import socket
    import sys
    import threading
    import traceback

    pid = os.getpid()

    def path(kind: str, ext: str) -> str:
        return os.path.join(watch_dir, f"{kind}.{pid}.{ext}")

    identity = {
        "pid": pid,
        "host": os.environ.get("NCCLDOCTOR_NODE_NAME") or socket.gethostname(),
        "argv": sys.argv,
        **{
            k.lower(): os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK")
        },
    }
    with open(path("proc", "json"), "w") as out:
        json.dump(identity, out)

    if signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL:  # never take over the user's handler
        stacks = open(path("stacks", "txt"), "w")  # noqa: SIM115 - must stay open for the handler
        faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True, chain=False)

    previous_hook = sys.excepthook

    def record_exception(kind, value, tb):
        try:
            with open(path("error", "txt"), "w") as out:
                out.write("".join(traceback.format_exception(kind, value, tb)))
        finally:
            previous_hook(kind, value, tb)

    sys.excepthook = record_exception

    fifo = path("fr", "fifo")
    try:
        os.mkfifo(fifo)
    except OSError:
        return
    atexit.register(lambda: os.path.exists(fifo) and os.unlink(fifo))

    def dump_flight_recorder_on_request() -> None:
        while True:
            with open(fifo, "rb") as trigger:  # blocks, without CPU, until the watcher writes
                trigger.read()
            dist = sys.modules.get("torch.distributed")
            if dist is None or not dist.is_initialized():
                continue
            try:
                from torch._C._distributed_c10d import _dump_fr_trace

                data = _dump_fr_trace()
            except Exception as exc:  # an old torch, or FR disabled: say so, don't die
                data = f"flight recorder unavailable: {exc}".encode()
            with open(path("fr", "pkl") + ".tmp", "wb") as out:
                out.write(data)
            os.replace(path("fr", "pkl") + ".tmp", path("fr", "pkl"))

    threading.Thread(
        target=dump_flight_recorder_on_request, name="nccldoctor-fr", daemon=True
    ).start()


def _flight_recorder_for_old_torch() -> None:
    size = os.environ.get("TORCH_FR_BUFFER_SIZE")
    if not size or "TORCH_NCCL_TRACE_BUFFER_SIZE" in os.environ:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:  # the distribution's metadata: importing torch here would cost every process seconds
        major, minor = (int(part) for part in version("torch").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return
    if (major, minor) < (2, 6):
        os.environ["TORCH_NCCL_TRACE_BUFFER_SIZE"] = size


def _chain_next_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    others = [p for p in sys.path if p and os.path.abspath(p) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec and spec.loader and spec.origin != __file__:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if _WATCH_DIR and os.path.isdir(_WATCH_DIR):
    import contextlib

    # A read-only or vanished watch dir must never break the user's program.
    with contextlib.suppress(OSError):
        _install(_WATCH_DIR)
    _flight_recorder_for_old_torch()
_chain_next_sitecustomize()
