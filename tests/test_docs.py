"""The field guide: generated finding pages are up to date and every link in docs/ resolves."""

from __future__ import annotations

import ast
import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from checks import Check, Problem, all_checks, summary
from nccldoctor.docs import finding_doc_path
from nccldoctor.docs.__main__ import main as docs_main
from nccldoctor.docs.build import catalogue, generate, stale_files, write_pages
from nccldoctor.docs.pages import render_check_page, render_index
from nccldoctor.docs.refs import load_refs
from nccldoctor.model import CATEGORIES, Severity

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
EXPLICIT_ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
FENCE = re.compile(r"^(`{3,}).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def run_docs(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``python -m nccldoctor.docs ARGS``'s exit code and stderr, run in this process (the
    command itself is run once, by the test below)."""
    capsys.readouterr()
    code = docs_main(list(args))
    return code, capsys.readouterr().err


def test_committed_docs_are_up_to_date_and_built_without_the_cli():
    """``python -m nccldoctor.docs --check`` as CI runs it; the field guide is built from the
    library (checks, catalogue), never through the CLI: ``-X importtime`` names every module the
    command imported."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "nccldoctor.docs", "--check"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120, cwd=REPO,
    )  # fmt: skip
    lines = result.stderr.splitlines()
    said = [line for line in lines if not line.startswith("import time:")]
    assert result.returncode == 0, "\n".join(said)
    imported = [line.rsplit("|", 1)[-1].strip() for line in lines if line not in said]
    assert "nccldoctor.docs.build" in imported and "checks" in imported
    assert not [name for name in imported if name.startswith("nccldoctor.cli")], imported


def test_check_names_stale_and_extra_files_and_write_repairs_them(tmp_path, capsys):
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    index = docs / "findings" / "README.md"
    index.write_text(index.read_text() + "hand edit\n")
    (docs / "findings" / "no.such-finding.md").write_text("# left over\n")

    code, stderr = run_docs(capsys, "--check", "--docs-dir", str(docs))
    assert code == 1
    assert "findings/README.md" in stderr
    assert "findings/no.such-finding.md" in stderr

    assert run_docs(capsys, "--docs-dir", str(docs))[0] == 0
    assert not (docs / "findings" / "no.such-finding.md").exists()
    assert run_docs(capsys, "--check", "--docs-dir", str(docs))[0] == 0


def test_missing_background_table_is_a_clear_error(tmp_path, capsys):
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    refs = docs / "finding_refs.toml"
    refs.write_text(refs.read_text().replace("[categories.p2p_error]", "[categories.p2p_typo]"))
    code, stderr = run_docs(capsys, "--check", "--docs-dir", str(docs))
    assert code == 2
    assert "p2p_error" in stderr and "p2p_typo" in stderr


def test_every_check_and_signature_has_its_page():
    checks, signatures = catalogue()
    # the master's findings are rules too (world scope), the job's and the logs' as well
    world = {"report.merged", "report.section-unread", "run.clock-skew", "run.mtu-stall",
             "run.node-lost", "run.node-never-joined", "run.node-refused", "run.nodes-missing",
             "run.hello-flood", "run.store-rejected"}  # fmt: skip
    assert {c.id for c in checks if c.scope == "world"} == world
    assert {"watch.hang", "logs.init-incomplete"} <= {c.id for c in checks}
    for entry in [*checks, *signatures]:
        page = REPO / finding_doc_path(entry.id)
        assert page.is_file(), f"{entry.id}: no {page}"
        assert f"# `{entry.id}`" in page.read_text()


def test_finding_doc_path_names_exactly_the_generated_pages():
    found = catalogue()
    generated = {f"docs/{path}" for path in generate(DOCS, *found)}
    expected = {finding_doc_path(e.id) for entries in found for e in entries}
    assert generated == expected | {"docs/findings/README.md"}
    assert (
        finding_doc_path("net.x.crashed") == finding_doc_path("net.x") == "docs/findings/net.x.md"
    )
    assert finding_doc_path("run.crashed") == "docs/findings/run.crashed.md"


