"""The layers of docs/ARCHITECTURE.md hold by construction: this test reads every module's
imports (module level, inside functions, and in `if TYPE_CHECKING:` blocks) and fails on an
import from a lower layer into a higher one, or on any import cycle between modules, also
one closed only by annotations (a type-level circle: the modules cannot be read, checked or
split one at a time). The test suite's own modules share code through tests/conftest.py and
helper modules, never by importing one another.

Layers, lowest first (a module may import its own layer and the ones below):
    ground          the error classes and hsa_status_t numbers; imports nothing of the project
    packets         AQL layouts, builders, rings, traces
    hsa.abi         the code-object reader and target table (ABI, as in IREE's runtime)
    hsa             the provider interface, ROCr and the virtual system
    compiler        kernel bundles, clang and IREE front ends
    amdgpu          the driver (core, selection, both backends)
    tools           packet-trace, hwlab
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ground", "amdgpu", "hsa", "packets", "compiler", "tools")
LAYERS = (
    "ground",
    "packets",
    "hsa.abi",
    "hsa",
    "compiler",
    "amdgpu",
    "tools",
)
#: Leaves: modules that import nothing of the project at all.
LEAVES = ("ground", "ground.errors", "ground.status")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module `name` refers to (a submodule, else its closest package)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path, annotations: bool = True) -> set[tuple[str, int]]:
    """(imported module, line) of `module`; with `annotations=False`, only the imports that
    run (not those in `if TYPE_CHECKING:` blocks)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[tuple[str, int]] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if (not annotations and isinstance(child, ast.If)
                    and "TYPE_CHECKING" in ast.unparse(child.test)):
                continue  # annotations only: not an import at run time
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if target := _resolve(alias.name):
                        found.add((target, child.lineno))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package[: len(package) - (child.level - 1)]
                    source = ".".join(base + ([child.module] if child.module else []))
                else:
                    source = child.module or ""
                for alias in child.names:
                    if target := _resolve(f"{source}.{alias.name}"):
                        found.add((target, child.lineno))
            visit(child)

    visit(tree)
    return {(t, line) for t, line in found if t != module}


#: Every import, those for annotations included: layers and circles are judged on this.
GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}
#: The imports that run.
RUNTIME_GRAPH = {m: _imports(m, p, annotations=False) for m, p in MODULES.items()}


def _layer(module: str) -> int:
    best = -1
    for i, prefix in enumerate(LAYERS):
        if module == prefix or module.startswith(prefix + "."):
            if best < 0 or len(prefix) > len(LAYERS[best]):
                best = i
    assert best >= 0, f"{module} is in no layer: add its package to LAYERS"
    return best


def test_the_graph_was_read():
    # guards against a walker that silently finds nothing
    assert len(MODULES) > 100
    assert ("ground.errors", 0) not in GRAPH["packets.build"]
    assert any(t == "ground.errors" for t, _ in GRAPH["packets.build"])
    assert any(t == "hsa.abi.codeobject" for t, _ in GRAPH["hsa.virtual.loader"])
    # an import under `if TYPE_CHECKING:` is in GRAPH but not in RUNTIME_GRAPH
    typed_only = {(m, t) for m in GRAPH for t, _ in GRAPH[m] - RUNTIME_GRAPH[m]}
    assert typed_only, "no annotation-only import found: the TYPE_CHECKING test is broken"


