"""Dataclass <-> JSON-ready dict conversion for Facts, driven by the type hints.

Facts cross process and node boundaries (published at rendezvous, stored in reports), so every
Facts class must survive ``from_dict(cls, to_dict(x)) == x``. Unknown keys are ignored and
missing keys take the field default, so older reports still load; a value of the wrong type (a
node named ``[]`` in a garbled report) is a TypeError, which the report loader turns into a
clear "malformed report" rather than letting it reach the checks.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def to_dict(obj: Any) -> Any:
    """A JSON-ready copy of a Facts dataclass (or of a list/dict of them)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def from_dict(cls: type[T], data: Any, strict: bool = False) -> T:
    """Rebuild ``cls`` from :func:`to_dict` output; tolerant of missing and extra keys.
    ``strict``: null only where the type allows None (a document of one writer, read whole),
    else it stands for anything (a report's older producers wrote null for unknowns)."""
    return _convert(cls, data, strict)


def read_fields(cls: type[T], data: Any, *, every_key: bool = False, only_known: bool = False) -> T:
    """``cls`` from the JSON object ``data`` another process wrote, each field read strictly
    (:func:`from_dict`) and named when it does not read; an enum field by its value.
    ``every_key``: each field must be there (a default would make up a value the writer always
    wrote); ``only_known``: a key ``cls`` has no field for is refused.

    Raises:
        ValueError: saying which field does not read and why.
    """
    if not isinstance(data, dict):
        raise ValueError(f"not an object but {type(data).__name__}")
    hints = _hints(cls)
    unknown = next((key for key in data if key not in hints), None) if only_known else None
    if unknown is not None:
        raise ValueError(f"an unknown key {str(unknown)[:40]!r}")
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            if every_key or (f.default is dataclasses.MISSING
                             and f.default_factory is dataclasses.MISSING):  # fmt: skip
                raise ValueError(f"no {f.name}")
            continue
        kind, value = hints[f.name], data[f.name]
        try:
            is_enum = isinstance(kind, type) and issubclass(kind, enum.Enum)
            values[f.name] = kind(value) if is_enum else _convert(kind, value, True)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{f.name}: {exc}") from None
    return cls(**values)


@functools.cache
def _hints(tp: type) -> dict[str, Any]:
    return typing.get_type_hints(tp)


def _convert(tp: Any, value: Any, strict: bool = False) -> Any:
    origin = typing.get_origin(tp)
    if value is None:
        if strict and tp is not Any and not _admits_none(tp, origin):
            raise TypeError(f"expected {getattr(tp, '__name__', tp)}, got null")
        return None
    if origin in (typing.Union, types.UnionType):
        errors = []
        for arg in typing.get_args(tp):
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, strict)
            except (TypeError, ValueError) as exc:
                errors.append(str(exc))
        # one type or None (the usual Optional): its own error says what is wrong inside
        raise TypeError(
            errors[0] if len(errors) == 1 else f"{type(value).__name__} is none of {tp}"
        )
    if origin in (list, tuple):
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        if strict and not isinstance(value, list):
            raise TypeError(f"expected a list, got {type(value).__name__}")
        return [_convert(item_tp, v, strict) for v in value] if isinstance(value, list) else []
    if origin is dict:
        _, val_tp = typing.get_args(tp) or (Any, Any)
        if strict and not isinstance(value, dict):
            raise TypeError(f"expected an object, got {type(value).__name__}")
        return (
            {k: _convert(val_tp, v, strict) for k, v in value.items()}
            if isinstance(value, dict)
            else {}
        )
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise TypeError(f"expected an object for {tp.__name__}, got {type(value).__name__}")
        hints = _hints(tp)
        kwargs = {
            f.name: _convert(hints[f.name], value[f.name], strict)
            for f in dataclasses.fields(tp)
            if f.name in value and f.init
        }
        return tp(**kwargs)
    if tp is Path:  # written as its text
        if not isinstance(value, str):
            raise TypeError(f"expected a path, got {type(value).__name__}")
        return Path(value)
    if tp in _SCALARS and not _is_scalar(tp, value):
        raise TypeError(f"expected {tp.__name__}, got {type(value).__name__}")
    return value


_SCALARS = (str, int, float, bool)


def _admits_none(tp: Any, origin: Any) -> bool:
    return origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)


def _is_scalar(tp: type, value: Any) -> bool:
    if tp is bool or isinstance(value, bool):
        return tp is bool and isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float))
    return isinstance(value, tp)
