"""`appliance admin cron next`: preview a schedule's fire times (issue 2, "CLI preview").

Prints each fire time in UTC and in the schedule's timezone and marks the DST cases an operator
should notice: a fixed-time job moved out of a spring-forward gap, and a time in a repeated
(fall-back) hour. ``--after`` defaults to the current time: the CLI may read the clock, the core
never does. Invalid input exits with code 2 and the core's message on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

from appliance.core.calendar import COUNT_MAX, FireTime, compile_schedule
from appliance.core.definition import JITTER_SECONDS_MAX
from appliance.core.errors import InvalidSchedule
from appliance.core.jitter import jittered_instant_s

EXIT_OK = 0
EXIT_USAGE = 2
COUNT_DEFAULT = 5


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("cron", help="preview cron schedules")
    tools = parser.add_subparsers(dest="cron_command", metavar="ACTION")
    tools.required = True
    preview = tools.add_parser(
        "next",
        help="print the next fire times of a cron expression in a timezone",
        description="Print the next fire times in UTC and local time. Marks: 'moved from DST "
        "gap' (a fixed-time job whose local time did not exist runs at the end of the gap) and "
        "'repeated hour' (the local time occurs twice when clocks fall back).",
    )
    preview.add_argument("--cron", required=True, help='five numeric fields, e.g. "30 2 * * *"')
    preview.add_argument("--timezone", required=True, help="IANA timezone, e.g. Europe/Berlin")
    preview.add_argument(
        "--after",
        help="RFC 3339 instant with an offset (default: now); results are strictly after it",
    )
    preview.add_argument(
        "--count",
        type=int,
        default=COUNT_DEFAULT,
        help=f"how many fire times (0-{COUNT_MAX}, default {COUNT_DEFAULT})",
    )
    preview.add_argument(
        "--jitter-seconds",
        type=int,
        default=0,
        metavar="N",
        help="also show each slot's jittered start (needs --schedule-id; 0-3600)",
    )
    preview.add_argument(
        "--schedule-id",
        type=int,
        metavar="ID",
        help="the schedule id the jitter is derived from (SHA-256 of id and slot)",
    )
    preview.add_argument("--json", action="store_true", help="print one JSON document")
    preview.set_defaults(func=run_next)


def run_next(args: argparse.Namespace) -> int:
    try:
        after = (
            _parse_after(args.after)
            if args.after is not None
            else datetime.now(UTC).replace(microsecond=0)
        )
        schedule = compile_schedule(args.cron, args.timezone)
        times = [schedule.describe(t) for t in schedule.next_fire_times(after, args.count)]
        starts = _jittered_starts(args, schedule, times)
    except InvalidSchedule as exc:
        print(f"appliance: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        document = {
            "cron": args.cron,
            "timezone": args.timezone,
            "after": _rfc3339(after.astimezone(UTC)),
            "fire_times": [_as_json(fire) for fire in times],
        }
        if starts is not None:
            document["jitter_seconds"] = args.jitter_seconds
            for item, start in zip(document["fire_times"], starts, strict=True):
                item["starts"] = _rfc3339(start)
        print(json.dumps(document, indent=2))
    else:
        print(f"{args.cron!r} in {args.timezone}, after {_rfc3339(after.astimezone(UTC))}:")
        for index, fire in enumerate(times):
            line = _as_line(fire)
            if starts is not None:
                line += f"  starts {_rfc3339(starts[index])}"
            print(line)
    return EXIT_OK


def _jittered_starts(
    args: argparse.Namespace, schedule: Any, times: list[FireTime]
) -> list[datetime] | None:
    """Each slot's jittered start (the due time stays the slot), or None without jitter."""
    if not args.jitter_seconds:
        if args.schedule_id is not None:
            raise InvalidSchedule("schedule-id: only meaningful with --jitter-seconds")
        return None
    if not 0 < args.jitter_seconds <= JITTER_SECONDS_MAX:
        raise InvalidSchedule(f"jitter-seconds: must be in [0, {JITTER_SECONDS_MAX}]")
    if args.schedule_id is None or args.schedule_id < 1:
        raise InvalidSchedule("schedule-id: --jitter-seconds needs the schedule's id (>= 1)")
    starts = []
    for fire in times:
        slot_s = int(fire.utc.timestamp())
        following_s = int(schedule.next_after(fire.utc).timestamp())
        start_s = jittered_instant_s(args.schedule_id, slot_s, args.jitter_seconds, following_s)
        starts.append(datetime.fromtimestamp(start_s, UTC))
    return starts


def _parse_after(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidSchedule(f"after: {text!r} is not an RFC 3339 instant") from exc
    if moment.tzinfo is None:
        raise InvalidSchedule(f"after: {text!r} has no UTC offset (add Z or +hh:mm)")
    return moment


def _rfc3339(moment: datetime) -> str:
    text = moment.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _marks(fire: FireTime) -> list[str]:
    marks = []
    if fire.moved_from_gap:
        marks.append("moved from DST gap")
    if fire.in_fold:
        marks.append(f"repeated hour, {'second' if fire.local.fold else 'first'} instance")
    return marks


def _as_line(fire: FireTime) -> str:
    local = f"{fire.local.isoformat()} {fire.local.tzname()}"
    marks = _marks(fire)
    suffix = f"  [{', '.join(marks)}]" if marks else ""
    return f"{_rfc3339(fire.utc)}  {local}{suffix}"


def _as_json(fire: FireTime) -> dict[str, object]:
    return {
        "utc": _rfc3339(fire.utc),
        "local": fire.local.isoformat(),
        "moved_from_gap": fire.moved_from_gap,
        "in_fold": fire.in_fold,
    }
