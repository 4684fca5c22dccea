"""Bad input never raises and never hides the good lines around it (hypothesis)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nccldoctor.ncclog.sources import parse_source

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _parse(data: bytes, block: int = 1 << 20, max_line: int = 64 * 1024):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rank.log"
        path.write_bytes(data)
        return parse_source(str(path), block=block, max_line=max_line)


def _env_line(i: int) -> bytes:
    return f"node-a:4711:4711 [0] NCCL INFO NCCL_TEST_{i} set by environment to {i}.".encode()


garbage = st.one_of(
    st.binary(max_size=300),
    st.binary(min_size=1, max_size=50).map(lambda b: b"\xff\xfe" + b + b"\xc3"),  # invalid UTF-8
    st.just(b"x" * 200_000),  # a huge line
    st.just(b"node-a:4711:4711 [0] NCCL INFO AllReduce: opCount zz"),  # a broken collective
    st.just(b"node-a:4711:4711 [0] NCCL WA"),  # a cut line
    st.just(b"\x00\r\x1b[31m NCCL  NCCL INFO"),
)


@SETTINGS
@given(st.binary(max_size=4000), st.sampled_from([7, 64, 4096, 1 << 20]))
def test_random_bytes_never_raise(data, block):
    result = _parse(data, block=block, max_line=512)
    assert result.lines >= data.count(b"\n")


@SETTINGS
@given(
    st.lists(st.tuples(st.booleans(), garbage), min_size=1, max_size=12),
    st.sampled_from([13, 257, 4096, 1 << 20]),
    st.booleans(),
)
def test_good_lines_survive_their_neighbours(plan, block, crlf):
    lines, expected = [], {}
    for i, (good_first, junk) in enumerate(plan):
        junk = junk.replace(b"\n", b" ")
        good = _env_line(i) + (b"\r" if crlf else b"")
        lines += [good, junk] if good_first else [junk, good]
        expected[f"NCCL_TEST_{i}"] = str(i)
    result = _parse(b"\n".join(lines), block=block)
    proc = result.processes["node-a:4711"]
    assert {k: v for k, v in proc.env.items() if k.startswith("NCCL_TEST_")} == expected
    if any(len(j) > 64 * 1024 for _, j in plan):
        assert sum(result.cut_lines.values()) >= 1


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["0x11", "0x22", "0x33"]), st.sampled_from(["coll", "call", "other"])
        ),
        min_size=1,
        max_size=400,
    ),
    st.sampled_from([97, 1000, 8192, 1 << 20]),
)
@example(  # a communicator's latest collective first in a region that does not start its block
    ops=[("0x11", "call")] * 2
    + [("0x11", "coll")] * 2
    + [("0x11", "call")] * 2
    + [("0x22", "coll")] * 2,
    block=1000,
)
@example(  # an unannounced communicator in the middle of a block with the application's lines
    ops=[
        ("0x11", "call"),
        ("0x11", "other"),
        ("0x11", "coll"),
        ("0x11", "coll"),
        ("0x33", "coll"),
        ("0x11", "coll"),
        ("0x11", "coll"),
    ],
    block=1000,
)
def test_collective_fast_path_keeps_every_communicators_last_op(ops, block):
    """The count-based path must agree with a line-by-line reading, at any block size."""
    head = "node-a:4711:4711 [0] NCCL INFO "
    out = [
        head
        + f"comm {c} rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x{c[2:]}9 - Init START"
        for c in ("0x11", "0x22")
    ]  # 0x33 is never announced
    last: dict[str, int] = {}
    n_coll = 0
    for i, (comm, kind) in enumerate(ops):
        if kind == "coll":
            out.append(
                head + f"AllReduce: opCount {i:x} sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 "
                f"op 0 root 0 comm {comm} [nranks=2] stream 0x3"
            )
            last[comm] = i
            n_coll += 1
        elif kind == "call":
            out.append(f"node-a:4711:4711 NCCL CALL ncclAllReduce(0x1,0x2,8,7,0,0,{comm},0x3)")
        else:
            out.append("training step")
    result = _parse(("\n".join(out) + "\n").encode(), block=block)
    assert result.coll_lines == n_coll
    assert result.lines == len(out)
    comms = result.processes["node-a:4711"].comms
    got = {c: comms[c].last_op.op_count for c in last if c in comms and comms[c].last_op}
    announced = {c: op for c, op in last.items() if c != "0x33"}
    assert {c: got.get(c) for c in announced} == announced
    if "0x33" in last:  # met through the tail of the block where it appears, or the source's end
        assert "0x33" in comms


@SETTINGS
@given(
    st.lists(
        st.sampled_from(["coll", "info", "bar", "world", "seq", "watchdog", "blank"]),
        min_size=1,
        max_size=300,
    ),
    st.integers(0, 10**6),
    st.sampled_from([257, 4096, 1 << 20]),
)
def test_application_lines_are_read_when_they_say_something(plan, seed, block):
    """Progress bars are one shape (digits as 0) and counted in bulk; a line with a fact or a
    signature is read whatever its digits, however often its shape recurs, at any block size."""
    from checks.signatures import identify

    head = "[rank0]:node-a:4711:4711 [0] NCCL INFO "
    out = [
        head + "comm 0x11 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x9 - Init START"
    ]
    sizes: dict[int, int] = {}
    seqs: list[int] = []
    count = {kind: 0 for kind in ("coll", "watchdog")}
    app = 0
    for i, kind in enumerate(plan):
        n = (seed + i * 7919) % 100000
        if kind == "coll":
            out.append(
                head + f"AllReduce: opCount {i:x} sendbuff 0x1 recvbuff 0x2 count {n} datatype 7 "
                "op 0 root 0 comm 0x11 [nranks=2] stream 0x3"
            )
        elif kind == "info":
            out.append(head + f"NCCL_TEST_{i} set by environment to {n}.")
        elif kind == "bar":
            out.append(f"[rank0]:Epoch {n % 9}: {n % 100}%|####| {n}/20000 [12:01<12:30, 13.4it/s]")
        elif kind == "world":
            out.append(f"[rank0]:[I] c10d rendezvous: world_size={n % 64 + 1}")
            sizes[n % 64 + 1] = sizes.get(n % 64 + 1, 0) + 1
        elif kind == "seq":
            out.append(f"[rank3]: last enqueued work: {n + 1}, last completed work: {n}")
            seqs.append(n)
        elif kind == "watchdog":
            out.append(
                f"[rank0]:[E424 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective "
                f"operation timeout: WorkNCCL(SeqNum={n}, OpType=BROADCAST, NumelIn=1, "
                "NumelOut=1, Timeout(ms)=1800000) ran for 1800010 milliseconds before timing out."
            )
        else:
            out.append("")
        count[kind] = count.get(kind, 0) + 1
        app += kind in ("bar", "world", "seq")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "stdout.log"
        path.write_bytes(("\n".join(out) + "\n").encode())
        result = parse_source(str(path), block=block, identify=identify)
    assert result.lines == len(out)
    assert result.coll_lines == count["coll"]
    assert result.other_lines == app + count["watchdog"]
    assert result.world_sizes == sizes
    assert result.completed_seq.get((None, 3)) == (max(seqs) if seqs else None)
    env = result.processes["node-a:4711"].env
    assert sum(name.startswith("NCCL_TEST_") for name in env) == count.get("info", 0)
    watchdog = identify(out[-1]) if plan[-1] == "watchdog" else None
    if watchdog:
        assert result.signatures[watchdog].count == count["watchdog"]


# One host's network lines of every era (2.2's head without NCCL, 2.2–2.3's interface lists,
# 2.4+'s bootstrap and NET/Socket, connect errors of several releases), each as NCCL prints it
NETWORK_LINES = (
    b"h-a:1:1 [0] INFO NET : Using interface eth0:10.0.0.1<0>",
    b"h-a:1:1 [0] INFO NET/IB : Using interface eth0 for sideband communication",
    b"h-a:1:1 [0] INFO NET : Using interface eth0:10.0.0.1<0>",  # NET/Socket lists them again
    b"h-a:1:1 [0] INFO NET : Using interface lo:127.0.0.1<0>",
    b"h-a:1:1 [0] INFO NET/Socket : 2 interfaces found",
    b"h-a:1:1 [0] INFO comm 0x55d07fb87c10 rank 0 nranks 16",
    b"h-a:1:1 [0] INFO Using internal Network Socket",
    b"h-b:2:2 [1] NCCL INFO NET : Using interface eth1:fe80::1%eth1<0>",
    b"h-b:2:2 [1] NCCL INFO NET/Socket : 1 interfaces found",
    b"h-b:2:2 [1] NCCL INFO NET/IB: [0] mlx5_0:1/IB ",
    b"h-b:2:2 [1] NCCL INFO CUDA Dev 1, IB Ports : mlx5_0/1(PIX) ",
    b"h-b:2:2 [1] include/socket.h:361 NCCL WARN Call to connect timeout : Connection refused",
    b"h-c:3:3 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.2<0>",
    b"h-c:3:3 [0] misc/socket.cc:450 NCCL WARN Net : Connect to 10.0.0.9<4321> failed : No route to host",
    b"h-c:3:3 [0] transport/net_ib.cc:1300 NCCL WARN NET/IB : Got completion from peer 10.0.0.9<4321> with status=12",
    b"h-c:3:3 [0] NCCL INFO Bootstrap Root : rank 3 of 8 ranks has already checked in",
    b"h-d:4:4 [0] misc/ibvwrap.cu:205 WARN Call to ibv_modify_qp failed",
)


@SETTINGS
@given(
    st.permutations(NETWORK_LINES),
    st.integers(0, 4000),
    st.sampled_from(["", "\r", "\x00", "wrap", "long"]),
    st.sampled_from([13, 257, 1 << 20]),
)
def test_network_lines_cut_anywhere_never_raise(lines, cut, damage, block):
    """The network lines interleaved in any order, cut at any byte, with CRLF, NULs, wrapped at
    80 columns or padded to 100 kB: parsed, summarised and judged without a traceback."""
    from nccldoctor.explain import judge_log_network
    from nccldoctor.ncclog.headline import explain_logs

    if damage == "wrap":
        lines = [line[i : i + 80] for line in lines for i in range(0, len(line), 80)]
    elif damage == "long":
        lines = [line + b" " * 100_000 if i % 5 == 0 else line for i, line in enumerate(lines)]
    elif damage:
        lines = [line + damage.encode() for line in lines]
    data = b"\n".join(lines)
    result = _parse(data[:cut] if cut < len(data) else data, block=block)
    explain_logs(result)
    judge_log_network(result)


def test_every_network_line_is_read_whole():
    """The same lines whole: each host's facts as NCCL printed them."""
    result = _parse(b"\n".join(NETWORK_LINES) + b"\n")
    a, b, c = (result.processes[k] for k in ("h-a:1", "h-b:2", "h-c:3"))
    assert a.bootstrap == {"ifname": "eth0", "address": "10.0.0.1"}
    assert [s["ifname"] for s in a.socket_ifs] == ["eth0", "lo"]
    assert a.networks == ["Socket"] and a.comms["0x55d07fb87c10"].nranks == 16
    assert b.bootstrap == {"ifname": "eth1", "address": "fe80::1%eth1"}
    assert [d["hca"] for d in b.ib_devices] == ["mlx5_0"]
    assert b.connect_errors == {"?": "Connection refused"}
    assert c.connect_errors == {"10.0.0.9<4321>": "No route to host"}
    assert c.failed_nets == ["IB"]
    assert result.processes["h-d:4"].failed_nets == ["IB"]
