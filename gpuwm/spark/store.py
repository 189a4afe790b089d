"""gpuwm's versioned state store under ``<checkpoint>/gpuwm/``.

Every stage of every vnode saves its operator as version ``batch_id``:
``state/<batch_id>/vnode-<V>/stage-<S>/`` holds the operator's small tables
(``<name>.arrow``) and its parts (``parts/<name>.arrow``); a part the
operator did not change is a hard link to the previous version's file, so a
batch writes what it changed and every version is complete on its own. The
driver commits a batch (``filter.arrow``, ``metrics.json``, ``_COMMITTED``)
after every task of it succeeded; a replayed batch rewrites the same files.
Operators stay in executor memory between batches (``_CACHE``) and are
reloaded from the store on a miss.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from ..errors import StateError
from ..frame import bytes_to_table, table_to_bytes  # noqa: F401  (the store's byte form of a table)

# executor-side cache: (checkpoint, stage, vnode, vnodes of the stage) -> (batch_id, operator)
_CACHE: dict[tuple[str, int, int, int], tuple[int, Any]] = {}


# -- Arrow IPC -----------------------------------------------------------------------
def write_table(path: str, t: pa.Table) -> None:
    with pa.OSFile(path, "wb") as fh, pa.ipc.new_stream(fh, t.schema) as w:  # no in-memory copy
        w.write_table(t)


def read_table(path: str) -> pa.Table:
    try:
        with pa.OSFile(path, "rb") as fh:
            return pa.ipc.open_stream(fh).read_all()
    except FileNotFoundError:
        raise StateError(f"gpuwm: state file {path} is missing") from None
    except pa.ArrowInvalid as e:
        raise StateError(f"gpuwm: state file {path} is damaged: {e}") from None


# -- layout --------------------------------------------------------------------------
def state_root(checkpoint: str) -> str:
    return os.path.join(checkpoint, "gpuwm", "state")


def batch_dir(checkpoint: str, batch_id: int) -> str:
    return os.path.join(state_root(checkpoint), f"{batch_id:010d}")


def stage_dir(checkpoint: str, batch_id: int, vnode: int, stage: int) -> str:
    return os.path.join(batch_dir(checkpoint, batch_id), f"vnode-{vnode:05d}", f"stage-{stage:02d}")


def _atomic_dir(final: str, write) -> None:
    """Write a directory completely under a temporary name, then rename it."""
    tmp = f"{final}.tmp-{os.getpid()}-{time.monotonic_ns()}"
    os.makedirs(tmp)
    write(tmp)
    if os.path.exists(final):
        shutil.rmtree(final)
    os.replace(tmp, final)


# -- operators -----------------------------------------------------------------------
def save_operator(checkpoint: str, batch_id: int, vnode: int, stage: int, op: Any,
                  prev_batch: int | None = None) -> None:
    """Write the operator's state as version ``batch_id``: its small tables
    whole, and its parts under ``parts/`` — one file per open window, sort
    run, session level or dedup run. A part the operator does not need
    written again is a hard link to its file in version ``prev_batch`` (the
    version the operator was loaded from; copied where the file system has
    no hard links)."""
    tables = op.state_tables()
    parts = op.state_parts()
    final = stage_dir(checkpoint, batch_id, vnode, stage)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    prev = None if prev_batch is None else os.path.join(stage_dir(checkpoint, prev_batch, vnode, stage), "parts")
    written: list[str] = []

    def write(d: str) -> None:
        for name, t in tables.items():
            write_table(os.path.join(d, f"{name}.arrow"), t)
        os.makedirs(os.path.join(d, "parts"))
        for name, must_write in parts.items():
            dst = os.path.join(d, "parts", f"{name}.arrow")
            src = None if prev is None else os.path.join(prev, f"{name}.arrow")
            if not must_write and src is not None and os.path.exists(src):
                try:
                    os.link(src, dst)
                except OSError:  # no hard links on this file system: copy
                    shutil.copyfile(src, dst)
            else:
                write_table(dst, op.snapshot_part(name))
                written.append(name)

    _atomic_dir(final, write)
    op.mark_saved(written)


def load_operator(plan: Any, stage: int, batch_id: int | None, vnode: int) -> Any:
    """Stage ``stage``'s operator on ``vnode`` as of ``batch_id`` (memory if
    cached there, else the store), or a fresh one when ``batch_id`` is None
    (before the first batch); bound to the stage's input schema. When
    ``batch_id`` was saved over another number of vnodes (the pipeline's
    ``vnodes`` changed), the operator is built from the state of all of
    them, re-partitioned by key (:func:`gpuwm.partition.rescale`)."""
    if batch_id is None:
        return plan.build(stage)
    seg = plan.segment_of(stage)
    key = (plan.checkpoint, stage, vnode, seg.tasks)
    # taken out of the cache while in use: a task that fails after changing
    # it must not leave it behind as the state of batch_id (the retry reloads)
    hit = _CACHE.pop(key, None)
    if hit is not None and hit[0] == batch_id:
        return hit[1]
    saved = saved_vnodes(plan.checkpoint, batch_id, stage)
    if saved != list(range(seg.tasks)):
        from gpuwm.partition import rescale

        if not plan.stages[stage].capabilities.rescale:
            raise StateError(f"gpuwm: stage {stage} ({plan.stages[stage].kind}) was saved over {len(saved)} vnode(s) "
                             f"and cannot be re-partitioned over {seg.tasks}")
        olds = [_read_operator(plan, stage, batch_id, u) for u in saved]
        return rescale(olds, plan.build(stage), seg.keys, seg.tasks, vnode)
    return _read_operator(plan, stage, batch_id, vnode)


def saved_vnodes(checkpoint: str, batch_id: int, stage: int) -> list[int]:
    """The vnodes that saved stage ``stage`` in version ``batch_id``."""
    d = batch_dir(checkpoint, batch_id)
    name = f"stage-{stage:02d}"
    try:
        entries = os.listdir(d)
    except FileNotFoundError:
        raise StateError(f"gpuwm: the state of batch {batch_id} is missing under {d}") from None
    return sorted(int(e.removeprefix("vnode-")) for e in entries
                  if e.startswith("vnode-") and not e.count(".") and os.path.isdir(os.path.join(d, e, name)))


def _read_operator(plan: Any, stage: int, batch_id: int, vnode: int) -> Any:
    d = stage_dir(plan.checkpoint, batch_id, vnode, stage)
    if not os.path.isdir(d):
        raise StateError(f"gpuwm: state of stage {stage}, vnode {vnode} for batch {batch_id} is missing under {d}")
    tables = {f.removesuffix(".arrow"): read_table(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".arrow")}
    pd_ = os.path.join(d, "parts")
    parts = {f.removesuffix(".arrow"): read_table(os.path.join(pd_, f)) for f in os.listdir(pd_)}
    op = plan.stages[stage].build(plan.profile, plan.backend)
    op.load_state(tables, parts)
    return op.bind(plan.schemas[stage])


def keep_operator(plan: Any, stage: int, vnode: int, batch_id: int, op: Any) -> None:
    """The operator as of ``batch_id`` stays in this executor's memory."""
    _CACHE[(plan.checkpoint, stage, vnode, plan.segment_of(stage).tasks)] = (batch_id, op)


