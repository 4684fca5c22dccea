"""The envelope of every NCCL version, under every launcher prefix we know."""

from __future__ import annotations

import pytest

from nccldoctor.ncclog.envelope import parse_line

ENVELOPES = [
    # (line, host, pid, tid, dev, level, file, line, func, msg)
    ("node-a:4711:4790 [3] NCCL INFO Using network IB",
     "node-a", 4711, 4790, 3, "INFO", None, None, None, "Using network IB"),
    ("node-a:4711:4711 [0] misc/socket.cc:58 NCCL WARN socketProgress: Connection closed",
     "node-a", 4711, 4711, 0, "WARN", "misc/socket.cc", 58, None, "socketProgress: Connection closed"),
    # 2.26+ NCCL_DEBUG_TIMESTAMP_FORMAT default stamp, 2.30.7 WARN with the function
    ("[2026-12-02 12:17:57] vm:2268:2268 [0] bootstrap.cc:129 (bootstrapNetInit) NCCL WARN Bootstrap : no socket interface found",
     "vm", 2268, 2268, 0, "WARN", "bootstrap.cc", 129, "bootstrapNetInit", "Bootstrap : no socket interface found"),
    # a user-defined stamp with fractions, and a CMake build's absolute path
    ("[12:17:57.123456] vm:1:2 [1] /src/nccl/src/init.cc:10 (ncclCommInitRank) NCCL WARN x",
     "vm", 1, 2, 1, "WARN", "/src/nccl/src/init.cc", 10, "ncclCommInitRank", "x"),
    # debug builds' TRACE: "%f func:line" before the level
    ("gpu1:10:11 [0] 1234.567890 ncclProxyProgress:820 NCCL TRACE progress",
     "gpu1", 10, 11, 0, "TRACE", None, None, None, "progress"),
    ("gpu1:10:10 NCCL CALL ncclGroupStart()", "gpu1", 10, 10, None, "CALL", None, None, None, "ncclGroupStart()"),
    # launchers: torchrun, srun, mpirun, ISO and syslog stamps
    ("[rank0]:node-a:4711:4711 [0] NCCL INFO Init", "node-a", 4711, 4711, 0, "INFO", None, None, None, "Init"),
    ("0: node-a:4711:4711 [0] NCCL INFO x", "node-a", 4711, 4711, 0, "INFO", None, None, None, "x"),
    ("[1,0]<stdout>:node-b:12:12 [1] NCCL INFO x", "node-b", 12, 12, 1, "INFO", None, None, None, "x"),
    ("2026-12-02T12:00:00.123+00:00 node-a:7:7 [0] NCCL INFO x", "node-a", 7, 7, 0, "INFO", None, None, None, "x"),
    ("Dec  2 12:00:00 node-a python[4711]: node-a:4711:4711 [0] NCCL INFO x",
     "node-a", 4711, 4711, 0, "INFO", None, None, None, "x"),
    ("node-a:4711:4711 [0] NCCL INFO x\r", "node-a", 4711, 4711, 0, "INFO", None, None, None, "x"),
    # the whole head cut away by hand (NVIDIA/nccl#2389)
    ("NCCL INFO Using network IB", "?", 0, 0, None, "INFO", None, None, None, "Using network IB"),
]  # fmt: skip


@pytest.mark.parametrize("case", ENVELOPES, ids=[c[0][:40] for c in ENVELOPES])
def test_envelope(case):
    text, host, pid, tid, dev, level, file, line, func, msg = case
    env = parse_line(text)
    assert env is not None
    assert (env.head.host, env.head.pid, env.head.tid, env.head.dev) == (host, pid, tid, dev)
    assert (env.level, env.head.file, env.head.line, env.head.func) == (level, file, line, func)
    assert env.msg == msg
    assert env.head.key == f"{host}:{pid}"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "epoch 1 loss 0.25",
        "NCCL version 2.18.6+cuda12.2",  # bare printf line: no envelope
        "NCCL is the backend",
        "torch.distributed.DistBackendError: NCCL error in: ../NCCLUtils.cpp:77, unhandled system error",
        "node-a:4711 [0] NCCL INFO missing tid",
        "node-a:4711:4711 [0] NCCL DEBUG not a level",
    ],
)
def test_not_an_envelope(text):
    assert parse_line(text) is None
