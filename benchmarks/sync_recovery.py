"""How fast the sync layer recovers from a network interruption, and from a server restart.

Run: ``python benchmarks/sync_recovery.py [--cuts 40] [--outage 0.2] [--write-results]``
(``--write-results``: the output goes into ``docs/results.md`` and ``benchmarks/README.md``, and the README's
table of what survives what quotes it).

A client in a forked worker process plays 2 ms episodes against a server in this process, through a TCP
proxy (``TcpProxy`` of ``tests/tcp_proxy.py``, a test helper that is not installed). The proxy is cut
(every connection reset: bytes in flight are lost) for ``--outage`` seconds, then restored, ``--cuts``
times. Printed:

* the time from the restore to the first task the client received after it (median, p99): what a worker
  loses beyond the outage itself (ZeroMQ's reconnect back-off, then the resend handshake);
* the counts on both sides afterwards: episodes played = episodes the curriculum received, updates sent =
  updates applied, and the messages sent again / dropped as repeats;
* a server restart: the server is closed and a new one binds the same port; the time from the new
  server's start to the client's first task from it (re-registration included).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import sys
import time
from pathlib import Path

import numpy as np

from magister.curricula.base import Curriculum
from magister.examples.results import BENCHMARKS_README, RESULTS_PAGE, machine, recording
from magister.sync.feed import CurriculumClient
from magister.sync.server import serve
from magister.task_spaces.discrete import Discrete

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fault proxy is a test helper
from tcp_proxy import TcpProxy  # noqa: E402


class Uniform(Curriculum):
    def sample(self, k: int = 1) -> list[int]:
        return self.rng.integers(self.task_space.num_tasks, size=k).tolist()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(address: str, stop, out, episode_s: float) -> None:
    """Play until ``stop``; send back the (monotonic) time each task arrived and the counts."""
    c = CurriculumClient(address, timeout=30.0)
    arrivals = []
    episodes = 0
    while not stop.is_set():
        a = c.next_task()
        arrivals.append(time.monotonic())
        time.sleep(episode_s)
        c.record_episode(a, 1.0, 1, 1.0)
        episodes += 1
    c.flush()
    t = c.transport
    out.put((arrivals, episodes, dict(c.stats), t.resent, t.pings, t.rejoins))
    c.close()


def _after(arrivals: np.ndarray, t: float) -> float:
    """Seconds from ``t`` to the first arrival after it."""
    i = np.searchsorted(arrivals, t)
    return float(arrivals[i] - t) if i < len(arrivals) else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cuts", type=int, default=40)
    ap.add_argument("--outage", type=float, default=0.2, help="seconds the proxy stays cut")
    ap.add_argument("--restarts", type=int, default=10)
    ap.add_argument("--write-results", action="store_true",
                    help="write the output into docs/results.md and benchmarks/README.md")
    args = ap.parse_args()
    with recording("sync-recovery", enabled=args.write_results, pages=(RESULTS_PAGE, BENCHMARKS_README)):
        run(args)


def run(args: argparse.Namespace) -> None:
    print(f"start: {machine()}")
    ctx = mp.get_context("fork")
    episode_s = 0.002

    # -- network interruptions ---------------------------------------------------------------------
    with serve(Uniform(Discrete(100), seed=0), "tcp://127.0.0.1:*") as server:
        port = int(server.address.rsplit(":", 1)[1])
        proxy_port = _free_port()
        stop, out = ctx.Event(), ctx.Queue()
        w = ctx.Process(target=_worker, args=(f"tcp://127.0.0.1:{proxy_port}", stop, out, episode_s))
        w.start()  # (before the proxy listens: a forked child would hold its listening socket)
        restores = []
        with TcpProxy("127.0.0.1", port, proxy_port) as proxy:
            time.sleep(1.0)
            for _ in range(args.cuts):
                proxy.cut()
                time.sleep(args.outage)
                proxy.restore()
                restores.append(time.monotonic())
                time.sleep(0.6)
            stop.set()
            arrivals, episodes, stats, resent, pings, rejoins = out.get(timeout=60)
            w.join(10)
        m = server.metrics()
    gaps = np.array([_after(np.asarray(arrivals), t) for t in restores]) * 1e3
    print(f"TCP interruption ({args.cuts} cuts of {args.outage:g} s, connections reset): time from the "
          f"restore to the first task after it: median {np.nanmedian(gaps):.0f} ms, "
          f"p99 {np.nanpercentile(gaps, 99):.0f} ms")
    print(f"  episodes played {episodes}, applied by the curriculum {int(m['sync/total/episodes_applied'])}; "
          f"updates sent {stats['updates_sent']}, received {int(m['sync/total/updates_received']) - 1} "
          f"(+1 goodbye); resent {resent} messages, {int(m['sync/duplicates_dropped'])} dropped as repeats, "
          f"{int(m['sync/replies_resent'])} replies resent; {pings} pings; re-registrations {rejoins}")

    # -- server restarts ---------------------------------------------------------------------------
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    stop, out = ctx.Event(), ctx.Queue()
    w = ctx.Process(target=_worker, args=(address, stop, out, episode_s))
    w.start()
    starts = []
    server = serve(Uniform(Discrete(100), seed=0), address)
    for _ in range(args.restarts):
        time.sleep(0.6)
        server.close()
        time.sleep(args.outage)
        server = serve(Uniform(Discrete(100), seed=0), address)
        starts.append(time.monotonic())
    time.sleep(0.6)
    stop.set()
    arrivals, episodes, stats, resent, pings, rejoins = out.get(timeout=60)
    w.join(10)
    server.close()
    gaps = np.array([_after(np.asarray(arrivals), t) for t in starts]) * 1e3
    print(f"server restart ({args.restarts} restarts on one port, {args.outage:g} s down): time from the "
          f"new server's start to the first task after it: median {np.nanmedian(gaps):.0f} ms, "
          f"p99 {np.nanpercentile(gaps, 99):.0f} ms; re-registrations {rejoins}")


if __name__ == "__main__":
    main()
