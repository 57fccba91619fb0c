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


def test_no_test_demands_bitwise_equal_floats_from_a_report():
    """Outputs of computations of different shapes (a surgery's wider matmuls) agree up to float32
    rounding, which depends on the CPU's kernels: `max_abs_logits == 0` passed on an AVX-512 CPU
    and failed on an AVX2 one. Such checks take a tolerance (tests/surgery/test_surgery.py's TOL);
    `scripts/test.sh --cpu=EPYC-Rome` runs tests on an emulated AVX2 CPU."""
    pattern = re.compile(r"\b(max_abs_\w+|max_kl|error)\s*==\s*0(\.0*)?\b")
    found = [
        f"{path}:{number}: {line.strip()}"
        for path, number, line in lines_of_tests()
        if pattern.search(line) and not path.endswith("test_layers.py")
    ]
    assert not found, "\n".join(found)


def test_tests_mirror_the_packages_and_wait_without_reading_the_clock():
    """Every test file lives in the folder of what it tests (tests/<package>/); a deadline loop
    is procs.wait_for, and no test asserts how long something took (a slower CPU is not a bug)."""
    loose = sorted(
        name
        for name in os.listdir(os.path.join(ROOT, "tests"))
        if name.startswith("test_") and name != "test_layers.py"
    )
    assert not loose, f"test files outside a package folder: {loose}"
    clock = re.compile(r"assert .*(time\.monotonic\(\)|time\.time\(\)|perf_counter\(\)) - ")
    deadline = re.compile(r"while time\.monotonic\(\) < deadline")
    found = [
        f"{path}:{number}: {line.strip()}"
        for path, number, line in lines_of_tests()
        if (clock.search(line) or deadline.search(line)) and not path.endswith("procs.py")
    ]
    assert not found, "\n".join(found)


def lines_of_tests():
    """(path, line number, line) of every line of the test files."""
    for dirpath, _, files in os.walk(os.path.join(ROOT, "tests")):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                for number, line in enumerate(open(path), 1):
                    yield os.path.relpath(path, ROOT), number, line
