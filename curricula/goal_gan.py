"""GoalGAN: a generative adversarial network that proposes goals of intermediate difficulty.

Florensa, Held, Geng & Abbeel, "Automatic Goal Generation for Reinforcement Learning Agents", ICML 2018.

A goal (here: a task's parameter vector) is *of intermediate difficulty* (a GOID) when the agent's success
rate on it lies in a band, :math:`R_{min} \\le \\bar s(g) \\le R_{max}` (``goid_lb``, ``goid_ub``). A
generator :math:`G(z)`, :math:`z \\sim \\mathcal{N}(0, I)`, proposes goals; each is played ``n_rollouts``
times and labelled :math:`y_g = 1` when its mean success is in the band, :math:`y_g = 0` otherwise. Every
``update_size`` labelled goals, a least-squares GAN (LSGAN) is trained on them for ``gan_iterations``
iterations, so that the generator learns to propose goals the discriminator takes for intermediate ones
(the paper's objective, its equation (5)):

.. math::

    \\min_D \\; \\mathbb{E}_{g \\sim p_{data}}\\big[y_g (D(g) - b)^2 + (1 - y_g)(D(g) - a)^2\\big]
    + \\mathbb{E}_{z}\\big[(D(G(z)) - a)^2\\big],
    \\qquad
    \\min_G \\; \\mathbb{E}_{z}\\big[(D(G(z)) - c)^2\\big]

with :math:`a = -1`, :math:`b = 1`, :math:`c = 0`, the paper's values (its code uses :math:`c = 1`). One
iteration is one discriminator step on a batch of ``batch_size`` labelled goals (drawn with replacement)
and as many generated ones, then one generator step on the same noise, as in the reference code.

Around the GAN, following the code of TeachMyAgent (Romac et al., ICML 2021) and SPDL (Klink et al., 2020):

* a generated goal gets Gaussian noise of standard deviation ``state_noise_level`` × the box's width per
  dimension, is clipped into the box (config axes snapped), and is handed out ``n_rollouts`` times;
* with probability ``p_old`` (and once a goal has been mastered), a goal drawn from the buffer of mastered
  goals (mean success above ``goid_ub``), plus the same noise, is handed out once instead; replayed goals
  are not labelled (the reference code does not label them either; they count as ``unlabelled_episodes``);
* a training with no intermediate goal among its labels is skipped (as in the reference code), and its
  goals are dropped;
* until the first training, goals are drawn uniformly from the box: the GoalGAN code pretrains its generator
  towards uniform goals (or goals a random policy reaches), and a task space has no policy to ask.

A goal's successes are collected by the task it was handed out as: an episode on a task that was neither
generated nor is pending (a replay, a task the env chose itself) is not labelled. With ``n_rollouts`` > 1
and several envs, the rollouts of one goal may run on different envs.

Success: GoalGAN needs a binary signal. ``signal="progress"`` (the default): an episode succeeds when its
final progress is at least ``success_threshold`` (default 0.5); ``signal="return"``: when its return is at
least ``success_threshold``, which must then be given.

Networks and defaults: generator MLP [256, 256] (ReLU, a tanh output onto the box normalised to
:math:`[-1, 1]^d`), noise dimension = the number of parameters, discriminator MLP [128, 128] (leaky ReLU
0.2), both Glorot-uniform initialised with zero biases; RMSProp with learning rate 1e-3 and decay 0.9 (TF's
RMSProp default, which the reference code used), batch 64, 250 iterations per training (the reference
code's). Band [0.25, 0.75], 2 rollouts, ``p_old`` 0.2, noise 0.01, update 100 goals: TeachMyAgent's
defaults (its benchmark runs noise 0.1 and ``p_old`` 0.1; the original code's band is [0.1, 0.9]).

Training runs through :class:`~magister.curricula._continuous.Refit`: on a snapshot of the labelled goals
and of the networks' and optimisers' state, in a worker thread (``background=True``), while the current
generator keeps proposing goals; the new state is swapped in at the next call once ready. A training that
comes due while the previous one still runs waits for it (the labelled goals keep accumulating and go into
it together). Each training seeds its own ``torch.Generator`` from the curriculum's generator, so with
``background=False`` (the training runs inside the call that completes the batch) a seeded GoalGAN repeats
exactly. torch is an optional dependency (install it with the ``teachers`` extra); it is imported only when
a GoalGAN is built.

>>> from magister.task_spaces import Box
>>> teacher = GoalGAN(Box(0.0, 1.0, shape=(2,)), update_size=10, gan_iterations=20,
...                   generator_layers=(16,), discriminator_layers=(16,), background=False, seed=0)
>>> for episode in range(20):
...     (task,) = teacher.sample(1)
...     teacher.update_on_episode(0.0, 1, task, float(episode % 2))  # one of each goal's 2 rollouts succeeds
>>> teacher.trainings, teacher.metrics()["goalgan/intermediate_share"]  # 10 goals labelled, all GOIDs
(1, 1.0)
"""

