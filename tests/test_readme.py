"""The README's operator example runs as printed, and its comments hold."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_operator_example_runs_and_its_comments_hold():
    text = README.read_text()
    section = text[text.index("## The operators"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)
    assert (ns["f"].watermark, ns["f"].late_rows) == (10_000, 0)
    assert ns["a"].state_rows == 1  # only the window [10000, 20000) is still open
    u = ns["u"]  # the two sessions of the comment were emitted; auction 1's [12000, 17000) is open
    assert (u.rows_out, u.state_rows) == (2, 1)
    assert ns["m"].update("a", 43) == 43
