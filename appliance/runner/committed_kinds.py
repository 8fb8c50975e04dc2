"""The command kinds beyond the baseline that this voter's log has committed.

Theory of operation (issue 36, finding 2; docs/raft.md, "Version gate"). A learner that has
never reported is left out of the version gate, so the log may commit kinds its binary cannot
apply; it stops at the first such entry (SPEC §11), which is safe for a learner but not for a
voter the quorum counts on. So ``promote_voter`` asks for a report from the learner naming every
kind the log holds beyond the baseline (``capabilities.promotion_refusal``), and this object
says which kinds those are.

The ``Machine`` notes each committed entry's kind as it applies it (``note``: the version gate's
kind, ``features.command_kind``; refused commands count, since a voter must decode them too).
Only the first entry of each kind writes: ``committed-kinds.json`` in the data_dir (0600, atomic
replace, fsynced), so a restart keeps what the checkpoint no longer says. The answer is exact
only for entries this voter applied itself since its store was created: a store that has a
checkpoint but no file (written by an earlier binary), or a snapshot installed from the leader,
hides the kinds before that point. Then ``required`` is every kind this binary applies beyond the
baseline: this voter applied (or decoded) everything before, so nothing committed lies outside
its own binary, and a learner whose binary reports all of them is safe — stricter than needed,
never less. A file that cannot be written or read counts as that unknown prefix too.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Final

from appliance.capabilities import BASELINE_COMMAND_KINDS, COMMAND_KINDS_MAX
from appliance.store.sqlite import fsync_dir

log = logging.getLogger("appliance.runner.committed_kinds")

FILE_NAME: Final = "committed-kinds.json"
FILE_MODE: Final = 0o600
FILE_BYTES_MAX: Final = 64 * 1024


class CommittedKinds:
    def __init__(self, path: Path | None, *, fresh_store: bool, known: frozenset[str]) -> None:
        """``fresh_store``: the store has no checkpoint yet (every entry will be applied here);
        ``known``: every kind this binary applies (the answer while the prefix is unknown)."""
        self._path = path
        self._known = frozenset(known) - BASELINE_COMMAND_KINDS
        self._lock = threading.Lock()
        self._kinds: set[str] = set()
        self._complete = fresh_store
        loaded = self._load()
        if loaded is not None:
            self._complete, self._kinds = loaded
        elif path is not None:
            self._save()  # a fresh store starts its record; an older one records "unknown"

    def note(self, kind: str) -> None:
        """A committed entry of ``kind`` was applied (cheap unless the kind is new here)."""
        if kind in BASELINE_COMMAND_KINDS or kind in self._kinds:
            return
        with self._lock:
            self._kinds.add(kind)
        self._save()

    def prefix_unknown(self) -> None:
        """A snapshot replaced the log: the kinds before it are no longer known here."""
        with self._lock:
            if not self._complete:
                return
            self._complete = False
        self._save()

    def required(self) -> frozenset[str]:
        """The kinds a new voter must apply: those committed, or, while the kinds before a
        snapshot or an older store are unknown, every kind this binary applies."""
        with self._lock:
            kinds = frozenset(self._kinds)
            return kinds if self._complete else kinds | self._known

    @property
    def complete(self) -> bool:
        with self._lock:
            return self._complete

    # ---- the file ------------------------------------------------------------------------------

    def _load(self) -> tuple[bool, set[str]] | None:
        path = self._path
        if path is None or not path.exists():
            return None
        try:
            if path.stat().st_size > FILE_BYTES_MAX:
                raise ValueError(f"larger than {FILE_BYTES_MAX} bytes")
            document = json.loads(path.read_text(encoding="utf-8"))
            complete, kinds = document["complete"], document["kinds"]
            if type(complete) is not bool or not isinstance(kinds, list):
                raise ValueError("expected complete (a boolean) and kinds (a list)")
            if len(kinds) > COMMAND_KINDS_MAX or not all(isinstance(k, str) for k in kinds):
                raise ValueError(f"kinds: at most {COMMAND_KINDS_MAX} strings")
            return complete, set(kinds)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("%s ignored (%s): the kinds committed so far count as unknown", path, exc)
            return False, set()

    def _save(self) -> None:
        path = self._path
        if path is None:
            return
        with self._lock:
            document = {"complete": self._complete, "kinds": sorted(self._kinds)}
            staging = path.with_name(path.name + ".writing")
            try:
                fd = os.open(
                    staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE
                )
                try:
                    os.fchmod(fd, FILE_MODE)
                    os.write(fd, json.dumps(document, sort_keys=True).encode())
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(staging, path)
                fsync_dir(path.parent)
            except OSError as exc:
                # Unrecorded, a restart would believe an older list: make it count as unknown.
                log.warning(
                    "%s not written (%s): the kinds count as unknown after a restart", path, exc
                )
                try:
                    path.unlink(missing_ok=True)
                except OSError:
                    log.error("%s could not be removed either; remove it by hand", path)
