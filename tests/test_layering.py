"""Layering: widgets/ is a view (no torch, torch_xla, transformers); tcbench/ never imports ipywidgets."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "torch_xla", "transformers")


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            roots.add(str(node.args[0].value).split(".")[0])
    return roots


def _py_files(folder: str) -> list[Path]:
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files, f"no Python files under {folder}/"
    return files


def test_widgets_source_never_imports_the_ml_stack():
    bad = {str(p.relative_to(ROOT)): sorted(_imported_roots(p) & set(HEAVY)) for p in _py_files("widgets")}
    assert not {k: v for k, v in bad.items() if v}, f"widgets/ imports the ML stack: {bad}"


def test_tcbench_source_never_imports_ipywidgets():
    bad = {str(p.relative_to(ROOT)): sorted(_imported_roots(p) & {"ipywidgets", "anywidget"})
           for p in _py_files("tcbench")}
    assert not {k: v for k, v in bad.items() if v}, f"tcbench/ imports widget libraries: {bad}"


def test_importing_the_panel_loads_no_ml_stack():
    code = ("import sys, tcbench.widgets\n"
            "from tcbench.widgets import Workbench\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                         cwd=str(ROOT / "tests"))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", f"tcbench.widgets pulled in: {out.stdout}"


# -- the package layers -----------------------------------------------------------------------------------------
# Lowest first: a module may import its own layer and those below it, never one above (imports inside functions
# count too). Every module is named by its package (or itself); "tcbench" is the public face, tcbench/__init__.py
# alone. README.md states this order (test_the_readme_states_the_layer_order).
LAYERS = (
    ("tcbench.core",),
    ("tcbench.host",),
    ("tcbench.measure",),
    ("tcbench.job",),
    ("tcbench.store",),
    ("tcbench.runner",),
    ("tcbench.view",),
    ("tcbench.comparison",),
    ("tcbench.tuning", "tcbench.parallel"),
    ("tcbench", "tcbench.hf"),   # the public face, and the Trainer callback users import by name
    ("tcbench.cli",),            # a client of the public face
)
PUBLIC_FACE = "tcbench"
# only the job's own process imports the ML stack at module level
TORCH_AT_TOP = ("tcbench.job",)
# the clients, tcbench/cli and widgets/ (tcbench.widgets), import the public face and these modules only
CLIENT_IMPORTS = (
    "tcbench.comparison", "tcbench.core.errors", "tcbench.core.events", "tcbench.core.spec", "tcbench.host.doctor",
    "tcbench.host.paths",
    "tcbench.job.backends", "tcbench.job.diagnostics", "tcbench.parallel.projection", "tcbench.parallel.scaling",
    "tcbench.store.api", "tcbench.store.postgres", "tcbench.tuning.batch.search", "tcbench.tuning.compile_search.search",
    "tcbench.tuning.compile_search.space", "tcbench.tuning.dashboard", "tcbench.tuning.lr.noise",
    "tcbench.tuning.lr.prediction", "tcbench.tuning.lr.retune", "tcbench.tuning.lr.workers", "tcbench.view.format",
)


def _modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for p in sorted((root / "tcbench").rglob("*.py")):
        name = ".".join(p.relative_to(root).with_suffix("").parts)
        out[name[:-len(".__init__")] if name.endswith(".__init__") else name] = p
    return out


def _names(prefix: str, module: str) -> bool:
    """Whether the LAYERS entry ``prefix`` names ``module``: itself, or a module inside it (the public face names
    only tcbench/__init__.py)."""
    return module == prefix or (prefix != PUBLIC_FACE and module.startswith(prefix + "."))


def _layer(module: str) -> int | None:
    """The index in LAYERS of the longest entry that names ``module``; None when no entry does."""
    named = [prefix for names in LAYERS for prefix in names if _names(prefix, module)]
    if not named:
        return None
    best = max(named, key=len)
    return next(i for i, names in enumerate(LAYERS) if best in names)


def _imports(path: Path, modules: dict[str, Path]) -> list[tuple[str, int, bool]]:
    """(imported tcbench module, line, at module level) for every import in the file, TYPE_CHECKING blocks left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    top = {id(n) for n in tree.body}
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for sub in node.body for n in ast.walk(sub)}
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                     for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        out += [(n, node.lineno, id(node) in top) for n in names]
    return out


def _target(name: str, modules: dict[str, Path]) -> str | None:
    """The module an imported name lives in: the name itself or its longest enclosing module."""
    return next((name[:i] for i in [len(name), *[k for k, c in enumerate(name) if c == "."][::-1]]
                 if name[:i] in modules), None)


