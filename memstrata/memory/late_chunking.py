"""Late chunking (Günther et al., 2024): the vector of a text cut from turns, pooled from the turns' token vectors.

An offline fact is a clause of one turn, and an extractive summary a few sentences of its episode's turns. Their
texts are quotes (with names put for pronouns, and dates resolved), so instead of encoding each again, a quote's
vector is the mean of the encoder's token vectors over the quoted characters, read from the pass that encoded the
turn when it was stored (:meth:`memstrata.memory.store.encoded.EncodedTexts.tokens_of`), then scaled to unit
length. The tokens of the speaker's name (the line starts ``"speaker: "``) join every quote, as the unit's text
names the speaker where the turn said "I". The tokens read the whole turn, so a quote's vector also carries its
context. No encoder call is made; a unit whose turn's token vectors are not at hand (stored by another process,
evicted from the bound, cut off by the encoder's window, or an embedder that gives none) is encoded as before.

Measured on the first four LoCoMo conversations (4,021 offline facts, 574 questions; the rank of the first
evidence fact among a conversation's facts by cosine), pooled against encoded: hit@5 55.4 / 53.7, hit@20 71.8 /
72.1, hit@50 81.7 / 80.3.

Example:
    >>> import numpy as np
    >>> from memstrata.memory.embeddings import TokenVectors
    >>> tokens = TokenVectors(np.eye(3, dtype=np.float16), np.array([[0, 3], [3, 5], [5, 9]]))
    >>> [round(float(x), 3) for x in quote_vector(tokens, [(0, 3), (5, 9)])]
    [0.707, 0.0, 0.707]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from memstrata.memory.embeddings import TokenVectors
from memstrata.memory.levels.level2.turn import Turn


def quote_vector(tokens: TokenVectors, spans: Sequence[tuple[int, int]]) -> np.ndarray | None:
    """The unit-length mean of the token vectors that lie inside any of ``spans`` (``[start, end)`` characters of
    the encoded text), or ``None`` when no token does.
    """
    return _unit_mean([tokens.vectors[_inside(tokens, spans)]])


def pooled_vector(
    quotes: Sequence[Sequence[Any]], turns: Mapping[str, Turn], tokens_of: Callable[[str], TokenVectors | None]
) -> np.ndarray | None:
    """The vector of a unit quoted from ``turns`` (``[turn id, start, end]`` in each turn's text): every quote's
    tokens and its speaker's name, pooled together; ``None`` when a quote's turn or its token vectors are missing.
    """
    parts: list[np.ndarray] = []
    for turn_id, start, end in quotes:
        turn = turns.get(turn_id)
        tokens = tokens_of(turn.embed_text()) if turn is not None else None
        if turn is None or tokens is None:
            return None
        quoted = _inside(tokens, [(turn.text_start + int(start), turn.text_start + int(end))])
        if not quoted.any():  # the quote lies past the encoder's window
            return None
        parts.append(tokens.vectors[quoted | _inside(tokens, [(0, len(turn.speaker))])])
    return _unit_mean(parts)


def _inside(tokens: TokenVectors, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """Which tokens lie wholly inside one of ``spans`` (special tokens, which cover no character, never do)."""
    starts, ends = tokens.offsets[:, 0], tokens.offsets[:, 1]
    inside = np.zeros(len(tokens), dtype=bool)
    for start, end in spans:
        inside |= (starts >= start) & (ends <= end) & (ends > starts)
    return inside


def _unit_mean(parts: Sequence[np.ndarray]) -> np.ndarray | None:
    rows = [p for p in parts if len(p)]
    if not rows:
        return None
    mean = np.concatenate(rows).astype(np.float32).mean(axis=0)
    norm = float(np.linalg.norm(mean))
    return mean / norm if norm > 0 else None


def unit_vectors(
    units: Sequence[Any],
    turns: Mapping[str, Mapping[str, Turn]],
    tokens_of: Callable[[str], TokenVectors | None],
    encode: Callable[[list[str]], list[list[float]]],
    *,
    pooled: bool = True,
) -> tuple[list[list[float]], int]:
    """Each unit's vector: pooled from its turns' token vectors where it quotes them (and ``pooled``), else its
    :meth:`embed_text` encoded (all of those in one ``encode`` call); and how many were pooled.

    ``turns`` are by conversation, then by id: a quote names its turn by id, and two conversations may hold turns of
    the same id.
    """
    found: list[np.ndarray | None] = [
        pooled_vector(u.quotes, turns.get(u.conversation_id, {}), tokens_of)
        if pooled and getattr(u, "quotes", None)
        else None
        for u in units
    ]
    missing = [i for i, v in enumerate(found) if v is None]
    encoded = encode([units[i].embed_text() for i in missing]) if missing else []
    vectors: list[list[float]] = [v.tolist() if v is not None else [] for v in found]
    for i, vector in zip(missing, encoded, strict=True):
        vectors[i] = list(vector)
    return vectors, len(units) - len(missing)
