"""What an engine child reads about itself from ``/proc/self/status``."""

from __future__ import annotations


def _status_field(name: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{name} missing from /proc/self/status")


def data_size_bytes() -> int:
    """VmData: the private writable memory that RLIMIT_DATA counts."""
    return _status_field("VmData")


def rss_bytes() -> int:
    """VmRSS: what the parent watches for growth across executions."""
    return _status_field("VmRSS")
