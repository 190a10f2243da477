"""What the teachers for continuous task spaces share.

* :class:`ParamBox`: the numeric parameters of a task space as one flat box ``[low, high]`` in
  :math:`\\mathbb{R}^d`, with the maps between an encoded task and its parameter vector. It takes a
  :class:`~magister.task_spaces.box.Box`, a :class:`~magister.task_spaces.config.ConfigSpace` whose axes
  all hold numbers (ordinal axes: a vector snaps to the nearest value on each axis, then to the nearest
  sampleable task), and a :class:`~magister.task_spaces.product.Product` of those. Any other space raises
  ``TypeError`` naming it and the spaces a teacher takes; a zero-width or inverted bound ``ValueError``.
* :func:`require`: the ``ImportError`` that names the ``teachers`` extra when scikit-learn, scipy or torch
  is missing.
* :class:`Refit`: a model fitted on a snapshot in a worker thread, so that a slow fit (a Gaussian mixture
  over k = 2..10) never holds up the thread that hands out tasks; the curriculum keeps sampling from its
  current model and swaps the new one in when it is ready.
* :func:`fit_by_aic`, :class:`Mixture` and :func:`draw`: what ALP-GMM and Covar-GMM share, a Gaussian
  mixture chosen by AIC over a range of component counts (scikit-learn), kept as plain arrays, and the
  draw of tasks from it (a uniform share, else a component in proportion to a per-component interest).

>>> from magister.task_spaces import Box, ConfigSpace, Product
>>> params = ParamBox(Product((Box(0.0, 1.0, shape=(2,)), ConfigSpace({"size": [4, 8, 16]}))), "ALPGMM")
>>> params.low.tolist(), params.high.tolist(), params.names
([0.0, 0.0, 4.0], [1.0, 1.0, 16.0], ['0[0]', '0[1]', '1.size'])
>>> params.task(np.array([0.25, 2.0, 11.0]))  # clipped into the box, snapped to the nearest size
((0.25, 1.0), (1,))
>>> params.vector(((0.5, 0.5), (2,))).tolist()
[0.5, 0.5, 16.0]
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace
from ..task_spaces.box import Box
from ..task_spaces.config import ConfigSpace
from ..task_spaces.product import Product
from .base import check_finite

logger = logging.getLogger(__name__)

__all__ = [
    "Mixture",
    "ParamBox",
    "Refit",
    "check_int",
    "check_ks",
    "check_ratio",
    "draw",
    "fit_by_aic",
    "fit_seed",
    "require",
    "task_vector",
]

#: What a teacher for continuous parameters takes, for error messages.
TAKES = "a Box, a ConfigSpace whose axes all hold numbers, or a Product of those"


def require(teacher: str, *modules: str) -> None:
    """Import ``modules`` or raise ``ImportError`` naming ``teacher`` and the extra that installs them."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ImportError(
                f"{teacher} needs {name}, which is not installed: pip install 'magister[teachers]'"
                + (" (and torch)" if name == "torch" else "")
            ) from exc


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


