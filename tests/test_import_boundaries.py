"""The layering of DESIGN.md, checked on the source: analyses never import renderers.

Nothing under ``analysis/`` or ``trace/`` imports ``torchscope.render``, ``torchscope.cli``,
the torch skin (``torchscope.compat``) or torch, at module level or inside a function (a lazy
import is still a dependency: it only fails later). Read from each module's syntax tree, so
an import behind ``if TYPE_CHECKING`` or in a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "torchscope"
CHECKED = ("analysis", "trace")
FORBIDDEN = ("torchscope.render", "torchscope.cli", "torchscope.compat", "torch")


def package_of(path: Path) -> str:
    """``src/torchscope/analysis/advisor/rules.py`` -> ``torchscope.analysis.advisor``."""
    return ".".join(("torchscope", *path.relative_to(PACKAGE).with_suffix("").parts[:-1]))


def imported_modules(source: str, package: str) -> list[tuple[int, str]]:
    """Every module (and imported name) ``source`` imports, anywhere in it, with its line;
    ``from . import x`` resolved against ``package``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


MODULES = sorted(p for d in CHECKED for p in (PACKAGE / d).rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_analyses_and_the_trace_import_no_renderer_cli_or_torch(path: Path) -> None:
    bad = [f"line {n}: {m}" for n, m in imported_modules(path.read_text(), package_of(path)) if _forbidden(m)]
    assert bad == [], f"{path.relative_to(PACKAGE)} imports {bad}"


def test_the_walk_sees_every_kind_of_import() -> None:
    """The checker itself: top-level, function-level, relative and guarded imports are found."""
    text = (
        "import torch.nn\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from torchscope.compat import KeyAverages\n"
        "def f():\n    from ..render import console\n    from ..cli.table import COMMAND\n"
        "from . import keys\n"
    )
    found = [m for _, m in imported_modules(text, package_of(PACKAGE / "analysis" / "probe.py"))]
    assert [m for m in found if _forbidden(m)] == [
        "torch.nn",
        "torchscope.compat",
        "torchscope.compat.KeyAverages",
        "torchscope.render",
        "torchscope.render.console",
        "torchscope.cli.table",
        "torchscope.cli.table.COMMAND",
    ]
    assert "torchscope.analysis.keys" in found


def module_level_imports(source: str) -> list[str]:
    """The modules ``source`` imports when it is imported (not inside functions)."""
    found: list[str] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
    return found


@pytest.mark.parametrize(
    "path", sorted((PACKAGE / "compat").rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_the_torch_skin_imports_torch_only_when_asked(path: Path) -> None:
    """A loaded trace's table needs no torch: compat/ imports it only inside the few functions
    that return torch's own types (``device_type``)."""
    top = [m for m in module_level_imports(path.read_text()) if m == "torch" or m.startswith("torch.")]
    assert top == []
