"""Data flows one way: a row goes rpc -> server (batcher, policy, store) -> learner, and no package
imports the one that calls it. Read from the source (imports inside functions count too)."""

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# package -> packages it must never import (they call it, directly or through others).
NEVER = {
    "seedlike.types": ["seedlike", "networks"],
    "seedlike.envs": ["seedlike.rpc", "seedlike.server", "seedlike.league", "seedlike.learning"],
    "seedlike.rpc.codec": ["seedlike.server", "seedlike.league", "seedlike.learning"],
    "seedlike.policy": ["seedlike.server", "seedlike.league", "seedlike.rpc"],
    "seedlike.server": ["seedlike.rpc", "seedlike.learning", "seedlike.learner"],
    "seedlike.league": ["seedlike.server", "seedlike.rpc", "seedlike.learner"],
    "seedlike.learning": ["seedlike.server", "seedlike.rpc", "seedlike.league"],
    "seedlike.algos": ["seedlike.server", "seedlike.rpc", "seedlike.league", "seedlike.learning"],
    "networks": ["seedlike.server", "seedlike.rpc", "seedlike.league", "seedlike.learning"],
    # The on-device runtime is called by the learner process and serves no actors.
    "seedlike.ondevice": ["seedlike.learner", "seedlike.server", "seedlike.rpc"],
}
# The ground floor and the top: runtime helpers import nothing else of seedlike, and only the
# package's lazy API (seedlike/__init__.py) and entrypoints import the launchers.
GROUND = "seedlike.runtime"
TOP = "seedlike.launch"
# Helpers for the tests and the benchmarks (network namespaces, a malicious actor).
TESTING = "seedlike.testing"


def modules():
    for top in ("seedlike", "networks", "surgery"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith(".py") and not name.endswith("_pb2.py"):
                    path = os.path.join(dirpath, name)
                    module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    yield module.removesuffix(".__init__"), path


def imports(path):
    tree = ast.parse(open(path).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def within(name, package):
    return name == package or name.startswith(package + ".")


def test_no_package_imports_its_caller():
    found = []
    for module, path in modules():
        for package, never in NEVER.items():
            if not within(module, package):
                continue
            for name in set(imports(path)):
                bad = [n for n in never if within(name, n) and not within(name, package)]
                if bad and not (package == "seedlike.types" and name == "seedlike.types"):
                    found.append(f"{module} imports {name}")
    assert not found, "\n".join(sorted(found))


def test_runtime_helpers_are_the_ground_floor_and_launchers_the_top():
    found = []
    for module, path in modules():
        for name in set(imports(path)):
            ours = name.split(".")[0] in ("seedlike", "networks", "surgery") and name != "seedlike"
            if within(module, GROUND) and ours and not within(name, GROUND):
                found.append(f"{module} imports {name}")
            if within(name, TOP) and not within(module, TOP) and module != "seedlike":
                found.append(f"{module} imports {name}")
    assert not found, "\n".join(sorted(found))


def test_the_library_imports_no_test_code():
    """The tests and benchmarks import the library, never the other way: what both need lives in
    seedlike.testing, which no other library module imports."""
    found = [
        f"{module} imports {name}"
        for module, path in modules()
        for name in set(imports(path))
        if within(name, "tests") or (within(name, TESTING) and not within(module, TESTING))
    ]
    assert not found, "\n".join(sorted(found))


# Functions longer than this (their docstring aside) are cut into named parts; a declarative
# table (a config section, a manifest) may be longer, and is named here with why.
MAX_FUNCTION_LINES = 80
LONG_TABLES: dict[str, str] = {}


def test_no_function_is_longer_than_a_screen():
    """The library's, the benchmarks' and the entrypoints' functions stay under
    MAX_FUNCTION_LINES lines of code each, so that each reads as one idea."""
    found = []
    paths = [path for _, path in modules()]
    for folder in ("benchmarks", ""):
        where = os.path.join(ROOT, folder)
        paths += [os.path.join(where, n) for n in sorted(os.listdir(where)) if n.endswith(".py")]
    for path in paths:
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            lines = node.end_lineno - node.lineno + 1
            doc = node.body[0]
            if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant):
                lines -= doc.end_lineno - doc.lineno + 1
            where = f"{os.path.relpath(path, ROOT)}:{node.name}"
            if lines > MAX_FUNCTION_LINES and where not in LONG_TABLES:
                found.append(f"{where} ({lines} lines)")
    assert not found, "\n".join(found)


def test_no_test_demands_bitwise_equal_floats_from_a_report():
    """Outputs of computations of different shapes (a surgery's wider matmuls) agree up to float32
    rounding, which depends on the CPU's kernels: `max_abs_logits == 0` passed on an AVX-512 CPU
    and failed on an AVX2 one. Such checks take a tolerance (tests/surgery/test_surgery.py's TOL);
    `scripts/test.sh --cpu=EPYC-Rome` runs tests on an emulated AVX2 CPU."""
    reported = re.compile(r"max_abs_\w+|max_kl|error")
    found = []
    for path, tree in _test_files():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare) or not isinstance(node.ops[0], ast.Eq):
                continue
            sides = [node.left, *node.comparators]
            named = [s for s in sides if reported.fullmatch(_name(s))]
            zero = [s for s in sides if isinstance(s, ast.Constant) and s.value == 0]
            if named and zero:
                found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)


