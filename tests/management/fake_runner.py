"""A stand-in for the runner loop's command executor: a tiny in-memory scheduler.

It is NOT the runner: it exists so the listener's contract can be proven in isolation (the
listener must not care what executes commands). Semantics follow seeds/001 loosely: ids are
increasing integers, cancel moves a Running occurrence to Cancelling, acknowledge_stopped moves
Unknown/Cancelling to Abandoned. Its replies deliberately contain things that must be redacted
(source code, a storage path) so tests can prove the listener strips them.
"""

from __future__ import annotations

import copy
import json
import threading
from typing import Any

from appliance.management import NotOwner

SECRET_PATH = "/var/lib/appliance/secret-store-path"


class FakeRunner:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner = True
        self.leader_hint: str | None = "n2@127.0.0.1:4502"
        # When set, a not-owner answer is the runner loop's own 409 shape naming the owner's
        # management listener (appliance/management/wiring.py ``with_leader_host``).
        self.owner_management_addr: str | None = None
        self.not_owner_answers = 0  # answer not-owner this many more times, even as the owner
        self.fail_next: Exception | None = None
        self.schedules: dict[int, dict[str, Any]] = {}
        self.occurrences: dict[int, dict[str, Any]] = {}
        self.next_schedule_id = 1
        self.executed: list[dict[str, Any]] = []

    # -- test helpers ----------------------------------------------------------------------------

    def add_occurrence(self, schedule_id: int, state: str) -> int:
        with self.lock:
            occurrence_id = 100 + len(self.occurrences) + 1
            self.occurrences[occurrence_id] = {
                "id": occurrence_id,
                "schedule_id": schedule_id,
                "state": state,
                "attempt": 1,
            }
            return occurrence_id

    def digest(self) -> str:
        with self.lock:
            return json.dumps(
                [self.schedules, self.occurrences, self.next_schedule_id, len(self.executed)],
                sort_keys=True,
            )

    # -- the executor ----------------------------------------------------------------------------

    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.executed.append(copy.deepcopy(command))
            if self.fail_next is not None:
                error, self.fail_next = self.fail_next, None
                raise error
            action = command["action"]
            if self.not_owner_answers > 0 and action != "list":
                self.not_owner_answers -= 1
                raise NotOwner(self.leader_hint)
            if not self.owner and action != "list":
                if self.owner_management_addr is not None:
                    return {
                        "ok": False,
                        "status": 409,
                        "error": {"code": "not_owner", "message": "not the owner"},
                        "leader_hint": self.leader_hint,
                        "owner_management_addr": self.owner_management_addr,
                    }
                raise NotOwner(self.leader_hint)
            return getattr(self, "_" + action)(command)

    def _status(self, command: dict[str, Any]) -> dict[str, Any]:
        return {
            "node": "n1",
            "term": 3,
            "ownership": {"node": "n1", "epoch": 2},
            "commit_index": 17,
            "grant_expires_at": "2030-01-01T00:00:00Z",
            "counts": {"schedules": len(self.schedules), "records": len(self.occurrences)},
            "data_dir": SECRET_PATH,
        }

    def _list(self, command: dict[str, Any]) -> dict[str, Any]:
        return {
            "stale_local_view": True,
            "schedules": [dict(s) for s in self.schedules.values()],
            "occurrences": [dict(o) for o in self.occurrences.values()],
        }

    def _create(self, command: dict[str, Any]) -> dict[str, Any]:
        schedule_id = self.next_schedule_id
        self.next_schedule_id += 1
        self.schedules[schedule_id] = {
            "id": schedule_id,
            "enabled": True,
            "definition": command["definition"],
        }
        return {"id": schedule_id}

    def _disable(self, command: dict[str, Any]) -> dict[str, Any]:
        schedule = self.schedules.get(command["id"])
        if schedule is not None:
            schedule["enabled"] = False
        return {"id": command["id"], "changed": schedule is not None}

    def _delete(self, command: dict[str, Any]) -> dict[str, Any]:
        removed = self.schedules.pop(command["id"], None)
        return {"id": command["id"], "changed": removed is not None}

    def _cancel(self, command: dict[str, Any]) -> dict[str, Any]:
        occurrence = self.occurrences.get(command["occurrence_id"])
        if occurrence is not None and occurrence["state"] in ("Pending", "Running"):
            occurrence["state"] = "Cancelling"
        return {
            "occurrence_id": command["occurrence_id"],
            "state": None if occurrence is None else occurrence["state"],
        }

    def _acknowledge_stopped(self, command: dict[str, Any]) -> dict[str, Any]:
        occurrence = self.occurrences.get(command["occurrence_id"])
        if occurrence is not None and occurrence["state"] in ("Unknown", "Cancelling"):
            occurrence["state"] = "Abandoned"
        return {
            "occurrence_id": command["occurrence_id"],
            "state": None if occurrence is None else occurrence["state"],
        }

    # The commands beyond seeds/001 (issue 22): the listener only routes them.
    def _run_now(self, command: dict[str, Any]) -> dict[str, Any]:
        occurrence_id = self.add_occurrence_locked(command["id"], "Pending")
        return {"id": command["id"], "occurrence_id": occurrence_id, "repeated": False}

    def add_occurrence_locked(self, schedule_id: int, state: str) -> int:
        occurrence_id = 100 + len(self.occurrences) + 1
        self.occurrences[occurrence_id] = {
            "id": occurrence_id,
            "schedule_id": schedule_id,
            "state": state,
            "attempt": 1,
        }
        return occurrence_id

    def _enable(self, command: dict[str, Any]) -> dict[str, Any]:
        schedule = self.schedules.get(command["id"])
        if schedule is not None:
            schedule["enabled"] = True
        return {"id": command["id"], "enabled": schedule is not None}

    def _update(self, command: dict[str, Any]) -> dict[str, Any]:
        return {"id": command["id"], "changed": command["id"] in self.schedules}

    def _pause(self, command: dict[str, Any]) -> dict[str, Any]:
        return {"paused": True, "changed": True}

    def _resume(self, command: dict[str, Any]) -> dict[str, Any]:
        return {"paused": False, "moved": []}

    def _backfill(self, command: dict[str, Any]) -> dict[str, Any]:
        return {"id": command["id"], "created": [], "existing": [], "overlap": []}

    def _backfill_preview(self, command: dict[str, Any]) -> dict[str, Any]:
        return {**self._backfill(command), "preview": True}
