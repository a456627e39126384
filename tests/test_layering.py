"""Layering: widgets/ is a view (no torch, torch_xla, transformers); tcbench/ never imports ipywidgets."""

from __future__ import annotations

import ast
import os
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
# count too). tcbench.view.format sits just above core: measure's verdict sentences and the store's tables use it.
LAYERS = (
    ("tcbench.core",),
    ("tcbench.view.format",),
    ("tcbench.host",),
    ("tcbench.measure",),
    ("tcbench.job",),
    ("tcbench.store",),
    ("tcbench.runner",),
    ("tcbench.view",),
    ("tcbench.comparison",),
    ("tcbench.tuning", "tcbench.parallel"),
    ("tcbench",),            # the public face (__init__) and tcbench.hf
    ("tcbench.cli",),        # a client of the public face
)
# only the job's own process imports the ML stack at module level
TORCH_AT_TOP = ("tcbench.job",)


def _modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for p in sorted((root / "tcbench").rglob("*.py")):
        name = ".".join(p.relative_to(root).with_suffix("").parts)
        out[name[:-len(".__init__")] if name.endswith(".__init__") else name] = p
    return out


def _layer(module: str) -> int:
    best = max((prefix for names in LAYERS for prefix in names if module == prefix or module.startswith(prefix + ".")),
               key=len)
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


def _graph(root: Path = ROOT) -> tuple[dict[str, set[str]], list[str]]:
    """The import graph between tcbench's modules and the imports that climb a layer."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    climbs = []
    for mod, path in modules.items():
        for name, line, _ in _imports(path, modules):
            if not (name == "tcbench" or name.startswith("tcbench.")):
                continue
            target = next((name[:i] for i in [len(name), *[k for k, c in enumerate(name) if c == "."][::-1]]
                           if name[:i] in modules), None)
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
