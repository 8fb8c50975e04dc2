"""The owner's calendars: each schedule's compiled cron, and the pulse that says what is due next.

Theory of operation (appliance/core/pulse.py has the pulse itself): the pulse exists only while
this voter owns (rebuilt from the committed state at acquisition, dropped when ownership ends).
A command that changed one schedule retracks only that schedule's entry; a full rebuild takes
one calendar step per schedule, so creating the 1,000th schedule cost 1,000 of them. Compiled
calendars are cached by (cron, timezone), which operator commands also use to check a
definition and to plan a backfill.
"""

from __future__ import annotations

from typing import Any

from appliance.core import state as core
from appliance.core.calendar import compile_schedule
from appliance.core.pulse import Pulse
from appliance.owner.serial import StateReader


class Calendars:
    def __init__(self, state: StateReader) -> None:
        self._read = state.read
        self.pulse: Pulse | None = None
        self.compiled: dict[int, Any] = {}  # schedule id -> its compiled calendar
        self._cache: dict[tuple[str, str], Any] = {}

    def compiled_for(self, definition: Any) -> Any:
        key = (definition.cron, definition.timezone)
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = compile_schedule(definition.cron, definition.timezone)
            self._cache[key] = compiled
        return compiled

    def rebuild(self) -> None:
        def build(st: core.SchedulerState) -> Pulse:
            self.compiled = {
                sid: self.compiled_for(s.definition) for sid, s in st.schedules.items()
            }
            return Pulse.rebuild(st, self.compiled)

        self.pulse = self._read(build)

    def drop(self) -> None:
        """Ownership ended: nothing is observed until the next acquisition rebuilds it."""
        self.pulse = None

    def track(self, schedule_id: int) -> None:
        """After a command that changed one schedule (create, enable, update, disable, delete):
        only its pulse entry changes."""
        pulse = self.pulse
        if pulse is None:
            self.rebuild()
            return

        def track(st: core.SchedulerState) -> None:
            schedule = st.schedules.get(schedule_id)
            if schedule is None:
                self.compiled.pop(schedule_id, None)
                pulse.forget(schedule_id)
                return
            compiled = self.compiled_for(schedule.definition)
            self.compiled[schedule_id] = compiled
            pulse.track(st, schedule_id, compiled)

        self._read(track)
