"""The settings reference (docs/configs.md), made from the code.

Every key of `seedlike.config.base_config()` is listed with its default, its unit where it has
one, and the comment written beside it in the function that sets it (the section functions of
seedlike/config.py, the algorithms' `defaults` in seedlike/algos/__init__.py and the helpers they
call). A setting's comment is the one at the end of its line, else the comment lines right above
it, else it shares the comment of the setting it follows ("see ..."). The defaults are read from
`base_config()` itself; the source text is shown where it evaluates to that value (`1.0 / 255.0`).

    python -m seedlike.config_doc            # rewrite the tables of docs/configs.md
    python -m seedlike.config_doc --check    # exit 1 if the page differs from the code

tests/core/test_docs.py fails when the page lacks a key, shows a wrong default, or differs from
what this module writes.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import os
import re
import sys
import tokenize
from types import ModuleType

import ml_collections

from seedlike import config as config_module
from seedlike.algos import ALGORITHMS

PAGE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "configs.md"
)
BEGIN = (
    "<!-- The tables below are written by `python -m seedlike.config_doc`: edit the comments "
    "in the code, not here. -->"
)
END = "<!-- End of the generated tables. -->"

# The order a user meets the sections in; "" is the run's own settings (the top level). A
# section base_config() has beyond these (an algorithm registered later) comes after them.
ORDER = (
    "", "env", "network", "ppo", "vtrace", "rainbow", "r2d2", "optimizer", "log", "checkpoint",
    "actor", "server", "transport", "league", "teams", "curriculum", "population", "anneal",
    "distributed",
)  # fmt: skip
TITLES = {
    "": "Run settings",
    "ppo": "ppo",
    "vtrace": "vtrace",
    "rainbow": "rainbow",
    "r2d2": "r2d2",
}

# The algorithms' sections, whose functions have no docstring.
INTROS = {
    "ppo": 'PPO (`algo="ppo"`, the default; seedlike/algos/ppo.py): GAE advantages from the '
    "behaviour values, then `epochs` passes of `num_minibatches` minibatches over each learner "
    "batch.",
    "vtrace": 'V-trace (IMPALA; `algo="vtrace"`, seedlike/algos/vtrace.py): off-policy corrected '
    "targets along whole unrolls, each unroll used once unless `epochs` > 1.",
    "rainbow": 'Rainbow-style Q-learning from the learner\'s replay (`algo="rainbow"`, '
    "seedlike/algos/rainbow.py). The Q head's own settings are `network.atoms`, "
    "`network.dueling`, `network.noisy` and `network.value_range` ([Replay and "
    "Q-learning](replay.md)).",
    "r2d2": 'Recurrent Q-learning from stored sequences (`algo="r2d2"`, seedlike/algos/r2d2.py): '
    "the replay's settings as in rainbow, with burn-in and value rescaling "
    "([R2D2](replay.md#r2d2)).",
}

# Units, by "section.key" or by a key name in any section; keys ending in _s or _ms are seconds
# and milliseconds.
UNITS = {
    "total_env_steps": "env steps",
    "pause_at_env_steps": "env steps",
    "unroll_length": "steps",
    "batch_unrolls": "unrolls",
    "env.num_envs": "envs",
    "env.batch_envs": "envs",
    "env.num_threads": "threads",
    "env.teammates": "agents",
    "env.mission_tokens": "words",
    "network.hidden_sizes": "units",
    "network.core_size": "units",
    "network.text_size": "units",
    "network.entity_size": "units",
    "network.board_lines": "stones",
    "network.team_pool": "share of features",
    "server.max_batch_rows": "rows",
    "server.min_batch_rows": "rows",
    "server.batch_share": "share of rows",
    "server.queue_unrolls": "unrolls",
    "server.max_actors": "streams",
    "server.max_streams_per_peer": "streams",
    "server.max_pending_streams": "streams",
    "server.max_envs_per_actor": "envs",
    "server.max_policy_lag": "policy versions",
    "server.max_identity_share": "share of a batch",
    "server.front_ends": "processes",
    "league.snapshot_every": "updates",
    "league.max_snapshots": "snapshots",
    "league.recent_k": "snapshots",
    "league.eval_games": "games",
    "league.eval_opponents": "references",
    "league.reference_every": "policy versions",
    "league.reference_games": "games",
    "league.reference_opponents": "references",
    "league.max_references": "references",
    "league.exploit_min_games": "games",
    "league.reset_env_steps": "env steps",
    "teams.spirit_updates": "policy versions",
    "teams.reward_decay_horizon": "agent steps",
    "curriculum.window": "episodes",
    "curriculum.full_range_from": "share of total_env_steps",
    "population.size": "learners",
    "anneal.start_version": "policy versions",
    "anneal.versions": "policy versions",
    "log.episode_window": "episodes",
    "checkpoint.max_to_keep": "checkpoints",
    "distributed.num_processes": "processes",
    "epochs": "passes",
    "num_minibatches": "minibatches",
    "capacity": "env steps",
    "min_fill": "env steps",
    "replay_ratio": "sampled / inserted",
    "batch_transitions": "transitions",
    "batch_sequences": "sequences",
    "n_step": "steps",
    "target_period": "sgd steps",
    "burn_in": "steps",
    "overlap": "steps",
    "anneal_steps": "env steps",
    "epsilon_slots": "slots",
}


# The lines of settings that have no comment in the code ("section.key", or a key name in any
# section). A comment written there takes the place of these.
FALLBACK = {
    "gamma": "Discount of the returns learned from.",
    "vf_coef": "Weight of the value loss.",
    "ent_coef": "Weight of the entropy bonus.",
    "ppo.gae_lambda": "GAE's lambda: 0 bootstraps after one step, 1 sums the whole unroll.",
    "ppo.value_clip_eps": "With clip_value: how far the value may move from the behaviour value.",
    "epsilon": "Exploration rate of slot 0; slot i acts epsilon-greedily with epsilon ** (1 + "
    "epsilon_alpha * i / (epsilon_slots - 1)) (Ape-X; seedlike/server/exploration.py).",
    "epsilon_alpha": "How fast the rates fall from slot to slot (the exponent of `epsilon`).",
    "epsilon_slots": "Exploration slots: an actor identity takes the lowest free one when it "
    "connects.",
    "anneal_steps": "Env steps over which every rate falls linearly from 1 to its own; 0: none.",
    "r2d2.double_q": "The online network chooses the bootstrap action, the target values it.",
    "optimizer.learning_rate": "Adam's learning rate (annealed linearly to 0 with anneal_lr).",
    "optimizer.adam_eps": "Adam's epsilon.",
    "log.wandb_project": "W&B project of the run.",
    "checkpoint.max_to_keep": "Checkpoints kept; older ones are deleted.",
    "server.max_abs_obs": "Largest |float observation| accepted; see `server.max_abs_reward`.",
    "server.max_envs_per_actor": "Most envs one actor may declare in its Hello.",
    "transport.credentials": 'The credentials directory (above); "": plaintext, loopback only.',
    "curriculum.lower": "T_l: a success rate below it lowers the bound by one level.",
    "curriculum.upper": "T_u: a success rate above it raises the bound by one level.",
    "curriculum.window": "Episodes that end after the bound moved before it is judged again.",
    "population.size": "Independent learners in one world (scripts/train.sh --population=N).",
    "anneal.start_version": "The policy version the ramp starts at.",
    "anneal.new_actions": "Legal-mask columns of the actions brought in.",
    "anneal.new_obs_features": 'Indices into "obs" of the features brought in.',
    "distributed.num_processes": "Learner processes forming the one learner.",
    "distributed.process_id": "This process's index (0: the coordinator, which writes "
    "checkpoints and metrics).",
}


@dataclasses.dataclass(frozen=True)
class Setting:
    key: str  # dotted, as --config.<key>
    default: str  # source text or repr: evaluates to the default
    unit: str
    doc: str


@dataclasses.dataclass(frozen=True)
class Section:
    name: str  # "" for the run's own settings
    title: str
    intro: str  # its function's docstring
    settings: tuple[Setting, ...]


@dataclasses.dataclass(frozen=True)
class _Assignment:
    key: str
    value: ast.expr
    source: str
    doc: str


@functools.cache
def _parsed(module: ModuleType):
    source = inspect.getsource(module)
    tree = ast.parse(source)
    comments, code_lines = {}, set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code_lines.add(tok.start[0])
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    return source, comments, code_lines, functions


def _is_setting(stmt) -> str | None:
    """The key of `c.<key> = ...`, else None."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            if target.value.id == "c":
                return target.attr
    return None