def test_every_page_links_back_to_the_index():
    for page in (DOCS / "findings").glob("*.md"):
        if page.name != "README.md":
            assert "](README.md" in page.read_text(), page.name


def test_every_category_has_background():
    refs = load_refs(DOCS)
    assert set(refs) == set(CATEGORIES)
    assert all(len(ref.background) > 100 for ref in refs.values())


@functools.cache  # an index page is the target of a link on every finding page
def markdown_anchors(page: Path) -> set[str]:
    """GitHub's heading slugs plus explicit <a id> anchors of one markdown page."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    anchors = set(EXPLICIT_ANCHOR.findall(text))
    for line in text.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", heading).replace(" ", "-"))
    return anchors


def test_internal_links_in_docs_resolve():
    pages = sorted(DOCS.rglob("*.md"))
    assert len(pages) >= 7, "the hand-written guide pages are missing"
    broken = []
    for page in pages:
        text = CODE_SPAN.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no file)")
            elif anchor and resolved.suffix == ".md" and anchor not in markdown_anchors(resolved):
                broken.append(f"{page.relative_to(REPO)}: {target} (no anchor)")
    assert not broken, "\n".join(broken)


def _cluster_rule(nodes):
    """Node facts differ across nodes (a rule for this test only).

    Compares ``NCCL_*`` across nodes; see NVIDIA/nccl#626 and `NVIDIA/nccl#1`.
    Values look like <ipv4>:<port> or `<host>:<port>`.
    """


def test_check_page_shows_the_docstring_scope_and_background():
    refs = load_refs(DOCS)
    rule = Check("cluster.env-differs", "cluster", "env_config", "cluster", _cluster_rule, "")
    page = render_check_page(rule, refs)
    assert "Compares `NCCL_*` across nodes" in page
    assert "[NVIDIA/nccl#626](https://github.com/NVIDIA/nccl/issues/626)" in page
    assert "`NVIDIA/nccl#1`" in page  # code spans stay code
    assert "look like \\<ipv4>:\\<port> or `<host>:<port>`" in page  # no stray HTML tags
    assert "nccldoctor check --master ADDR --nodes N" in page
    assert f"function `{_cluster_rule.__name__}`" in page
    assert refs["env_config"].title in page
    assert "No description yet." in page


def test_index_groups_registered_checks_by_area():
    checks = all_checks()
    index = render_index(checks, [], load_refs(DOCS))
    for c in checks:
        assert f'<a id="area-{c.area}"></a>' in index
        assert f"[`{c.id}`]({c.id}.md)" in index
    for category in CATEGORIES:
        assert f'<a id="category-{category}"></a>' in index


@pytest.mark.parametrize("bad", ["../escape", "a.b.crashed", "README", "with space"])
def test_ids_that_cannot_name_a_page_are_refused(bad):
    rule = Check(bad, "cluster", "other", "cluster", _cluster_rule, "")
    with pytest.raises(ValueError, match="finding id"):
        generate(DOCS, [rule], [])


def test_write_pages_reports_nothing_when_current(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    pages = generate(docs, *catalogue())
    assert write_pages(docs, pages) == []
    assert stale_files(docs, pages) == []


def test_note_shows_on_its_page_and_unknown_note_ids_are_refused(tmp_path, capsys):
    rule = Check("cluster.env-differs", "cluster", "env_config", "cluster", _cluster_rule, "")
    page = render_check_page(rule, load_refs(DOCS), [], "Seen as `Message truncated`.")
    assert "## What goes wrong\n\nSeen as `Message truncated`." in page

    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    refs = docs / "finding_refs.toml"
    text = refs.read_text()
    text = text if "\n[notes]\n" in text else text + "\n[notes]\n"
    refs.write_text(text.replace("\n[notes]\n", '\n[notes]\n"no.such-check" = "text"\n'))
    code, stderr = run_docs(capsys, "--check", "--docs-dir", str(docs))
    assert code == 2
    assert "no.such-check" in stderr


def _warns_or_fails(facts):
    """Warns or fails (a rule for this test only)."""
    return Problem(Severity.WARN if facts else Severity.FAIL, "t")


def test_check_page_names_the_severities_its_body_uses():
    refs = load_refs(DOCS)
    rule = Check("test.sev", "network", "other", "node", _warns_or_fails, "Warns or fails.")
    assert "| can report | `fail`, `warn` |" in render_check_page(rule, refs)
    silent = Check("test.none", "network", "other", "node", _cluster_rule, "")
    assert "can report" not in render_check_page(silent, refs)


def test_signature_page_shows_pattern_cause_fix_and_references():
    from checks.signatures import SIGNATURES

    refs = load_refs(DOCS)
    for sig in SIGNATURES:
        page = (DOCS / "findings" / f"{sig.id}.md").read_text()
        assert sig.pattern in page
        assert sig.fix.rstrip() in page
        assert f"`{sig.severity.value}`" in page
        assert refs[sig.category].title in page
        for reference in sig.reference:
            assert reference.split("#")[0] in page


def _findings_built_here(source: str) -> list[str]:
    """Where ``source`` builds a finding itself: a call of ``Finding(...)`` (or
    ``model.Finding(...)``), ``Finding.from_dict`` of a dict written out in the code, or
    ``replace(finding, id=...)``. Loading a document's findings (``from_dict(f)``) and
    changing a finding's severity or title are not."""
    built = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        owner = getattr(func, "value", None)
        from_finding = getattr(owner, "id", getattr(owner, "attr", "")) == "Finding"
        if (
            name == "Finding"
            or (
                name == "from_dict"
                and from_finding
                and any(isinstance(a, ast.Dict) for a in node.args)
            )
            or (name == "replace" and any(k.arg == "id" for k in node.keywords))
        ):
            built.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
    return built


