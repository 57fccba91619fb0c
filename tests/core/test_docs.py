"""The README and the documentation site (docs/, mkdocs.yml): the site builds with every internal
link checked, every relative link of the README, the pages and benchmarks/RESULTS.md leads to a
file and heading that exist, every result file RESULTS.md cites is in the checkout, and the
reference pages say what the code does: docs/configs.md lists every setting of base_config() with
its default (and is what `python -m seedlike.config_doc` writes)."""

import ast
import glob
import os
import re
import subprocess
import sys

import ml_collections

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
