"""Self-paced curricula over continuous task parameters: SPDL and its episodic form, SPRL.

Klink, Abdulsamad, Belousov & Peters, "Self-Paced Deep Reinforcement Learning", NeurIPS 2020 (SPDL), and
Klink, Abdulsamad, Belousov & Peters, "Self-Paced Contextual Reinforcement Learning", CoRL 2019 (SPRL).

The teacher keeps a Gaussian distribution :math:`p_\\nu = \\mathcal{N}(m, \\Sigma)` over the task
parameters (the *contexts* :math:`c`) and moves it, one step of bounded KL divergence at a time, from an
easy initial distribution towards a target distribution :math:`\\mu = \\mathcal{N}(m_\\mu, \\Sigma_\\mu)`
(the tasks one finally wants solved), as fast as the learner's performance allows. Two ways to drive it:

``mode="values"`` (SPDL). The learner hands over its critic's values :math:`V(s_0, c_i)` on contexts
:math:`c_i` drawn from the current distribution :math:`p_{old}` (``update_on_demand({"contexts": C,
"values": V})``; without ``"contexts"``, the teacher uses the contexts of the episodes reported since its
last update, :meth:`SelfPaced.pending_contexts`, in that order). The update solves

.. math::

    \\max_\\nu \\; \\frac{1}{M} \\sum_{i=1}^M \\frac{p_\\nu(c_i)}{p_{old}(c_i)} V(s_0, c_i)
    - \\alpha\\, \\mathrm{KL}(p_\\nu \\,\\|\\, \\mu)
    \\quad \\text{s.t.} \\quad \\mathrm{KL}(p_{old} \\,\\|\\, p_\\nu) \\le \\epsilon

with ``scipy.optimize.minimize(method="trust-constr")`` (the solver of the SPDL repository's second
teacher; its first took a conjugate-gradient step with a line search, as TeachMyAgent does), the mean free
and the covariance parameterised by its Cholesky factor with a log diagonal (``covariance="full"``) or by
log standard deviations (``covariance="diag"``), so that it stays positive definite. The step is taken in
coordinates whitened by the old distribution, with exact gradients (see ``_values_update``).

``mode="returns"`` (SPRL, black box). Every ``update_every`` episodes, the contexts :math:`c_i` played and
their returns :math:`R_i` (or final progress, ``signal="progress"``) weight the samples as

.. math::

    w_i \\propto \\exp\\Big(\\frac{R_i + \\alpha \\log \\mu(c_i) - \\alpha \\log p_{old}(c_i)}
    {\\alpha + \\eta}\\Big),
    \\qquad
    \\eta = \\arg\\min_{\\eta > 0} \\; \\eta\\,\\epsilon + (\\alpha + \\eta)
    \\log \\frac{1}{M} \\sum_i \\exp\\Big(\\frac{R_i + \\alpha \\log \\mu(c_i) - \\alpha \\log p_{old}(c_i)}
    {\\alpha + \\eta}\\Big)

(the convex dual of maximising :math:`E_p[R] - \\alpha\\,\\mathrm{KL}(p \\| \\mu)` subject to
:math:`\\mathrm{KL}(p \\| p_{old}) \\le \\epsilon` over sample-based distributions; minimised with
``scipy.optimize.minimize_scalar`` over :math:`\\log \\eta`), then refits the Gaussian by weighted maximum
likelihood (:math:`m = \\sum_i w_i c_i`, :math:`\\Sigma = \\sum_i w_i (c_i - m)(c_i - m)^\\top`).

In both modes a step that would leave the trust region (a solver stopping slightly outside it, or a
weighted fit whose Gaussian is farther than the samples' weights were) is pulled back: the new mean and
covariance are interpolated towards the old ones, :math:`m_t = m_{old} + t (m - m_{old})`,
:math:`\\Sigma_t = (1 - t)\\Sigma_{old} + t\\Sigma`, with the largest :math:`t \\in [0, 1]` found by bisection
(40 halvings) such that :math:`\\mathrm{KL}(p_{old} \\| p_t) \\le \\epsilon`. So every update keeps
:math:`\\mathrm{KL}(p_{old} \\| p_{new}) \\le \\epsilon`.

The trade-off :math:`\\alpha` follows SPDL's schedule: with :math:`n` the number of the update (from 1)
and :math:`\\bar J` the mean performance of its batch (the mean of the values, or of ``"performance"`` when
given; the mean return in ``mode="returns"``),

.. math::

    \\alpha_n = 0 \\;\\text{ for } n < n_\\alpha, \\qquad
    \\alpha_n = \\min\\Big(\\alpha_{max}, \\; \\zeta \\frac{\\max(0, \\bar J)}
    {\\max(\\mathrm{KL}(p_{old} \\| \\mu), 10^{-10})}\\Big) \\;\\text{ otherwise}

(``n < alpha_offset`` as in the SPDL code, whose update counter starts at 1: the first ``alpha_offset - 1``
updates have :math:`\\alpha = 0`; the :math:`\\max(0, \\cdot)` keeps :math:`\\alpha` from turning negative
when the performance does).

Defaults: :math:`\\epsilon = 0.05`, :math:`\\zeta = 1.6`, offset 10 (SPDL's point-mass experiment with PPO),
:math:`\\alpha_{max} = 10^5` (SPDL's code). TeachMyAgent's benchmark uses :math:`\\epsilon = 0.1`,
:math:`\\zeta = 0.25`, offset 10. ``update_every=100`` episodes (returns mode) is this library's choice
(TeachMyAgent updates every 50,000 steps). The initial distribution defaults to the box's centre with a
standard deviation of a quarter of the box's width per dimension (this library's choice: the papers start
from a hand-picked easy distribution, which a user should give when they know one).

Tasks are drawn from :math:`p_\\nu` and clipped into the bounds (a config axis snapped to its nearest value)
by :class:`~magister.curricula._continuous.ParamBox`, as the SPDL code clips its samples: the tasks played
follow the Gaussian truncated onto the box, while the densities in the updates are the untruncated
Gaussian's, evaluated at the clipped contexts. Keep the distributions well inside the box for the
importance weights to mean what they say. The optimisation runs in coordinates normalised by the box's
width (KL divergences and density ratios do not change under that map); means, covariances and metrics are
reported in the space's own units.

>>> from magister.task_spaces import Box
>>> teacher = SelfPaced(Box(0.0, 1.0, shape=(2,)), target_mean=[0.9, 0.9], target_std=0.05,
...                     mode="returns", update_every=50, seed=0)
>>> for _ in range(200):
...     (task,) = teacher.sample(1)
...     teacher.update_on_episode(-abs(task[0] - 0.9) - abs(task[1] - 0.9), 1, task, 0.0)
>>> teacher.updates, bool(teacher.mean[0] > 0.5)   # four KL-bounded steps towards the target
(4, True)
"""

