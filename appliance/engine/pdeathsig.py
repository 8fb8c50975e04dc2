"""Linux parent-death signal: a child asks the kernel to kill it when its parent goes away.

The kernel delivers the signal when the *thread* that created the child exits, not just the
process, which is why the engine starts every child from one long-lived spawner thread.
"""

from __future__ import annotations

import ctypes
import sys

PR_SET_PDEATHSIG = 1


def set_parent_death_signal(signum: int) -> bool:
    """Arm the parent-death signal; False where the platform has no prctl."""
    if not sys.platform.startswith("linux"):
        return False
    # The running program already links libc; CDLL(None) finds prctl without a library search.
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    return True
