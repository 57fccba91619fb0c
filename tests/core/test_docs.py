"""The README and the documentation site (docs/, mkdocs.yml): the site builds with every internal
link checked, every relative link of the README, the pages and benchmarks/RESULTS.md leads to a
file and heading that exist, every result file RESULTS.md cites is in the checkout, and the
reference pages say what the code does: docs/configs.md lists every setting of base_config() with
its default (and is what `python -m seedlike.config_doc` writes), docs/metrics.md every key a
metrics row can hold and no other."""

import ast
import glob
import os
import re
import subprocess
import sys

import ml_collections
import pytest

from seedlike import config, config_doc
from tests.procs import ROOT

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub and mkdocs make it: lowercase, punctuation dropped, spaces
    as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def headings(path: str) -> set[str]:
    found, fence = set(), False
    with open(path) as f:
        for line in f:
            if line.startswith("```"):
                fence = not fence
            elif not fence and line.startswith("#"):
                found.add(slug(line.lstrip("#")))
    return found


def broken_links(path: str) -> list[str]:
    """The relative links of a Markdown file whose file or heading does not exist."""
    out, fence = [], False
    with open(path) as f:
        text = []
        for line in f:
            if line.startswith("```"):
                fence = not fence
            elif not fence:
                text.append(line)
    for target in LINK.findall("".join(text)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        if not os.path.exists(full):
            out.append(f"{target}: no file {full}")
        elif anchor and full.endswith(".md") and anchor not in headings(full):
            out.append(f"{target}: no heading #{anchor} in {full}")
    return out


def test_every_relative_link_leads_somewhere(tmp_path):
    docs = os.path.join(ROOT, "docs")
    pages = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "benchmarks", "RESULTS.md")]
    pages += [os.path.join(docs, p) for p in sorted(os.listdir(docs)) if p.endswith(".md")]
    assert len(pages) > 5
    assert [b for page in pages for b in broken_links(page)] == []
    # The checker itself finds what is broken.
    page = tmp_path / "page.md"
    page.write_text("# Top\n\n[a](page.md#top) [b](nothing.md) [c](#missing) [d](https://x.y)\n")
    assert broken_links(str(page)) == [
        f"nothing.md: no file {tmp_path / 'nothing.md'}",
        "#missing: no heading #missing in " + str(page),
    ]


def test_the_docs_site_builds_with_its_links_checked(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    built = {p for p in os.listdir(tmp_path / "site") if os.path.isdir(tmp_path / "site" / p)}
    pages = {p[: -len(".md")] for p in os.listdir(os.path.join(ROOT, "docs")) if p.endswith(".md")}
    assert len(pages) > 15 and pages - {"index"} <= built


def test_the_readme_starts_with_what_seedlike_is_and_the_two_commands():
    with open(os.path.join(ROOT, "README.md")) as f:
        first_screen = "".join(f.readlines()[:30])
    assert "trains agents that play games" in first_screen
    assert "scripts/train.sh" in first_screen and "scripts/test.sh" in first_screen


def test_the_readme_is_short_and_leads_to_every_page():
    """The README is the first screen and a map; the details live in docs/."""
    with open(os.path.join(ROOT, "README.md")) as f:
        lines = f.readlines()
    assert len(lines) <= 350, f"README.md has {len(lines)} lines: move details into docs/"
    text = "".join(lines)
    assert ".venv/bin/mkdocs serve" in text
    pages = {p for p in os.listdir(os.path.join(ROOT, "docs")) if p.endswith(".md")}
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)", text))
    assert sorted(pages - linked) == [], "docs pages the README does not link"


def test_the_home_page_starts_with_install_and_a_first_run():
    """docs/index.md, where the site starts: what seedlike is, how to install it, the two
    commands, how the site is served; then a link to every page."""
    with open(os.path.join(ROOT, "docs", "index.md")) as f:
        text = f.read()
    top, *_ = text.split("\n## ")
    assert top.startswith("# seedlike\n") and "trains agents that play games" in top
    assert re.findall(r"^## (.+)$", text, re.M)[:2] == ["Install", "First run"]
    first_run = text.split("\n## First run\n")[1].split("\n## ")[0]
    commands = first_run.split("```bash\n")[1].split("```")[0].splitlines()
    assert commands[0].startswith("scripts/train.sh ")
    assert commands[1].startswith("scripts/test.sh ")
    assert ".venv/bin/mkdocs serve" in text
    pages = {p for p in os.listdir(os.path.join(ROOT, "docs")) if p.endswith(".md")}
    linked = set(re.findall(r"\]\(([\w-]+\.md)", text))
    assert sorted(pages - linked - {"index.md"}) == [], "pages the home page does not link"