from __future__ import annotations

import logging
import warnings
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..task_spaces.base import EncodedTask, TaskSpace
from ._continuous import ParamBox, feedback, require
from .base import Curriculum, check_finite

logger = logging.getLogger(__name__)

__all__ = ["SelfPaced"]

_MODES = ("values", "returns")
_COVARIANCES = ("full", "diag")
_SIGNALS = ("return", "progress")
#: smallest variance of the fitted Gaussian in normalised units (a standard deviation of 1e-4 box widths)
_VAR_FLOOR = 1e-8
#: metrics() reports the per-dimension mean and std of at most this many dimensions.
_MAX_METRIC_DIMS = 16


# -- Gaussians in Cholesky form (normalised coordinates) -----------------------------------------------
def _logpdf(x: np.ndarray, mean: np.ndarray, chol: np.ndarray) -> np.ndarray:
    """Log density of N(mean, chol cholᵀ) at the rows of ``x``."""
    z = np.linalg.solve(chol, (x - mean).T)
    d = mean.size
    return -0.5 * (z * z).sum(axis=0) - np.log(np.diag(chol)).sum() - 0.5 * d * np.log(2.0 * np.pi)


def _kl(m0: np.ndarray, l0: np.ndarray, m1: np.ndarray, l1: np.ndarray) -> float:
    """KL(N(m0, l0 l0ᵀ) ‖ N(m1, l1 l1ᵀ)) in closed form:
    ½ [tr(Σ1⁻¹Σ0) + (m1 − m0)ᵀ Σ1⁻¹ (m1 − m0) − d + log det Σ1 − log det Σ0]."""
    a = np.linalg.solve(l1, l0)
    b = np.linalg.solve(l1, m1 - m0)
    logdet = 2.0 * (np.log(np.diag(l1)).sum() - np.log(np.diag(l0)).sum())
    return float(0.5 * ((a * a).sum() + (b * b).sum() - m0.size + logdet))


