"""What the entrypoints check of their command lines before absl parses them, so that a mistyped
flag is answered with the flag to write, in one line: a config setting written without
`config.`, a near-miss of the entrypoint's own flags (absl's `--log_dir` for `--logdir`), a
--config.x.y=v of a key the config lacks or a value of the wrong type, a renamed setting.
"""

from __future__ import annotations

import ast
import difflib
import os
import sys

import ml_collections

from seedlike.config import base_config, load_config_file, renamed

# Flags absl defines for every program (logging, help): taken as they are, except where their
# name is a near-miss of the entrypoint's own (check_flag_names).
ABSL_FLAGS = (
    "helpfull",
    "helpshort",
    "helpxml",
    "help",
    "flagfile",
    "undefok",
    "v",
    "verbosity",
    "alsologtostderr",
    "logtostderr",
    "log_dir",
    "stderrthreshold",
    "showprefixforinfo",
    "only_check_args",
    "pdb_post_mortem",
    "pdb",
    "run_with_pdb",
    "run_with_profiling",
    "profile_file",
    "use_cprofile_for_profiling",
    "logger_levels",
    "log_prefix",
)


def check_flag_names(argv: list[str], own: list[str], defined: list[str]) -> None:
    """Exits with one line where a flag of `argv` is not the one the user meant: `own` are the
    entrypoint's flags, `defined` every flag absl knows (its own too).

    * --total_env_steps=20000, a config setting: "write --config.total_env_steps=20000";
    * --num_actor, --log_dir: near-misses of an own flag ("did you mean --num_actors?"), also
      where absl defines the name for itself (its logging folder is not the run's).
    """
    config = base_config()
    for arg in argv[1:]:
        if not arg.startswith("--") or arg.startswith("--config") or arg == "--":
            continue
        name, eq, value = arg[2:].partition("=")
        name = name.removeprefix("no") if name.removeprefix("no") in own else name
        if name in own:
            continue
        settings = config_settings(config, name)
        if settings and name not in defined:
            write = f"{eq}{value if eq else '=VALUE'}"
            fix = " or ".join(f"--config.{key}{write}" for key in settings)
            sys.exit(f"error: --{name} is a config setting: write {fix}")
        near = difflib.get_close_matches(name, own, 1, 0.75)
        if near and (name not in defined or name in ABSL_FLAGS):
            whose = (
                "absl's own flag (its log files' folder), not this command's; "
                if (name in defined)
                else ""
            )
            sys.exit(f"error: unknown flag --{name}: {whose}did you mean --{near[0]}?")


def check_flags(argv: list[str] | None = None) -> None:
    """check_flag_names for the entrypoint being run: its own flags are those its module (the
    script, argv[0]) defines. Call it after the flags are defined, before app.run parses."""
    from absl import flags

    argv = sys.argv if argv is None else argv
    own = [f.name for f in flags.FLAGS.get_key_flags_for_module(argv[0])]
    check_flag_names(argv, own, [*flags.FLAGS, *ABSL_FLAGS])


def config_settings(config: ml_collections.ConfigDict, name: str) -> list[str]:
    """The dotted keys of the config settings `name` can mean: itself (a top-level key or a
    dotted path), else every section's key of that name ([] for none)."""
    node = config
    for part in name.split("."):
        if not isinstance(node, ml_collections.ConfigDict) or part not in node:
            break
        node = node[part]
    else:
        return [name]
    return [
        f"{section}.{name}"
        for section, value in config.items()
        if isinstance(value, ml_collections.ConfigDict) and name in value
    ]


def check_override_flags(argv: list[str], default_config: str) -> list[str]:
    """Exits with a readable message if the --config file cannot be loaded or a --config.a.b=v
    flag names a key the config lacks. (ml_collections would otherwise fail deep inside flag
    parsing with a long traceback or a bare KeyError.)

    Environment arguments are the exception: ml_collections cannot add keys, so each
    --config.env.kwargs.NAME=VALUE flag of a NAME the config does not declare is removed from
    `argv` and returned; `add_env_kwargs` puts them into the parsed config. A flag of a renamed
    setting (RENAMED_KEYS) is rewritten in `argv` to the new name, with a warning.
    """
    path = default_config
    for arg in argv[1:]:
        if arg.startswith("--config="):
            path = arg.split("=", 1)[1]
    file = path.partition(":")[0]
    if not os.path.isfile(file):
        sys.exit(f"error: --config={path}: no such file (the shipped configs are in configs/)")
    try:
        config = load_config_file(path)
    except Exception as e:  # noqa: BLE001 (a config file is code: any error, in one line)
        raise SystemExit(
            f"error: cannot load config file {path!r}: {type(e).__name__}: {e}"
        ) from None
    kwargs = []
    for i, arg in enumerate(list(argv)):
        key = arg[len("--config.") :].split("=", 1)[0] if arg.startswith("--config.") else ""
        if i and renamed(key) != key:
            print(
                f"warning: --config.{key} is now --config.{renamed(key)} (the old name goes in the "
                "next release)",
                file=sys.stderr,
            )
            argv[i] = arg = arg.replace(key, renamed(key), 1)
    for arg in list(argv[1:]):
        if not arg.startswith("--config."):
            continue
        key = arg[len("--config.") :].split("=", 1)[0]
        if key.startswith(ENV_KWARGS) and "." not in key[len(ENV_KWARGS) :]:
            if key[len(ENV_KWARGS) :] not in config.env.kwargs:
                argv.remove(arg)
                kwargs.append(arg)
            continue
        node = config
        for i, part in enumerate(key.split(".")):
            if not isinstance(node, ml_collections.ConfigDict) or part not in node:
                where = ".".join(key.split(".")[:i]) or "the top level"
                known = sorted(node.keys()) if isinstance(node, ml_collections.ConfigDict) else []
                sys.exit(
                    f"error: unknown config key {key!r} in --config.{key}: {path} has no "
                    f"{part!r} at {where}; known keys there: {', '.join(known) or '(none)'}"
                )
            node = node[part]
        if "=" in arg:
            problem = _value_problem(node, arg.split("=", 1)[1])
            if problem:
                sys.exit(f"error: {arg}: {problem} ({path} has {key}={node!r})")
    return kwargs