def test_the_result_files_results_md_names_are_in_the_repository():
    """benchmarks/results/ is ignored by git (benchmarks write there), so a result that RESULTS.md
    cites is kept only when added on purpose; on a clean clone a forgotten one is missing here."""
    with open(os.path.join(ROOT, "benchmarks", "RESULTS.md")) as f:
        text = f.read()
    # Files, patterns (name.*) and folders named as results; not a command's output (--out=).
    named = re.findall(r"(?<![=/\w])(?:benchmarks/)?(results/[\w./*-]+)", text)
    named = [p.rstrip(".") for p in named if not p.endswith("results/")]
    assert len(named) > 10
    missing = sorted(
        {p for p in named if not glob.glob(os.path.join(ROOT, "benchmarks", p.rstrip("/")))}
    )
    assert not missing, f"RESULTS.md cites files that are not in the checkout: {missing}"


def _value(text: str):
    """The value a default written in a page stands for: a literal, or arithmetic on literals."""
    tree = ast.parse(text, mode="eval")
    allowed = (
        ast.Expression, ast.Constant, ast.Tuple, ast.List, ast.Dict, ast.UnaryOp, ast.USub,
        ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Load,
    )  # fmt: skip
    assert all(isinstance(n, allowed) for n in ast.walk(tree)), f"not a literal: {text}"
    return eval(compile(tree, "<default>", "eval"), {"__builtins__": {}})  # noqa: S307


def _settings(tree, prefix: str = "") -> dict:
    """Every setting of a config as "section.key" -> value (an empty section, env.kwargs, is one
    setting whose default is {})."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, ml_collections.ConfigDict) and len(value):
            out.update(_settings(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value.to_dict() if hasattr(value, "to_dict") else value
    return out


def _setting_rows(path: str) -> dict[str, str]:
    """The page's table rows as key -> default text (the first two cells, unquoted)."""
    rows = {}
    row = re.compile(r"^\| `([^`]+)` \| `((?:[^`\\]|\\.)*)` \|")
    with open(path) as f:
        for line in f:
            m = row.match(line)
            if m:
                assert m.group(1) not in rows, f"{m.group(1)} listed twice"
                rows[m.group(1)] = m.group(2).replace("\\|", "|").replace("&lt;", "<")
    return rows


def test_the_settings_page_lists_every_setting_with_its_default():
    """docs/configs.md has a row for every key of base_config(), and no other, and the default
    each row shows is the one the code sets."""
    defaults = _settings(config.base_config())
    assert len(defaults) > 200 and "env.kwargs" in defaults and "r2d2.batch_sequences" in defaults
    rows = _setting_rows(os.path.join(ROOT, "docs", "configs.md"))
    assert sorted(set(defaults) - set(rows)) == [], "settings the page lacks"
    assert sorted(set(rows) - set(defaults)) == [], "rows for settings that do not exist"
    wrong = {k: (rows[k], defaults[k]) for k in defaults if _value(rows[k]) != defaults[k]}
    assert wrong == {}, "defaults the page shows wrongly: {key: (page, code)}"
    # The check itself finds a missing key and a wrong default.
    assert _value("2.0 / 3.0") == 2.0 / 3.0 and _value("1_000_000") == 10**6
    assert _value("(-10.0, 10.0)") == (-10.0, 10.0) and _value("None") is None


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_the_settings_page_is_what_the_code_writes():
    """The tables are generated from the comments beside each default; after a change there,
    `python -m seedlike.config_doc` rewrites them. Every setting has a line of meaning."""
    path = os.path.join(ROOT, "docs", "configs.md")
    with open(path) as f:
        text = f.read()
    assert config_doc.page_with_tables(text) == text, "run: python -m seedlike.config_doc"
    sections = config_doc.sections()
    assert [s.name for s in sections][: len(config_doc.ORDER)] == list(config_doc.ORDER)
    assert [r.key for s in sections for r in s.settings if not r.doc] == []
    # Sections appear as headings of the page, in the order a user meets them.
    found = headings(path)
    assert {"run-settings", "env", "network", "ppo", "r2d2", "distributed"} <= found
    # The link configs.md has always had into the learner contract still leads there.
    assert "internals.md#the-learner-contract" in text


