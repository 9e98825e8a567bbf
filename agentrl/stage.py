"""What every stage entry point shares: exit codes for bad params and missing tracking."""

from __future__ import annotations

import sys
from collections.abc import Callable

from agentrl.config import ConfigError
from agentrl.errors import StageError
from agentrl.tracking import TrackingUnavailable

EXIT_BAD_PARAMS = 2
EXIT_NO_TRACKING = 3
EXIT_STAGE_FAILED = 1


def run_stage(main: Callable[[], None]) -> None:
    """Run a stage body: bad params exit 2, an unreachable tracker 3, a stage error 1; one line each."""
    try:
        main()
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_BAD_PARAMS)
    except TrackingUnavailable as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_NO_TRACKING)
    except StageError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_STAGE_FAILED)
