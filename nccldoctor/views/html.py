"""The HTML view: one self-contained page (inline CSS, SVG and a little JS; no network).

Rendered with jinja2 (autoescape on) from the templates in the top-level ``templates/`` folder,
which the wheel ships as ``nccldoctor/templates``. A Content-Security-Policy in the page allows
no request at all and only the page's own script and style (by hash), so even an escaping bug
could not load or run anything.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import shlex
from functools import cache
from pathlib import Path
from typing import Any

import nccldoctor
from nccldoctor.report import Report
from nccldoctor.report.answer import nccl_summary
from nccldoctor.report.shape import items, section, values
from nccldoctor.views import charts, isolation, sections, topology

PAGE_TEMPLATE = "report.html.j2"


def templates_dir() -> Path:
    """``nccldoctor/templates`` in an installed wheel, ``templates/`` in a source checkout."""
    package = Path(nccldoctor.__file__).resolve().parent
    for candidate in (package / "templates", package.parent / "templates"):
        if (candidate / PAGE_TEMPLATE).is_file():
            return candidate
    raise FileNotFoundError(
        f"{PAGE_TEMPLATE} is neither in {package / 'templates'} nor in {package.parent / 'templates'}"
    )


@cache
def _environment(directory: Path) -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory),
        bytecode_cache=_bytecode_cache(jinja2),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        log_lines=log_lines,
        matrix_rows=matrix_rows,
        timeline_lanes=timeline_lanes,
        num=number,
    )
    return env


def _bytecode_cache(jinja2: Any) -> Any:
    """jinja2's own cache of compiled templates (a private folder in the temp directory, keyed
    by each template's checksum and jinja2's version): compiling the page template costs ~60 ms
    of every run that writes a page, loading it ~1 ms. None when no safe folder exists; a cache
    that cannot be read or written is a compile, never an error."""

    class QuietCache(jinja2.FileSystemBytecodeCache):
        def load_bytecode(self, bucket: Any) -> None:
            try:
                super().load_bytecode(bucket)  # jinja2 itself resets a bucket it cannot load
            except OSError:
                bucket.reset()

        def dump_bytecode(self, bucket: Any) -> None:
            with contextlib.suppress(OSError):
                super().dump_bytecode(bucket)

    try:
        return QuietCache()
    except (OSError, RuntimeError):  # no temp directory of this user's own
        return None


def number(value: Any, digits: int = 2) -> str:
    """A measured number with ``digits`` decimals; anything else as it is ("" for None)."""
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def log_lines(lines: list[tuple[str, str]]) -> Any:
    """One ``<div>`` per log line, escaped; done here because a 64-rank report has ~13k lines
    and a template loop over them is most of the page's render time. The lines are escaped in
    one call (joined on a newline, which escaping keeps and a kept line cannot hold)."""
    from markupsafe import Markup, escape

    texts = [line.replace("\n", " ") for _, line in lines]
    escaped = str(escape("\n".join(texts))).split("\n") if texts else []
    # kind is one of line_kinds()'s fixed words, never text from the report.
    return Markup(
        "".join(
            f'<div class="{kind}">{text}</div>' if kind else f"<div>{text}</div>"
            for (kind, _), text in zip(lines, escaped, strict=True)
        )
    )


def matrix_rows(matrix: topology.TransportMatrix) -> Any:
    """The rank-by-rank rows, escaped; built here because 64 ranks make 4096 cells, which a
    template loop renders many times slower. Cells repeat: each distinct one is built once."""
    from markupsafe import Markup, escape

    built: dict[tuple[bool, tuple[str, ...], bool], str] = {}
    rows = []
    for rank in matrix.ranks:
        cells = []
        for peer in matrix.ranks:
            key = (
                rank == peer,
                tuple(matrix.cells.get((rank, peer), [])),
                (rank, peer) in matrix.gdr,
            )
            cell = built.get(key)
            if cell is None:
                css = "self" if key[0] else matrix.css(list(key[1]))
                text = " ".join(topology.short_transport(label) for label in key[1])
                cell = built[key] = (
                    f'<td class="{escape(css)}">{escape(text)}{"+GDR" if key[2] else ""}</td>'
                )
            cells.append(cell)
        rows.append(f"<tr><th>{escape(rank)}</th>{''.join(cells)}</tr>\n")
    return Markup("".join(rows))


def timeline_lanes(timeline: charts.Timeline) -> Any:
    """Each lane's label and bars as SVG, escaped; built here because 64 nodes and 64 ranks
    make ~1000 bars of seven fields each, most of the page's template time."""
    from markupsafe import Markup, escape

    left = timeline.plot.left - 8
    out = []
    for lane in timeline.lanes:
        label = escape(lane.label)
        stuck = (' class="stuck"', " ⚠ stuck") if lane.stuck else ("", "")
        out.append(
            f'<text x="{left}" y="{lane.y + 12}" text-anchor="end"{stuck[0]}>{label}{stuck[1]}</text>\n'
        )
        for bar in lane.bars:
            # status is a phase status word from the report: escaped like every other field
            out.append(
                f'<rect class="{escape(bar.status)}" x="{bar.x:.1f}" y="{lane.y + 2}" '
                f'width="{bar.width:.1f}" height="14"><title>{label} · {escape(bar.label)}'
                "</title></rect>"
            )
            if bar.width > len(bar.phase) * 6 + 6:
                out.append(
                    f'<text class="barlabel" x="{bar.x + 3:.1f}" y="{lane.y + 13}">'
                    f"{escape(bar.phase)}</text>"
                )
    return Markup("".join(out))


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def render_html(report: Report) -> str:
    """The report as one HTML page."""
    return render_document_html(report.to_dict())