# Where metrics rows get their keys. metrics_row (seedlike/learner.py) builds each row from literal
# keys and from the parts below; a row.update() it makes from anything else fails the test, so a
# new source of keys cannot go unread.
ROW_WRITERS = {
    "seedlike/learner.py": (
        "metrics_row",
        "_process_metrics",
        "_part_metrics",
        "LearnerProcess.log",
    ),
    "seedlike/learning/replay_update.py": ("ReplayLearner._counters",),
    "seedlike/server/curriculum.py": ("Curriculum.take_metrics",),
    "seedlike/league/league.py": ("League.take_metrics",),
    "seedlike/league/evaluation.py": ("Evaluation.evaluate", "EvaluationThread.run"),
    "seedlike/league/ratings.py": ("TrueSkillEvaluator.metrics",),
    "seedlike/ondevice/run.py": ("row_of",),
}
# Files whose `self.metric_keys = (...)` name the learner's keys (besides the algorithms' records).
METRIC_KEYS_FILES = ("seedlike/learning/update.py", "seedlike/learning/replay_update.py")
# What metrics_row's row.update({k: ... for k in X}) may read: the learner's keys, one update's
# keys (the same), the renamed keys' old names.
KEY_ITERABLES = ("p.learner.metric_keys", "keys", "METRIC_ALIASES.items()")
# The methods whose dicts metrics_row merges as they are (row.update(x.method())).
MERGED_METHODS = ("take_metrics", "metrics")
# The functions of seedlike/learner.py that build parts of a row (ROW_WRITERS reads them too).
ROW_PARTS = ("_process_metrics", "_part_metrics")


def _parse(path: str) -> ast.Module:
    with open(os.path.join(ROOT, path)) as f:
        return ast.parse(f.read())


def _function(tree: ast.Module, qualname: str):
    node = tree
    for part in qualname.split("."):
        node = next(
            n
            for n in node.body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part
        )
    return node