def _assignments(module: ModuleType, name: str, section: str) -> dict[str, _Assignment]:
    """Every `c.<key> = ...` of function `name` and of the module's functions it calls (theirs
    first, so its own override them), with each one's comment."""
    source, comments, code_lines, functions = _parsed(module)
    func = functions[name]
    out: dict[str, _Assignment] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in functions and node.func.id != name:
                for key, a in _assignments(module, node.func.id, section).items():
                    out[key] = a
    blocks: list[tuple[str, str]] = []  # (key, its comments), in order
    for stmt in func.body:
        key = _is_setting(stmt)
        if key is None:
            continue
        trailing = [
            comments[line]
            for line in range(stmt.lineno, stmt.end_lineno + 1)
            if line in comments and line in code_lines
        ]
        above, line = [], stmt.lineno - 1
        while line in comments and line not in code_lines:
            above.insert(0, comments[line])
            line -= 1
        parts = [" ".join(above)] if above else []
        parts += trailing
        if not above:
            # A setting an earlier one's comment names (in backticks, or where it has no comment
            # of its own) shares that comment.
            plain = re.compile(rf"(?<![\w.`]){re.escape(key)}(?![\w`])")
            quoted = f"`{key}`"
            for head, block in reversed(blocks):
                if quoted in block or (not trailing and plain.search(block)):
                    if parts and not parts[-1].endswith("."):
                        parts[-1] += "."
                    parts.append(f"See `{section + '.' if section else ''}{head}`.")
                    break
        if above or trailing:
            blocks.append((key, " ".join(above + trailing)))
        inherited = out.get(key)
        doc = " ".join(p for p in parts if p)
        if inherited is not None and inherited.doc and inherited.doc not in doc:
            doc = f"{doc.rstrip('.')}. {inherited.doc}" if doc else inherited.doc
        segment = ast.get_source_segment(source, stmt.value) or ""
        out[key] = _Assignment(key, stmt.value, " ".join(segment.split()), doc)
    return out


