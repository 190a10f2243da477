"""TF-IDF sentence vectors in numpy: the embedder that needs no model at all."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

__all__ = ["TfidfEmbedder"]

_TOKEN = re.compile(r"[a-z0-9]+")


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
