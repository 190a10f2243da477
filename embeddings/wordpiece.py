"""BERT's uncased WordPiece tokenizer, in plain Python (for the numpy sentence encoder)."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import numpy as np

__all__ = ["WordPiece"]


class WordPiece:
    """BERT's uncased tokenizer: basic clean-up and splitting, then greedy longest-match WordPiece.

    ``vocab_file`` holds one token per line (its line number is its id); :meth:`encode` returns the ids of a
    text between ``[CLS]`` and ``[SEP]``, at most ``max_length`` in all.
    """

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
