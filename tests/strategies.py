"""Hypothesis strategies the property tests share."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def json_values(keys: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[Any]:
    """Any value `json.loads` can return (NaN and the infinities included), its objects keyed by
    ``keys``: any short text unless the test wants the names a reader looks for."""
    return st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.text(max_size=8) if keys is None else keys, inner, max_size=4)
        ),
        max_leaves=20,
    )


JSON = json_values()
