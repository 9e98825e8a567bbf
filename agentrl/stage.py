"""What every stage entry point shares: exit codes for bad params and missing tracking."""

from __future__ import annotations

import sys
from collections.abc import Callable

from agentrl.config import ConfigError
from agentrl.tracking import TrackingUnavailable

EXIT_BAD_PARAMS = 2
EXIT_NO_TRACKING = 3


def run_stage(main: Callable[[], None]) -> None:
    """Run a stage body; bad params exit 2 and an unreachable tracker exits 3, one line each."""
    try:
        main()
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_BAD_PARAMS)
    except TrackingUnavailable as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_NO_TRACKING)
