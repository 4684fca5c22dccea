from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.cluster.netns import Lab, netns_available


@pytest.fixture
def lab() -> Iterator[Callable[[int], Lab]]:
    """``lab(n)``: n hosts in network namespaces on one bridge, removed after the test."""
    if not netns_available():
        pytest.skip("needs root and ip netns")
    made: list[Lab] = []

    def build(n: int) -> Lab:
        made.append(Lab())
        return made[-1].build(n)

    try:
        yield build
    finally:
        for item in made:
            item.close()