from __future__ import annotations

import atexit
import logging
import weakref
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace
from ._continuous import ParamBox, Refit, feedback, require
from .base import Curriculum, check_finite

logger = logging.getLogger(__name__)

__all__ = ["GoalGAN"]

#: the LSGAN targets of the GoalGAN paper: a (fake / not intermediate), b (intermediate), c (generator)
LSGAN_A, LSGAN_B, LSGAN_C = -1.0, 1.0, 0.0
_SIGNALS = ("progress", "return")
#: most goals waiting for their rollouts; past it the oldest is dropped (logged and counted)
_MAX_PENDING = 10_000
#: trainings that have run in a worker thread, finished at exit (a thread killed inside torch aborts Python)
_TRAINING: weakref.WeakSet[Refit] = weakref.WeakSet()


@atexit.register
def _finish_trainings() -> None:
    for refit in list(_TRAINING):
        try:
            refit.wait(timeout=120)
        except Exception:  # (a failed or endless training must not hold up the exit)
            logger.warning("GoalGAN: a training still running at exit was left behind")


# -- the networks (torch is imported inside the functions only) ------------------------------------------
def _mlp(sizes: Sequence[int], hidden: str, out: str | None) -> Any:
    import torch.nn as nn

    layers: list[Any] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU() if hidden == "relu" else nn.LeakyReLU(0.2))
    if out == "tanh":
        layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def _networks(config: dict[str, Any]) -> tuple[Any, Any]:
    d, noise = config["dims"], config["noise_dim"]
    gen = _mlp([noise, *config["generator_layers"], d], "relu", "tanh")
    disc = _mlp([d, *config["discriminator_layers"], 1], "leaky_relu", None)
    return gen, disc


def _init_weights(config: dict[str, Any], seed: int) -> dict[str, list[np.ndarray]]:
    """Glorot-uniform weights and zero biases, from a torch generator seeded with ``seed``."""
    import torch
    import torch.nn as nn

    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, net in zip(("generator", "discriminator"), _networks(config)):
        for layer in net:
            if isinstance(layer, nn.Linear):
                nn.init.xavier_uniform_(layer.weight, generator=g)
                nn.init.zeros_(layer.bias)
        out[name] = [p.detach().numpy().copy() for p in net.parameters()]
    return out


def _load(net: Any, arrays: Sequence[np.ndarray]) -> None:
    import torch

    with torch.no_grad():
        for p, a in zip(net.parameters(), arrays):
            p.copy_(torch.from_numpy(np.asarray(a, dtype=np.float32)))


def _optimiser(net: Any, lr: float, state: dict[str, Any] | None) -> Any:
    """RMSProp over ``net`` (decay 0.9), with its running averages restored from ``state``."""
    import torch

    opt = torch.optim.RMSprop(net.parameters(), lr=lr, alpha=0.9)
    if state is not None:
        for p, step, avg in zip(net.parameters(), state["step"], state["square_avg"]):
            opt.state[p] = {"step": torch.tensor(float(step)),
                            "square_avg": torch.from_numpy(np.asarray(avg, dtype=np.float32).copy())}
    return opt


