"""The catalyst room (``gpuwm.spark.catalyst``): the expression IR its
translator writes is the one ``gpuwm.project`` evaluates, op for op."""

from __future__ import annotations

import ast
from pathlib import Path

from gpuwm.project import OPS
from gpuwm.spark.catalyst.expressions import EMITS

ROOT = Path(__file__).resolve().parents[1]


def _written_ops(path: Path) -> set[str]:
    """The op of every IR node written as a dict display of one constant key in ``path``."""
    ops = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict) and len(node.keys) == 1 and isinstance(node.keys[0], ast.Constant) \
                and isinstance(node.keys[0].value, str):
            ops.add(node.keys[0].value)
    return ops


def test_every_op_the_translator_writes_is_one_the_evaluator_has():
    assert EMITS <= set(OPS), sorted(EMITS - set(OPS))


def test_the_translators_ops_are_the_ones_it_declares():
    """A node written in ``project_expr``'s module is an op of ``EMITS``,
    or a step's filter (``where``), or not a node (a lookup table of
    patterns, the ``to_json`` form's ``fields``)."""
    tables = {"tinyint", "yyyy", "fields"}  # (_INT_DIGITS, _PATTERN, to_json's {"fields": ..., "java": ...})
    written = _written_ops(ROOT / "gpuwm/spark/catalyst/expressions.py") - tables - {"where"}
    assert written <= EMITS, sorted(written - EMITS)


def test_every_op_the_evaluator_has_is_written_somewhere():
    """No op of ``gpuwm.project`` that nothing writes: the translator's, or
    the front's own (``tumble``: a top-N's window over a source's rows)."""
    front = set().union(*(_written_ops(p) for p in (ROOT / "gpuwm/spark/front").rglob("*.py")))
    assert set(OPS) <= EMITS | (front & {"tumble"}), sorted(set(OPS) - EMITS)
