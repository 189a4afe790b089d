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