class _Part:
    """One component of the space: its slice of the vector and the maps for it."""

    def __init__(self, space: TaskSpace, prefix: str, teacher: str) -> None:
        self.space = space
        if isinstance(space, Box):
            self.low = np.asarray(space.low, dtype=np.float64).ravel()
            self.high = np.asarray(space.high, dtype=np.float64).ravel()
            self.names = [f"{prefix}[{i}]" for i in range(self.low.size)]
            self.values: list[np.ndarray] | None = None
        elif isinstance(space, ConfigSpace):
            axes = space.axes
            bad = [name for name, vals in axes.items() if not all(_is_number(v) for v in vals)]
            if bad:
                raise TypeError(
                    f"{teacher} cannot use {space!r}: axes {bad} hold values that are not numbers; "
                    f"it takes {TAKES}"
                )
            self.values = [np.asarray(list(vals), dtype=np.float64) for vals in axes.values()]
            self.low = np.array([v.min() for v in self.values])
            self.high = np.array([v.max() for v in self.values])
            self.names = [f"{prefix}{name}" for name in axes]
        else:
            raise TypeError(f"{teacher} cannot use {space!r} ({type(space).__name__}); it takes {TAKES}")
        self.dims = self.low.size

    def vector(self, encoded: Any) -> np.ndarray:
        if self.values is None:
            return np.asarray(encoded, dtype=np.float64).ravel()
        return np.array([vals[int(i)] for vals, i in zip(self.values, encoded)])

    def task(self, x: np.ndarray, rng: np.random.Generator) -> EncodedTask:
        x = np.clip(x, self.low, self.high)
        if self.values is None:
            return tuple(float(v) for v in x)
        row = tuple(int(np.abs(vals - v).argmin()) for vals, v in zip(self.values, x))
        space: ConfigSpace = self.space  # type: ignore[assignment]
        if space.contains_encoded(row):
            return row
        return self._nearest_sampleable(space, x, rng)

    def _nearest_sampleable(self, space: ConfigSpace, x: np.ndarray, rng: np.random.Generator) -> EncodedTask:
        """The sampleable task nearest to ``x`` (each axis scaled by its range); a random one when the space
        is too large to enumerate."""
        if space.num_tasks is None or space.num_tasks > 100_000:
            return space.sample_encoded(1, rng)[0]
        rows = np.asarray(space.encoded_tasks)
        points = np.stack([vals[rows[:, j]] for j, vals in enumerate(self.values)], axis=1)  # type: ignore
        scale = np.where(self.high > self.low, self.high - self.low, 1.0)
        best = int((((points - x) / scale) ** 2).sum(axis=1).argmin())
        return tuple(int(i) for i in rows[best])


class ParamBox:
    """The numeric parameters of ``task_space`` as one flat box.

    Args:
        task_space: a :class:`Box`, a :class:`ConfigSpace` whose axes all hold numbers, or a
            :class:`Product` (tuple or dict) of those.
        teacher: the teacher's name, for error messages.

    Attributes:
        low, high: the bounds, float64 arrays of shape ``(dims,)``.
        names: one name per dimension (``"[i]"`` for a box's i-th element, ``"axis"`` for a config axis,
            prefixed with the component's index or key in a product).

    Raises:
        TypeError: for any other space (the message names it and what a teacher takes).
        ValueError: where a dimension's bounds are equal (``low == high``: nothing to learn over).
    """

    def __init__(self, task_space: TaskSpace, teacher: str) -> None:
        self.task_space = task_space
        if isinstance(task_space, Product):
            comps = task_space.spaces
            named = comps.items() if isinstance(comps, dict) else enumerate(comps)
            self._keys = list(comps) if isinstance(comps, dict) else None
            self._parts = [_Part(s, f"{key}" + ("." if isinstance(s, ConfigSpace) else ""), teacher)
                           for key, s in named]
        else:
            self._keys = None
            self._parts = [_Part(task_space, "", teacher)]
        self._product = isinstance(task_space, Product)
        self.low = np.concatenate([p.low for p in self._parts])
        self.high = np.concatenate([p.high for p in self._parts])
        self.names = [n for p in self._parts for n in p.names]
        self.dims = int(self.low.size)
        flat = [i for i in range(self.dims) if not self.low[i] < self.high[i]]
        if flat:
            raise ValueError(
                f"{teacher}: the bounds of {[self.names[i] for i in flat]} in {task_space!r} have zero width "
                f"(low {self.low[flat].tolist()}, high {self.high[flat].tolist()}); a teacher needs "
                "low < high on every dimension"
            )
        self._splits = np.cumsum([p.dims for p in self._parts])[:-1]

    @property
    def width(self) -> np.ndarray:
        """``high - low`` per dimension."""
        return self.high - self.low

    def vector(self, encoded: EncodedTask) -> np.ndarray:
        """The parameter vector of an encoded task, shape ``(dims,)``."""
        if not self._product:
            return self._parts[0].vector(encoded)
        parts = [encoded[k] for k in self._keys] if self._keys is not None else list(encoded)  # type: ignore
        return np.concatenate([p.vector(e) for p, e in zip(self._parts, parts)])

    def task(self, x: np.ndarray, rng: np.random.Generator | None = None) -> EncodedTask:
        """The encoded task of a vector: clipped into the box, each config axis snapped to its nearest value
        (then to the nearest sampleable task, when constraints or a held-out set exclude the snapped one)."""
        rng = rng if rng is not None else np.random.default_rng()
        x = np.asarray(x, dtype=np.float64).ravel()
        if not self._product:
            return self._parts[0].task(x, rng)
        codes = [p.task(piece, rng) for p, piece in zip(self._parts, np.split(x, self._splits))]
        return dict(zip(self._keys, codes)) if self._keys is not None else tuple(codes)

    def uniform(self, rng: np.random.Generator, k: int = 1) -> np.ndarray:
        """``k`` vectors drawn uniformly from the box, shape ``(k, dims)``."""
        return rng.uniform(self.low, self.high, size=(k, self.dims))