def _builders() -> dict[str, tuple[ModuleType, str]]:
    """Section name -> (module, function) that builds it, read from base_config's body (the
    algorithms' sections from their records)."""
    _, _, _, functions = _parsed(config_module)
    out = {}
    for stmt in ast.walk(functions["base_config"]):
        if not (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)):
            continue
        call = stmt.value.func
        if not isinstance(call, ast.Name) or call.id not in functions:
            continue
        target = stmt.targets[0]
        if isinstance(target, ast.Name):
            out[""] = (config_module, call.id)
        elif isinstance(target, ast.Attribute):
            out[target.attr] = (config_module, call.id)
    for name, algorithm in ALGORITHMS.items():
        defaults = algorithm.defaults
        out[name] = (sys.modules[defaults.__module__], defaults.__name__)
    return out


def _evaluate(node: ast.expr):
    """The value of a literal expression (numbers, strings, tuples, arithmetic on them)."""
    allowed = (
        ast.Expression, ast.Constant, ast.Tuple, ast.List, ast.UnaryOp, ast.USub, ast.UAdd,
        ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Load,
    )  # fmt: skip
    if not all(isinstance(n, allowed) for n in ast.walk(node)):
        raise ValueError("not a literal")
    return eval(compile(ast.Expression(node), "<default>", "eval"), {"__builtins__": {}})  # noqa: S307


