r"""A long turn's parts: what lets a turn longer than the encoder reads be found by any of its sentences.

MiniLM reads the first 256 word pieces of a text, so a pasted document or a long assistant reply is embedded by its
opening alone: "my passport number is XK-4411" in the middle of a 21k-character message matches nothing. A turn
whose rendered line is longer than :data:`ENCODER_TOKENS` is also stored as passages: consecutive verbatim slices of
its text, cut at sentence ends where one falls inside :data:`PASSAGE_TOKENS` word pieces, each embedded with its
speaker and linked to its turn. A passage hit brings its turn as a candidate (an ``event`` that lends no prior, as
facts do); the turn itself stays the evidence, and when it does not fit the context, the context quotes the passage
that matches the query (:mod:`memstrata.memory.search.excerpts`). A turn that fits the encoder has no passages, so
short chats pay nothing.

Example:
    >>> import re
    >>> from memstrata.memory.levels.level2.turn import Turn
    >>> class Words:  # a stand-in tokenizer: one token per word, with its character span
    ...     def spans(self, text):
    ...         return [m.span() for m in re.finditer(r"\S+", text)]
    >>> turn = Turn(user_id="u", session_id="1", position=0, speaker="Ann", text="One two. Three four. Five six.")
    >>> [p.text for p in turn_passages(turn, Words(), fits=3, size=3)]
    ['One two.', 'Three four.', 'Five six.']
    >>> turn_passages(turn, Words(), fits=100) == []
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import Field, model_validator

from memstrata.memory.levels.base import Level, register
from memstrata.memory.levels.level2.turn import Turn
from memstrata.memory.models import Unit

ENCODER_TOKENS = 254
"""Word pieces MiniLM reads of one text (its 256, less the two special tokens): a longer turn gets passages."""
PASSAGE_TOKENS = 128
"""The most word pieces of one passage: about five sentences, short enough to quote inside a small budget."""
_CLOSERS = "\"')]\u201d\u2019"


class SpanTokenizer(Protocol):
    """Anything that gives a text's word pieces as character spans, such as
    :class:`memstrata.memory.tokens.TokenCounter`.
    """

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The (start, end) characters of each word piece of ``text``, special tokens left out."""


class Passage(Unit):
    """A verbatim slice of one long turn's text, searched in its place."""

    turn_id: str
    session_id: str
    speaker: str
    start: int = Field(ge=0, description="where the slice starts in the turn's text (characters)")
    end: int = Field(ge=0, description="where it ends (exclusive)")
    text: str = Field(description="the turn's text[start:end], verbatim")

    @model_validator(mode="after")
    def _derive_id(self) -> Passage:
        if not self.id:
            self.id = passage_id(self.turn_id, self.start)
        return self

    def embed_text(self) -> str:
        """``speaker: slice``, as the turn itself is rendered."""
        return f"{self.speaker}: {self.text}"

    def linked_turn_ids(self) -> list[str]:
        """The turn it is cut from."""
        return [self.turn_id]

    def metadata(self) -> dict[str, Any]:
        """The base metadata plus its turn, session and span."""
        return {
            **super().metadata(),
            "turn_id": self.turn_id,
            "session_id": self.session_id,
            "start": self.start,
            "end": self.end,
        }


def passage_id(turn_id: str, start: int) -> str:
    """The id of the passage of turn ``turn_id`` that starts at character ``start`` of its text."""
    return f"part:{turn_id}:{start}"


def spans_of(text: str, pieces: Sequence[tuple[int, int]], *, size: int = PASSAGE_TOKENS) -> list[tuple[int, int]]:
    """Cut ``text`` (whose word pieces are ``pieces``) into consecutive (start, end) slices of at most ``size``
    pieces each, ending at the last sentence end inside that many pieces, else at the last word start.
    """
    out: list[tuple[int, int]] = []
    first = 0
    while first < len(pieces):
        last = min(first + size, len(pieces))
        if last < len(pieces):
            gaps = [j for j in range(first + 1, last + 1) if pieces[j][0] > pieces[j - 1][1]]  # a word starts at j
            ends = [j for j in gaps if _ends_sentence(text, pieces[j - 1], pieces[j])]
            last = ends[-1] if ends else gaps[-1] if gaps else last
        out.append((pieces[first][0], pieces[last - 1][1]))
        first = last
    return out


def _ends_sentence(text: str, before: tuple[int, int], after: tuple[int, int]) -> bool:
    """Whether a sentence ends between two word pieces: a line break between them, or ``. ! ?`` (and any closing
    quotes or brackets) ending the first.
    """
    if "\n" in text[before[1] : after[0]]:
        return True
    return text[max(0, before[1] - 4) : before[1]].rstrip(_CLOSERS)[-1:] in {".", "!", "?"}


def is_long(speaker: str, text: str, *, fits: int = ENCODER_TOKENS) -> bool:
    """Whether ``speaker: text`` may be longer than ``fits`` word pieces: a word piece holds at least one
    character, so a line of at most ``fits`` non-space characters never is (and no tokenizer runs for it).
    """
    return len(speaker) + len(text) - text.count(" ") > fits


def long_turns(turns: Sequence[Turn], *, fits: int = ENCODER_TOKENS) -> list[Turn]:
    """The turns that may be longer than ``fits`` word pieces (:func:`is_long`)."""
    return [t for t in turns if is_long(t.speaker, t.text, fits=fits)]


def turn_passages(
    turn: Turn, tokenizer: SpanTokenizer, *, fits: int = ENCODER_TOKENS, size: int = PASSAGE_TOKENS
) -> list[Passage]:
    """The passages of ``turn``: none when its rendered line has at most ``fits`` word pieces."""
    pieces = tokenizer.spans(turn.text)
    if len(pieces) + len(tokenizer.spans(turn.speaker + ":")) <= fits:
        return []
    return [
        Passage(
            user_id=turn.user_id,
            conversation_id=turn.conversation_id,
            turn_id=turn.id,
            session_id=turn.session_id,
            speaker=turn.speaker,
            start=start,
            end=end,
            text=turn.text[start:end],
            timestamp=turn.timestamp,
            timestamp_raw=turn.timestamp_raw,
        )
        for start, end in spans_of(turn.text, pieces, size=size)
    ]


PASSAGE = register(
    Level(
        kind="passage",
        unit=Passage,
        role="event",
        scopes=("Short", "Mixed"),
        description="the parts of a turn longer than the encoder reads, each linked to its turn",
        lends_prior=False,
    )
)
