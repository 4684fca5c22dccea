from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cluster.netns import Lab, netns_available


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Callable[[int], Lab]]:
    """``lab(n)``: n hosts in network namespaces on one bridge, removed after the test."""
    if not netns_available():
        pytest.skip("needs root and ip netns")
    made: list[Lab] = []

    def build(n: int, **docker: object) -> Lab:
        made.append(Lab(reports=tmp_path / f"lab{len(made)}"))
        return made[-1].build(n, **docker)

    try:
        yield build
    finally:
        for item in made:
            item.close()
