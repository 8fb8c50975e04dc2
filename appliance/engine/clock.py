"""Wall-clock seam: the engine stamps started_at/finished_at through an injected clock.

The protocol is the one shared ``Clock`` (appliance/clock.py); the engine needs only ``now()``.
"""

from __future__ import annotations

from appliance.clock import Clock, SystemClock

__all__ = ["Clock", "SystemClock"]
