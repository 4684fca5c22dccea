"""nccl-tests' ``-J`` output (util.cu's JSON writer) as a run. An unreadable document becomes a
run with ``error`` set; it never raises."""

from __future__ import annotations

from typing import Any

from nccldoctor import jsondoc
from nccldoctor.ncctests.records import Device, Half, PerfRun, Row


def is_json_document(data: Any) -> bool:
    """The top-level keys of nccl-tests' ``-J`` file (util.cu jsonOutputInit and the footer)."""
    return isinstance(data, dict) and "results" in data and ("config" in data or "args" in data)


def parse_json(text: str, source: str) -> PerfRun:
    """The run in a ``-J`` document; ``error`` says why when it is not one."""
    run = PerfRun(source)
    data, run.error = jsondoc.load(
        text, is_json_document, "nccl-tests' -J output", ": nccl-tests stopped while writing it?"
    )
    if data is None:
        return run
    args = data.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str):
        run.test = args[0].rsplit("/", 1)[-1]
    version = data.get("nccl_version")
    if isinstance(version, int) and version > 0:
        # NCCL_VERSION_CODE: major*10000 + minor*100 + patch from 2.9 on
        run.nccl_version = f"{version // 10000}.{version // 100 % 100}.{version % 100}"
    config = data.get("config")
    if isinstance(config, dict):
        run.settings = {str(k): str(v) for k, v in config.items() if not isinstance(v, list)}
        for d in jsondoc.as_list(config.get("devices")):
            if isinstance(d, dict) and isinstance(d.get("rank"), int):
                run.devices.append(
                    Device(
                        d["rank"],
                        str(d.get("hostname", "?")),
                        jsondoc.as_int(d.get("device")),
                        jsondoc.as_int(d.get("pid")),
                        str(d.get("device_info", "")),
                    )
                )
    run.wrong_column = "#wrong"
    for entry in jsondoc.as_list(data.get("results")):
        if not isinstance(entry, dict) or not isinstance(entry.get("size"), int):
            run.cut_rows += 1
            continue
        run.rows.append(
            Row(
                entry["size"],
                jsondoc.as_int(entry.get("count")),
                _str(entry.get("type")),
                _str(entry.get("redop")),
                _str(entry.get("root")),
                _half(entry.get("out_of_place")),
                _half(entry.get("in_place")),
            )
        )
    oob = data.get("out_of_bounds")
    if isinstance(oob, dict) and isinstance(oob.get("count"), int):
        run.out_of_bounds = oob["count"]
    avg = data.get("average_bus_bandwidth")
    if isinstance(avg, dict):
        run.avg_busbw_GBps = _json_number(avg.get("bandwidth"))
        run.concluded = True
    for error in jsondoc.as_list(data.get("errors")):
        if isinstance(error, str) and error:
            run.failures.append(error)
    return run


def _str(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) else None


def _json_number(value: Any) -> float | None:
    # jsonDouble writes NaN as the string "nan"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _half(value: Any) -> Half | None:
    if not isinstance(value, dict):
        return None
    return Half(
        _json_number(value.get("time", value.get("cpu_time"))),
        _json_number(value.get("alg_bw")),
        _json_number(value.get("bus_bw")),
        _json_number(value.get("nwrong")),
    )