_BOOLS = ("true", "false", "t", "f", "1", "0")  # what absl's boolean flags accept


def _value_problem(default, text: str) -> str:
    """Why `text` cannot set a config field whose value is `default` (ml_collections parses it
    by the field's type and would fail deep in absl with a traceback-like line), or ""."""
    if isinstance(default, bool):
        return "" if text.lower() in _BOOLS else "not a boolean: write true or false"
    if isinstance(default, int | float):
        kind = int if isinstance(default, int) else float
        try:
            kind(text)
            return ""
        except ValueError:
            pass
        try:  # 1e6 for an int: say what to write
            number = float(text)
        except ValueError:
            return f"not a number: the setting is {'a whole number' if kind is int else 'a float'}"
        return f"not a whole number{f': write {int(number)}' if number.is_integer() else ''}"
    if isinstance(default, tuple) and default:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        kinds = {type(x) for x in default}
        items = value if isinstance(value, tuple | list) else (value,)
        if all(type(x) in kinds or (float in kinds and type(x) is int) for x in items):
            return ""
        return f"not a tuple like {default!r}: write e.g. {','.join(map(repr, default))}"
    return ""


ENV_KWARGS = "env.kwargs."


def add_env_kwargs(config: ml_collections.ConfigDict, flags: list[str]) -> None:
    """Adds --config.env.kwargs.NAME=VALUE flags (from `check_override_flags`) to config.env.kwargs;
    VALUE is read as a Python literal (50, 0.5, True, "text"), or taken as text."""
    for flag in flags:
        key, _, text = flag[len("--config.") :].partition("=")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        with config.unlocked():
            config.env.kwargs[key[len(ENV_KWARGS) :]] = value


def finished_line(logdir: str, config) -> str:
    """One line saying that the run in `logdir` is done already with this config's budget (its
    summary.json: finished at total_env_steps or at its return target, or paused at
    pause_at_env_steps), where its results are and how to go on; "" where it has more to do."""
    from seedlike.metrics import read_summary

    summary = read_summary(logdir)
    if summary is None or summary.get("outcome") not in ("finished", "paused"):
        return ""
    steps, total = int(summary["env_steps"]), int(config.total_env_steps)
    pause = int(config.pause_at_env_steps)
    if pause and pause < total:
        if steps < pause:
            return ""
        how = "rerun with a larger --config.pause_at_env_steps (or 0) to go on"
    elif steps >= total or (
        summary["outcome"] == "finished" and total == summary["total_env_steps"]
    ):
        how = (
            f"extend it with a larger --config.total_env_steps (it had {total:,}), or start "
            "afresh with another --logdir"
        )
    else:
        return ""
    final = summary.get("final_return")
    score = f", final return {final:.2f}" if final is not None else ""
    return (
        f"{logdir} is {summary['outcome']} at {steps:,} env steps{score}: results in "
        f"{os.path.join(logdir, 'summary.md')} and metrics.jsonl; {how}"
    )


def main(argv: list[str]) -> None:
    """For the shell scripts (scripts/train.sh), before they start anything; exit status 2 with
    one line where the command line is off, 3 where the run is done already:

      python -m seedlike.cli flags --own=A,B,... -- ARGS   check_flag_names, own flags A, B, ...
      python -m seedlike.cli finished --logdir=D --config=F -- --config.K=V ...   finished_line
      python -m seedlike.cli runtime --config=F -- --config.K=V ...   prints "device" where the
          env runs inside the learner's program (no actors to start), else "actors"
    """
    options = dict(a[2:].split("=", 1) for a in argv[2 : argv.index("--")] if "=" in a)
    args = argv[argv.index("--") + 1 :]
    if argv[1] == "flags":
        try:
            check_flag_names(["script", *args], options.get("own", "").split(","), ABSL_FLAGS)
        except SystemExit as e:
            print(e.code, file=sys.stderr)
            sys.exit(2)
        return
    config = load_config_file(options["config"])
    if argv[1] == "runtime":
        from seedlike.envs import BACKENDS

        backend = config.env.backend
        for arg in args:  # an unknown backend is the learner's to report
            backend = arg.partition("=")[2] if arg.startswith("--config.env.backend=") else backend
        found = BACKENDS.get(backend)
        print("device" if found is not None and found.on_device else "actors")
        return
    for arg in args:  # the two settings the budget depends on; the learner checks the rest
        key, _, value = arg[len("--config.") :].partition("=")
        if key in ("total_env_steps", "pause_at_env_steps") and value.isdigit():
            config[key] = int(value)
    line = finished_line(options["logdir"], config)
    if line:
        print(line)
        sys.exit(3)


if __name__ == "__main__":
    main(sys.argv)
