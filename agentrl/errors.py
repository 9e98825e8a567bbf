"""Errors a stage reports as one line and a non-zero exit, without a traceback."""


class StageError(RuntimeError):
    """A stage could not produce its outputs for a reason the user can act on."""