def render_document_html(document: dict[str, Any]) -> str:
    """The page for a report document (the redacted JSON of ``Report.to_dict``)."""
    directory = templates_dir()
    env = _environment(directory)
    style = env.get_template("report.css").render()
    script = env.get_template("report.js").render()
    return env.get_template(PAGE_TEMPLATE).render(
        doc=document,
        style=style,
        script=script,
        csp=f"default-src 'none'; style-src {_csp_hash(style)}; script-src {_csp_hash(script)}; "
        "img-src data:; base-uri 'none'; form-action 'none'",
        **page_context(document),
    )


def page_context(document: dict[str, Any]) -> dict[str, Any]:
    """Everything the template shows, arranged from the document by the section helpers; the
    banner, answer and consistency table as the document states them."""
    top = section(document, "headline")
    summary = nccl_summary(document)
    comm = topology.communicator(document)
    bandwidth = section(document, "bandwidth")
    phases = items(document.get("phases"))
    columns, rows = sections.consistency(document)
    return {
        "banner_key": str(top.get("banner") or ""),
        "banner_title": str(top.get("title") or ""),
        # under the banner's heading, the line without it ("Hang: ..." under "Hang")
        "verdict_line": str(top.get("line") or "").removeprefix(f"{top.get('title')}: "),
        "answer": str(top.get("answer") or ""),
        "notes": [str(n) for n in values(document.get("load_notes"))],
        "areas": sections.area_lines(document),
        "cluster_rows": rows,
        "cluster_columns": columns,
        "finding_groups": sections.finding_groups(document),
        "findings_hidden": sections.findings_hidden(document),
        "summary": summary,
        "nccl_headline": topology.nccl_headline(summary),
        "matrix": topology.transport_matrix(summary),
        "rank_transports": topology.rank_transports(comm),
        "rings": topology.ring_lines(summary, comm),
        "trees": topology.tree_lines(summary, comm),
        "bandwidth": bandwidth,
        "bandwidth_rows": sections.bandwidth_rows(bandwidth),
        "links": sections.link_table(document),
        "pairs": isolation.pair_matrix(document),
        "chart": charts.bandwidth_chart(
            items(bandwidth.get("rows")), section(bandwidth, "tcp_wire_Gbitps")
        ),
        "timeline": charts.timeline(phases, section(document, "hang") or None),
        "phases": phases,
        "hang": section(document, "hang"),
        "mnist": section(document, "mnist"),
        "rank_logs": sections.rank_logs(document),
        "perf_runs": sections.perf_runs(document),
        "ras_outputs": sections.ras_outputs(document),
        "flight_recorder_files": values(section(document, "flight_recorder").get("files")),
        "flight_recorder_groups": sections.flight_recorder_groups(document),
        "skipped": items(section(document, "attachments").get("skipped")),
        "environments": sections.environments(document),
        "reproduce": shlex.join(str(a) for a in values(document.get("command"))),
    }
