"""How much can a task filter buy at CPU scale? Train on a pool filtered with privileged labels.

``python -m magister.examples.xland.oracle_filter --keep oracle --seed 0`` draws ``--pool`` training
tasks from the trainer's task space (held-out tasks excluded, as always), labels each with one episode of
the scripted goal-seeker and one of the noop policy in the learner's slot (noop co-player), keeps

* ``all``: every task (unfiltered sampling, the baseline),
* ``achievable``: tasks the goal-seeker scores on,
* ``nontrivial``: tasks the noop policy scores nothing on (the goal does not simply hold),
* ``oracle``: both,

and trains :func:`magister.examples.xland_ppo.train` uniformly over the kept tasks (co-players from the
FSP curriculum as in the trainer), with the trainer's other defaults. It prints the labels' shares, the
held-out test participation next to the reference policies', and the participation on ``--bigval``
further validation tasks (drawn after the run's own validation tasks by the same generator; one episode per
evaluation co-player, worst case over them: the trainer's ``--n-bigval``).

This is an upper-bound experiment for issue 7's ablation, not a curriculum: the goal-seeker is a scripted
policy with privileged access to the state, which a dynamic task filter (agent and control policy only)
does not have. If training on the oracle's pool does not beat the unfiltered pool by more than the seed
spread, no filter of the same proposals can be shown to at that budget. Measured (in
:mod:`magister.examples.xland_ppo`'s docstring, "An oracle filter, measured"): not at 100k training steps,
where the agents are still near the random policy; at 200k, +0.05 test participation on both seeds run.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import numpy as np

from magister.examples.xland.coplayers import NOOP
from magister.examples.xland.env import XLandTask
from magister.examples.xland.evaluation import NoopPolicy, SeekerPolicy, play_grid

logger = logging.getLogger(__name__)

__all__ = ["KEEP_RULES", "label_pool", "main"]

#: Which labelled tasks each ``--keep`` mode trains on: ``rule(seeker_return, noop_return) -> bool``.
KEEP_RULES = {
    "all": lambda seeker, noop: True,
    "achievable": lambda seeker, noop: seeker > 0,
    "nontrivial": lambda seeker, noop: noop == 0,
    "oracle": lambda seeker, noop: seeker > 0 and noop == 0,
}


def label_pool(pool: list[XLandTask], episode_length: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Returns of one goal-seeker and one noop episode per task (learner's slot, noop co-player).

    >>> from magister.examples.xland.task import XLandTaskSpace
    >>> space = XLandTaskSpace(coplayer_ids=(NOOP,), world_sizes=(7, 7), seed=0, max_options=1)
    >>> seeker, noop = label_pool([space.sample() for _ in range(3)], episode_length=8)
    >>> seeker.shape, noop.shape
    ((3,), (3,))
    """
    seeker, noop = (play_grid(pool, policy, coplayers=(NOOP,), episode_length=episode_length, seed=seed)[:, 0]
                    for policy in (SeekerPolicy(), NoopPolicy()))
    return seeker, noop


def main(argv: list[str] | None = None) -> dict[str, float]:
    from magister.examples.xland_ppo import make_task_space, parse_args, train

    p = argparse.ArgumentParser(prog="python -m magister.examples.xland.oracle_filter", description=__doc__,
                                epilog="Needs the 'examples' extra (torch, tqdm, matplotlib, scipy): pip "
                                       "install 'magister[examples]'.",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keep", choices=sorted(KEEP_RULES), default="oracle", help="which tasks to train on")
    p.add_argument("--pool", type=int, default=3000, help="training tasks drawn and labelled")
    p.add_argument("--bigval", type=int, default=160, help="further validation tasks to measure on")
    p.add_argument("--seed", type=int, default=0, help="trainer seed (also seeds the pool and the sets)")
    p.add_argument("--total-steps", type=int, default=100_000)
    p.add_argument("--run-dir", default="runs")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True)
    a = p.parse_args(argv)
    for name in ("pool", "total_steps"):
        if getattr(a, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive int, got {getattr(a, name)!r}")
    if a.bigval < 0:
        raise ValueError(f"--bigval must be >= 0, got {a.bigval!r}")
    logging.basicConfig(level=logging.WARNING)
    flags = ["--curriculum", "uniform", "--total-steps", str(a.total_steps), "--seed", str(a.seed),
             "--run-dir", a.run_dir, "--run-name", f"xland_oracle_{a.keep}_s{a.seed}", "--no-tensorboard",
             "--n-bigval", str(a.bigval), "--progress" if a.progress else "--no-progress"]
    args = parse_args(flags)
    space, test, _ = make_task_space(args)
    drawn = space.sample_encoded(a.pool, rng=np.random.default_rng(777 + a.seed))
    pool = [XLandTask.decode(e) for e in drawn]
    t0 = time.perf_counter()
    seeker, noop = label_pool(pool, args.episode_length, seed=a.seed)
    rule = KEEP_RULES[a.keep]
    kept = [t for t, s, n in zip(pool, seeker.tolist(), noop.tolist()) if rule(s, n)]
    if not kept:
        raise RuntimeError(f"--keep {a.keep} kept none of the {len(pool)} tasks of the pool")
    sys.stdout.write(f"pool of {len(pool)} training tasks: goal-seeker scores on {np.mean(seeker > 0):.3f}, "
                     f"noop on {np.mean(noop > 0):.3f}; --keep {a.keep} trains on {len(kept)} "
                     f"(labelled in {time.perf_counter() - t0:.0f} s)\n")
    result = train(args, train_tasks=kept)
    out = {f"test/{name}": r.participation for name, r in result.test.items()}
    sys.stdout.write("test participation (" + str(len(test)) + " tasks): "
                     + ", ".join(f"{k.split('/')[1]} {v:.3f}" for k, v in out.items()) + "\n")
    if result.bigval is not None:
        out["bigval/agent"] = result.bigval
        sys.stdout.write(f"bigval participation ({a.bigval} further validation tasks): agent "
                         f"{result.bigval:.3f}\n")
    return out


if __name__ == "__main__":
    main()
