"""nccl-tests output of each era, read from real outputs (tests/fixtures/nccl_tests/SOURCES.md),
and the rules over it."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks import run_checks
from nccldoctor.ncctests import PerfReading, link_GBps, parse_json, parse_text

FIXTURES = Path(__file__).parent / "fixtures" / "nccl_tests"


def read(name: str, text: str | None = None):
    body = text if text is not None else (FIXTURES / name).read_text()
    return parse_text(body.splitlines(), name)


def ids(reading: PerfReading) -> dict[str, list]:
    found: dict[str, list] = {}
    for f in run_checks("nccl_tests", reading):
        found.setdefault(f.id, []).append(f)
    return found


def test_todays_table_with_na_and_its_footer():
    (run,) = read("nccl-tests-287-alltoall.txt")
    assert run.settings["nGpus"] == "1" and run.settings["iters"] == "20"
    assert [(d.rank, d.host, d.pid) for d in run.devices] == [(0, "GENOA-01", 2181762)]
    (row,) = run.rows
    assert (row.size, row.count, row.type, row.redop, row.root) == (33554432, 8388608, "float",
                                                                   "none", "-1")  # fmt: skip
    assert row.out_of_place.algbw_GBps == 1715.44 and row.out_of_place.wrong == 0
    assert row.in_place.wrong is None  # N/A: not validated
    assert (run.out_of_bounds, run.avg_busbw_GBps, run.concluded) == (0, 0.0, True)


@pytest.mark.parametrize(
    ("name", "hosts", "column", "rows"),
    [
        ("nccl-1039-allreduce-cut.txt", ["job-1111-2222-0"], "#wrong", 4),
        ("nccl-tests-82-broadcast.txt", ["v100-gpu-1", "v100-gpu-5"], "error", 1),
        ("nv_peer_memory-38-v2.0.txt", ["clx-mld-45", "clx-mld-46"], None, 0),
        ("nccl-tests-5-v1.txt", ["node03"], "res", 0),
    ],
)
def test_each_era_header_devices_and_columns(name, hosts, column, rows):
    (run,) = read(name)
    assert run.hosts == hosts
    assert run.wrong_column == column
    assert len(run.rows) == rows


def test_the_old_root_column_and_error_column_map_by_the_header():
    (run,) = read("nccl-tests-82-broadcast.txt")
    (row,) = run.rows
    assert (row.root, row.redop, row.out_of_place.time_us, row.in_place.time_us) == (
        "0", None, 45.82, 38.17
    )  # fmt: skip
    assert run.nccl_version == "2.9.6"


def test_a_paste_from_the_units_line_reads_with_todays_layout_and_its_failures():
    (run,) = read("nccl-tests-322-failure.txt")
    assert len(run.rows) == 5 and run.peak_busbw_GBps == 367.44
    assert len(run.failures) == 5 and run.failures[-1] == "HCA-22: Test NCCL failure common.c"
    (failed,) = ids(PerfReading([run]))["nccl_tests.test-failed"]
    assert failed.severity == "fail" and "unhandled cuda error" in failed.title


def test_a_row_cut_mid_way_is_counted_not_read():
    text = (FIXTURES / "nccl-1039-allreduce-cut.txt").read_text()
    cut = text[: text.rindex("0.01") + 2]  # the last row stops in its in-place busbw
    (run,) = read("cut", cut)
    assert (len(run.rows), run.cut_rows) == (3, 1)
    (part,) = ids(PerfReading([run]))["nccl_tests.read-in-part"]
    assert "1 cut short" in part.title


def test_wrong_values_are_data_corruption():
    text = (FIXTURES / "nccl-1039-allreduce-cut.txt").read_text()
    # derived: the real 32-byte row with 3 wrong in-place elements
    bad = text.replace("17.74    0.00    0.00      0", "17.74    0.00    0.00      3")
    (run,) = read("bad", bad)
    (found,) = ids(PerfReading([run]))["nccl_tests.data-corruption"]
    assert found.severity == "fail" and found.category == "data_corruption"
    assert found.evidence == ["size 32 B float sum in-place: #wrong 3"]
    (clean,) = read("nccl-1039-allreduce-cut.txt")
    assert "nccl_tests.data-corruption" not in ids(PerfReading([clean]))


def test_an_out_of_bounds_count_is_data_corruption_in_the_old_error_era():
    text = (FIXTURES / "rccl-2078-footer.txt").read_text()
    (run,) = read("oob", text.replace("values : 0 OK", "values : 50 FAILED"))
    (found,) = ids(PerfReading([run]))["nccl_tests.data-corruption"]
    assert "# Out of bounds values : 50 FAILED" in found.evidence


def test_sockets_across_nodes_from_the_outputs_own_nccl_lines():
    (run,) = read("nccl-398-socket-two-nodes.txt")
    assert run.network == "Socket"
    (found,) = ids(PerfReading([run]))["nccl_tests.socket-transport"]
    assert found.severity == "warn" and "TCP sockets" in found.title
    # one node over sockets is no fallback: NCCL uses no network inside a node
    (single,) = read("nccl-tests-131-socket.txt")
    assert single.network == "Socket"
    assert "nccl_tests.socket-transport" not in ids(PerfReading([single]))


def test_sockets_named_by_the_tickets_log_for_an_output_without_nccl_lines():
    (run,) = read("nccl-tests-82-broadcast.txt")
    assert run.network is None
    assert "nccl_tests.socket-transport" not in ids(PerfReading([run]))
    assert "nccl_tests.socket-transport" in ids(PerfReading([run], log_network="Socket"))


def test_peak_busbw_against_the_nodes_nics():
    (run,) = read("nccl-tests-82-broadcast.txt")  # two hosts, peak 0.00 GB/s
    links = {"v100-gpu-1": link_GBps(["100 Gb/sec (4X EDR)"], []), "v100-gpu-5": 12.5}
    (found,) = ids(PerfReading([run], link_GBps=links))["nccl_tests.below-link"]
    assert "0% of the 12.5 GB/s" in found.title
    assert found.evidence == ["v100-gpu-1: NICs 12.5 GB/s", "v100-gpu-5: NICs 12.5 GB/s"]
    # a host no node report names is left out of the minimum and the evidence alike
    (one,) = ids(PerfReading([run], link_GBps={"v100-gpu-5": 25.0}))["nccl_tests.below-link"]
    assert "of the 25 GB/s" in one.title and one.evidence == ["v100-gpu-5: NICs 25 GB/s"]
    assert "nccl_tests.below-link" not in ids(PerfReading([run], link_GBps={"other": 25.0}))
    assert link_GBps([], [25000, 0]) == 3.125 and link_GBps([], []) is None


def test_the_result_names_the_peak():
    (run,) = read("rccl-2078-footer.txt")  # rows without their header: read by their cells
    assert (len(run.rows), run.peak_busbw_GBps, run.avg_busbw_GBps) == (4, 361.17, 142.652)
    (run,) = read("nccl-tests-322-failure.txt")
    (result,) = ids(PerfReading([run]))["nccl_tests.result"]
    assert "peak busbw 367.44 GB/s at 17179869184 B" in result.title


def test_json_output_as_util_cu_writes_it():
    # written from nccl-tests src/util.cu (jsonOutputInit, writeDeviceReport, the body, the
    # footer): no public -J file was found
    document = {
        "version": 1, "start_time": "2026-01-01 00:00:00", "args": ["./build/all_reduce_perf"],
        "env": [], "nccl_version": 22703,
        "config": {"nthreads": 1, "ngpus": 1, "devices": [
            {"rank": 0, "group": 0, "pid": 1, "hostname": "a", "device": 0,
             "device_hex": "0x1", "device_info": "H100"},
            {"rank": 1, "group": 0, "pid": 2, "hostname": "b", "device": 0,
             "device_hex": "0x1", "device_info": "H100"}]},
        "results": [{"size": 1024, "count": 256, "type": "float", "redop": "sum", "root": "-1",
                     "out_of_place": {"time": 10.0, "alg_bw": 0.1, "bus_bw": 0.1, "nwrong": 0},
                     "in_place": {"time": 10.0, "alg_bw": "nan", "bus_bw": 0.1, "nwrong": 2},
                     "actual_iterations": 20, "experiment_name": ""}],
        "out_of_bounds": {"count": 1, "okay": False},
        "average_bus_bandwidth": {"bandwidth": 0.1, "okay": "unchecked"}, "errors": [],
    }  # fmt: skip
    run = parse_json(json.dumps(document), "r.json")
    assert (run.test, run.nccl_version, run.hosts) == ("all_reduce_perf", "2.27.3", ["a", "b"])
    assert run.rows[0].in_place.algbw_GBps is None and run.rows[0].in_place.wrong == 2
    assert "nccl_tests.data-corruption" in ids(PerfReading([run]))
    cut = parse_json(json.dumps(document)[:300], "cut.json")
    assert cut.error and cut.rows == []
    assert "nccl_tests.read-in-part" in ids(PerfReading([cut]))


@pytest.mark.parametrize("junk", ["", "\x00\xff" * 100, "#  size count\n1 2 3\n", "# nThread x"])
def test_odd_input_never_raises(junk):
    runs = parse_text(junk.splitlines(), "junk")
    run_checks("nccl_tests", PerfReading(runs))
    assert parse_json(junk, "junk").error


@pytest.mark.parametrize(
    "document",
    ['{"results": 3, "config": 4, "errors": 5}',
     '{"results": [3, {"size": "x"}], "config": {"devices": 7}, "out_of_bounds": 4, "args": 5}'],
)  # fmt: skip
def test_json_of_the_wrong_shape_is_read_as_far_as_it_goes(document):
    run = parse_json(document, "odd.json")
    assert run.rows == [] and run.devices == []
    run_checks("nccl_tests", PerfReading([run]))


def test_a_failure_line_carrying_ncclgetlasterror_is_matched_in_the_catalogue():
    # derived from nccl-tests-322's line shape: 2.13+ append ncclGetLastError(), the last WARN
    line = ("HCA-1: Test NCCL failure common.cu:1204 'unhandled system error (run with "
            "NCCL_DEBUG=INFO for details) / Bootstrap : no socket interface found'")  # fmt: skip
    (run,) = read("failure", line + "\n")
    (found,) = ids(PerfReading([run]))["nccl_tests.test-failed"]
    assert found.title.endswith("NCCL bootstrap found no usable network interface")
    assert found.category == "interface_selection" and "NCCL_SOCKET_IFNAME" in found.fix


def test_cputime_per_iteration_and_timestamp_columns_map_by_the_header():
    # the -C -I 1 -S header as src/util.cu writeResultHeader prints it (no public output found);
    # the row as writeBenchmarkLinePreamble/Body/writePerIterReport/writeTimestamp print it
    names = ("size", "count", "type", "redop", "root", "cputime", "algbw", "busbw", "#wrong",
             "i_min", "i_max", "i_p99", "i_cv%", "cputime", "algbw", "busbw", "#wrong", "i_min",
             "i_max", "i_p99", "i_cv%")  # fmt: skip
    header = "# " + "  ".join(names) + "  timestamp"  # cells are whitespace-separated
    row = ("     1048576        262144     float     sum      -1    51.20   20.48   38.40      0"
           "    50.10    55.00    54.90     2.10    50.90   20.60   38.62      1    50.00    "
           "54.00    53.80     1.90  2026-01-02 03:04:05")  # fmt: skip
    (run,) = read("flags", "\n".join(["# nThread 1 nGpus 1 minBytes 8", header, row]) + "\n")
    (parsed,) = run.rows
    assert parsed.out_of_place.time_us == 51.2 and parsed.out_of_place.busbw_GBps == 38.4
    assert parsed.in_place.time_us == 50.9 and parsed.in_place.wrong == 1
    assert run.wrong_rows()[0][1] == "in-place"


def test_nccl_lines_between_rows_from_a_host_named_by_digits_are_no_rows():
    text = (FIXTURES / "nccl-1039-allreduce-cut.txt").read_text().splitlines()
    # derived: an NCCL INFO line of a host whose name starts with a digit, between two rows
    text.insert(-1, "10-0-0-7:3423:3440 [0] NCCL INFO Channel 00/02 : 0 1 2 3")
    (run,) = read("between", "\n".join(text) + "\n")
    assert (len(run.rows), run.cut_rows) == (4, 0)


# ---- the real outputs of expect.toml, as people pasted them ------------------------------------

EXPECT = tomllib.loads((FIXTURES / "expect.toml").read_text())


def paste_facts(runs) -> dict:
    """What expect.toml states of a paste, read from its runs."""
    peaks = [r.peak_busbw_GBps for r in runs if r.peak_busbw_GBps is not None]
    return {
        "rows": sum(len(r.rows) for r in runs),
        "cut_rows": sum(r.cut_rows for r in runs),
        "peak_busbw": max(peaks) if peaks else None,
        "avg_busbw": next((r.avg_busbw_GBps for r in runs if r.avg_busbw_GBps is not None), None),
        "out_of_bounds": next((r.out_of_bounds for r in runs if r.out_of_bounds is not None), None),
        "wrong": sum(len(r.wrong_rows()) for r in runs),
        "failures": sum(len(r.failures) for r in runs),
        "hosts": sorted({h for r in runs for h in r.hosts}),
    }


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_every_fact_of_a_real_paste(name):
    want = {k: sorted(v) if k == "hosts" else v for k, v in EXPECT[name].items() if k != "source"}
    got = paste_facts(read(name))
    assert {k: got[k] for k in want} == want


def test_rows_without_a_header_take_their_layout_from_their_cells():
    # a reduction and a root (2.13+), no reduction before the root (2.x broadcast), neither
    (run,) = read("nccl-tests-167-rows-only-max-min.txt")
    assert (run.rows[0].redop, run.rows[0].root, run.wrong_column) == ("max", "-1", "#wrong")
    (run,) = read("bottlerocket-kernel-kit-313-indented-mpirun-rows.txt")
    assert run.rows[0].redop == "none" and run.rows[0].in_place.wrong is None  # N/A
    # derived: the old error column's rows (%5.0le) without their header
    lines = (FIXTURES / "nccl-258-error-column-container-host.txt").read_text().splitlines()
    rows = [line for line in lines if line.strip()[:1].isdigit()][:4]
    (run,) = read("error", "\n".join(rows) + "\n")
    assert (len(run.rows), run.wrong_column, run.wrong_rows()) == (4, "error", [])
    assert run.rows[0].redop == "sum" and run.rows[0].root is None


def test_a_footer_starts_nothing_rows_after_it_are_another_run():
    # the thread quotes one run's footer, then pastes another run's table
    first, second = read("aws-k8s-tester-503-quoted-footer-mpirun-table.txt")
    assert (first.avg_busbw_GBps, first.out_of_bounds, first.rows) == (92.3405, 0, [])
    assert (len(second.rows), second.cut_rows, second.avg_busbw_GBps) == (3, 1, None)
    # derived: the same rows pasted twice, each under its footer, are two runs
    text = (FIXTURES / "nccl-tests-119-rows-footer.txt").read_text()
    assert [len(r.rows) for r in read("twice", text + text)] == [6, 6]


def test_a_footer_alone_is_a_run():
    (run,) = read("footer", "# Out of bounds values : 3 FAILED\n")
    assert (run.out_of_bounds, run.rows, run.concluded) == (3, [], False)
    (run,) = read("footer", " Avg bus bandwidth    : 12.5 \n")  # v1, or '#' eaten
    assert (run.avg_busbw_GBps, run.concluded) == (12.5, True)


def test_lines_of_a_log_are_no_rows():
    # a log's lines that start with digits: an editor's line numbers, a host named by digits
    for log in ("pytorch-38702-v2.4.8-line-numbered-socket", "nccl-tests-208-v2.21.5-hash-"
                "stripped-cuda-named-symbol"):  # fmt: skip
        text = (FIXTURES.parent / "real" / log / "log.txt").read_text()
        assert all(r.rows == [] and r.cut_rows == 0 for r in read(log, text))


OUTPUTS = sorted(FIXTURES.glob("*.txt"))
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _rows(text: str) -> list:
    return [row for run in parse_text(text.splitlines(), "x") for row in run.rows]


@SETTINGS
@given(st.sampled_from(OUTPUTS), st.data())
def test_a_real_paste_cut_at_any_byte_reads_a_prefix_of_its_rows(path, data):
    raw = path.read_bytes()
    at = data.draw(st.integers(0, len(raw)))
    text = raw[:at].decode("utf-8", "replace")
    runs = parse_text(text.splitlines(), path.name)
    run_checks("nccl_tests", PerfReading(runs))
    cut, whole = _rows(text), _rows(raw.decode())
    assert len(cut) <= len(whole)
    assert cut[:-1] == whole[: max(len(cut) - 1, 0)]  # the last may be cut inside its last cell


@SETTINGS
@given(
    st.sampled_from(OUTPUTS),
    st.sampled_from(["nul", "crlf", "wrap", "long", "noise"]),
    st.integers(0, 10**6),
    st.binary(max_size=64),
)
def test_a_mangled_real_paste_never_raises(path, how, at, noise):
    text = path.read_text()
    at %= len(text) + 1
    mangled = {
        "nul": text[:at] + "\x00" * 7 + text[at:],
        "crlf": text.replace("\n", "\r\n"),
        # a terminal 80 columns wide
        "wrap": "\n".join(
            line[i : i + 80] for line in text.splitlines() for i in range(0, len(line) or 1, 80)
        ),
        "long": text[:at] + "8 2 float sum -1 " + "1.5 " * 25_000 + text[at:],
        "noise": text[:at] + noise.decode("latin-1") + text[at:],
    }[how]
    runs = parse_text(mangled.splitlines(), path.name)
    run_checks("nccl_tests", PerfReading(runs))
    if how == "crlf":
        assert _rows(mangled) == _rows(text)