def _plain(value):
    if isinstance(value, ml_collections.ConfigDict):
        return value.to_dict()
    return value


def _default_text(value, node: ast.expr | None, source: str) -> str:
    value = _plain(value)
    if node is not None:
        try:
            if _evaluate(node) == value and type(_evaluate(node)) is type(value):
                return source
        except (ValueError, SyntaxError, TypeError):
            pass
    return repr(value)


def _unit(section: str, key: str) -> str:
    dotted = f"{section}.{key}" if section else key
    if dotted in UNITS:
        return UNITS[dotted]
    if key in UNITS and section:
        return UNITS[key]
    if key.endswith("_ms"):
        return "ms"
    if key.endswith("_s"):
        return "seconds"
    return ""


def sections() -> list[Section]:
    """Every section of base_config() in ORDER, each setting with its default and comment."""
    base = config_module.base_config()
    builders = _builders()
    names = [""] + [k for k, v in base.items() if isinstance(v, ml_collections.ConfigDict)]
    ordered = [n for n in ORDER if n in names] + [n for n in names if n not in ORDER]
    out = []
    for name in ordered:
        if name not in builders:
            raise KeyError(f"no function builds section {name!r} of base_config()")
        module, function = builders[name]
        found = _assignments(module, function, name)
        node = base if name == "" else base[name]
        rows = []
        keys = [k for k in found if k in node] + [k for k in node if k not in found]
        for key in keys:
            value = node[key]
            if name == "" and isinstance(value, ml_collections.ConfigDict):
                continue  # a section
            a = found.get(key)
            dotted = f"{name}.{key}" if name else key
            rows.append(
                Setting(
                    key=dotted,
                    default=_default_text(value, a.value if a else None, a.source if a else ""),
                    unit=_unit(name, key),
                    doc=(a.doc if a else "") or _fallback(name, key),
                )
            )
        intro = INTROS.get(name) or inspect.getdoc(getattr(module, function)) or ""
        out.append(Section(name, TITLES.get(name, name), " ".join(intro.split()), tuple(rows)))
    _check_fallbacks(out)
    return out


def _fallback(section: str, key: str) -> str:
    dotted = f"{section}.{key}" if section else key
    return FALLBACK.get(dotted) or (FALLBACK.get(key, "") if section else "")


def _check_fallbacks(found: list[Section]) -> None:
    """Every FALLBACK entry names a setting (a renamed one is an error, not a silent line)."""
    keys = {r.key for s in found for r in s.settings}
    leaves = {k.rpartition(".")[2] for k in keys}
    stale = sorted(k for k in FALLBACK if k not in keys and ("." in k or k not in leaves))
    if stale:
        raise KeyError(f"config_doc.FALLBACK names settings that do not exist: {stale}")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;")


def markdown() -> str:
    """The generated part of docs/configs.md, from BEGIN to END."""
    lines = [BEGIN, ""]
    for s in sections():
        lines.append(f"## {s.title}")
        lines.append("")
        if s.intro:
            lines += [_cell(s.intro), ""]
        lines.append("| key | default | unit | meaning |")
        lines.append("| --- | --- | --- | --- |")
        for row in s.settings:
            lines.append(
                f"| `{row.key}` | `{_cell(row.default)}` | {row.unit} | {_cell(row.doc)} |"
            )
        lines.append("")
    lines.append(END)
    return "\n".join(lines) + "\n"


def page_with_tables(text: str) -> str:
    """`text` (the page) with its generated part replaced by `markdown()`."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{PAGE} lacks the markers of its generated part")
    return text[:start] + markdown() + text[end + len(END) + 1 :]


def main(argv: list[str]) -> int:
    with open(PAGE) as f:
        text = f.read()
    new = page_with_tables(text)
    if "--check" in argv:
        if new != text:
            print(f"{PAGE} differs from the code: run python -m seedlike.config_doc")
            return 1
        return 0
    if new != text:
        with open(PAGE, "w") as f:
            f.write(new)
        print(f"rewrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
