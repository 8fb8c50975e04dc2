"""What a stopping voter says on Ctrl-C/SIGTERM: what it waits for, and for how long.

Shutdown never cancels accepted work (seeds/001: "Ctrl-C drains bounded observation tasks; it does
not cancel accepted external effects"). The voter stops scheduling, keeps its admission route up
and waits at most ``drain_s`` for the occurrences it is still observing or cancelling to report;
whatever is not observed in time is observed again by the next owner (or this voter after its next
start). ``drain_notice`` says so in one line, naming those occurrences; ``open_occurrences`` reads
them from the runner without entering its loop (a read of a snapshot, tolerant of a loop that
renames its internals: then it says only the bound).
"""

from __future__ import annotations

from typing import Any, Final

SHOWN_MAX: Final = 8


def open_occurrences(runner: Any) -> list[int] | None:
    """Occurrence ids with a running observation/cancellation task; None when unknown."""
    published = getattr(runner, "open_occurrences", None)
    if callable(published):  # the runner loop publishes them after each turn
        return sorted(published())
    work = getattr(runner, "_work", None)
    if not isinstance(work, dict):
        return None
    try:
        items = list(work.values())
    except RuntimeError:  # changed while copying: the count is not knowable now
        return None
    return sorted(
        w.occurrence_id
        for w in items
        if (getattr(w, "busy", False) or getattr(w, "observing", False))
        and isinstance(getattr(w, "occurrence_id", None), int)
    )


def _ids(ids: list[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:SHOWN_MAX])
    return shown + (", ..." if len(ids) > SHOWN_MAX else "")


def drain_notice(open_ids: list[int] | None, drain_s: float) -> str:
    """The one line printed when the stop begins."""
    bound = f"{drain_s:g} s"
    if open_ids == []:
        return "stopping: scheduling stopped; no occurrence is running, so nothing to wait for"
    what = (
        "for the occurrences still running"
        if open_ids is None
        else f"for {len(open_ids)} running occurrence(s) ({_ids(open_ids)})"
    )
    return (
        f"stopping: scheduling stopped; waiting up to {bound} {what} to report their outcome "
        "(admission stays up meanwhile); accepted work is not cancelled, and an outcome not "
        "seen by then is observed after the next start"
    )