def test_the_scan_sees_a_finding_built_by_hand():
    source = (
        "from nccldoctor import model\n"
        'a = Finding("run.nat", "docker_network", Severity.FAIL, "behind NAT")\n'
        'b = model.Finding(id="run.x", category="other", severity=None, title="t")\n'
        'c = Finding.from_dict({"id": "run.y", "category": "other"})\n'
        'd = dataclasses.replace(a, id="run.z")\n'
        "e = Finding.from_dict(loaded)\n"
        'f = dataclasses.replace(a, title=a.title + " (on gloo)")\n'
    )
    assert [line.split(":")[0] for line in _findings_built_here(source)] == [
        "line 2", "line 3", "line 4", "line 5"]  # fmt: skip


def test_no_finding_is_built_outside_the_registry():
    """A finding is born in exactly one registered rule (docs/design.md#data-flow): the runner
    in checks/__init__.py turns each rule's Problems into Findings; nothing else builds one,
    so the registry (and the field guide made from it) knows every finding id there is."""
    runner = REPO / "checks" / "__init__.py"
    sources = sorted((REPO / "nccldoctor").rglob("*.py")) + sorted((REPO / "checks").rglob("*.py"))
    assert len(sources) > 100 and runner in sources
    built = {
        path.relative_to(REPO).as_posix(): found
        for path in sources
        if path != runner and (found := _findings_built_here(path.read_text(encoding="utf-8")))
    }
    assert not built, built
    assert _findings_built_here(runner.read_text(encoding="utf-8"))  # the runner does build them


COMMAND = re.compile(r"\bnccldoctor ([a-z]+)\b([^`\n|]*)")


def _commands_in_docs() -> list[tuple[str, str, str]]:
    """(page, command, the rest of its line) for every `nccldoctor <command>` in the guide's code."""
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        code = [m[0] for m in FENCE.finditer(text)] + CODE_SPAN.findall(FENCE.sub("", text))
        for snippet in code:
            # shell comments and quoted strings talk about nccldoctor; they do not run it
            snippet = re.sub(r'"[^"\n]*"|(^|\s)#.*$', " ", snippet, flags=re.M)
            for match in COMMAND.finditer(snippet):
                found.append((page.relative_to(REPO).as_posix(), match[1], match[2]))
    return found


