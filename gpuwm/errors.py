"""gpuwm's exceptions. Every error names the bad value."""


class GpuwmError(Exception):
    """Base class of every error gpuwm raises on purpose."""


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


def unknown_keys(where: str, unknown: set, allowed) -> str:
    """The message for keys of ``where`` outside ``allowed``, with the near
    miss of each where there is one (``'tumbel': did you mean 'tumble'?``).

    >>> unknown_keys("window", {"tumbel"}, {"tumble", "hop", "by"})
    "window: unknown key 'tumbel': did you mean 'tumble'?; expected one of ['by', 'hop', 'tumble']"
    """
    import difflib

    said = []
    for k in sorted(map(str, unknown)):
        near = difflib.get_close_matches(k, [str(a) for a in allowed], n=1, cutoff=0.6)
        said.append(f"{k!r}: did you mean {near[0]!r}?" if near else repr(k))
    return f"{where}: unknown key{'s' if len(said) > 1 else ''} {', '.join(said)}; expected one of {sorted(allowed)}"
