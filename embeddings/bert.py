"""A BERT encoder's forward pass in numpy, and the ``.safetensors`` reader that loads its weights."""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["NumpyBert", "erf", "load_safetensors"]


def erf(x: np.ndarray) -> np.ndarray:
    """Error function, Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7); numpy has no erf."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def load_safetensors(path: Path) -> dict[str, np.ndarray]:
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


class NumpyBert:
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
            h = 0.5 * h * (1.0 + erf(h / np.sqrt(2.0)))
            x = self._ln(self._dense(h, p + "output.dense") + x, p + "output.LayerNorm")
        return np.add.reduceat(x.astype(np.float64), bounds[:-1], axis=0) / np.array(lengths)[:, None]