class Refit:
    """A model refitted on snapshots off the caller's thread.

    ``start(snapshot)`` hands a copy of the data to ``fit`` in a worker thread and returns at once (a
    snapshot that arrives while a fit runs waits for it; a newer one replaces it). ``ready()`` returns the
    newest finished model once, else ``None``, so the caller swaps it in under its own lock. With
    ``background=False`` the fit runs inside ``start`` (deterministic; what the tests use for exact values).

    A fit that raises is logged with the teacher's name and re-raised from the next ``ready()`` or
    ``wait()``, where the caller sees it; the worker thread is a daemon and holds no lock of the caller's.

    Args:
        fit: ``fit(snapshot) -> model``; must not touch the curriculum.
        name: the teacher's name, for logs and errors.
        background: run fits in a worker thread.
    """

    def __init__(self, fit: Callable[[Any], Any], name: str, background: bool = True) -> None:
        self.fit = fit
        self.name = name
        self.background = bool(background)
        self.fits = 0  # fits finished
        self._cond = threading.Condition()
        self._pending: Any = None
        self._has_pending = False
        self._running = False
        self._result: Any = None
        self._has_result = False
        self._error: BaseException | None = None

    def start(self, snapshot: Any) -> None:
        """Fit ``snapshot`` (in the background, or now)."""
        if not self.background:
            self._finish(self.fit(snapshot), None)
            return
        with self._cond:
            self._pending, self._has_pending = snapshot, True
            if self._running:
                return
            self._running = True
        threading.Thread(target=self._work, name=f"magister-{self.name}-refit", daemon=True).start()

    def _work(self) -> None:
        while True:
            with self._cond:
                if not self._has_pending:
                    self._running = False
                    self._cond.notify_all()
                    return
                snapshot, self._pending, self._has_pending = self._pending, None, False
            try:
                model, error = self.fit(snapshot), None
            except Exception as exc:  # reported to the caller from ready()/wait()
                logger.exception("%s: a refit failed", self.name)
                model, error = None, exc
            self._finish(model, error)

    def _finish(self, model: Any, error: BaseException | None) -> None:
        with self._cond:
            if error is None:
                self._result, self._has_result = model, True
                self.fits += 1
            else:
                self._error = error
            self._cond.notify_all()

    @property
    def busy(self) -> bool:
        """Whether a fit is running or waiting."""
        with self._cond:
            return self._running or self._has_pending

    def ready(self) -> Any:
        """The newest finished model, once (``None`` when there is none new).

        Raises:
            RuntimeError: a background fit raised (its exception chained).
        """
        with self._cond:
            if self._error is not None:
                error, self._error = self._error, None
                raise RuntimeError(f"{self.name}: a refit failed: {error!r}") from error
            if not self._has_result:
                return None
            model, self._result, self._has_result = self._result, None, False
            return model

    def wait(self, timeout: float = 60.0) -> Any:
        """Wait until no fit runs or waits (at most ``timeout`` seconds), then :meth:`ready`.

        Raises:
            TimeoutError: the fits did not finish in time.
        """
        with self._cond:
            if not self._cond.wait_for(lambda: not (self._running or self._has_pending), timeout):
                raise TimeoutError(f"{self.name}: a refit did not finish within {timeout} s")
        return self.ready()

    def __getstate__(self) -> dict[str, Any]:
        """Pickles without its thread state: a fit in flight is finished first and its model kept."""
        model = self.wait() if self.background else self.ready()
        if model is not None:  # (kept for this object too)
            self._result, self._has_result = model, True
        state = {k: v for k, v in self.__dict__.items() if k != "_cond"}
        state.update(_running=False, _pending=None, _has_pending=False, _result=model,
                     _has_result=model is not None, _error=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cond = threading.Condition()


# -- Gaussian mixtures (ALP-GMM and Covar-GMM) --------------------------------------------------------------
class Mixture:
    """A fitted Gaussian mixture as plain arrays: what a teacher samples from and checkpoints.

    Attributes:
        weights: the mixture weights, shape ``(k,)``.
        means: the component means, shape ``(k, n)``.
        covariances: the full covariance matrices, shape ``(k, n, n)``.
        aic: the Akaike information criterion of the fit on its data.
    """

    def __init__(self, weights: Any, means: Any, covariances: Any, aic: float) -> None:
        self.weights = np.asarray(weights, dtype=np.float64)
        self.means = np.asarray(means, dtype=np.float64)
        self.covariances = np.asarray(covariances, dtype=np.float64)
        self.aic = float(aic)
        k, n = self.means.shape
        if self.weights.shape != (k,) or self.covariances.shape != (k, n, n):
            raise ValueError(
                f"a mixture of {k} components over {n} dimensions needs weights of shape ({k},) and "
                f"covariances of shape ({k}, {n}, {n}), got {self.weights.shape} and {self.covariances.shape}"
            )

    @property
    def components(self) -> int:
        return int(self.weights.size)

    def state_dict(self) -> dict[str, Any]:
        return {"weights": self.weights.copy(), "means": self.means.copy(),
                "covariances": self.covariances.copy(), "aic": self.aic}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Mixture:
        return cls(state["weights"], state["means"], state["covariances"], state["aic"])


def fit_seed(root: int, fit: int) -> int:
    """The ``random_state`` of fit number ``fit`` of a teacher whose seed's entropy is ``root``: the same
    seed and the same fit number give the same mixture, run to run."""
    return int(np.random.SeedSequence([int(root), int(fit), 0x6D6978]).generate_state(1)[0])


def fit_by_aic(snapshot: tuple[np.ndarray, int], *, ks: tuple[int, ...]) -> Mixture:
    """Fit a full-covariance :class:`sklearn.mixture.GaussianMixture` with ``k`` components for each ``k``
    in ``ks`` on ``snapshot = (data, random_state)`` and keep the one of lowest AIC (Portelas et al. 2019).

    >>> rng = np.random.default_rng(0)
    >>> data = np.concatenate([rng.normal(0.0, 0.1, (100, 2)), rng.normal(5.0, 0.1, (100, 2))])
    >>> fit_by_aic((data, 0), ks=(1, 2)).components
    2
    """
    from sklearn.mixture import GaussianMixture

    data, random_state = snapshot
    best: Mixture | None = None
    for k in ks:
        gmm = GaussianMixture(n_components=k, covariance_type="full", random_state=random_state).fit(data)
        aic = float(gmm.aic(data))
        if best is None or aic < best.aic:
            best = Mixture(gmm.weights_, gmm.means_, gmm.covariances_, aic)
    if best is None:
        raise ValueError("fit_by_aic needs at least one candidate number of components")
    return best


def draw(
    rng: np.random.Generator,
    box: ParamBox,
    mixture: Mixture | None,
    interest: np.ndarray,
    random_share: float,
    k: int,
) -> np.ndarray:
    """``k`` parameter vectors, shape ``(k, box.dims)``: each uniform over ``box`` with probability
    ``random_share`` (always, while there is no mixture); otherwise from component ``i`` of ``mixture``
    with probability ``interest[i] / sum(interest)`` (uniform over the components when every interest is
    0), drawn from :math:`N(\\mu_i, \\Sigma_i)` and cut to its first ``box.dims`` coordinates (the task).
    Not yet clipped: :meth:`ParamBox.task` does that.

    >>> box = ParamBox(Box(0.0, 1.0, shape=(1,)), "doc")
    >>> mix = Mixture([0.5, 0.5], [[0.2, 9.0], [0.8, 0.0]], [np.eye(2) * 1e-8] * 2, 0.0)
    >>> draw(np.random.default_rng(0), box, mix, np.array([1.0, 0.0]), 0.0, 3).round(3).tolist()
    [[0.2], [0.2], [0.2]]
    """
    out = box.uniform(rng, k)
    if mixture is None:
        return out
    guided = np.flatnonzero(rng.random(k) >= random_share)
    interest = np.maximum(np.asarray(interest, dtype=np.float64), 0.0)
    total = interest.sum()
    p = interest / total if total > 0 else np.full(mixture.components, 1.0 / mixture.components)
    which = rng.choice(mixture.components, size=guided.size, p=p)
    for i in np.unique(which):
        rows = guided[which == i]
        x = rng.multivariate_normal(mixture.means[i], mixture.covariances[i], size=rows.size)
        out[rows] = x[:, : box.dims]
    return out


def check_int(name: str, value: Any, least: int) -> int:
    """``value`` as an int ``>= least``, or ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
    return int(value)


def check_ks(potential_ks: Iterable[int], fit_rate: int, who: str) -> tuple[int, ...]:
    """The candidate numbers of components as a tuple of ints in ``[1, fit_rate]``, or ``ValueError``."""
    ks = tuple(potential_ks)
    if not ks:
        raise ValueError(f"{who}: potential_ks is empty; expected numbers of components such as range(2, 11)")
    for k in ks:
        check_int("each of potential_ks", k, 1)
    if max(ks) > fit_rate:
        raise ValueError(
            f"{who}: potential_ks goes up to {max(ks)} components, but a fit sees only fit_rate={fit_rate} "
            "points; expected every k <= fit_rate"
        )
    return tuple(int(k) for k in ks)


def check_ratio(value: Any) -> float:
    """``random_task_ratio`` as a float in ``[0, 1]``, or ``ValueError``."""
    v = check_finite("random_task_ratio", value)
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"random_task_ratio must be in [0, 1], got {value!r}")
    return v


def task_vector(box: ParamBox, task: EncodedTask) -> np.ndarray:
    """The parameter vector of an encoded task fed back to a teacher, or ``ValueError`` naming the task and
    the space when it is not one of the space's tasks (wrong length, wrong type, not finite)."""
    try:
        x = box.vector(task)
    except (TypeError, ValueError, IndexError, KeyError) as exc:
        raise ValueError(f"{task!r} is not a task of {box.task_space!r}: {exc}") from exc
    if x.shape != (box.dims,) or not np.isfinite(x).all():
        raise ValueError(
            f"{task!r} is not a task of {box.task_space!r}: its parameters are {x.tolist()}, expected "
            f"{box.dims} finite numbers"
        )
    return x


def feedback(teacher: Any, task: EncodedTask, episode_return: float, length: int, progress: float,
             signal: str) -> tuple[np.ndarray, float]:
    """What a teacher learns from one episode, checked: the task's parameter vector (``ValueError`` naming a
    task that is not one of the space's) and the episode's ``signal``, its return or its progress (a return
    or progress that is not finite is refused, ``ValueError``, whichever the teacher reads); the teacher's
    episode and step counts are advanced."""
    ret, prog = check_finite("episode_return", episode_return), check_finite("progress", progress)
    value = ret if signal == "return" else prog
    x = task_vector(teacher.params, task)
    teacher.task_space.check_encoded(task)  # (inside the bounds, a sampleable config)
    teacher.num_steps += check_int("length", length, 0)
    teacher.num_episodes += 1
    return x, value

