"""Run inside the PufferLib virtualenv by tests/test_pufferlib_recipe.py: the recipe's trainer at a tiny
budget under PufferLib's Serial and Multiprocessing backends, then what must hold of it, printed as one JSON
line per backend.

For each backend: every info PufferLib returned names a training level (``info["task"]``) and carries the
layout the env generated (``info["layout"]``), and the trainer checked each against a fresh MiniGrid reset
of that seed (``--check-levels``: a mismatch raises); the curriculum received every episode the envs
finished, and its buffer holds only levels that were played; the run resumes from its checkpoint.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pufferlib

from magister.examples.pufferlib import train as T


def run(backend: str, out: Path) -> dict:
    common = ["--backend", backend, "--num-envs", "4", "--num-workers", "2", "--num-steps", "32",
              "--num-levels", "12", "--max-steps", "10", "--heldout", "3", "--hidden", "16", "--check-levels",
              "--no-progress", "--seed", "3", "--out", str(out)]
    res = T.main([*common, "--total-timesteps", str(2 * 4 * 32)])
    cur = res["curriculum"]
    infos_with_task = len(res["tasks_seen"])
    assert infos_with_task > 0 and res["checked"] == infos_with_task, (res["checked"], infos_with_task)
    assert set(res["tasks_seen"]) <= set(range(12)), sorted(set(res["tasks_seen"]))
    assert res["episodes"] > 0 and cur.num_episodes >= res["episodes"], (cur.num_episodes, res["episodes"])
    buffered = [int(t) for t in cur.buffer_tasks()] if hasattr(cur, "buffer_tasks") else []
    assert set(buffered) <= set(res["tasks_seen"]), (buffered, sorted(set(res["tasks_seen"])))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2]
    # resume for one more update: the counters continue from the checkpoint
    more = T.main([*common, "--total-timesteps", str(3 * 4 * 32), "--resume", str(out / "checkpoint.pt")])
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2, 3] and more["global_step"] == 3 * 4 * 32
    assert len(more["heldout"]) == 3
    return {"backend": backend, "infos_checked": res["checked"], "episodes": res["episodes"],
            "curriculum_episodes": cur.num_episodes, "levels_played": len(set(res["tasks_seen"])),
            "buffered": len(buffered)}


if __name__ == "__main__":
    backends = sys.argv[1:] or ["Serial", "Multiprocessing"]
    print(f"pufferlib-core {pufferlib.__version__}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for b in backends:
            print(json.dumps(run(b, Path(tmp) / b)), flush=True)
