"""gpuwm's exceptions. Every error names the bad value."""


class GpuwmError(Exception):
    """Base class of every error gpuwm raises on purpose."""

    #: a failure while running (exit status 1), not a mistake in what the user gave (2)
    runtime = False


class ConfigError(GpuwmError, ValueError):
    """An operator, profile or window was configured with a bad value."""


class SchemaError(GpuwmError, TypeError):
    """A table lacks a column, has the wrong type, or changed between calls."""


class WatermarkError(GpuwmError, ValueError):
    """A watermark went backwards, or a null event time was refused."""


class BackendError(GpuwmError, RuntimeError):
    """The requested backend cannot run here (e.g. 'gpu' without a GPU)."""


class StateError(GpuwmError, RuntimeError):
    """Saved state is missing or damaged (a checkpoint's file, part or batch)."""

    runtime = True


def near_miss(name: str, choices) -> str:
    """``": did you mean 'x'?"`` for the choice closest to ``name``, or "".

    >>> near_miss("windw", ["window", "sort"]), near_miss("zzz", ["window"])
    (": did you mean 'window'?", '')
    """
    import difflib

    near = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f": did you mean {near[0]!r}?" if near else ""


def unknown_keys(where: str, unknown: set, allowed) -> str:
    """The message for keys of ``where`` outside ``allowed``, with the near
    miss of each where there is one (``'tumbel': did you mean 'tumble'?``).

    >>> unknown_keys("window", {"tumbel"}, {"tumble", "hop", "by"})
    "window: unknown key 'tumbel': did you mean 'tumble'?; expected one of ['by', 'hop', 'tumble']"
    """
    said = [repr(k) + near_miss(k, allowed) for k in sorted(map(str, unknown))]
    return f"{where}: unknown key{'s' if len(said) > 1 else ''} {', '.join(said)}; expected one of {sorted(allowed)}"


class SinkError(GpuwmError, RuntimeError):
    """A sink did not take a micro-batch's rows (a ``foreachBatch`` function raised): nothing of the batch was
    committed, and a restart runs it again."""

    runtime = True
