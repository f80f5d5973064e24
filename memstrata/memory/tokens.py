"""Token counting with the packaged MiniLM WordPiece tokenizer (offline).

This is exactly the counter ``shared/docs/EVAL.md`` prescribes: no truncation,
no padding, no special tokens.

Example:
    >>> counter = TokenCounter()  # doctest: +SKIP
    >>> counter.count("hello world")  # doctest: +SKIP
    2
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from memstrata.memory.embeddings import minilm_path


class CountsTokens(Protocol):
    """Anything that counts a text's tokens, such as :class:`TokenCounter`."""

    def count(self, text: str) -> int:
        """The number of tokens in ``text``."""


@lru_cache(maxsize=1)
def _default_file() -> str:
    return str(Path(minilm_path()) / "tokenizer.json")


@lru_cache(maxsize=1)
def _tokenizer(path: str):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)
    tok.no_truncation()
    tok.no_padding()
    return tok


@lru_cache(maxsize=8)
def _splits_on_whitespace(path: str) -> bool:
    return type(_tokenizer(path).pre_tokenizer).__name__ in {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}


@lru_cache(maxsize=4096)
def _words(text: str) -> int:
    """Whitespace-separated words of ``text`` (memoized: packing asks it of the same candidate turns often)."""
    return len(text.split())


@lru_cache(maxsize=65536)
def _count(tokenizer_file: str, text: str) -> int:
    return len(_tokenizer(tokenizer_file).encode(text, add_special_tokens=False).ids)


class TokenCounter:
    """Counts WordPiece tokens of the MiniLM tokenizer (memoized: evidence lines repeat across queries)."""

    def __init__(self, tokenizer_file: str | None = None) -> None:
        self.tokenizer_file = tokenizer_file or _default_file()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenCounter) and other.tokenizer_file == self.tokenizer_file

    def __hash__(self) -> int:
        return hash(self.tokenizer_file)

    def count(self, text: str) -> int:
        """The tokens of ``text`` under the tokenizer file, special tokens left out (0 for an empty text)."""
        return _count(self.tokenizer_file, text) if text else 0

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The (start, end) characters of each of ``text``'s tokens, special tokens left out."""
        return list(_tokenizer(self.tokenizer_file).encode(text, add_special_tokens=False).offsets) if text else []

    def at_least(self, text: str) -> int:
        """A lower bound of :meth:`count` without tokenizing: its whitespace-separated words (each is one token or
        more) when the pre-tokenizer splits on whitespace, else 0.
        """
        return _words(text) if _splits_on_whitespace(self.tokenizer_file) else 0

    def count_lines(self, lines: Sequence[str]) -> int:
        r"""The tokens of ``"\n".join(lines)``, summed from the memoized lines' counts.

        Exact when the tokenizer's pre-tokenizer splits on whitespace (MiniLM's WordPiece does), so no token
        spans two lines (``tests/unit_tests/test_tokens.py`` checks it on LoCoMo's turns); another tokenizer file counts
        the joined text.
        """
        if not _splits_on_whitespace(self.tokenizer_file):
            return self.count("\n".join(lines))
        return sum(self.count(text) for text in lines)

    def count_many(self, texts: list[str]) -> list[int]:
        """The token count of each text, encoded in one batch."""
        if not texts:
            return []
        encs = _tokenizer(self.tokenizer_file).encode_batch(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encs]