def test_the_public_error_modules_are_reached_as_before():
    # `import amdgpu` then `amdgpu.errors.X` (and `hsa.status.X`) worked as a side effect of
    # the layers importing them; now that they import `ground`, the packages import them
    import subprocess
    import sys

    code = ("import amdgpu, hsa; print(amdgpu.errors.BufferStateError.__mro__[1].__name__, "
            "hsa.status.HSA_STATUS_ERROR)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["DeviceError", "4096"], out.stderr


def test_the_public_error_modules_re_export_the_ground_floor():
    import amdgpu.errors
    import ground.errors
    import ground.status
    import hsa.status

    for public, ground_module in ((amdgpu.errors, ground.errors), (hsa.status, ground.status)):
        names = [n for n in vars(ground_module) if n[0].isupper()]
        assert names and all(getattr(public, n) is getattr(ground_module, n) for n in names)


def test_no_upward_import():
    upward = [
        f"{MODULES[m].relative_to(ROOT)}:{line}: {m} ({LAYERS[_layer(m)]}) imports {t} "
        f"({LAYERS[_layer(t)]})"
        for m, edges in GRAPH.items()
        for t, line in edges
        if _layer(t) > _layer(m)
    ]
    assert not upward, "imports from a higher layer:\n" + "\n".join(sorted(upward))


def test_leaves_import_nothing_of_the_project():
    for leaf in LEAVES:
        assert not GRAPH[leaf], f"{leaf} must stay a leaf, imports {sorted(GRAPH[leaf])}"


def test_no_import_cycle():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def strongconnect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, _ in GRAPH[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            strongconnect(v)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_backends_do_not_import_device_selection():
    # selection imports the backends; the reverse edge would bring the old cycle back
    for m, edges in GRAPH.items():
        if m.startswith(("amdgpu.hsa_backend", "amdgpu.vulkan")):
            assert "amdgpu.selection" not in {t for t, _ in edges}, m


#: Modules split along their seams keep an order inside: each may import only the ones
#: before it (the package's __init__ re-exports them all and is imported by none of them).
INNER_ORDER = {
    "packets.trace": ("format", "records", "writer", "reader", "sinks"),
    "hsa.abi.codeobject": ("descriptor", "elf", "metadata", "bundle", "reader"),
    "amdgpu.vulkan": ("command_plan", "command_bindings", "command_recording",
                      "command_buffer"),
    # the HSA command buffer (what recording makes, patching, replay, recording) and the
    # device's parts (shared state, then one module per concern, then the device)
    "amdgpu.hsa_backend": ("command_segments", "command_patching", "command_replay",
                           "command_buffer", "parts", "loading", "memory", "transfers",
                           "submission", "device"),
}


def test_split_modules_keep_their_inner_order():
    wrong = []
    for package, order in INNER_ORDER.items():
        rank = {f"{package}.{name}": i for i, name in enumerate(order)}
        assert set(rank) <= set(MODULES), f"{package}: {sorted(set(rank) - set(MODULES))} gone"
        for m, i in rank.items():
            for t, line in GRAPH[m]:
                if t == package or rank.get(t, -1) > i:
                    wrong.append(f"{MODULES[m].relative_to(ROOT)}:{line}: {m} imports {t}")
    assert not wrong, "imports against a split module's order:\n" + "\n".join(sorted(wrong))


def test_the_virtual_systems_parts_get_their_collaborators_passed_in():
    # queues, loader and copy engine work with what the provider hands them (memory,
    # signals, lookups), never with the provider itself or its private fields
    for part in ("hsa.virtual.queues", "hsa.virtual.loader", "hsa.virtual.copies"):
        assert "hsa.virtual.provider" not in {t for t, _ in GRAPH[part]}, part
        source = MODULES[part].read_text()
        assert "provider._" not in source and "self.provider" not in source, part


# --- the test suite: test modules share code through helpers, never each other ----------
#: Calls that load a module by name or by path: a test module loaded this way is an import.
_LOADERS = {"import_module", "__import__", "spec_from_file_location", "run_path",
            "run_module", "SourceFileLoader", "load_source", "exec_module"}
_TEST_FILE = re.compile(r"(?:^|[/\\])test_\w+\.py$")


def _is_test_module(dotted: str) -> bool:
    """`test_x`, `tests.test_x` and their submodules name a test module."""
    parts = dotted.split(".")
    if parts[0] == "tests":
        parts = parts[1:]
    return bool(parts) and parts[0].startswith("test_")


def _test_module_imports(source: str, filename: str = "<test>") -> list[tuple[int, str]]:
    """(line, what) for every import of a test module in `source`: `import test_x`,
    `from test_x import y`, `import tests.test_x`, `from tests.test_x import y`,
    `from tests import test_x`, and importlib/runpy loads naming one (`"tests.test_x"`,
    a path ending in `test_x.py`), at module level or anywhere inside a function."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names
                      if _is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if _is_test_module(node.module):
                found.append((node.lineno, f"from {node.module} import ..."))
            elif node.module == "tests":
                found += [(node.lineno, f"from tests import {a.name}") for a in node.names
                          if _is_test_module(a.name)]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name not in _LOADERS:
                continue
            for arg in (n for a in [*node.args, *node.keywords] for n in ast.walk(a)):
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    text = arg.value
                    if _TEST_FILE.search(text) or (text.isidentifier() or "." in text) \
                            and not text.endswith(".py") and _is_test_module(text):
                        found.append((node.lineno, f"{name}({text!r})"))
    return sorted(found)


def test_the_test_module_check_finds_every_form():
    # each form the check must catch, and the helper imports it must let through
    caught = {
        "import test_a": 1,
        "import tests.test_a as a": 1,
        "from test_a import f": 1,
        "from tests.test_a import f": 1,
        "from tests import test_a, codeobjects": 1,
        "def f():\n    import test_a\n": 1,
        "def f():\n    from tests.test_a.sub import g\n": 1,
        "importlib.import_module('tests.test_a')": 1,
        "__import__('test_a')": 1,
        "importlib.util.spec_from_file_location('x', HERE.with_name('test_a.py'))": 1,
        "runpy.run_path('tests/test_a.py')": 1,
        "import codeobjects\nfrom tests.codeobjects import load_kernel": 0,
        "from toolchains import require_clang\nimport testing_helpers": 0,
        "importlib.import_module('hsa.virtual.gfx11')": 0,
        "spec_from_file_location('x', ROOT / 'benchmarks' / 'pass_rate.py')": 0,
        "'''see tests/test_a.py'''\nfrom hsa.virtual.gfx11.testing import Harness": 0,
    }
    for source, count in caught.items():
        assert len(_test_module_imports(source)) == count, source


def test_no_test_module_imports_another():
    # shared fixtures live in tests/conftest.py, shared code in helper modules of tests/
    # whose names do not start with test_ (codeobjects.py, provider_suite.py, ...); a helper
    # may not import a test module either, or it would carry the import through
    files = sorted((ROOT / "tests").glob("*.py"))
    assert len([f for f in files if f.name.startswith("test_")]) > 50  # the glob found them
    wrong = [f"tests/{f.name}:{line}: {what}"
             for f in files for line, what in _test_module_imports(f.read_text(), str(f))]
    assert not wrong, ("test modules imported (move the shared part into tests/conftest.py "
                       "or a helper module not named test_*):\n" + "\n".join(wrong))


def test_every_helper_module_is_registered_for_assert_rewriting():
    # pytest rewrites the asserts of test modules only; conftest registers the helpers
    conftest = ast.parse((ROOT / "tests" / "conftest.py").read_text())
    helpers = next(ast.literal_eval(n.value) for n in ast.walk(conftest)
                   if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "HELPERS")
    found = {f.stem for f in (ROOT / "tests").glob("*.py")
             if not f.name.startswith("test_") and f.name != "conftest.py"}
    assert found and set(helpers) == found, f"tests/conftest.py HELPERS: {sorted(found)}"