def _optimiser_state(net: Any, opt: Any) -> dict[str, Any]:
    params = list(net.parameters())
    return {"step": np.array([float(opt.state[p]["step"]) for p in params]),
            "square_avg": [opt.state[p]["square_avg"].numpy().copy() for p in params]}


def _train_lsgan(snapshot: dict[str, Any]) -> dict[str, Any]:
    """One GoalGAN training: ``snapshot`` (goals in [-1, 1]^d, 0/1 labels, the networks' and optimisers'
    state, the config, a seed) → the new state and the last losses. Touches nothing else."""
    import torch

    config = snapshot["config"]
    g = torch.Generator().manual_seed(snapshot["seed"])
    gen, disc = _networks(config)
    _load(gen, snapshot["weights"]["generator"])
    _load(disc, snapshot["weights"]["discriminator"])
    g_opt = _optimiser(gen, config["lr"], snapshot["optimisers"].get("generator"))
    d_opt = _optimiser(disc, config["lr"], snapshot["optimisers"].get("discriminator"))
    goals = torch.from_numpy(np.asarray(snapshot["goals"], dtype=np.float32))
    labels = torch.from_numpy(np.asarray(snapshot["labels"], dtype=np.float32))
    batch, noise_dim = config["batch_size"], config["noise_dim"]
    d_loss = g_loss = torch.zeros(())
    for _ in range(config["gan_iterations"]):
        idx = torch.randint(len(goals), (batch,), generator=g)
        z = torch.randn(batch, noise_dim, generator=g)
        real, y = disc(goals[idx]).squeeze(-1), labels[idx]
        fake = disc(gen(z).detach()).squeeze(-1)
        d_loss = (y * (real - LSGAN_B) ** 2 + (1 - y) * (real - LSGAN_A) ** 2).mean() \
            + ((fake - LSGAN_A) ** 2).mean()
        d_opt.zero_grad()
        d_loss.backward()
        d_opt.step()
        g_loss = ((disc(gen(z)).squeeze(-1) - LSGAN_C) ** 2).mean()
        g_opt.zero_grad()
        g_loss.backward()
        g_opt.step()
    return {
        "weights": {"generator": [p.detach().numpy().copy() for p in gen.parameters()],
                    "discriminator": [p.detach().numpy().copy() for p in disc.parameters()]},
        "optimisers": {"generator": _optimiser_state(gen, g_opt),
                       "discriminator": _optimiser_state(disc, d_opt)},
        "d_loss": float(d_loss.detach()), "g_loss": float(g_loss.detach()),
    }


