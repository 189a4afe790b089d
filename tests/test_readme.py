"""The README a newcomer reads: the two commands first, at most 300 lines,
every link to a page or file resolving (and those pages' links too), and
its code blocks running as printed, their comments holding. (The
``accelerate`` block runs in ``tests/test_accelerate.py``, on its Spark
session.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COMMANDS = ["python3 -m venv .venv && .venv/bin/pip install -e . pyspark==4.1.3 && .venv/bin/gpuwm demo",
            "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' pyspark==4.1.3 && .venv/bin/python -m pytest -q"]


def code_blocks(page: Path, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", page.read_text(), re.S)


def section(page: Path, title: str) -> Path:
    return page.read_text().split(title, 1)[1]


def test_readme_opens_with_the_two_commands_and_is_short():
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    assert code_blocks(README, "bash")[0].splitlines() == COMMANDS
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1] == COMMANDS[1]


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+://|#|mailto:", t)]


def test_every_link_resolves():
    """From the README, every page it links and every page those link,
    each relative link names a file that exists."""
    todo, seen, broken = [README], set(), []
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        for link in _links(page):
            target = (page.parent / link.split("#")[0]).resolve()
            if not target.exists():
                broken.append(f"{page.relative_to(ROOT)}: {link}")
            elif target.suffix == ".md":
                todo.append(target)
    assert not broken
    pages = {p.relative_to(ROOT).as_posix() for p in seen}
    # every reference page is reachable from the README
    for p in [*ROOT.glob("gpuwm/**/README.md"), ROOT / "gpuwm" / "DESIGN.md", ROOT / "tests" / "README.md",
              ROOT / "benchmarks" / "README.md"]:
        assert p.relative_to(ROOT).as_posix() in pages, p


def test_readme_operator_example_runs_and_its_comments_hold():
    code = re.search(r"```python\n(.*?)```", section(README, "## The operators, without Spark"), re.S).group(1)
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)
    assert ns["f"].watermark == 10_000 and ns["f"].late_rows == 0
    rows = sorted(zip(*(ns["closed"].column(c).to_pylist() for c in ("auction", "bids", "max_price"))))
    assert rows == [(1, 1, 10), (2, 2, 40)]
    assert ns["a"].state_rows == 1  # auction 1's [10000, 20000) is still open


def test_operators_page_example_runs_and_its_comments_hold():
    page = ROOT / "gpuwm" / "README.md"
    code = re.search(r"```python\n(.*?)```", section(page, "## The operators"), re.S).group(1)
    ns: dict = {}
    exec(compile(code, str(page), "exec"), ns)
    assert (ns["f"].watermark, ns["f"].late_rows) == (10_000, 0)
    assert ns["a"].state_rows == 1  # only the window [10000, 20000) is still open
    u = ns["u"]  # the two sessions of the comment were emitted; auction 1's [12000, 17000) is open
    assert (u.rows_out, u.state_rows) == (2, 1)
    assert ns["m"].update("a", 43) == 43


def test_readme_spec_is_a_valid_spec(tmp_path):
    """The README's one spec passes the checks ``gpuwm run`` makes before
    Spark starts, and a misspelt key in it is named with its near miss."""
    from gpuwm.errors import ConfigError
    from gpuwm.spark.front.spec import load_spec

    (block,) = code_blocks(README, "json")
    (tmp_path / "q7.json").write_text(block)
    spec = load_spec(str(tmp_path / "q7.json"))
    assert spec["sources"]["bids"]["watermark"] == {"column": "date_time", "delay": "4 seconds"}
    assert spec["sink"] == {"parquet": "out/q7sql"}
    (tmp_path / "bad.json").write_text(block.replace('"sink"', '"snik"'))
    with pytest.raises(ConfigError, match=r"'snik'.*'sink'"):
        load_spec(str(tmp_path / "bad.json"))
