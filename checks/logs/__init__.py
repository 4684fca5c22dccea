"""Rules over NCCL/PyTorch logs (scope ``logs``): the inputs (``inputs.py``), every known
signature of the catalogue and the WARNs no signature explains (``catalogue.py``), what needs
more than one rank's log — who never finished init, who stopped early, who disagrees with the
others, where the ranks went separate ways (``comms.py``) — and what the processes say apart
(``processes.py``: versions, environments, NCCL errors, connection retries).

The subject is a :class:`~nccldoctor.ncclog.summary.LogReading`: the parser's records and their
communicators. Each catalogue entry (``signatures.toml``) is registered as a rule of its own
id, so ``--list-checks``, the crash guard and the docs see it like any other rule.
"""

from checks.logs import catalogue, comms, inputs, processes

__all__ = ["catalogue", "comms", "inputs", "processes"]
