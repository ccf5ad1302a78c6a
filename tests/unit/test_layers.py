"""Imports only run downwards: every module's imports (function-level ones too) against the order.

leaves < config < backends < store < budgets < engine < tracing < notify < metrics < watchdog
< orchestration < tasks < flows < sandbox < cli < deployments
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# lowest first; a module may import its own layer and any layer before it
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "leaves",
        (
            "nightshift",
            "nightshift.errors",
            "nightshift.files",
            "nightshift.backoff",
            "nightshift.states",
            "nightshift.loop",
        ),
    ),
    ("config", ("nightshift.config",)),
    ("backends", ("nightshift.backends",)),
    ("store", ("nightshift.store",)),
    ("budgets", ("nightshift.budgets",)),
    ("engine", ("nightshift.engine",)),
    ("tracing", ("nightshift.tracing",)),
    ("notify", ("nightshift.notify",)),
    ("metrics", ("nightshift.metrics",)),
    ("watchdog", ("nightshift.watchdog",)),
    ("orchestration", ("nightshift.orchestration",)),
    ("tasks", ("nightshift.tasks", "tasks")),
    ("flows", ("nightshift.flows", "flows")),
    ("sandbox", ("nightshift.sandbox", "sandbox")),
    ("cli", ("nightshift.cli", "nightshift.__main__")),
    ("deployments", ("deployments",)),
)
PACKAGES = ("nightshift", "tasks", "flows", "sandbox", "deployments")


def layer_of(module: str) -> int | None:
    """The index of the layer ``module`` belongs to (the longest prefix wins); None: not ours."""
    matches = [
        (len(prefix), index)
        for index, (_, prefixes) in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    return max(matches)[1] if matches else None


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def statements(node: ast.AST) -> Iterator[ast.AST]:
    """Every statement in ``node``, at any depth: an import is a statement, so the walk skips
    expressions (most of a tree's nodes; a lambda holds none) and costs a fifth of ast.walk."""
    for name in ("body", "orelse", "finalbody", "handlers", "cases"):
        for child in getattr(node, name, ()):
            if isinstance(child, ast.stmt):
                yield child
            yield from statements(child)  # an except clause or a case holds statements


def imported(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, module) of every import anywhere in the file, relative ones resolved."""
    found: list[tuple[int, str]] = []
    for node in statements(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, base] if base else package)
            for alias in node.names:
                # `from pkg import sub` may name a submodule of another layer than pkg's
                sub = f"{base}.{alias.name}"
                found.append((node.lineno, base if layer_of(sub) == layer_of(base) else sub))
    return found


def upward_imports(root: Path = REPO) -> list[str]:
    """Every import of a higher layer, as ``file:line: a (layer) imports b (layer)``."""
    problems = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            module = module_name(path, root)
            own = layer_of(module)
            assert own is not None, module
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for line, target in sorted(set(imported(tree, module, path.name == "__init__.py"))):
                theirs = layer_of(target)
                if theirs is not None and theirs > own:
                    problems.append(
                        f"{path.relative_to(root)}:{line}: {module} ({LAYERS[own][0]}) imports "
                        f"{target} ({LAYERS[theirs][0]})"
                    )
    return problems


def test_no_import_runs_upward() -> None:
    problems = upward_imports()
    assert not problems, "imports against the layers:\n" + "\n".join(problems)


def test_the_check_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    store = tmp_path / "nightshift" / "store"
    store.mkdir(parents=True)
    for package in PACKAGES:
        (tmp_path / package).mkdir(exist_ok=True)
    (store / "__init__.py").write_text("")
    (store / "x.py").write_text(
        "def f():\n    from nightshift.watchdog import checks\n"
        "from ..engine import night\n"
        "import nightshift.config.settings\n"
        "try:\n    pass\nexcept ImportError:\n    import nightshift.cli\n"
        "class C:\n    match 1:\n        case 1:\n            import flows\n"
    )
    problems = upward_imports(tmp_path)
    assert len(problems) == 4, problems
    assert "x.py:2: nightshift.store.x (store) imports nightshift.watchdog " in problems[0]
    assert "x.py:3: nightshift.store.x (store) imports nightshift.engine (engine)" in problems[1]
    assert "x.py:8: nightshift.store.x (store) imports nightshift.cli (cli)" in problems[2]
    assert "x.py:12: nightshift.store.x (store) imports flows (flows)" in problems[3]