def _sprl_weights(signals: np.ndarray, log_mu: np.ndarray, log_q: np.ndarray, alpha: float,
                  epsilon: float) -> tuple[np.ndarray, float]:
    """SPRL's sample weights (normalised) and the η that minimises the dual (module docstring)."""
    from scipy.optimize import minimize_scalar
    from scipy.special import logsumexp, softmax

    a = signals + alpha * (log_mu - log_q)
    n = a.size

    def dual(log_eta: float) -> float:
        eta = np.exp(log_eta)
        return float(eta * epsilon + (alpha + eta) * (logsumexp(a / (alpha + eta)) - np.log(n)))

    scale = max(float(np.ptp(a)), 1e-8)
    res = minimize_scalar(dual, bounds=(np.log(scale * 1e-6), np.log(scale * 1e6)), method="bounded",
                          options={"xatol": 1e-8})
    eta = float(np.exp(res.x))
    return softmax(a / (alpha + eta)), eta


def _cholesky(cov: np.ndarray, what: str) -> np.ndarray:
    cov = np.asarray(cov, dtype=np.float64)
    try:
        if not np.all(np.isfinite(cov)) or not np.allclose(cov, cov.T):
            raise np.linalg.LinAlgError
        return np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        raise ValueError(f"SelfPaced: {what} must be a finite symmetric positive definite matrix, "
                         f"got {cov.tolist()!r}") from None


