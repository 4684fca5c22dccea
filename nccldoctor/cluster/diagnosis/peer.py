"""What other nodes wrote to the master's store, checked before the master uses it.

The store answers anyone who reaches its port, and a node's entry or result is JSON another
process wrote (docs/design.md#gate). Each is read within a size, a nesting depth and integer
bounds, then checked against the report's JSON Schema (``report/schema.json``, the document
``docs/report.md`` describes; a node entry's Facts against its ``node_facts``), so that what
the merge and the rules read has the types they expect. What fails is left out and said, with
why, in a :class:`~nccldoctor.facts.world.Rejected` the ``world`` rules turn into a finding.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from importlib import resources
from typing import Any

from nccldoctor.cluster.records import NodeEntry
from nccldoctor.facts.serde import read_fields
from nccldoctor.report import Report
from nccldoctor.report.load import ReportError, report_from_document

MAX_RESULT_BYTES = 64 << 20  # a node report of 8 ranks with their stacks is a few MB
MAX_ENTRY_BYTES = 4 << 20  # a node's Facts: tens of KB
MAX_DEPTH = 48  # a report nests about 8 deep; the views and rules recurse over it
MAX_INT = 2**63  # larger ones overflow the float conversions of the rules and views
NAME_CHARS = 255
_MAX_PROCS = 4096
_MAX_PATH = 4096  # Linux's PATH_MAX
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def node_result(raw: bytes | str) -> tuple[Report | None, str]:
    """A node's report as published to the store; (None, why) when it is not one."""
    document, why = _read(raw, MAX_RESULT_BYTES)
    if document is None:
        return None, why
    why = schema_error(document, _schema())
    if why:
        return None, why
    path = document.get("report_path")  # the node's own file, listed in the cluster section
    if path is not None and (not isinstance(path, str) or len(path) > _MAX_PATH):
        return None, f"report_path is {_kind(path)} of {len(str(path))} characters"
    try:
        return report_from_document(document, "the result"), ""
    except ReportError as exc:
        return None, str(exc)


def node_entry(raw: bytes | str, slot: int) -> tuple[NodeEntry | None, str]:
    """A node's entry as written to ``node/<slot>``; (None, why) when it is not one."""
    data, why = _read(raw, MAX_ENTRY_BYTES)
    if data is None:
        return None, why
    facts = data.get("facts") if isinstance(data, dict) else None
    if isinstance(facts, dict) and (why := schema_error(facts, _schema()["$defs"]["node_facts"])):
        return None, f"facts: {why}"  # the schema's reason names the place in the Facts
    try:  # each field of the record, the Facts whole, strictly: what is not a field is refused
        entry = read_fields(NodeEntry, data, only_known=True)
    except ValueError as exc:
        return None, str(exc)[:200]
    if entry.slot != slot:
        return None, f"it claims slot {entry.slot}"
    if not 0 < len(entry.name) <= NAME_CHARS or not entry.name.isprintable():
        return None, "its name is not a host name"
    for key, text in (("advertised", entry.advertised), ("seen", entry.seen)):
        if len(text) > NAME_CHARS or not text.isprintable():  # quoted in findings and the report
            return None, f"its {key} address is not an address"
    if not 0 < entry.procs <= _MAX_PROCS:
        return None, f"procs {entry.procs} is not 1..{_MAX_PROCS}"
    if not math.isfinite(entry.skew_s):
        return None, "skew_s is not a finite number"
    return entry, ""


def claimed_name(raw: bytes | str) -> str:
    """The name a rejected entry gives itself, if any, as printable text of a host name's
    length (it is shown in the finding that names the intruder)."""
    match = re.search(
        rb'"name": *"([^"\\]{1,255})"', raw if isinstance(raw, bytes) else raw.encode()
    )
    if not match:
        return ""
    return "".join(ch for ch in match.group(1).decode(errors="replace") if ch.isprintable())


def _read(raw: bytes | str, limit: int) -> tuple[Any, str]:
    """The JSON value of ``raw`` within ``limit`` bytes, MAX_DEPTH levels and MAX_INT."""
    if len(raw) > limit:
        return None, f"{len(raw)} bytes, more than the {limit} a node writes"
    try:
        value = json.loads(raw)
    except RecursionError:
        return None, "nested too deep to parse"
    except ValueError as exc:  # not JSON, not UTF-8, an integer of more than 4300 digits
        return None, f"not JSON: {str(exc)[:200]}"
    return (None, why) if (why := _shape_error(value)) else (value, "")


