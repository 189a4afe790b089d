"""gpuwm: event-time operators for micro-batch streams, on GPU (CuPy) or CPU.

>>> import gpuwm
>>> sorted(gpuwm.PROFILES)
['flink', 'risingwave', 'spark']
"""

from .errors import BackendError, ConfigError, GpuwmError, SchemaError, SinkError, StateError, WatermarkError

#: the names this package exports, each imported from its module on first
#: use (PEP 562): ``import gpuwm`` stays cheap where only a little of it
#: is needed, as in the Python worker of a Spark data source
_LAZY = {
    "Backend": "backend", "get_backend": "backend", "gpu_available": "backend", "set_backend": "backend",
    "PROFILES": "profiles", "Profile": "profiles", "resolve_profile": "profiles",
    "Dedup": "dedup", "Over": "over", "StreamSort": "sort", "WatermarkFilter": "watermark",
    "WatermarkMerger": "watermark", "Session": "session", "Hop": "window", "Tumble": "window",
    "WindowAggregate": "window", "TopN": "topn",
}


def __getattr__(name: str):
    import importlib

    if name in _LAZY:
        mod = importlib.import_module(f".{_LAZY[name]}", __name__)
        value = getattr(mod, "resolve" if name == "resolve_profile" else name)
    else:  # a submodule (``gpuwm.window``): imported as ``import gpuwm.window`` would
        try:
            value = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [
    "Backend",
    "BackendError",
    "ConfigError",
    "Dedup",
    "GpuwmError",
    "Hop",
    "Over",
    "PROFILES",
    "Profile",
    "SchemaError",
    "SinkError",
    "StateError",
    "Session",
    "StreamSort",
    "TopN",
    "Tumble",
    "WatermarkError",
    "WatermarkFilter",
    "WatermarkMerger",
    "WindowAggregate",
    "get_backend",
    "gpu_available",
    "resolve_profile",
    "set_backend",
]
