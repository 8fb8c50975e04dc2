"""Reservations and the one-shot submit capability (SPEC §7, seeds/000).

The worker reserves pool capacity before it asks for a permit, so admitted work never finds the
pool full. After it has durably consumed the permit it binds the reservation to a request and
gets a SubmitCapability: the only way to hand work to the engine. The capability can be used
exactly once, cannot be copied or pickled (so no second holder can exist), and re-checks the
durable consume record through the worker's callback immediately before submitting.

The seam with the pool is ``CapacityHolder`` (the pool implements it): a reservation gives its
capacity back through ``release_reservation`` and submits through ``submit_reserved``; the pool
takes the capacity over with ``Reservation.hand_over``. Nothing here reaches into the pool.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from appliance.engine.model import CapabilityError, ExecutionReport, ExecutionRequest, SubmitRefused

Recheck = Callable[[], bool]


class CapacityHolder(Protocol):
    """What a reservation needs from the pool that issued it."""

    def release_reservation(self, reservation: Reservation) -> None:
        """Return the reservation's unit of capacity (it was never submitted)."""

    def submit_reserved(
        self, reservation: Reservation, request: ExecutionRequest
    ) -> ExecutionReport:
        """Turn the reservation into an execution of request; the pool calls ``hand_over``."""


class Reservation:
    """One unit of pool capacity held for one future submission."""

    def __init__(self, holder: CapacityHolder, token: int) -> None:
        self._holder = holder
        self.token = token
        self._lock = threading.Lock()
        self._released = False
        self._bound = False

    def capability(self, request: ExecutionRequest, recheck: Recheck) -> SubmitCapability:
        """Bind this reservation to one request; possible once per reservation."""
        request.validate()
        with self._lock:
            if self._released:
                raise CapabilityError("reservation was already released")
            if self._bound:
                raise CapabilityError("reservation is already bound to a capability")
            self._bound = True
        return SubmitCapability(self, request, recheck)

    def release(self) -> None:
        """Give the capacity back unused. Idempotent; no effect once submitted."""
        with self._lock:
            if self._released:
                return
            self._released = True
        self._holder.release_reservation(self)

    def submit(self, request: ExecutionRequest) -> ExecutionReport:
        """Hand the bound request to the pool (SubmitCapability, after its re-check)."""
        return self._holder.submit_reserved(self, request)

    def hand_over(self) -> None:
        """The execution now owns the capacity; the reservation can no longer release it."""
        with self._lock:
            if self._released:
                raise CapabilityError("reservation was already released")
            self._released = True

    def __copy__(self) -> NoReturn:
        raise CapabilityError("a reservation cannot be copied")

    def __deepcopy__(self, memo: dict[int, Any]) -> NoReturn:
        raise CapabilityError("a reservation cannot be copied")

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise CapabilityError("a reservation cannot be pickled")


class SubmitCapability:
    """The single right to submit one request. Refuses copy, deepcopy, pickling, second use."""

    __slots__ = ("_lock", "_recheck", "_request", "_reservation", "_used")

    def __init__(self, reservation: Reservation, request: ExecutionRequest, recheck: Recheck):
        self._reservation = reservation
        self._request = request
        self._recheck = recheck
        self._lock = threading.Lock()
        self._used = False

    @property
    def execution_id(self) -> str:
        return self._request.execution_id

    @property
    def used(self) -> bool:
        return self._used

    def submit(self) -> ExecutionReport:
        """Re-check the durable consume record, then submit. Usable once, even if refused."""
        with self._lock:
            if self._used:
                raise CapabilityError("capability was already used")
            self._used = True
        try:
            confirmed = self._recheck()
        except Exception as exc:
            self._reservation.release()
            raise SubmitRefused(f"re-check of the consume record failed: {exc}") from exc
        if confirmed is not True:
            self._reservation.release()
            raise SubmitRefused("re-check did not confirm the durable consume record")
        return self._reservation.submit(self._request)

    def __copy__(self) -> NoReturn:
        raise CapabilityError("a submit capability cannot be copied")

    def __deepcopy__(self, memo: dict[int, Any]) -> NoReturn:
        raise CapabilityError("a submit capability cannot be copied")

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise CapabilityError("a submit capability cannot be pickled")

    def __reduce__(self) -> NoReturn:
        raise CapabilityError("a submit capability cannot be pickled")
