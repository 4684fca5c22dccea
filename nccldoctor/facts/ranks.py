"""How the ranks of a `check` run ended: the subject of the ``ranks`` rules.

A rank's row is the report's ``ranks`` entry (docs/report.md#ranks): where it got to, its state
(ok, failed, crashed, stuck), its error, its last NCCL lines and stacks. The rows are the
document's own, so that a merge of node report files judges them exactly as the master did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RanksSeen:
    ranks: Sequence[Mapping[str, Any]]
    phases: Sequence[str]  # the worker phases in order (the earliest phase reached is behind)
    results: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)  # result.json by rank
    # Sentences naming nodes that stopped reporting; when they explain every rank's end, every
    # rank is a consequence.
    lost: Sequence[str] = ()