def _shape_error(value: Any) -> str:
    """Nesting past MAX_DEPTH or an integer past MAX_INT, found without recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            if isinstance(item, int) and not isinstance(item, bool) and abs(item) > MAX_INT:
                return f"an integer of {len(str(abs(item)))} digits"
            continue
        if depth > MAX_DEPTH:
            return f"nested more than {MAX_DEPTH} deep"
        stack.extend((child, depth + 1) for child in children)
    return ""


@cache
def _schema() -> dict[str, Any]:
    text = resources.files("nccldoctor.report").joinpath("schema.json").read_text("utf-8")
    return json.loads(text)


def schema_error(value: Any, schema: dict[str, Any], where: str = "") -> str:
    """The first place where ``value`` does not hold to ``schema`` ("" when it does): the
    keywords the report's schema uses (type, enum, properties, required, additionalProperties,
    propertyNames, items, prefixItems, minItems, maxItems, minimum, pattern, anyOf, $ref).
    Recursion is bounded by the depth _shape_error allowed."""
    if "$ref" in schema:
        schema = _resolve(schema["$ref"])
    at = where or "the document"
    if "anyOf" in schema:
        errors = [schema_error(value, option, where) for option in schema["anyOf"]]
        if all(errors):  # said by the option of the value's type, where one is
            typed = [e for o, e in zip(schema["anyOf"], errors, strict=True) if _typed(value, o)]
            return (typed or errors)[0]
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is(value, kind) for kind in kinds):
            return f"{at} is {_kind(value)}, not {' or '.join(kinds)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{at} is {str(value)[:40]!r}, not one of {len(schema['enum'])} known values"
    if isinstance(value, dict):
        return _object_error(value, schema, where)
    if isinstance(value, list):
        return _array_error(value, schema, where)
    if "minimum" in schema and isinstance(value, (int, float)) and value < schema["minimum"]:
        return f"{at} is below {schema['minimum']}"
    if "pattern" in schema and isinstance(value, str) and not re.search(schema["pattern"], value):
        return f"{at} {value[:40]!r} is not of the form {schema['pattern']}"
    return ""


def _object_error(value: dict[str, Any], schema: dict[str, Any], where: str) -> str:
    missing = [key for key in schema.get("required", ()) if key not in value]
    if missing:
        return f"{where or 'the document'} has no {missing[0]}"
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    names = schema.get("propertyNames")
    for key, item in value.items():
        place = f"{where}.{key[:40]}" if where else key[:40]
        if names is not None and (why := schema_error(key, names, f"the key {place}")):
            return why
        if key in properties:
            why = schema_error(item, properties[key], place)
        elif isinstance(extra, dict):
            why = schema_error(item, extra, place)
        else:
            why = "" if extra else f"{place} is not expected"
        if why:
            return why
    return ""


def _array_error(value: list[Any], schema: dict[str, Any], where: str) -> str:
    at = where or "the document"
    if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
        return f"{at} has {len(value)} items"
    first = schema.get("prefixItems", [])
    for index, item in enumerate(value):
        rule = first[index] if index < len(first) else schema.get("items")
        if rule is not None and (why := schema_error(item, rule, f"{where}[{index}]")):
            return why
    return ""


def _resolve(ref: str) -> dict[str, Any]:
    node: Any = _schema()
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def _typed(value: Any, schema: dict[str, Any]) -> bool:
    """Whether ``value`` is of a type ``schema`` allows (any, when it names none)."""
    kinds = (_resolve(schema["$ref"]) if "$ref" in schema else schema).get("type")
    if kinds is None:
        return True
    return any(_is(value, kind) for kind in ([kinds] if isinstance(kinds, str) else kinds))


def _is(value: Any, kind: str) -> bool:
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(kind, (object,)))


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
             int: "an integer", float: "a number", type(None): "null"}  # fmt: skip
    return names.get(type(value), type(value).__name__)
