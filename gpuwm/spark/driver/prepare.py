"""A checkpoint made ready before Spark starts a query: gpuwm's format,
its state whole and as far as Spark's commits, the same pipeline (or only
a rescale of it) as the one that wrote the state, and this query its only
owner (:func:`prepare_checkpoint`)."""

from __future__ import annotations

import json
from typing import Any

from ...backend import log
from ...errors import ConfigError, StateError
from ..executor.plan import Plan
from ..storage.checkpoint import FORMAT, Checkpoint, Owner

_NONE = object()  # a key or item one side lacks

def prepare_checkpoint(ck: Checkpoint, plan: Plan) -> Owner:
    """Before the query starts: the checkpoint is usable, its state is
    whole and of this pipeline, and no other query runs on it."""
    from .drain import has_drains

    ck.loc.probe("checkpoint location", "gpuwm")
    fmt = ck.loc.read_json(Checkpoint.FORMAT_FILE)
    # (state objects with no commit beside them are a stopped task's leftovers after gpuwm/ was deleted,
    # not another layout: check_state below refuses or ignores them)
    if fmt is None and ck.loc.list("gpuwm/state") and ck.loc.list("gpuwm/commits"):
        raise ConfigError(f"checkpoint {ck} holds gpuwm state in an older layout (hard-linked state directories, "
                          f"before format {FORMAT}), which this gpuwm does not read: finish it with the gpuwm that "
                          "wrote it, or start from a new checkpoint location")
    if fmt is not None and fmt.get("format") != FORMAT:
        raise ConfigError(f"checkpoint {ck} holds gpuwm state of format {fmt.get('format')}; this gpuwm reads "
                          f"format {FORMAT}: use the gpuwm that wrote it, or a new checkpoint location")
    check_state(ck)  # (first: a checkpoint whose gpuwm/ is gone is named for that)
    last = ck.newest_logged_batch()
    if last is not None and ck.logged_offsets(last):
        if ck.logged_offset(last, "drain") is not None:
            raise ConfigError(
                f"checkpoint {ck} was written by an earlier gpuwm, whose drain source was a Python data source "
                "(this one's is a file source), and Spark cannot restart a query whose sources changed. Use a "
                "new checkpoint location.")
        if not has_drains(ck):
            raise ConfigError(
                f"checkpoint {ck} was written by a gpuwm without drain batches: Spark's offset log has "
                "no gpuwm drain source, and Spark cannot restart a query whose sources changed. Use a new "
                "checkpoint location.")
    desc = plan.describe()
    old = ck.loc.read(Checkpoint.PIPELINE)
    old = None if old is None else old.decode()
    if old is not None and old != desc and not _rescales(ck, plan, old, desc):
        changed = json_changes(json.loads(old), json.loads(desc))
        raise ConfigError(
            f"checkpoint {ck} was written by another pipeline (checkpoint → now): {'; '.join(changed)}. Use a "
            "new checkpoint location, or restore these (only vnodes may change: a rescale)")
    owner = Owner.take(ck)
    if fmt is None:
        ck.loc.publish_json(Checkpoint.FORMAT_FILE, {"format": FORMAT})
    if old != desc:  # a new checkpoint, or a rescale (the next batch re-partitions the state)
        ck.loc.publish_bytes(Checkpoint.PIPELINE, desc.encode())
    return owner


def check_state(ck: Checkpoint) -> None:
    """gpuwm's state reaches Spark's last committed batch and every file
    its last commit names is there; else the checkpoint is refused (it
    would restart from other state than Spark's offsets say)."""
    spark_done = ck.spark_batches("commits")
    ours = ck.committed_batches()
    if spark_done and (not ours or ours[-1] < spark_done[-1]):
        have = f"gpuwm's last commit is batch {ours[-1]}" if ours else \
            f"there is no gpuwm state ({ck}/gpuwm/commits is empty or missing)"
        raise StateError(f"checkpoint {ck} is damaged: Spark has committed batch {spark_done[-1]} but "
                         f"{have}; restore {ck}/gpuwm from a backup, or start from a new checkpoint location")
    if ours:
        c = ck.commit(ours[-1])
        missing = ck.loc.missing(list(c.get("files", ())) + [c["filter"]])
        if missing:
            raise StateError(f"checkpoint {ck} is damaged: batch {ours[-1]}'s state is missing "
                             f"{len(missing)} file(s), e.g. {ck}/{missing[0]}; restore it from a backup, or start "
                             "from a new checkpoint location")


def json_changes(a: Any, b: Any, path: str = "$") -> list[str]:
    """Where two JSON values differ, each ``path: old → new``, the values
    short (:func:`_short`).

    >>> json_changes({"w": {"delay": 2, "split": "s"}, "st": [1, 2]}, {"w": {"delay": 3, "split": "s"}, "st": [1]})
    ['$.w.delay: 2 → 3', '$.st[1]: 2 → (none)']
    >>> json_changes({"d": "datetime.timedelta(seconds=2)"}, {"d": "datetime.timedelta(seconds=3, microseconds=500000)"})
    ['$.d: 2 s → 3.5 s']
    """
    if isinstance(a, dict) and isinstance(b, dict):
        return [c for k in list(a) + [k for k in b if k not in a]
                for c in json_changes(a.get(k, _NONE), b.get(k, _NONE), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        return [c for i in range(max(len(a), len(b)))
                for c in json_changes(a[i] if i < len(a) else _NONE, b[i] if i < len(b) else _NONE, f"{path}[{i}]")]
    if a == b:
        return []
    return [f"{path}: {_short(a)} → {_short(b)}"]


def _short(v: Any) -> str:
    """A pipeline description's value as a person reads it: strings
    unquoted, ``datetime.timedelta(seconds=10)`` as ``10 s``."""
    if v is _NONE:
        return "(none)"
    if not isinstance(v, str):
        return json.dumps(v)
    import re
    from datetime import timedelta

    def seconds(m: re.Match) -> str:
        kw = {k.strip(): float(x) for k, x in (a.split("=") for a in m.group(1).split(",") if "=" in a)}
        return f"{timedelta(**kw).total_seconds():g} s"

    return re.sub(r"datetime\.timedelta\(([^)]*)\)", seconds, v)


def _rescales(ck: Checkpoint, plan: Plan, old: str, new: str) -> bool:
    """The pipelines differ only in ``vnodes`` (online rescale): True when
    every stage's state can be re-partitioned, else a ConfigError."""
    a, b = json.loads(old), json.loads(new)
    if {k: v for k, v in a.items() if k != "vnodes"} != {k: v for k, v in b.items() if k != "vnodes"}:
        return False
    fixed = [f"stage {i} ({s.kind})" for i, s in enumerate(plan.stages) if not s.capabilities.rescale]
    if fixed:
        raise ConfigError(f"checkpoint {ck!r} was written with vnodes={a.get('vnodes')}; rescaling to "
                          f"vnodes={plan.vnodes} re-partitions every stage's state by key, which "
                          f"{', '.join(fixed)} cannot do yet: keep vnodes={a.get('vnodes')}")
    log.info("gpuwm: rescaling %s from vnodes=%s to %s: the next batch re-partitions the state by key",
             ck, a.get("vnodes"), plan.vnodes)
    return True
