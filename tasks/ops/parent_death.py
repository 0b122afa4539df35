"""Die with the parent: a child process of a run (a gateway worker, the temporary Prefect
server) is SIGKILLed when the run's process dies, even by SIGKILL, so no orphan outlives it.

Standard library only: the temporary server's boot script imports this before anything else.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys


def die_with_parent(parent: int) -> None:
    """Linux's parent-death signal; elsewhere a no-op (the caller's other ways of noticing a
    dead parent still apply). Exits at once if the parent died before the signal was set."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        sys.exit(0)
