"""rmqcore/_core.pyi must name exactly what the compiled module exports, and
the CLI's offline checker must see what the store wrote."""

from __future__ import annotations

import ast
import pathlib

import rmqcore
from rmqcore import _core

PYI = pathlib.Path(rmqcore.__file__).with_name("_core.pyi")


def _stub_names() -> set[str]:
    tree = ast.parse(PYI.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_stub_matches_module():
    public = {n for n in dir(_core) if not n.startswith("_")
              and getattr(getattr(_core, n), "__module__", _core.__name__) == _core.__name__}
    assert _stub_names() == public


def test_stub_classes_name_their_public_members():
    tree = ast.parse(PYI.read_text())
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        stubbed = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        stubbed |= {n.target.id for n in node.body
                    if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        actual = {n for n in dir(getattr(_core, node.name)) if not n.startswith("_")}
        assert actual <= stubbed, f"{node.name}: not in the stub: {actual - stubbed}"
