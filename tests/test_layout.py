"""The house's shape, counted from the source: rooms a newcomer can read, an import graph without cycles,
and tests that share builders only through ``tests/support``.

* No test module (``test_*.py``) imports another test module, directly or by ``from tests.x import test_y``;
  shared builders live in ``tests/support``, which imports no test module either.
* No product folder holds more than ``MAX_MODULES`` modules (``__init__.py`` not counted), except the folders in
  ``LARGER``, each held to its size so it cannot grow.
* No import cycles between product modules: every import in the source (lazy ones inside functions too, as
  they run at some point; ``if TYPE_CHECKING:`` blocks excepted) is an arrow of the graph.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support.paths import REPO_ROOT

PRODUCT = ("ingest", "fairshare", "scheduler", "analytics")
TESTS = REPO_ROOT / "tests"
MAX_MODULES = 12
#: Folders allowed above the limit, with the size they are held to (none today).
LARGER: dict[str, int] = {}


def _py_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" not in path.parts:
            yield path


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Ids of import nodes under ``if TYPE_CHECKING:`` (they never run)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skipped.update(id(n) for n in ast.walk(inner))
    return skipped


def _imported(path: Path, module: str) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of everything ``path`` imports: ``from a.b import c`` gives ``a.b.c`` and ``a.b``."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_checking_only(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:
                yield node.lineno, f"{target}.{alias.name}"


def _resolve(name: str, modules: set[str]) -> str | None:
    """The most specific known module ``name`` refers to (a module, or the package holding an attribute)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def test_no_test_module_imports_another_test_module() -> None:
    modules = {_module_name(p) for p in _py_files(TESTS)}
    offences = []
    for path in _py_files(TESTS):
        here = _module_name(path)
        for line, name in _imported(path, here):
            target = _resolve(name, modules)
            if target and target != here and target.rpartition(".")[2].startswith("test_"):
                offences.append(f"{path.relative_to(REPO_ROOT)}:{line} imports {target}")
    assert not offences, "test modules share builders through tests/support only:\n" + "\n".join(offences)


def _module_counts() -> dict[str, int]:
    counts = {}
    for top in PRODUCT:
        for folder in [REPO_ROOT / top, *sorted(p for p in (REPO_ROOT / top).rglob("*") if p.is_dir())]:
            if (folder / "__init__.py").exists():
                counts[folder.relative_to(REPO_ROOT).as_posix()] = sum(
                    1 for p in folder.glob("*.py") if p.name != "__init__.py"
                )
    return counts


def test_no_product_folder_holds_more_than_a_reader_can_take_in() -> None:
    counts = _module_counts()
    assert set(LARGER) <= set(counts), f"LARGER names folders that are gone: {set(LARGER) - set(counts)}"
    too_big = {
        folder: n for folder, n in sorted(counts.items()) if n > max(MAX_MODULES, LARGER.get(folder, 0))
    }
    assert not too_big, f"folders over {MAX_MODULES} modules (split them by question): {too_big}"


def _product_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for top in PRODUCT for p in _py_files(REPO_ROOT / top)}
    modules = set(files)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in files.items():
        for _, name in _imported(path, module):
            target = _resolve(name, modules)
            if target and target != module:
                graph[module].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
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
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_between_product_modules() -> None:
    cycles = _cycles(_product_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)
