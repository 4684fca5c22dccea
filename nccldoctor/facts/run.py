"""What a node's cluster run observed before its workers: the subject of the ``run`` rules.

The agent's phases fill these records (reach, the hello to the master's listener, the port
probe, a listener that could not start, a world that closed before this node came); the
``run`` checks judge them once, when the node report is built.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from nccldoctor.facts.network import NetworkFacts


@dataclass
class ReachResult:
    master: str
    addresses: list[str] = field(default_factory=list)
    resolve_error: str | None = None
    hosts_lines: list[str] = field(default_factory=list)  # /etc/hosts lines naming the master
    interface: str | None = None  # the kernel's route to the master goes out here
    source: str | None = None  # with this source address: what this node advertises
    connected: bool = False
    attempts: int = 0
    error: str | None = None  # the last connect error
    refused: int = 0  # attempts answered with RST: the host is there, nobody listens (yet)
    timed_out: int = 0  # attempts that got no answer at all: a firewall dropping, or no route
    elapsed_s: float = 0.0

    @property
    def loopback(self) -> bool:
        """The master resolved, and only to loopback addresses (127.0.1.1, ::1)."""
        return bool(self.addresses) and all(
            ipaddress.ip_address(a.split("%")[0]).is_loopback for a in self.addresses
        )


@dataclass
class HelloReply:
    """The master's gate's answer to this node's hello."""

    ok: bool
    advertised: str = ""  # the address this node said it has (its route's source address)
    run_id: str = ""
    seen: str = ""
    skew_s: float = 0.0  # master clock minus this node's clock, halfway through the exchange
    rtt_s: float = 0.0
    error: str = ""
    refused: bool = False  # the master answered and said no: retrying will not help
    probe_port: int = 0  # the master's listener on an ephemeral port (0: none)


@dataclass
class NcclBootstrap:
    """libnccl's own bootstrap on this node (ncclGetUniqueId in a child process): the interface
    and address it picked, read from its output, or why there are none."""

    library: str
    rc: int | None  # ncclResult_t; None when the call never returned
    error: str | None
    interface: tuple[str, str] | None  # (interface, address) of its "Bootstrap: Using" line
    lines: list[str] = field(default_factory=list)  # the last lines of its output


@dataclass
class PortProbe:
    """Connections to ephemeral ports, each way, as gloo and NCCL open them after the rendezvous."""

    to_master: str  # "address:port" this node dialled
    to_master_ok: bool
    to_master_error: str
    from_master: str  # "address:port" the master dialled back
    from_master_ok: bool | None  # None: the master could not be asked
    from_master_error: str
    timeout_s: float

    @property
    def blocked(self) -> bool:
        """A connection either way was dropped (an unasked way, None, is not)."""
        return self.to_master_ok is False or self.from_master_ok is False


@dataclass
class MasterLost:
    """The master's store stopped answering after rendezvous, seen just before the hand-over."""

    master: str  # the master's node name
    address: str
    error: str  # the store's connect error
    phase: str  # this node's phase when it was lost
    rank_errors: dict[int, str] = field(default_factory=dict)  # each local rank's error


@dataclass
class MasterSearch:
    """Whose listener answered at ``--master``'s gate port (the node agent's "whoami"): the node
    hearing its own nonce back is the master (docs/docker.md#whoami)."""

    gate: str  # "address:port" asked
    given_rank: int | None  # --node-rank, when the user gave one
    answered: bool = False  # a nccldoctor listener answered
    mine: bool = False  # ... and it was this node's own
    error: str = ""  # the last error while asking
    own_gate_error: str = ""  # this node could not open its own listener
    elapsed_s: float = 0.0

    @property
    def undecided(self) -> bool:
        """Nobody answered: this node cannot tell whether it is the master."""
        return self.given_rank is None and not self.answered

    @property
    def second_master(self) -> bool:
        """Told it is the master (--node-rank 0) while --master leads to another node's."""
        return self.given_rank == 0 and self.answered and not self.mine


@dataclass
class RunObserved:
    """One node's observations of its run, for the ``run`` rules."""

    node: str
    port: int  # the store's port (--port); nccldoctor's own listener is the next one
    gate: str = ""  # "address:port" of the master's listener
    network: NetworkFacts | None = None  # this node's network facts (the port probe's fix)
    reach: ReachResult | None = None
    master_search: MasterSearch | None = None
    hello: HelloReply | None = None
    bootstrap: NcclBootstrap | None = None
    port_probe: PortProbe | None = None
    listen_error: str | None = None  # the master's store or listener could not bind its port
    late_for: list[str] | None = None  # the world's nodes, when it closed before this one came
    crash: str | None = None  # "ExcType: message" of an internal error of the agent
    master_lost: MasterLost | None = None
    aborted: str | None = None  # why the run stopped before its end
