"""The package's layers (docs/layout.md): each subpackage of prism/
imports only the layers below it, so the tree reads as the data flow,
plan on the host -> run in the guest -> report on the host."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PKG = REPO / "prism"

# What each part may import besides itself, top to bottom.
ALLOWED = {
    "cli": {"root", "bench", "host", "guest", "drives", "common"},
    "bench": {"host", "guest", "drives", "common"},
    "host": {"guest", "drives", "common"},
    "guest": {"common"},
    "drives": {"common"},
    "common": set(),
    "root": set(),
}


def _part(module: str) -> str:
    """prism.host.vm -> host; prism.cli -> cli; prism -> root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "root"


def _imports(path: Path) -> list[str]:
    """The prism modules @path imports, as absolute names."""
    pkg = list(path.relative_to(REPO).parts[:-1])  # prism/host/vm.py -> prism, host
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.split(".")[0] == "prism"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[:len(pkg) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "prism":
                continue
            # from PKG import NAME: NAME may be a module or subpackage of PKG.
            where = REPO / mod.replace(".", "/")
            out += [f"{mod}.{a.name}" if (where / a.name).is_dir()
                    or (where / f"{a.name}.py").exists() else mod for a in node.names]
    return out


def test_subpackages_say_what_they_are():
    for d in sorted(p for p in PKG.iterdir() if (p / "__init__.py").exists()):
        doc = ast.get_docstring(ast.parse((d / "__init__.py").read_text()))
        assert doc and len(doc.split()) > 30, f"{d.name}/__init__.py needs its paragraph"
        assert d.name in ALLOWED, f"prism/{d.name}/ is no layer of ALLOWED"


def test_nothing_imports_upward():
    wrong = []
    for path in sorted(PKG.rglob("*.py")):
        mod = ".".join(path.relative_to(PKG.parent).with_suffix("").parts)
        mod = mod.removesuffix(".__init__")
        me = _part(mod)
        for target in _imports(path):
            other = _part(target)
            if other != me and other not in ALLOWED[me]:
                wrong.append(f"{path.relative_to(REPO)} imports {target} ({me} -> {other})")
    assert not wrong, "\n".join(wrong)