def _graph(root: Path = ROOT) -> tuple[dict[str, set[str]], list[str]]:
    """The import graph between tcbench's modules and the imports that climb a layer."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    climbs = []
    for mod, path in modules.items():
        for name, line, _ in _imports(path, modules):
            if not (name == "tcbench" or name.startswith("tcbench.")):
                continue
            target = _target(name, modules)
            if target is None or target == mod:
                continue
            graph[mod].add(target)
            if _layer(target) > _layer(mod):
                climbs.append(f"{path.relative_to(root)}:{line} {mod} imports {target}, a higher layer")
    return graph, climbs


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_every_module_belongs_to_a_layer():
    for mod in _modules():
        assert _layer(mod) is not None, mod


def test_a_module_no_layer_names_fails_the_check():
    """test_every_module_belongs_to_a_layer can fail: a new package or module is in no layer until LAYERS names it."""
    assert _layer("tcbench.newpkg") is None and _layer("tcbench.newmodule") is None
    assert _layer("tcbench") == _layer("tcbench.hf") == len(LAYERS) - 2 and _layer("tcbench.core.spec") == 0


def _client_imports(root: Path = ROOT) -> list[str]:
    """The imports of tcbench/cli and widgets/ outside themselves, the public face and CLIENT_IMPORTS."""
    modules = _modules(root)
    bad = []
    for path in sorted((root / "tcbench" / "cli").rglob("*.py")) + sorted((root / "widgets").rglob("*.py")):
        for name, line, _ in _imports(path, modules):
            target = _target(name, modules) if name.split(".")[0] == "tcbench" else None
            if target is None or target == PUBLIC_FACE or target in CLIENT_IMPORTS or target.startswith("tcbench.cli"):
                continue
            bad.append(f"{path.relative_to(root)}:{line} imports {target}")
    return bad


def test_the_cli_and_the_widgets_import_the_public_face_and_the_listed_modules_only():
    bad = _client_imports()
    assert not bad, "add it to the public face (tcbench/__init__.py) or to CLIENT_IMPORTS:\n" + "\n".join(bad)


def test_the_client_check_catches_an_unlisted_import(tmp_path):
    import shutil

    for folder in ("tcbench", "widgets"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    panel = tmp_path / "widgets" / "_panel.py"
    panel.write_text(panel.read_text() + "\n\ndef _unlisted():\n    from tcbench.runner.process import run\n")
    assert any(b.startswith("widgets/_panel.py:") and b.endswith("imports tcbench.runner.process")
               for b in _client_imports(tmp_path))


def _readme_layers() -> list[list[str]]:
    """The layer order README.md states: the list after "lowest first:", up to the closing parenthesis."""
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    order = re.search(r"lowest first: (.*?)\); ", text)
    assert order, 'README.md no longer states the layer order ("lowest first: core, ..., cli); ")'
    plain = re.sub(r"\([^)]*\)", "", order.group(1)).replace("`", "")
    return [[n.strip() for n in group.split(" and ")] for group in plain.split(", ")]


def test_the_readme_states_the_layer_order():
    short = [[name.removeprefix("tcbench.") for name in names] for names in LAYERS]
    assert _readme_layers() == short, f"README.md's layer order differs from LAYERS in {__file__}"


def test_no_import_climbs_a_layer():
    _, climbs = _graph()
    assert not climbs, "imports that climb a layer:\n" + "\n".join(climbs)


def test_no_import_cycle_between_modules():
    graph, _ = _graph()
    assert not _cycles(graph), f"import cycles (imports inside functions count): {_cycles(graph)}"


def test_only_the_job_package_imports_the_ml_stack_at_module_level():
    modules = _modules()
    bad = [f"{mod}:{line} {name}" for mod, path in modules.items() if not mod.startswith(TORCH_AT_TOP)
           for name, line, at_top in _imports(path, modules) if at_top and name.split(".")[0] in HEAVY]
    assert not bad, f"torch & co imported at module level outside tcbench.job: {bad}"


def test_the_layering_check_catches_a_back_edge_and_a_cycle(tmp_path):
    """The checks above can fail: a copy of the package with one import added that climbs (core -> runner)."""
    import shutil

    shutil.copytree(ROOT / "tcbench", tmp_path / "tcbench", ignore=shutil.ignore_patterns("__pycache__"))
    spec = tmp_path / "tcbench" / "core" / "spec.py"
    spec.write_text(spec.read_text() + "\n\ndef _back_edge():\n    from tcbench.runner.process import run\n")
    graph, climbs = _graph(tmp_path)
    assert any("tcbench.core.spec imports tcbench.runner.process" in c for c in climbs)
    assert any("tcbench.core.spec" in comp and "tcbench.runner.process" in comp for comp in _cycles(graph))


# -- a backend's name decides only inside tcbench/job/backends ---------------------------------------------------
BACKEND_NAMES = ("eager", "inductor", "xla", "aot_eager", "cudagraphs", "openxla")


def _device_type(node: ast.expr) -> bool:
    """``x.type`` or ``getattr(x, "type", ...)``: a torch device's type ("xla", "cuda"), which is no backend's name."""
    return (isinstance(node, ast.Attribute) and node.attr == "type") or (
        isinstance(node, ast.Call) and getattr(node.func, "id", "") == "getattr" and len(node.args) > 1
        and isinstance(node.args[1], ast.Constant) and node.args[1].value == "type")


def _name_comparisons(root: Path = ROOT) -> list[str]:
    """Comparisons (==, !=, in, not in, ...) with a backend's name as a string literal, outside tcbench/job/backends."""
    backends = root / "tcbench" / "job" / "backends"
    found = []
    for path in sorted((root / "tcbench").rglob("*.py")):
        if backends in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            if any(_device_type(s) for s in sides):
                continue
            literals = [c.value for s in sides for c in (getattr(s, "elts", None) or [s]) if isinstance(c, ast.Constant)]
            if any(v in BACKEND_NAMES for v in literals):
                found.append(f"{path.relative_to(root)}:{node.lineno} {ast.unparse(node)}")
    return found


def test_only_the_backends_compare_a_backends_name():
    found = _name_comparisons()
    assert not found, "ask the backend class (tcbench.job.backends.backend_class) instead:\n" + "\n".join(found)


def test_the_name_check_catches_a_comparison(tmp_path):
    (tmp_path / "tcbench" / "runner").mkdir(parents=True)
    (tmp_path / "tcbench" / "runner" / "x.py").write_text('def f(spec):\n    return spec.backend in ("xla", "tpu")\n')
    assert _name_comparisons(tmp_path) == ["tcbench/runner/x.py:2 spec.backend in ('xla', 'tpu')"]