# -- the driver's side ---------------------------------------------------------------
def now_for_batch(checkpoint: str, batch_id: int) -> str:
    """The processing time of a batch, fixed at its first attempt so that a
    replay sees the same idleness."""
    d = os.path.join(checkpoint, "gpuwm", "now")
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, str(batch_id))
    if os.path.exists(p):
        with open(p) as fh:
            return fh.read().strip()
    now = datetime.now(timezone.utc).isoformat()
    with open(p + ".tmp", "w") as fh:
        fh.write(now)
    os.replace(p + ".tmp", p)
    return now


def committed_batches(checkpoint: str) -> list[int]:
    root = state_root(checkpoint)
    if not os.path.isdir(root):
        return []
    return sorted(int(n) for n in os.listdir(root)
                  if n.isdigit() and os.path.exists(os.path.join(root, n, "_COMMITTED")))


def load_filter_state(checkpoint: str, batch_id: int) -> bytes:
    p = os.path.join(batch_dir(checkpoint, batch_id), "filter.arrow")
    try:
        with open(p, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        raise StateError(f"gpuwm: the watermark state of committed batch {batch_id} is missing ({p})") from None


def commit_batch(checkpoint: str, batch_id: int, filter_state: bytes, metrics: dict, keep: int = 2) -> None:
    d = batch_dir(checkpoint, batch_id)
    os.makedirs(d, exist_ok=True)
    for name, data in (("filter.arrow", filter_state), ("metrics.json", json.dumps(metrics).encode())):
        tmp = os.path.join(d, name + ".tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, os.path.join(d, name))
    with open(os.path.join(d, "_COMMITTED"), "w") as fh:
        fh.write(str(batch_id))
    root = state_root(checkpoint)
    for name in os.listdir(root):  # old versions: keep the last `keep`
        try:
            b = int(name.split(".")[0])
        except ValueError:
            continue
        if b <= batch_id - keep or ".tmp-" in name:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    from .exchange import exchange_root

    ex = exchange_root(checkpoint)  # the batch's exchanged pieces: a replay writes them again
    for name in os.listdir(ex) if os.path.isdir(ex) else ():
        if name.isdigit() and int(name) <= batch_id:
            shutil.rmtree(os.path.join(ex, name), ignore_errors=True)
    nd = os.path.join(checkpoint, "gpuwm", "now")
    for name in os.listdir(nd):
        if name.isdigit() and int(name) <= batch_id - keep:
            os.remove(os.path.join(nd, name))
