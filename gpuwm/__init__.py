"""gpuwm: event-time operators for micro-batch streams, on GPU (CuPy) or CPU.

>>> import gpuwm
>>> sorted(gpuwm.PROFILES)
['flink', 'risingwave', 'spark']
"""

from .backend import Backend, get_backend, gpu_available, set_backend
from .errors import BackendError, ConfigError, GpuwmError, SchemaError, StateError, WatermarkError
from .profiles import PROFILES, Profile, resolve as resolve_profile
from .dedup import Dedup
from .over import Over
from .sort import StreamSort
from .watermark import WatermarkFilter, WatermarkMerger
from .session import Session
from .window import Hop, Tumble, WindowAggregate

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
    "StateError",
    "Session",
    "StreamSort",
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
