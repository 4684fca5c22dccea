"""A stranger on the cluster network, for the lab tests of the master's gate and store
(tests/cluster/test_intruder_netns.py). Run in a lab host's namespace from the repository:

    python -m tests.cluster.intruder forge MASTER PORT
        says hello without a token (a master that trusts its network answers with the run id),
        joins the store as a node with an entry nested 100 deep, prints "entry", waits for the
        world and writes three results in node rank 1's name that are not reports (nested past
        parsing, an integer of 5000 digits, findings of the wrong type), prints "results"
    python -m tests.cluster.intruder flood MASTER GATE_PORT SECONDS
        for SECONDS from the gate's opening: hellos with a wrong token from 8 threads, 2 lines
        of 64 MiB without a newline, 6 clients sending a byte a second, probes of 600 s, 1e9 s and
        NaN; prints what it sent as one JSON line
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from datetime import timedelta

from nccldoctor.cluster.agent import rendezvous, wire

NAME = "intruder"


def ask(master: str, port: int, message: dict, timeout: float = 5.0) -> dict:
    with socket.create_connection((master, port), timeout) as conn:
        conn.sendall(json.dumps(message).encode() + b"\n")
        return json.loads(wire.read_line(conn, time.monotonic() + timeout) or b"{}")


def forge(master: str, port: int) -> None:
    from torch.distributed import TCPStore  # first: the torch import takes seconds

    deadline = time.monotonic() + 60
    while True:
        try:
            reply = ask(master, port + 1, {"op": "hello", "node": NAME, "advertised": ""})
            if reply.get("ok"):
                break
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the gate never answered")
        time.sleep(0.1)
    keys = rendezvous.Keys(reply["run_id"])
    store = TCPStore(master, port, is_master=False, timeout=timedelta(seconds=60))
    slot = int(store.add(keys.count, 1))
    deep: object = {}
    for _ in range(100):
        deep = {"x": deep}
    store.set(keys.node(slot), json.dumps({"slot": slot, "name": NAME, "procs": 1, "facts": deep}))
    print("entry", flush=True)
    store.wait([keys.world])
    wrong = {"schema_version": 3, "tool_version": "0", "kind": "check", "created": "",
             "command": [], "verdict": "healthy", "exit_code": 0, "completed": True,
             "area_status": {}, "findings": "none", "nodes": [], "headline": {},
             "consistency": {}}  # fmt: skip
    for junk in ("[" * 100_000, '{"kind": "check", "exit_code": ' + "9" * 5000 + "}",
                 json.dumps(wrong)):  # fmt: skip
        store.set(keys.result(1, int(store.add(keys.results(1), 1))), junk)
    print("results", flush=True)


def flood(master: str, gate: int, seconds: float) -> None:
    sent = {"hellos": 0, "busy": 0, "long": 0, "slow": 0, "probes": 0}
    lock = threading.Lock()
    while True:  # the gate opens when the master's preflight ends
        try:
            socket.create_connection((master, gate), 1).close()
            break
        except OSError:
            time.sleep(0.1)
    end = time.monotonic() + seconds

    def count(what: str) -> None:
        with lock:
            sent[what] += 1

    def hellos() -> None:
        while time.monotonic() < end and sent["hellos"] < 2500:
            try:
                reply = ask(master, gate, {"op": "hello", "node": NAME, "token": "nope"})
                count("busy" if reply.get("busy") else "hellos")
            except (OSError, ValueError):
                time.sleep(0.05)

    def long_line() -> None:
        try:
            with socket.create_connection((master, gate), 5) as conn:
                for _ in range(4096):  # 64 MiB
                    conn.sendall(b"x" * wire.MAX_LINE)
        except OSError:
            count("long")  # the gate closed it

    def slow() -> None:
        try:
            with socket.create_connection((master, gate), 5) as conn:
                while time.monotonic() < end:
                    conn.send(b"{")
                    time.sleep(1)
        except OSError:
            count("slow")  # the gate closed it

    def probes() -> None:
        for seconds in (600, 1e9, float("nan")):
            for message in ({"op": "tcp", "node": NAME, "seconds": seconds},
                            {"op": "dial", "port": 22, "seconds": seconds}):  # fmt: skip
                try:
                    ask(master, gate, message)
                    count("probes")
                except (OSError, ValueError):
                    pass

    workers = [threading.Thread(target=hellos) for _ in range(8)]
    # 8 of the 16 connections the gate serves one address: the hellos keep the rest busy
    workers += [threading.Thread(target=long_line) for _ in range(2)]
    workers += [threading.Thread(target=slow) for _ in range(6)]
    workers += [threading.Thread(target=probes)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(json.dumps(sent), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "forge":
        forge(sys.argv[2], int(sys.argv[3]))
    else:
        flood(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