class GoalGAN(Curriculum):
    """Goals of intermediate difficulty from a GAN trained on labelled goals (see the module docstring).

    Parameters
    ----------
    task_space : TaskSpace
        A ``Box``, a ``ConfigSpace`` whose axes hold numbers, or a ``Product`` of those.
    goid_lb, goid_ub : float
        The band of mean success that makes a goal intermediate (inclusive at both ends).
    n_rollouts : int
        Episodes per generated goal before it is labelled.
    p_old : float
        Probability of replaying a mastered goal instead of generating one.
    state_noise_level : float
        Noise added to every goal, as a fraction of the box's width per dimension.
    update_size : int
        Labelled goals per GAN training.
    gan_iterations, batch_size, lr : int, int, float
        The training: iterations, batch size, RMSProp learning rate.
    generator_layers, discriminator_layers : sequence of int
        Hidden layer widths.
    noise_dim : int, optional
        Dimension of the generator's input noise (default: the number of parameters, as the reference
        code).
    signal : {"progress", "return"}
        What decides an episode's success.
    success_threshold : float, optional
        Success when the signal is at least this (default 0.5 with ``signal="progress"``; required with
        ``signal="return"``).
    background : bool
        Train in a worker thread (``False``: inside the call that completes a batch; deterministic).
    seed : int, optional
        Seeds the sampling and, through it, every network initialisation and training.

    Raises
    ------
    TypeError
        For a space the teacher cannot use (names it).
    ValueError
        For zero-width bounds or bad hyperparameters.
    ImportError
        Without torch (names torch and the ``teachers`` extra).
    """

    def __init__(
        self,
        task_space: TaskSpace,
        *,
        goid_lb: float = 0.25,
        goid_ub: float = 0.75,
        n_rollouts: int = 2,
        p_old: float = 0.2,
        state_noise_level: float = 0.01,
        update_size: int = 100,
        gan_iterations: int = 250,
        batch_size: int = 64,
        lr: float = 1e-3,
        generator_layers: Sequence[int] = (256, 256),
        discriminator_layers: Sequence[int] = (128, 128),
        noise_dim: int | None = None,
        signal: str = "progress",
        success_threshold: float | None = None,
        background: bool = True,
        seed: int | None = None,
    ) -> None:
        require("GoalGAN", "torch")
        super().__init__(task_space, seed=seed)
        self.params = ParamBox(task_space, "GoalGAN")
        d = self.params.dims
        self.goid_lb, self.goid_ub = check_finite("goid_lb", goid_lb), check_finite("goid_ub", goid_ub)
        if not 0.0 <= self.goid_lb <= self.goid_ub <= 1.0:
            raise ValueError(f"GoalGAN needs 0 <= goid_lb <= goid_ub <= 1, got {goid_lb!r}, {goid_ub!r}")
        self.p_old = check_finite("p_old", p_old)
        self.state_noise_level = check_finite("state_noise_level", state_noise_level)
        if not 0.0 <= self.p_old <= 1.0 or self.state_noise_level < 0.0:
            raise ValueError(f"GoalGAN needs p_old in [0, 1] and state_noise_level >= 0, got {p_old!r}, "
                             f"{state_noise_level!r}")
        ints = {"n_rollouts": n_rollouts, "update_size": update_size, "gan_iterations": gan_iterations,
                "batch_size": batch_size, "noise_dim": d if noise_dim is None else noise_dim}
        for name, value in ints.items():
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"GoalGAN: {name} must be a positive int, got {value!r}")
        layers = {"generator_layers": tuple(generator_layers),
                  "discriminator_layers": tuple(discriminator_layers)}
        for name, value in layers.items():
            if not value or not all(isinstance(w, (int, np.integer)) and w >= 1 for w in value):
                raise ValueError(f"GoalGAN: {name} must be positive ints, got {value!r}")
        if signal not in _SIGNALS:
            raise ValueError(f"GoalGAN: signal must be one of {_SIGNALS}, got {signal!r}")
        if success_threshold is None and signal == "return":
            raise ValueError("GoalGAN(signal='return') needs success_threshold: the return at or above "
                             "which an episode counts as a success")
        self.signal = signal
        self.success_threshold = check_finite(
            "success_threshold", 0.5 if success_threshold is None else success_threshold)
        self.n_rollouts, self.update_size = int(n_rollouts), int(update_size)
        self.config: dict[str, Any] = {
            "dims": d, "lr": check_finite("lr", lr), "gan_iterations": int(gan_iterations),
            "batch_size": int(batch_size), "noise_dim": int(ints["noise_dim"]),
            "generator_layers": [int(w) for w in layers["generator_layers"]],
            "discriminator_layers": [int(w) for w in layers["discriminator_layers"]],
        }
        self._centre = (self.params.low + self.params.high) / 2.0
        self._half = self.params.width / 2.0
        self.weights = _init_weights(self.config, int(self.rng.integers(2**63)))
        self.optimisers: dict[str, Any] = {}
        self._generator: Any = None  # the torch generator built from self.weights, made on first use
        self.trainings = 0
        self.skipped_trainings = 0
        self.unlabelled_episodes = 0
        self.dropped_pending = 0
        self.losses = (0.0, 0.0)
        self.last_intermediate_share = 0.0
        self._queue: deque[EncodedTask] = deque()  # tasks to hand out, in order
        self._pending: dict[tuple[float, ...], list[Any]] = {}  # key -> [goal, rollouts needed, successes]
        self._goals: list[np.ndarray] = []  # labelled since the last training, in [-1, 1]^d
        self._labels: list[bool] = []
        self._mastered: list[np.ndarray] = []
        self._refit = Refit(_train_lsgan, "GoalGAN", background=background)

    # -- goals ----------------------------------------------------------------------------------------
    def _normalised(self, x: np.ndarray) -> np.ndarray:
        return (x - self._centre) / self._half

    def _generate(self) -> np.ndarray:
        """One goal in space units: uniform before the first training, the generator's after."""
        if self.trainings == 0:
            return self.params.uniform(self.rng)[0]
        import torch

        if self._generator is None:
            self._generator = _networks(self.config)[0]
            _load(self._generator, self.weights["generator"])
        z = torch.from_numpy(self.rng.standard_normal((1, self.config["noise_dim"])).astype(np.float32))
        with torch.no_grad():
            out = self._generator(z).numpy()[0].astype(np.float64)
        return self._centre + self._half * out

    def _refill(self) -> None:
        noise = self.rng.normal(0.0, 1.0, self.params.dims) * self.state_noise_level * self.params.width
        if self._mastered and self.rng.random() < self.p_old:
            goal = self._mastered[int(self.rng.integers(len(self._mastered)))]
            self._queue.append(self.params.task(self._centre + self._half * goal + noise, self.rng))
            return
        task = self.params.task(self._generate() + noise, self.rng)
        self._queue.extend([task] * self.n_rollouts)
        self._expect(task)

    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``k`` tasks: each generated goal ``n_rollouts`` times in a row, or a replayed mastered one."""
        self._check_k(k)
        self._swap()
        out = []
        for _ in range(int(k)):
            if not self._queue:
                self._refill()
            out.append(self._queue.popleft())
        self.num_sampled += int(k)
        return out

    def _expect(self, task: EncodedTask) -> None:
        """A generated goal is queued ``n_rollouts`` times: its results will be collected under the task's
        key (a goal that lands on a task already pending adds its rollouts to that task's)."""
        x = self.params.vector(task)
        key = tuple(x.tolist())
        entry = self._pending.get(key)
        if entry is None:
            if len(self._pending) >= _MAX_PENDING:
                oldest = next(iter(self._pending))
                del self._pending[oldest]
                self.dropped_pending += 1
                logger.info("GoalGAN: %d goals wait for rollouts; dropped the oldest", _MAX_PENDING)
            self._pending[key] = [self._normalised(x), self.n_rollouts, []]
        else:
            entry[1] += self.n_rollouts

    def labelled_goals(self) -> tuple[np.ndarray, np.ndarray]:
        """The goals labelled since the last training (space units, ``(n, d)``) and their labels (1:
        intermediate)."""
        goals = np.array(self._goals).reshape(-1, self.params.dims)
        return self._centre + self._half * goals, np.array(self._labels, dtype=bool)

    def mastered_goals(self) -> np.ndarray:
        """The buffer of mastered goals (space units, ``(n, d)``)."""
        return self._centre + self._half * np.array(self._mastered).reshape(-1, self.params.dims)

    # -- feedback -------------------------------------------------------------------------------------
    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        """Collect the episode's success for its goal; label the goal once its rollouts are in."""
        x, value = feedback(self, task, episode_return, length, progress, self.signal)
        key = tuple(x.tolist())
        self._swap()
        entry = self._pending.get(key)
        if entry is None:
            self.unlabelled_episodes += 1
            return
        entry[2].append(value >= self.success_threshold)
        if len(entry[2]) < entry[1]:
            return
        del self._pending[key]
        goal, mean = entry[0], float(np.mean(entry[2]))
        self._goals.append(goal)
        self._labels.append(self.goid_lb <= mean <= self.goid_ub)
        if mean > self.goid_ub:
            self._mastered.append(goal)
        self._maybe_train()

    def _maybe_train(self) -> None:
        if len(self._goals) < self.update_size or self._refit.busy:
            return
        goals, labels = np.array(self._goals), np.array(self._labels, dtype=np.float64)
        self._goals, self._labels = [], []
        self.last_intermediate_share = float(labels.mean())
        if not labels.any():
            self.skipped_trainings += 1
            logger.info("GoalGAN: no intermediate goal among %d labelled; training skipped", len(labels))
            return
        _TRAINING.add(self._refit)
        self._refit.start({"goals": goals, "labels": labels, "weights": self.weights,
                           "optimisers": self.optimisers, "config": self.config,
                           "seed": int(self.rng.integers(2**63))})
        self._swap()

    def _swap(self) -> None:
        self._apply(self._refit.ready())

    def _apply(self, result: dict[str, Any] | None) -> None:
        """Swap a finished training's networks in."""
        if result is None:
            return
        self.weights, self.optimisers = result["weights"], result["optimisers"]
        self.losses = (result["d_loss"], result["g_loss"])
        self._generator = None
        self.trainings += 1
        logger.debug("GoalGAN: training %d done (D loss %.4g, G loss %.4g)", self.trainings, *self.losses)
        self._maybe_train()

    # -- introspection and checkpointing ------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        out = super().metrics()
        out.update({
            "goalgan/trainings": float(self.trainings),
            "goalgan/skipped_trainings": float(self.skipped_trainings),
            "goalgan/labelled": float(len(self._goals)),
            "goalgan/intermediate_share": self.last_intermediate_share,
            "goalgan/mastered": float(len(self._mastered)),
            "goalgan/pending": float(len(self._pending)),
            "goalgan/unlabelled_episodes": float(self.unlabelled_episodes),
            "goalgan/d_loss": float(self.losses[0]),
            "goalgan/g_loss": float(self.losses[1]),
        })
        return out

    def state_dict(self) -> dict[str, Any]:
        """Plain data: the networks' and optimisers' weights as numpy arrays, the goals, the queue. A
        training in flight is finished (and swapped in) first."""
        self._apply(self._refit.wait())
        state = super().state_dict()
        state.update(
            weights={k: [a.copy() for a in v] for k, v in self.weights.items()},
            optimisers={k: {"step": v["step"].copy(), "square_avg": [a.copy() for a in v["square_avg"]]}
                        for k, v in self.optimisers.items()},
            trainings=self.trainings, skipped_trainings=self.skipped_trainings,
            unlabelled_episodes=self.unlabelled_episodes, dropped_pending=self.dropped_pending,
            losses=list(self.losses), last_intermediate_share=self.last_intermediate_share,
            queue=list(self._queue),
            pending=[[key, goal.copy(), need, list(successes)]
                     for key, (goal, need, successes) in self._pending.items()],
            goals=[g.copy() for g in self._goals], labels=list(self._labels),
            mastered=[g.copy() for g in self._mastered],
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        shapes = [np.shape(a) for a in state["weights"]["generator"]]
        if shapes != [np.shape(a) for a in self.weights["generator"]]:
            raise ValueError(f"GoalGAN: the checkpoint's generator has layers {shapes}, this one "
                             f"{[np.shape(a) for a in self.weights['generator']]}")
        self._refit.wait()  # (a training of this object's own past is not the checkpoint's: dropped)
        super().load_state_dict(state)
        self.weights = {k: [np.asarray(a).copy() for a in v] for k, v in state["weights"].items()}
        self.optimisers = {k: {"step": np.asarray(v["step"]).copy(),
                               "square_avg": [np.asarray(a).copy() for a in v["square_avg"]]}
                           for k, v in state["optimisers"].items()}
        self._generator = None
        self.trainings, self.skipped_trainings = int(state["trainings"]), int(state["skipped_trainings"])
        self.unlabelled_episodes = int(state["unlabelled_episodes"])
        self.dropped_pending = int(state["dropped_pending"])
        self.losses = (float(state["losses"][0]), float(state["losses"][1]))
        self.last_intermediate_share = float(state["last_intermediate_share"])
        self._queue = deque(state["queue"])
        self._pending = {tuple(float(v) for v in key): [np.asarray(goal, dtype=np.float64).copy(), int(need),
                                                       [bool(s) for s in successes]]
                         for key, goal, need, successes in state["pending"]}
        self._goals = [np.asarray(g, dtype=np.float64).copy() for g in state["goals"]]
        self._labels = [bool(v) for v in state["labels"]]
        self._mastered = [np.asarray(g, dtype=np.float64).copy() for g in state["mastered"]]

    def __repr__(self) -> str:
        return f"GoalGAN({self.task_space!r}, trainings={self.trainings})"
