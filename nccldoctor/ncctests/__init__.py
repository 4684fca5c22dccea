"""nccl-tests output (``all_reduce_perf`` and the other ``*_perf``), text and ``-J`` JSON, as data.

Every era's format is in the formats page (docs/nccl-tests-formats.md#nccl-tests). The text
reader (``text.py``) reads each line kind but the table by a table of regexes, and the table by
its own header: ``table.py`` holds the table's shape, the layout a header announces or a
headerless row's cells imply. ``json_output.py`` reads ``-J``; both fill the records of
``records.py``. It judges nothing: the rules are ``checks/nccl_tests.py``.
"""

from nccldoctor.ncctests.json_output import parse_json
from nccldoctor.ncctests.records import PerfReading, PerfRun, link_GBps
from nccldoctor.ncctests.text import parse_text

__all__ = [
    "PerfReading",
    "PerfRun",
    "link_GBps",
    "parse_json",
    "parse_text",
]
