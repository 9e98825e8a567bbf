"""The one error path of every entry point (stages and the ``agentrl`` CLI).

An error the user can act on is one line on stderr and an exit code a scheduler can act
on; a traceback only with ``AGENTRL_DEBUG=1``:

- 2: bad params, a plugin that does not load (:class:`ConfigError`), a model that is not
  where params or arguments say (:class:`ModelError`): the same error every time;
- 1: the stage could not produce its outputs (:class:`StageError`);
- 3: a server the stage needs is unreachable (:class:`ServerUnreachable`: the tracking
  server, the rollout server): may pass on retry.

Anything else is a bug and keeps Python's traceback (exit 1).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from agentrl.config import ConfigError
from agentrl.errors import ModelError, ServerUnreachable, StageError

EXIT_STAGE_FAILED = 1
EXIT_BAD_PARAMS = 2
EXIT_UNREACHABLE = 3
# first match wins: subclasses before their bases
EXIT_CODES: dict[type[Exception], int] = {
    ConfigError: EXIT_BAD_PARAMS,
    ModelError: EXIT_BAD_PARAMS,
    ServerUnreachable: EXIT_UNREACHABLE,
    StageError: EXIT_STAGE_FAILED,
}
DEBUG_ENV = "AGENTRL_DEBUG"


@contextmanager
def error_path() -> Iterator[None]:
    """Turn the errors of :data:`EXIT_CODES` into one line and their exit code."""
    try:
        yield
    except tuple(EXIT_CODES) as err:
        if os.environ.get(DEBUG_ENV) == "1":
            traceback.print_exc()
        print(f"error: {err}", file=sys.stderr)
        code = next(c for kind, c in EXIT_CODES.items() if isinstance(err, kind))
        raise SystemExit(code) from None


def run_stage(main: Callable[[], None]) -> None:
    """Run a stage body through :func:`error_path`."""
    with error_path():
        main()