def test_tests_wait_without_reading_the_clock():
    """A deadline loop is procs.wait_for (or procs.wait_until, which does not raise), a loop that
    works for a time is procs.repeat_for, and no test asserts how long something took (a slower
    CPU is not a bug): outside tests/procs.py no `while` reads the clock and no assert does."""
    found = []
    for path, tree in _test_files():
        if path.endswith("procs.py"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.While) and _reads_clock(node.test):
                found.append(f"{path}:{node.lineno}: while {ast.unparse(node.test)}")
            if isinstance(node, ast.Assert) and _reads_clock(node.test):
                found.append(f"{path}:{node.lineno}: assert {ast.unparse(node.test)}")
    assert not found, "\n".join(found)
    # The reader itself sees both shapes.
    probe = ast.parse("while time.monotonic() < t:\n    pass\nassert perf_counter() - t < 1\n")
    assert [_reads_clock(n.test) for n in probe.body] == [True, True]


# Test folders that mirror no one package: the library's top-level modules (seedlike/config.py,
# checkpoint.py, metrics.py, ...), and whole runs across packages.
MIRRORLESS = {"core": "seedlike", "integration": None}
NOT_TESTS = {"fixtures", "fake_ssh", "__pycache__"}  # data and a fake ssh command


def test_tests_mirror_the_packages():
    """Every test file lives in tests/<package>/ for a package of the library (seedlike/<p>/,
    networks/, surgery/), and uses that package (imports it, or runs one of its modules in a
    process): a test of the trajectory store sits in tests/server/, not beside the learner's."""
    tests = os.path.join(ROOT, "tests")
    loose = sorted(n for n in os.listdir(tests) if n.startswith("test_") and n != "test_layers.py")
    assert not loose, f"test files outside a package folder: {loose}"
    found = []
    for folder in sorted(os.listdir(tests)):
        if not os.path.isdir(os.path.join(tests, folder)) or folder in NOT_TESTS:
            continue
        package = MIRRORLESS.get(folder, _package_of(folder))
        if folder not in MIRRORLESS and package is None:
            found.append(f"tests/{folder}/ mirrors no package (seedlike/{folder}/, {folder}/)")
            continue
        for path, tree in _test_files(os.path.join(tests, folder)):
            if not os.path.basename(path).startswith("test_") or package is None:
                continue
            names = {n for n in _imports_of(tree) if within(n, package)}
            top = {n for n in names if n.count(".") <= 1} if folder == "core" else names
            if not top and not _names_in_strings(tree, package):
                found.append(f"{path} is in tests/{folder}/ but uses nothing of {package}")
    assert not found, "\n".join(found)


def _package_of(folder: str) -> str | None:
    """The library package a test folder mirrors, or None."""
    for package, where in ((f"seedlike.{folder}", ("seedlike", folder)), (folder, (folder,))):
        if os.path.isfile(os.path.join(ROOT, *where, "__init__.py")):
            return package
    return None


def _names_in_strings(tree, package: str) -> bool:
    """Whether a string of the file names a module of `package` (dotted, for `python -m`, or as
    a path): a test that runs the package in a process of its own."""
    path = package.replace(".", "/") + "/"
    return any(
        isinstance(n, ast.Constant) and isinstance(n.value, str)
        and (package + "." in n.value or path in n.value)
        for n in ast.walk(tree)
    )  # fmt: skip


def _imports_of(tree) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return names


CLOCKS = {"monotonic", "time", "perf_counter", "monotonic_ns", "perf_counter_ns"}


def _reads_clock(node) -> bool:
    """Whether an expression calls time.monotonic(), time.time(), perf_counter() or the like."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Attribute) and f.attr in CLOCKS and _name(f.value) == "time":
                return True
            if isinstance(f, ast.Name) and f.id in CLOCKS - {"time"}:
                return True
    return False


def _name(node) -> str:
    """The last name of a Name or an attribute chain ("" for anything else)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _test_files(folder: str = os.path.join(ROOT, "tests")):
    """(path, ast) of every Python file under `folder` but this one."""
    for dirpath, _, files in os.walk(folder):
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            if name.endswith(".py") and path != os.path.abspath(__file__):
                with open(path) as f:
                    yield os.path.relpath(path, ROOT), ast.parse(f.read())


def test_nothing_imports_an_entrypoint():
    """absl's flags are one process-wide table: a module that defines flags when imported is an
    entrypoint, and one that imports it (even lazily, inside a function) collides with its own
    flags of the same name the day they meet (the sweep's --seeds met seedlike.plot's)."""
    scripts = {
        f"{folder}.{name[:-3]}".lstrip("."): os.path.join(ROOT, folder, name)
        for folder in ("", "benchmarks")
        for name in os.listdir(os.path.join(ROOT, folder))
        if name.endswith(".py")
    }
    every = {**dict(modules()), **scripts}
    entrypoints = {module for module, path in every.items() if _defines_flags_on_import(path)}
    assert {"learner", "seedlike.launch.sweep.__main__", "benchmarks.rainbow"} <= entrypoints
    found = [
        f"{module} imports the entrypoint {name}"
        for module, path in every.items()
        for name in set(imports(path))
        if name in entrypoints and name != module
    ]
    assert not found, "\n".join(sorted(found))


def _defines_flags_on_import(path: str) -> bool:
    """A flags.DEFINE_* call at the module's top level (not inside a def or a __main__ guard)."""
    return any(
        isinstance(call, ast.Call) and _name(call.func).startswith("DEFINE_")
        for node in ast.parse(open(path).read()).body
        if not isinstance(node, (ast.FunctionDef, ast.If))
        for call in ast.walk(node)
    )
