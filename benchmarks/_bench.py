"""What the Spark benchmark scripts share: which progress entries to time,
and how results are written (``results.json`` + ``results.md``)."""

from __future__ import annotations

import json
from pathlib import Path


def data_progress(query, pipeline) -> list[dict]:
    """Spark's progress of the micro-batches that had input, as gpuwm's
    metrics count it (a batch read directly reports gpuwm's count to Spark's
    progress too; gpuwm's own count is the one the benchmarks trust)."""
    ids = {m["batch_id"] for m in pipeline.history if m["input_rows"]}
    return [p for p in query.recentProgress if p["batchId"] in ids]


def write_results(out: str | Path, payload: dict, md: list[str]) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(payload, indent=2))
    (out / "results.md").write_text("\n".join(md) + "\n")
    return out
