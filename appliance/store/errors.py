"""Errors raised by the durable stores.

``StoreRefused`` means "this binary, with this configuration, will not open that store"; nothing
was changed on disk. ``StoreCorrupt`` means a checksum failed while the store was in use: the
process should stop rather than act on damaged data.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of every error the stores raise on purpose."""


class StoreRefused(StoreError):
    """Opening was refused (incompatible, damaged or locked store); the files are unchanged."""

    def __init__(self, message: str):
        self.message = message
        super().__init__(message)


class StoreCorrupt(StoreError):
    """A stored blob failed its checksum (or an invariant) while the store was open."""


class WorkerRecordRefused(StoreError):
    """A worker store operation that the invocation's durable record forbids; nothing changed.

    ``reason`` is a short machine-readable tag (``binding_mismatch``, ``not_reserved``,
    ``no_permit``, ``permit_mismatch``, ``already_consumed``, ``fenced``, ``receipt_mismatch``,
    ``unknown_execution``, ``execution_finished``) so that a route can map it to an answer.
    """

    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(message)


class StoreWriteFailed(StoreError):
    """A commit failed (I/O error, disk full): its durability is unknown; stop the process."""
