"""gpuwm's versioned operator state, kept through the storage seam
(:mod:`gpuwm.spark.storage.checkpoint`) on any file system Spark's checkpoint is on.

Every stage of every vnode saves its operator as version ``batch_id``: one
object, written under a name unique to the task attempt, holding the
operator's small tables and the parts it changed; its footer names where
every part is — a part the operator did not change stays where an older
version wrote it. A retried or speculative attempt writes its own object;
the driver's commit of the batch (:meth:`Checkpoint.write_commit`, once,
after every task succeeded) names the versions that won, from the tasks'
results. Operators stay in executor memory between batches (``_CACHE``)
and are used again only when the version they were saved as is the one the
commit names; else they are read back from the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import StateError
from ...frame import bytes_to_table, table_to_bytes  # noqa: F401  (the store's byte form of a table)
from .checkpoint import Checkpoint

# executor-side cache: (checkpoint, stage, vnode, vnodes of the stage) -> (batch_id, version, operator, places)
_CACHE: dict[tuple[str, int, int, int], tuple[int, str, Any, dict]] = {}


@dataclass(frozen=True)
class Prev:
    """The committed batch a batch's tasks start from: its id and the state
    version of every ``"<stage>/<vnode>"``."""

    batch_id: int
    versions: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, commit: dict) -> "Prev":
        return cls(commit["batch_id"], dict(commit["versions"]))

    def saved_vnodes(self, stage: int) -> list[int]:
        """The vnodes that saved stage ``stage`` in this version."""
        return sorted(int(k.split("/")[1]) for k in self.versions if int(k.split("/")[0]) == stage)


@dataclass
class Saved:
    """A state version a task wrote: its object and every object it names."""

    name: str
    places: dict[str, list]

    @property
    def files(self) -> list[str]:
        return sorted({self.name} | {p[0] for p in self.places.values()})


# -- operators -----------------------------------------------------------------------
def save_operator(ck: Checkpoint, batch_id: int, vnode: int, stage: int, op: Any,
                  places: dict[str, list] | None = None) -> Saved:
    """Write the operator's state as version ``batch_id``: its small tables,
    and the parts — one per open window, sort run, session level or dedup
    run — it changed since ``places`` (the parts of the version it was
    loaded from, or saved as last); the others stay where they are."""
    places = places or {}
    parts = op.state_parts()
    kept = {name: places[name] for name, must_write in parts.items() if not must_write and name in places}
    write = op.snapshot_parts([name for name in parts if name not in kept])  # one device -> host copy
    obj, parts = ck.write_version(batch_id, stage, vnode, op.state_tables(), write, kept)
    op.mark_saved(list(write))
    return Saved(obj, parts)


def load_operator(plan: Any, stage: int, prev: Prev | None, vnode: int) -> tuple[Any, dict[str, list]]:
    """Stage ``stage``'s operator on ``vnode`` as of ``prev`` (memory if it
    holds the committed version, else the store), or a fresh one when
    ``prev`` is None (before the first batch); bound to the stage's input
    schema; and its parts' places. When ``prev`` was saved over another
    number of vnodes (the pipeline's ``vnodes`` changed), the operator is
    built from the state of all of them, re-partitioned by key
    (:func:`gpuwm.partition.rescale`)."""
    if prev is None:
        return plan.build(stage), {}
    seg = plan.segment_of(stage)
    key = (str(plan.checkpoint), stage, vnode, seg.tasks)
    want = prev.versions.get(f"{stage}/{vnode}")
    # taken out of the cache while in use: a task that fails after changing
    # it must not leave it behind as the state of batch_id (the retry reloads)
    hit = _CACHE.pop(key, None)
    if hit is not None and hit[0] == prev.batch_id and hit[1] == want:
        return hit[2], hit[3]
    saved = prev.saved_vnodes(stage)
    if saved != list(range(seg.tasks)):
        from gpuwm.partition import rescale

        if not saved:
            raise StateError(f"batch {prev.batch_id}'s commit has no state of stage {stage}")
        if not plan.stages[stage].capabilities.rescale:
            raise StateError(f"stage {stage} ({plan.stages[stage].kind}) was saved over {len(saved)} vnode(s) "
                             f"and cannot be re-partitioned over {seg.tasks}")
        olds = [_read_operator(plan, stage, prev, u)[0] for u in saved]
        return rescale(olds, plan.build(stage), plan.stage_keys(stage), seg.tasks, vnode), {}
    return _read_operator(plan, stage, prev, vnode)


def _read_operator(plan: Any, stage: int, prev: Prev, vnode: int) -> tuple[Any, dict[str, list]]:
    name = prev.versions.get(f"{stage}/{vnode}")
    if name is None:
        raise StateError(f"state of stage {stage}, vnode {vnode} for batch {prev.batch_id} is missing "
                         f"from its commit under {plan.checkpoint}")
    tables, parts, places = plan.checkpoint.read_version(name)
    op = plan.stages[stage].build(plan.profile, plan.backend)
    op.load_state(tables, parts)
    return op.bind(plan.schemas[stage]), places


def keep_operator(plan: Any, stage: int, vnode: int, batch_id: int, saved: Saved, op: Any) -> None:
    """The operator as of ``batch_id`` (saved as ``saved``) stays in this executor's memory."""
    _CACHE[(str(plan.checkpoint), stage, vnode, plan.segment_of(stage).tasks)] = \
        (batch_id, saved.name, op, saved.places)


# -- the driver's side ---------------------------------------------------------------
def committed_versions(results: list[dict]) -> tuple[dict[str, str], list[str], str]:
    """From the tasks' result metrics of a batch: the state version of every
    ``"<stage>/<vnode>"``, every object those name, and the watermark
    filter's state (the name its vnode-0 task wrote)."""
    versions: dict[str, str] = {}
    files: set[str] = set()
    filters = []
    for m in results:
        versions.update(m.get("versions", {}))
        files.update(m.get("files", ()))
        if "filter" in m:
            filters.append(m["filter"])
    if len(filters) != 1:
        raise StateError(f"a batch's tasks wrote {len(filters)} watermark filter states, not one")
    return versions, sorted(files), filters[0]
