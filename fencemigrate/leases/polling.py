"""Waiting for a busy lease: the same bounded, jittered polling for every backend."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from ..dialects.waits import WAIT_REPORT_INTERVAL_S
from ..errors import LeaseBusy
from .model import Grant, LeaseRequest

_FIRST_POLL_S = 0.02
_LONGEST_POLL_S = 0.25

Busy = TypeVar("Busy")


class StoppedWaiting(Exception):
    """The caller's ``stop_waiting`` said the lease is no longer needed (nothing left to do)."""


def poll_for_grant(
    request: LeaseRequest,
    attempt: Callable[[int], Grant | Busy],
    busy: Callable[[Busy], LeaseBusy],
    stop_waiting: Callable[[], bool] | None = None,
    pause: Callable[[float], None] = time.sleep,
    longest_pause_s: float | None = None,
    waiting: Callable[[Busy, int], None] = lambda busy, remaining_ms: None,
) -> Grant:
    """Call ``attempt(remaining_ms)`` until it grants, for at most ``request.wait_ms``.

    Between attempts, backs off from 20 ms to 250 ms (with jitter, so that runners started
    together do not poll in step), or to ``longest_pause_s`` when ``pause`` returns early on a
    release. ``stop_waiting()`` is asked after each pause, before the next attempt: a runner woken
    by the release of a run that did the work leaves without taking the lease (StoppedWaiting).
    When the wait runs out, raises ``busy(last answer)``.
    ``waiting(last answer, remaining_ms)`` reports the wait: after the first busy answer, then
    every :data:`WAIT_REPORT_INTERVAL_S` (never when ``--wait`` is 0: there is no wait to report).
    """
    deadline = time.monotonic() + request.wait_ms / 1000
    pause_s = _FIRST_POLL_S
    next_report = time.monotonic()
    while True:
        remaining_ms = max(0, round((deadline - time.monotonic()) * 1000))
        outcome = attempt(remaining_ms)
        if isinstance(outcome, Grant):
            return outcome
        now = time.monotonic()
        if now >= deadline:
            raise busy(outcome)
        if now >= next_report:
            waiting(outcome, max(0, round((deadline - now) * 1000)))
            next_report = now + WAIT_REPORT_INTERVAL_S
        pause(min(pause_s, max(deadline - time.monotonic(), 0)) * random.uniform(0.5, 1.0))
        pause_s = min(pause_s * 2, longest_pause_s or _LONGEST_POLL_S)
        if stop_waiting is not None and stop_waiting():
            raise StoppedWaiting()