def _key(node) -> str | None:
    """A literal key ("loss/total"), or a family with its f-string's fields as <> ("busy/<>")."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "<>" for v in node.values)
    return None


def _row_keys(func) -> set[str]:
    """The keys a function writes into the dicts it returns or fills by key: literal dicts
    assigned to, merged into or returned as such a variable, its subscripts, dict
    comprehensions with f-string keys."""
    names = {n.value.id for n in ast.walk(func) if isinstance(n, ast.Return)
             and isinstance(n.value, ast.Name)}  # fmt: skip
    names |= {
        t.value.id
        for n in ast.walk(func)
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and _key(t.slice)
    }
    dicts = []
    for n in ast.walk(func):
        if isinstance(n, ast.Return) and isinstance(n.value, (ast.Dict, ast.DictComp)):
            dicts.append(n.value)
        elif isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict):
            if any(isinstance(t, ast.Name) and t.id in names for t in n.targets):
                dicts.append(n.value)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            target = n.func.value
            if n.func.attr == "update" and isinstance(target, ast.Name) and target.id in names:
                dicts += [a for a in n.args if isinstance(a, (ast.Dict, ast.DictComp))]
    keys = set()
    for d in dicts:
        keys |= {_key(k) for k in (d.keys if isinstance(d, ast.Dict) else [d.key])} - {None}
    for n in ast.walk(func):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                    if t.value.id in names and _key(t.slice):
                        keys.add(_key(t.slice))
    return keys


def _unread_row_sources(func) -> list[str]:
    """What metrics_row merges into its row that the collector does not read."""
    out = []
    for n in ast.walk(func):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            if n.func.attr == "update" and ast.unparse(n.func.value) == "row":
                (arg,) = n.args
                if isinstance(arg, ast.Dict):
                    continue
                if isinstance(arg, ast.DictComp):
                    if _key(arg.key) or ast.unparse(arg.generators[0].iter) in KEY_ITERABLES:
                        continue
                if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute):
                    if arg.func.attr in MERGED_METHODS and not arg.args:
                        continue
                if isinstance(arg, ast.Call) and getattr(arg.func, "id", None) in ROW_PARTS:
                    continue
                out.append(ast.unparse(arg))
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Subscript) and ast.unparse(t.value) == "row":
                    if not _key(t.slice):
                        out.append(ast.unparse(t))
    return out


def _module_value(path: str, name: str):
    tree = _parse(path)
    for n in tree.body:
        if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == name for t in n.targets):
            return ast.literal_eval(n.value)
    raise KeyError(f"{path} has no {name}")


def emitted_metric_keys() -> set[str]:
    """Every key a metrics row can hold, read from the code that writes rows; families as
    "busy/<>"."""
    from seedlike.algos import ALGORITHMS

    keys = set()
    for path, functions in ROW_WRITERS.items():
        tree = _parse(path)
        for name in functions:
            found = _row_keys(_function(tree, name))
            assert found, f"{path}: {name} writes no key this test can read"
            keys |= found
    for path in METRIC_KEYS_FILES:
        assigned = [
            n.value
            for n in ast.walk(_parse(path))
            if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Attribute) and t.attr == "metric_keys" for t in n.targets)
        ]
        assert assigned, f"{path} sets no metric_keys"
        keys |= {_key(e) for v in assigned for e in v.elts} - {None}
    keys |= set(_module_value("seedlike/learner.py", "METRIC_ALIASES"))
    keys |= set(_module_value("seedlike/learning/train_state.py", "INFLUENCE_METRICS"))
    for algorithm in ALGORITHMS.values():
        keys |= set(algorithm.metrics)
    return keys


def documented_metric_keys(path: str) -> dict[str, str]:
    """The keys in the first cells of the page's tables ("busy/<stage>" as "busy/<>") -> the
    row's meaning."""
    out = {}
    with open(path) as f:
        for line in f:
            if not line.startswith("| `"):
                continue
            first, meaning = line[2:].split(" | ", 1)
            for key in re.findall(r"`([^`]+)`", first):
                out[re.sub(r"<[^>]*>", "<>", key)] = meaning
    return out


def test_the_metrics_page_lists_every_key_a_row_can_hold_and_no_other():
    learner = _parse("seedlike/learner.py")
    for name in ("metrics_row", *ROW_PARTS):
        unread = _unread_row_sources(_function(learner, name))
        assert unread == [], f"{name} merges keys this test cannot read"
    emitted = emitted_metric_keys()
    assert {"loss/state_age", "busy/<>", "replay/size", "eval/seconds", "episodes_total"} <= emitted
    documented = documented_metric_keys(os.path.join(ROOT, "docs", "metrics.md"))
    assert sorted(emitted - set(documented)) == [], "keys rows hold that docs/metrics.md lacks"
    assert sorted(set(documented) - emitted) == [], "keys docs/metrics.md lists that no row holds"
    # A family's row names each of its members where the code names them.
    stages = [*_module_value("seedlike/server/inference.py", "STAGES")]
    process = _function(learner, "_process_metrics")
    busy = next(n.value for n in ast.walk(process) if isinstance(n, ast.Assign)
                and getattr(n.targets[0], "id", None) == "busy")  # fmt: skip
    stages += [k.value for k in busy.keys if k is not None]
    segments = _module_value("seedlike/server/inference.py", "SEGMENTS")
    for family, members in (("busy/<>", stages), ("latency_ms/<>", segments)):
        assert [m for m in members if f"`{m}`" not in documented[family]] == [], family
    # The reader itself sees a merge it does not know.
    probe = ast.parse("def f(row, p):\n    row.update(p.other())\n    row[p.key] = 1\n").body[0]
    assert sorted(_unread_row_sources(probe)) == ["p.other()", "row[p.key]"]