class SelfPaced(Curriculum):
    """A Gaussian distribution over the task parameters, moved towards a target by KL-bounded steps.

    Parameters
    ----------
    task_space : TaskSpace
        A ``Box``, a ``ConfigSpace`` whose axes hold numbers, or a ``Product`` of those (see
        :class:`~magister.curricula._continuous.ParamBox`).
    target_mean : array_like
        Mean of the target distribution :math:`\\mu`, one number per parameter (space units).
    target_std, target_cov : float, array_like
        Its standard deviation (a number or one per parameter: a diagonal covariance) or its full
        covariance matrix; exactly one of them.
    init_mean, init_std, init_cov : optional
        The initial distribution (same forms); default: the box's centre, standard deviation a quarter of
        the box's width per dimension.
    mode : {"values", "returns"}
        ``"values"``: SPDL, driven by the learner's critic through :meth:`update_on_demand`;
        ``"returns"``: SPRL's episodic form, driven by the episodes' returns every ``update_every``.
    covariance : {"full", "diag"}
        A full covariance (Cholesky factor) or a diagonal one (one standard deviation per parameter) for
        the context distribution.
    epsilon : float
        The trust region: :math:`\\mathrm{KL}(p_{old} \\| p_{new}) \\le \\epsilon` per update.
    zeta, alpha_offset, max_alpha : float, int, float
        The schedule of :math:`\\alpha` (see the module docstring).
    update_every : int
        Episodes per update in ``mode="returns"``.
    memory : int
        ``mode="values"``: how many contexts of reported episodes are kept for an update that does not
        pass its own (the oldest go first).
    signal : {"return", "progress"}
        ``mode="returns"``: what an episode's performance :math:`R` is (SPRL uses the return).
    seed : int, optional
        Seeds the sampling.

    Raises
    ------
    TypeError
        For a space the teacher cannot use (names it).
    ValueError
        For zero-width bounds, a missing or ill-formed target, or bad hyperparameters.
    ImportError
        Without scipy (names the ``teachers`` extra).
    """

    def __init__(
        self,
        task_space: TaskSpace,
        *,
        target_mean: Any,
        target_std: Any = None,
        target_cov: Any = None,
        init_mean: Any = None,
        init_std: Any = None,
        init_cov: Any = None,
        mode: str = "values",
        covariance: str = "full",
        epsilon: float = 0.05,
        zeta: float = 1.6,
        alpha_offset: int = 10,
        max_alpha: float = 1e5,
        update_every: int = 100,
        memory: int = 10_000,
        signal: str = "return",
        seed: int | None = None,
    ) -> None:
        require("SelfPaced", "scipy")
        super().__init__(task_space, seed=seed)
        self.params = ParamBox(task_space, "SelfPaced")
        for name, value, allowed in (("mode", mode, _MODES), ("covariance", covariance, _COVARIANCES),
                                     ("signal", signal, _SIGNALS)):
            if value not in allowed:
                raise ValueError(f"SelfPaced: {name} must be one of {allowed}, got {value!r}")
        self.mode, self.covariance, self.signal = mode, covariance, signal
        self.epsilon = check_finite("epsilon", epsilon)
        self.zeta = check_finite("zeta", zeta)
        self.max_alpha = check_finite("max_alpha", max_alpha)
        if self.epsilon <= 0 or self.zeta < 0 or self.max_alpha < 0:
            raise ValueError(f"SelfPaced needs epsilon > 0, zeta >= 0 and max_alpha >= 0, got epsilon="
                             f"{epsilon!r}, zeta={zeta!r}, max_alpha={max_alpha!r}")
        for name, value, least in (("alpha_offset", alpha_offset, 0), ("update_every", update_every, 2),
                                   ("memory", memory, 2)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
                raise ValueError(f"SelfPaced: {name} must be an int >= {least}, got {value!r}")
        self.alpha_offset, self.update_every, self.memory = int(alpha_offset), int(update_every), int(memory)
        d = self.params.dims
        self.target_mean, self.target_chol = self._gaussian("target", target_mean, target_std, target_cov)
        if init_mean is None and init_std is None and init_cov is None:
            init_mean, init_std = (self.params.low + self.params.high) / 2.0, self.params.width / 4.0
        elif init_mean is None:
            init_mean = (self.params.low + self.params.high) / 2.0
        elif init_std is None and init_cov is None:
            init_std = self.params.width / 4.0
        self.mean_n, self.chol_n = self._gaussian("init", init_mean, init_std, init_cov)
        if self.covariance == "diag":
            self.chol_n = np.diag(np.sqrt(np.diag(self.chol_n @ self.chol_n.T)))
        self.alpha = 0.0
        self.updates = 0
        self.last_kl_step = 0.0  # KL(p_old ‖ p_new) of the last update
        self._contexts: deque[np.ndarray] = deque(maxlen=self.memory if mode == "values" else update_every)
        self._signals: deque[float] = deque(maxlen=update_every)
        logger.debug("SelfPaced over %d parameters, mode %s", d, mode)

    def _gaussian(self, what: str, mean: Any, std: Any, cov: Any) -> tuple[np.ndarray, np.ndarray]:
        """(mean, Cholesky factor) of a Gaussian given in space units, in normalised coordinates."""
        d, low, width = self.params.dims, self.params.low, self.params.width
        m = np.asarray(mean, dtype=np.float64).ravel()
        if m.shape != (d,) or not np.all(np.isfinite(m)):
            raise ValueError(f"SelfPaced: {what}_mean must be {d} finite numbers (one per parameter "
                             f"{self.params.names}), got {mean!r}")
        if (std is None) == (cov is None):
            raise ValueError(f"SelfPaced: give exactly one of {what}_std and {what}_cov")
        if std is not None:
            s = np.asarray(std, dtype=np.float64).ravel()
            if s.size not in (1, d) or not np.all(np.isfinite(s)) or not np.all(s > 0):
                raise ValueError(f"SelfPaced: {what}_std must be a positive number or {d} of them, "
                                 f"got {std!r}")
            cov = np.diag(np.broadcast_to(s, (d,)) ** 2)
        c = np.asarray(cov, dtype=np.float64)
        if c.shape != (d, d):
            raise ValueError(f"SelfPaced: {what}_cov must be a {d}x{d} matrix, got shape {c.shape}")
        chol = _cholesky(c, f"{what}_cov")
        return (m - low) / width, chol / width[:, None]

    # -- the distribution ---------------------------------------------------------------------------
    @property
    def mean(self) -> np.ndarray:
        """The context distribution's mean, in the space's units."""
        return self.params.low + self.params.width * self.mean_n

    @property
    def cov(self) -> np.ndarray:
        """The context distribution's covariance, in the space's units."""
        chol = self.params.width[:, None] * self.chol_n
        return chol @ chol.T

    def kl_to_target(self) -> float:
        """:math:`\\mathrm{KL}(p_\\nu \\| \\mu)` of the current distribution."""
        return _kl(self.mean_n, self.chol_n, self.target_mean, self.target_chol)

    def sample(self, k: int = 1) -> list[EncodedTask]:
        """``k`` tasks drawn from :math:`p_\\nu`, clipped (and snapped) into the space."""
        self._check_k(k)
        z = self.rng.standard_normal((int(k), self.params.dims))
        x = self.params.low + self.params.width * (self.mean_n + z @ self.chol_n.T)
        self.num_sampled += int(k)
        return [self.params.task(row, self.rng) for row in x]

    def pending_contexts(self) -> np.ndarray:
        """The contexts (space units, shape ``(n, d)``) of the episodes reported since the last update, in
        order: what ``update_on_demand({"values": V})`` without ``"contexts"`` pairs ``V`` with."""
        if not self._contexts:
            return np.zeros((0, self.params.dims))
        return self.params.low + self.params.width * np.array(self._contexts)

    # -- feedback -----------------------------------------------------------------------------------
    def update_on_episode(
        self,
        episode_return: float,
        length: int,
        task: EncodedTask,
        progress: float,
        env_id: int | None = None,
    ) -> None:
        """Remember the episode's context (and, in returns mode, its performance); in returns mode,
        update every ``update_every`` episodes."""
        x, value = feedback(self, task, episode_return, length, progress, self.signal)
        self._contexts.append((x - self.params.low) / self.params.width)
        if self.mode == "values":
            return
        self._signals.append(value)
        if len(self._signals) == self.update_every:
            contexts, signals = np.array(self._contexts), np.array(self._signals)
            self._contexts.clear()
            self._signals.clear()
            self._returns_update(contexts, signals)

    def update_on_demand(self, metrics: dict[str, Any]) -> None:
        """``{"values": V, "contexts": C, "performance": J}`` (mode ``"values"``): one SPDL update.

        ``V``: the critic's values :math:`V(s_0, c_i)`, shape ``(n,)``; ``C``: the contexts, shape
        ``(n, d)`` in the space's units (default: :meth:`pending_contexts`, which must then hold ``n``);
        ``J``: the mean performance for :math:`\\alpha` (default: the mean of ``V``). Every update clears
        the remembered contexts (they were drawn from the distribution it replaces). A dict without
        ``"values"`` is ignored. Bad shapes or non-finite numbers raise ``ValueError`` naming the key and
        leave the teacher as it was.
        """
        if not isinstance(metrics, Mapping):
            raise TypeError(f"SelfPaced.update_on_demand takes a dict, got {type(metrics).__name__}")
        if "values" not in metrics:
            return
        if self.mode != "values":
            raise ValueError("SelfPaced(mode='returns') learns from episode returns; pass 'values' to a "
                             "SelfPaced(mode='values')")
        values = np.asarray(metrics["values"], dtype=np.float64)
        if values.ndim != 1 or values.size < 2 or not np.all(np.isfinite(values)):
            raise ValueError("SelfPaced: metrics['values'] must be a 1-D array of at least 2 finite "
                             f"numbers, got shape {values.shape}"
                             + ("" if np.all(np.isfinite(values)) else " with non-finite entries"))
        if "contexts" in metrics:
            contexts = np.asarray(metrics["contexts"], dtype=np.float64)
            if contexts.ndim == 1 and self.params.dims == 1:
                contexts = contexts[:, None]
            if contexts.shape != (values.size, self.params.dims) or not np.all(np.isfinite(contexts)):
                raise ValueError(f"SelfPaced: metrics['contexts'] must be finite numbers of shape "
                                 f"({values.size}, {self.params.dims}) to match metrics['values'], "
                                 f"got shape {contexts.shape}")
            contexts = (contexts - self.params.low) / self.params.width
        else:
            if len(self._contexts) != values.size:
                raise ValueError(f"SelfPaced: metrics['values'] has {values.size} entries but "
                                 f"{len(self._contexts)} episodes were reported since the last update; pass "
                                 "metrics['contexts'] or one value per pending_contexts() row")
            contexts = np.array(self._contexts)
        perf = check_finite("metrics['performance']", metrics.get("performance", float(values.mean())))
        self._contexts.clear()
        self._values_update(contexts, values, perf)

    # -- the updates --------------------------------------------------------------------------------
    def _next_alpha(self, performance: float) -> float:
        """Count the update and set α by SPDL's schedule."""
        self.updates += 1
        if self.updates < self.alpha_offset:
            self.alpha = 0.0
        else:
            kl = max(self.kl_to_target(), 1e-10)
            self.alpha = min(self.max_alpha, self.zeta * max(0.0, performance) / kl)
        return self.alpha

    def _unpack(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d = self.params.dims
        chol = np.diag(np.exp(theta[d:2 * d]))
        if self.covariance == "full":
            chol[np.tril_indices(d, -1)] = theta[2 * d:]
        return theta[:d], chol

    def _pack(self, mean: np.ndarray, chol: np.ndarray) -> np.ndarray:
        d = self.params.dims
        parts = [mean, np.log(np.diag(chol))]
        if self.covariance == "full":
            parts.append(chol[np.tril_indices(d, -1)])
        return np.concatenate(parts)

    def _theta_grad(self, grad_mean: np.ndarray, grad_chol: np.ndarray, chol: np.ndarray) -> np.ndarray:
        """The gradient in the packed parameters from the gradients in the mean and the Cholesky factor."""
        parts = [grad_mean, np.diag(grad_chol) * np.diag(chol)]
        if self.covariance == "full":
            parts.append(grad_chol[np.tril_indices(self.params.dims, -1)])
        return np.concatenate(parts)

    def _values_update(self, contexts: np.ndarray, values: np.ndarray, performance: float) -> None:
        """SPDL's step. Gradients (with z = L⁻¹(c − m), Σ = LLᵀ): ∂log p/∂m = L⁻ᵀz,
        ∂log p/∂L = L⁻ᵀ(zzᵀ − I); ∂KL(p‖μ)/∂m = Σ_μ⁻¹(m − m_μ), ∂KL(p‖μ)/∂L = Σ_μ⁻¹L − L⁻ᵀ;
        ∂KL(p_old‖p)/∂m = Σ⁻¹(m − m_old), ∂KL(p_old‖p)/∂L = L⁻ᵀ − Σ⁻¹(Σ_old + δδᵀ)Σ⁻¹L with
        δ = m − m_old (each taken on the lower triangle)."""
        from scipy.optimize import BFGS, NonlinearConstraint, minimize

        # Whitened by the old distribution (x ↦ L_old⁻¹(x − m_old), under which KL divergences and density
        # ratios do not change), p_old is N(0, I) and the trust region is about as wide in every direction.
        m_old, l_old = self.mean_n, self.chol_n
        white = np.linalg.inv(l_old)
        contexts = (contexts - m_old) @ white.T
        t_mean, t_chol = white @ (self.target_mean - m_old), white @ self.target_chol
        d = self.params.dims
        m0, l0 = np.zeros(d), np.eye(d)
        alpha = self._next_alpha(performance)
        old_logp = _logpdf(contexts, m0, l0)
        target_prec = np.linalg.inv(t_chol @ t_chol.T)
        n, eye = values.size, np.eye(d)

        def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
            m, chol = self._unpack(theta)
            inv = np.linalg.inv(chol)
            z = inv @ (contexts - m).T
            logp = -0.5 * (z * z).sum(axis=0) - np.log(np.diag(chol)).sum() - 0.5 * d * np.log(2 * np.pi)
            rv = np.exp(np.minimum(logp - old_logp, 50.0)) * values  # (overflow guard)
            f = -float(rv.mean()) + alpha * _kl(m, chol, t_mean, t_chol)
            g_m = -(inv.T @ (z @ rv)) / n + alpha * target_prec @ (m - t_mean)
            g_l = -(inv.T @ ((z * rv) @ z.T - rv.sum() * eye)) / n + alpha * (target_prec @ chol - inv.T)
            return f, self._theta_grad(g_m, g_l, chol)

        def step_kl(theta: np.ndarray) -> float:
            m, chol = self._unpack(theta)
            return _kl(m0, l0, m, chol)

        def step_kl_grad(theta: np.ndarray) -> np.ndarray:
            m, chol = self._unpack(theta)
            inv = np.linalg.inv(chol)
            prec = inv.T @ inv
            g_l = inv.T - prec @ (eye + np.outer(m, m)) @ prec @ chol
            return self._theta_grad(prec @ m, g_l, chol)[None, :]

        theta0 = self._pack(m0, l0)
        with warnings.catch_warnings():  # (BFGS's "delta_grad == 0" when a step changes nothing)
            warnings.filterwarnings("ignore", "delta_grad == 0", UserWarning)
            res = minimize(objective, theta0, method="trust-constr", jac=True, hess=BFGS(),
                           constraints=[NonlinearConstraint(step_kl, -np.inf, self.epsilon, jac=step_kl_grad,
                                                            hess=BFGS())],
                           options={"maxiter": 200, "gtol": 1e-6, "xtol": 1e-8})
        theta = res.x if np.all(np.isfinite(res.x)) else theta0
        m1, l1 = self._unpack(theta)
        self._accept(m_old + l_old @ m1, (l_old @ l1) @ (l_old @ l1).T)
        logger.debug("SelfPaced: update %d (values), alpha %.4g, %s", self.updates, alpha, res.message)

    def _returns_update(self, contexts: np.ndarray, signals: np.ndarray) -> None:
        m0, l0 = self.mean_n, self.chol_n
        alpha = self._next_alpha(float(signals.mean()))
        log_mu = _logpdf(contexts, self.target_mean, self.target_chol)
        w, eta = _sprl_weights(signals, log_mu, _logpdf(contexts, m0, l0), alpha, self.epsilon)
        m1 = w @ contexts
        diff = contexts - m1
        self._accept(m1, (w[:, None] * diff).T @ diff)
        logger.debug("SelfPaced: update %d (returns), alpha %.4g, eta %.4g", self.updates, alpha, eta)

    def _accept(self, mean: np.ndarray, cov: np.ndarray) -> None:
        """Take (mean, cov) as the new distribution, pulled back towards the old one until
        KL(old ‖ new) ≤ ε (bisection on the interpolation weight)."""
        if self.covariance == "diag":
            cov = np.diag(np.diag(cov))
        cov = (cov + cov.T) / 2.0 + _VAR_FLOOR * np.eye(self.params.dims)
        m0, l0 = self.mean_n, self.chol_n
        c0 = l0 @ l0.T

        def at(t: float) -> tuple[np.ndarray, np.ndarray]:
            return m0 + t * (mean - m0), np.linalg.cholesky((1.0 - t) * c0 + t * cov)

        lo, hi = 0.0, 1.0
        if _kl(m0, l0, *at(1.0)) > self.epsilon:
            for _ in range(40):
                mid = (lo + hi) / 2.0
                if _kl(m0, l0, *at(mid)) <= self.epsilon:
                    lo = mid
                else:
                    hi = mid
            hi = lo
        self.mean_n, self.chol_n = at(hi)
        self.last_kl_step = _kl(m0, l0, self.mean_n, self.chol_n)

    # -- introspection and checkpointing ------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """Mean and standard deviation per dimension (space units), KL to the target, α, updates."""
        out = super().metrics()
        std = np.sqrt(np.diag(self.cov))
        for i, (m, s) in enumerate(zip(self.mean[:_MAX_METRIC_DIMS], std[:_MAX_METRIC_DIMS])):
            out[f"selfpaced/mean[{i}]"] = float(m)
            out[f"selfpaced/std[{i}]"] = float(s)
        out["selfpaced/kl_target"] = self.kl_to_target()
        out["selfpaced/alpha"] = float(self.alpha)
        out["selfpaced/updates"] = float(self.updates)
        out["selfpaced/kl_step"] = float(self.last_kl_step)
        return out

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(
            mean=self.mean_n.copy(), chol=self.chol_n.copy(), alpha=float(self.alpha), updates=self.updates,
            last_kl_step=float(self.last_kl_step),
            contexts=[c.copy() for c in self._contexts], signals=list(self._signals),
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mean = np.asarray(state["mean"], dtype=np.float64)
        if mean.shape != (self.params.dims,):
            raise ValueError(f"SelfPaced: state_dict has {mean.size} parameters, this space has "
                             f"{self.params.dims}")
        super().load_state_dict(state)
        self.mean_n, self.chol_n = mean.copy(), np.asarray(state["chol"], dtype=np.float64).copy()
        self.alpha, self.updates = float(state["alpha"]), int(state["updates"])
        self.last_kl_step = float(state["last_kl_step"])
        self._contexts.clear()
        self._contexts.extend(np.asarray(c, dtype=np.float64).copy() for c in state["contexts"])
        self._signals.clear()
        self._signals.extend(float(s) for s in state["signals"])

    def __repr__(self) -> str:
        return f"SelfPaced({self.task_space!r}, mode={self.mode!r}, updates={self.updates})"

