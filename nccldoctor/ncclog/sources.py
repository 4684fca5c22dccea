"""Sources in, one :class:`~nccldoctor.ncclog.records.LogSet` out: each file parsed whole, or a
big one in stretches spread over worker processes and folded back in order."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable

from nccldoctor.ncclog.inputs import BLOCK_BYTES, MAX_LINE, BlockReader, Source, Stretch, stretches
from nccldoctor.ncclog.lines import COLL_NEEDLE
from nccldoctor.ncclog.netfolds import settle_interfaces
from nccldoctor.ncclog.parser import SourceParser
from nccldoctor.ncclog.records import LogSet
from nccldoctor.ncclog.signals import Identify, may_match

POOL_MIN_BYTES = 32 << 20  # below this, starting worker processes costs more than it saves
TASKS_PER_JOB = 8  # stretches per process: they finish together however unlike the files are


def parse_source(
    name: str,
    block: int = BLOCK_BYTES,
    max_line: int = MAX_LINE,
    identify: Identify | None = None,
) -> LogSet:
    """Parse one file (or ``-``); never raises on bad content. ``identify`` names the known
    signature of a WARN or non-NCCL line (see :mod:`~nccldoctor.ncclog.signals`)."""
    return _settled(parse_stretch(name, (0, None), block, max_line, identify))


def parse_stretch(
    name: str,
    stretch: Stretch,
    block: int = BLOCK_BYTES,
    max_line: int = MAX_LINE,
    identify: Identify | None = None,
) -> LogSet:
    """Parse the lines of one file that start in ``stretch``; the stretches of a file, parsed
    anywhere and folded in order with ``LogSet.continue_with``, are the file parsed whole."""
    reader = BlockReader(name, block, max_line, stretch)
    parser = SourceParser(name, identify)
    for data, start, end in reader:
        parser.feed(data, start, end)
    parser.finish()
    result = parser.result
    if reader.truncated:
        result.cut_lines[name] = reader.truncated
    if reader.read_error:
        result.read_errors.append(f"{name}: {reader.read_error}")
    return result


def _settled(result: LogSet) -> LogSet:
    """A whole file's record: in one rank's file every line, and every signature, is its;
    what several lines say together is read now that they are all in."""
    for proc in result.processes.values():
        settle_interfaces(proc)
    if len(result.processes) == 1:
        only = next(iter(result.processes.values()))
        only.lines = result.lines
        for hit in result.signatures.values():
            hit.lines = [(text, line, key or only.key) for text, line, key in hit.lines]
    return result


def _parse_task(task: tuple[str, Stretch], identify: Identify | None) -> LogSet:
    return parse_stretch(task[0], task[1], identify=identify)


def parse_sources(
    sources: Iterable[Source],
    jobs: int | None = None,
    progress: Callable[[str], None] | None = None,
    identify: Identify | None = None,
) -> LogSet:
    """Parse every source, spreading stretches of the files over ``jobs`` processes when that
    pays off. ``identify`` must be picklable by reference (a module-level function) for the pool."""
    sources = list(sources)
    merged = LogSet()
    jobs = jobs or os.cpu_count() or 1
    files = sorted((s for s in sources if s.name != "-"), key=lambda s: -s.size)  # big first
    total = sum(s.size for s in files)
    size = total // (jobs * TASKS_PER_JOB)
    tasks = [(s.name, cut) for s in files for cut in stretches(s, size, COLL_NEEDLE)]
    pooled = jobs > 1 and len(tasks) > 1 and total >= POOL_MIN_BYTES
    if pooled:
        if identify is not None:  # the catalogue is loaded before the fork: the workers share it
            may_match(identify, "")
        import multiprocessing  # only runs that spread over processes pay for these imports
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=ctx) as pool:
            parse = functools.partial(_parse_task, identify=identify)
            whole: LogSet | None = None  # the file being folded, stretch by stretch
            for (name, (_, stop)), result in zip(tasks, pool.map(parse, tasks), strict=True):
                if whole is None:
                    whole = result
                else:
                    whole.continue_with(result)
                if stop is None:  # its last stretch
                    merged.merge(_settled(whole))
                    whole = None
                    if progress:
                        progress(name)
    for s in sources:
        if pooled and s.name != "-":
            continue
        merged.merge(parse_source(s.name, identify=identify))
        if progress:
            progress(s.name)
    merged.sources = [s.name for s in sources]
    return merged
