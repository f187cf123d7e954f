"""Peak resident memory, per stage.

``parathink run`` executes every stage in one process, and the kernel's peak (``ru_maxrss``) only ever grows, so
without a reset a stage would report the largest peak of any stage before it. On Linux the runner resets the
process's high-water mark (``/proc/self/clear_refs``) as each stage starts and reads ``VmHWM`` when it ends;
elsewhere ``reset_peak`` returns False and the figure is the process's peak so far.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_peak() -> bool:
    """Start a new high-water mark (Linux >= 4.0); False where the kernel does not allow it."""
    try:
        _CLEAR_REFS.write_text("5")  # "5": reset the peak resident set size (proc(5))
    except OSError:
        return False
    return True


def peak_rss_mb() -> float:
    """Peak resident memory since the last reset (or since the process started), in MiB."""
    try:
        found = re.search(r"^VmHWM:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
        if found:
            return int(found.group(1)) / 1024
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KB on Linux
