"""Rate-limited server logs: a flood of faults gives a bounded number of records, and every fault counted."""

from __future__ import annotations

import logging
import re
import time

import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from magister.curricula.domain_randomization import DomainRandomization
from magister.sync.ratelimit import RateLimitedLogger
from magister.sync.zmq_server import serve
from magister.task_spaces.discrete import Discrete

pytestmark = pytest.mark.timeout(120)

_COUNT = re.compile(r"\((\d+) (?:more )?like this in the last")


def _represented(records: list[logging.LogRecord]) -> int:
    """Events the records stand for: one each, plus the counts they report ("(N more like this ...)"),
    a flush record ("(N like this ...)") standing for its N alone."""
    total = 0
    for r in records:
        text = r.getMessage()
        m = _COUNT.search(text)
        if m is None:
            total += 1
        elif "more like this" in text:
            total += 1 + int(m.group(1))
        else:
            total += int(m.group(1))
    return total


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.floats(0.0, 5.0, allow_nan=False), min_size=1, max_size=200),
    kinds=st.lists(st.sampled_from("abc"), min_size=200, max_size=200),
    interval=st.floats(0.5, 20.0),
)
def test_every_event_is_logged_or_counted_and_records_are_spaced_by_the_interval(gaps, kinds, interval):
    t = [0.0]
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    lg = logging.getLogger(f"test.ratelimit.{id(records)}")
    lg.propagate = False
    lg.setLevel(logging.DEBUG)
    lg.addHandler(Keep())
    log = RateLimitedLogger(lg, interval, clock=lambda: t[0])
    emitted_at: dict[str, list[float]] = {}
    for gap, kind in zip(gaps, kinds):
        t[0] += gap
        if log.warning(kind, "event %s", kind):
            emitted_at.setdefault(kind, []).append(t[0])
    n_events = len(gaps)
    assert log.suppressed() <= n_events - sum(len(v) for v in emitted_at.values())
    for times in emitted_at.values():  # one record per kind per interval, no closer
        assert all(b - a >= interval for a, b in zip(times, times[1:]))
    log.flush()
    assert log.suppressed() == 0
    assert _represented(records) == n_events
    for kind in "abc":  # each kind's records name their own kind
        assert all(r.getMessage().startswith(f"event {kind}") for r in records if r.args[0] == kind)


def test_a_copy_starts_afresh_and_keeps_the_settings():
    import copy
    import pickle

    log = RateLimitedLogger(logging.getLogger("magister.test"), interval=3.0)
    log.warning("a", "x")
    log.warning("a", "x")
    for twin in (copy.deepcopy(log), pickle.loads(pickle.dumps(log))):
        assert twin.interval == 3.0 and twin.logger is log.logger and twin.suppressed() == 0
        assert twin.warning("a", "x")  # its own first record of the kind
    assert log.suppressed("a") == 1


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="logging.Logger"):
        RateLimitedLogger("magister")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positive"):
        RateLimitedLogger(logging.getLogger("x"), interval=0)


def test_ten_thousand_garbage_frames_give_a_bounded_number_of_warnings_with_the_count(caplog):
    """A peer that sends 10^4 garbage frames and never reads the error replies: the server cannot deliver
    most of them. Before, that was one WARNING per reply (thousands of lines written on the server thread);
    now it is one line per interval, and the rest are counted in the next line or when the server closes."""
    n = 10_000
    caplog.set_level(logging.WARNING, logger="magister.sync.zmq_server")
    server = serve(DomainRandomization(Discrete(5), seed=0))
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 10)  # it never reads: the server's replies back up
        sock.connect(server.address)
        for i in range(n):
            sock.send(b"garbage %d" % i)
        deadline = time.monotonic() + 60
        while server.metrics()["sync/malformed_frames_unattributed"] < n:
            assert time.monotonic() < deadline, "the server did not handle the frames in time"
            time.sleep(0.05)
        undelivered = int(server.metrics()["sync/replies_undelivered"])
        during = [r for r in caplog.records
                  if r.name == "magister.sync.zmq_server" and r.levelno >= logging.WARNING]
    finally:
        sock.close(0)
        ctx.term()
        server.close()
    records = [r for r in caplog.records
               if r.name == "magister.sync.zmq_server" and r.levelno >= logging.WARNING]
    assert undelivered > n // 2  # most replies found the peer's queue full
    assert 1 <= len(during) <= 20  # (one per 10 s of flood; it takes seconds, not minutes)
    assert len(records) <= len(during) + 1  # close() adds one record with the count held back
    assert _represented(records) == undelivered
    assert any(_COUNT.search(r.getMessage()) for r in records)
    assert all("could not deliver" in r.getMessage() for r in records)
