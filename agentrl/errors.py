"""Errors a stage reports as one line and a non-zero exit, without a traceback."""


class StageError(RuntimeError):
    """A stage could not produce its outputs for a reason the user can act on (exit 1)."""


class ModelError(StageError):
    """A model directory that is missing, corrupt, or does not fit the chat format: the
    same every time, so it exits 2 like bad params."""


class ServerUnreachable(StageError):
    """A server the stage talks to (tracking, rollouts) does not answer: it may be starting
    or restarting, so it exits 3, which a retry can fix."""