def test_commands_and_options_in_docs_are_real():
    import typer.main

    from nccldoctor.cli.app import app

    cli = typer.main.get_command(app)
    wrong = []
    for page, name, rest in _commands_in_docs():
        command = cli.commands.get(name)
        if command is None:
            wrong.append(f"{page}: nccldoctor {name} (no such command)")
            continue
        if hasattr(command, "commands"):  # a group (`report merge ...`), or its default command
            first = (rest.split() or [""])[0]
            command = command.commands.get(first) or command.commands[command.default_command]
        options = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
        for token in rest.split(" -- ")[0].split():
            option = token.split("=")[0]
            if option.startswith("-") and option != "--" and option not in options:
                wrong.append(f"{page}: nccldoctor {name} {option} (no such option)")
    assert len(_commands_in_docs()) > 30
    assert not wrong, "\n".join(sorted(set(wrong)))


LAYOUT_ROW = re.compile(r"^\| `((?:nccldoctor/)?[\w/]+)/` \|(.*)$", re.M)


def unlisted_packages(layout: str, packages: set[str]) -> list[str]:
    """The packages (folders of .py files) a README layout section does not name. A package is
    named by its own row (`nccldoctor/watch/`), or by its own name inside the row of the
    package above it (`inject/` in the watch row, `phases/` in the agent's); a package made of
    rooms (cluster/) by the rows of all its rooms."""
    rows = dict(LAYOUT_ROW.findall(layout))

    def named(p: str) -> bool:
        if p in rows:
            return True
        parent, _, name = p.rpartition("/")
        while parent and parent not in rows:
            parent, _, inner = parent.rpartition("/")
            name = f"{inner}/{name}"
        if parent and f"`{name}/`" in rows[parent]:
            return True
        rooms = [q for q in packages if q.startswith(f"{p}/") and q.count("/") == p.count("/") + 1]
        return bool(rooms) and all(named(q) for q in rooms)

    return sorted(p for p in packages if not named(p))


def test_the_layout_rule_catches_a_package_the_readme_does_not_name():
    layout = (
        "| `nccldoctor/watch/` | the watcher and `inject/`, the sitecustomize |\n"
        "| `nccldoctor/cluster/agent/` | the agent, one module per phase in `phases/` |\n"
    )
    tree = {"nccldoctor/watch", "nccldoctor/watch/inject", "nccldoctor/cluster",
            "nccldoctor/cluster/agent", "nccldoctor/cluster/agent/phases"}  # fmt: skip
    assert unlisted_packages(layout, tree) == []
    assert unlisted_packages(layout, tree | {"nccldoctor/watch/hooks"}) == [
        "nccldoctor/watch/hooks"
    ]
    # a room nobody names leaves its package of rooms unnamed too
    assert unlisted_packages(layout, tree | {"nccldoctor/cluster/lab"}) == [
        "nccldoctor/cluster", "nccldoctor/cluster/lab"]  # fmt: skip
    assert unlisted_packages(layout.replace("`phases/`", "phases"), tree) == [
        "nccldoctor/cluster/agent/phases"]  # fmt: skip


def test_the_readme_layout_lists_every_package_and_only_real_ones():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("## Layout") :]
    rows = dict(LAYOUT_ROW.findall(layout))
    assert {"checks", "templates", "nccldoctor/cluster/agent"} <= set(rows)
    assert not [p for p in rows if not (REPO / p).is_dir()], "listed but not in the tree"
    packages = {
        str(d.relative_to(REPO))
        for d in (REPO / "nccldoctor").rglob("*")
        if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py"))
    }
    unlisted = unlisted_packages(layout, packages)
    assert not unlisted, f"packages missing from the README's layout: {unlisted}"


def test_every_rules_summary_is_a_whole_sentence():
    # The summary is the first sentence however the docstring wraps it, never a cut line.
    assert summary("""A node outlived the master: its store stopped answering after
    rendezvous. The ranks here saw it go.""") == (
        "A node outlived the master: its store stopped answering after rendezvous."
    )
    rules = [c for c in all_checks() if c.func.__doc__]
    cut = [c.id for c in rules if not c.doc.endswith((".", ")", ":", "?"))]
    assert rules and cut == []
