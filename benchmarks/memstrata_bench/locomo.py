r"""LoCoMo loading: turns, questions and normalized evidence ids.

The rules are those of ``shared/docs/EVAL.md``: sessions come only from the
``session_N`` keys, evidence ids are split on ``;``, ``,`` and whitespace and
parsed with ``D:?(\d+):0*(\d+)``, ids that match no turn are dropped, and so
are questions left with no evidence. Categories 1-4 are the headline; category
5 (adversarial) is reported on its own.

Example:
    >>> normalize_evidence(["D1:3; D2:4", "D:11:26", "D30:05"])
    ['D1:3', 'D2:4', 'D11:26', 'D30:5']
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HEADLINE_CATEGORIES: tuple[int, ...] = (1, 2, 3, 4)
ADVERSARIAL_CATEGORY = 5
CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_EVIDENCE_ID = re.compile(r"D:?(\d+):0*(\d+)")
_SEPARATORS = re.compile(r"[;,\s]+")


@dataclass(frozen=True)
class LocomoTurn:
    """One dialogue turn.

    Attributes:
        dia_id: normalized id, ``"D<session>:<turn>"``.
        session: the session number.
        speaker: who spoke.
        text: the verbatim text; presence in a context is judged on this field.
        caption: the BLIP caption of a shared photo, if any.
    """

    dia_id: str
    session: int
    speaker: str
    text: str
    caption: str | None = None

    def render(self) -> str:
        """The baseline rendering: ``speaker: text`` plus the photo caption.

        Example:
            >>> LocomoTurn("D1:1", 1, "Ann", "Look!", "a cat on a sofa").render()
            'Ann: Look! [shares a photo: a cat on a sofa]'
        """
        line = f"{self.speaker}: {self.text}"
        return f"{line} [shares a photo: {self.caption}]" if self.caption else line


@dataclass(frozen=True)
class LocomoQuestion:
    """One QA item whose evidence survived normalization.

    Attributes:
        question: the question text.
        category: LoCoMo category, 1-5.
        evidence: normalized dia_ids of the gold turns, all present in the conversation.
        answer: the gold answer (the adversarial answer for category 5).
    """

    question: str
    category: int
    evidence: tuple[str, ...]
    answer: str = ""


@dataclass
class LocomoConversation:
    """One LoCoMo conversation with its turns, questions and the raw JSON item.

    Attributes:
        sample_id: the conversation id, e.g. ``"conv-26"``.
        turns: every turn, in session then turn order.
        questions: the questions kept after evidence normalization.
        raw: the parsed JSON object, as handed to ``Memstrata.ingest``.
        dropped_questions: questions dropped for lack of valid evidence.
        dropped_ids: evidence ids that matched no turn.
    """

    sample_id: str
    turns: list[LocomoTurn]
    questions: list[LocomoQuestion]
    raw: dict[str, Any] = field(repr=False)
    dropped_questions: int = 0
    dropped_ids: list[str] = field(default_factory=list)

    def turn_texts(self) -> dict[str, str]:
        """Map each dia_id to its verbatim text."""
        return {t.dia_id: t.text for t in self.turns}


def normalize_dia_id(piece: str) -> str | None:
    """Parse one evidence piece into ``"D<s>:<t>"``, or ``None`` when it is no id.

    Example:
        >>> normalize_dia_id("D30:05"), normalize_dia_id("D:11:26"), normalize_dia_id("D")
        ('D30:5', 'D11:26', None)
    """
    match = _EVIDENCE_ID.search(piece)
    if match is None:
        return None
    return f"D{int(match.group(1))}:{int(match.group(2))}"


def normalize_evidence(raw: Iterable[str]) -> list[str]:
    """Split and parse raw evidence entries, keeping order and dropping duplicates.

    Example:
        >>> normalize_evidence(["D1:3; D2:4", "D1:3", "D"])
        ['D1:3', 'D2:4']
    """
    ids: list[str] = []
    for entry in raw:
        for piece in _SEPARATORS.split(str(entry)):
            dia_id = normalize_dia_id(piece) if piece else None
            if dia_id is not None and dia_id not in ids:
                ids.append(dia_id)
    return ids


def parse_turns(body: dict[str, Any]) -> list[LocomoTurn]:
    """The turns of one ``conversation`` object, from the ``session_N`` lists only."""
    numbers = sorted(int(m.group(1)) for key in body if (m := _SESSION_KEY.match(key)) and isinstance(body[key], list))
    turns: list[LocomoTurn] = []
    for number in numbers:
        for raw in body[f"session_{number}"]:
            dia_id = normalize_dia_id(str(raw.get("dia_id", ""))) or f"D{number}:{len(turns)}"
            turns.append(
                LocomoTurn(
                    dia_id=dia_id,
                    session=number,
                    speaker=str(raw["speaker"]),
                    text=str(raw["text"]),
                    caption=raw.get("blip_caption") or None,
                )
            )
    return turns


def parse_question(item: dict[str, Any], known: set[str]) -> tuple[LocomoQuestion | None, list[str]]:
    """One QA item, with its evidence restricted to known turns, plus the ids dropped."""
    ids = normalize_evidence(item.get("evidence") or [])
    kept = tuple(i for i in ids if i in known)
    dropped = [i for i in ids if i not in known]
    if not kept:
        return None, dropped
    answer = item.get("answer", item.get("adversarial_answer", ""))
    return LocomoQuestion(
        question=str(item["question"]), category=int(item["category"]), evidence=kept, answer=str(answer)
    ), dropped


def parse_conversation(item: dict[str, Any]) -> LocomoConversation:
    """Parse one LoCoMo item (the object holding ``conversation``, ``qa`` and ``sample_id``)."""
    turns = parse_turns(item["conversation"])
    known = {t.dia_id for t in turns}
    questions: list[LocomoQuestion] = []
    dropped_ids: list[str] = []
    dropped_questions = 0
    for qa in item.get("qa", []):
        question, dropped = parse_question(qa, known)
        dropped_ids.extend(dropped)
        if question is None:
            dropped_questions += 1
        else:
            questions.append(question)
    return LocomoConversation(
        sample_id=str(item["sample_id"]),
        turns=turns,
        questions=questions,
        raw=item,
        dropped_questions=dropped_questions,
        dropped_ids=dropped_ids,
    )


def load_locomo(path: str | Path, *, conversations: Sequence[str] | None = None) -> list[LocomoConversation]:
    """Load ``locomo10.json``, optionally keeping only some ``sample_id`` values.

    Args:
        path: the LoCoMo JSON file.
        conversations: sample ids to keep (all when ``None``), in file order.

    Raises:
        ValueError: when the file is not a LoCoMo list or a requested id is missing.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list) or not all(isinstance(x, dict) and "conversation" in x for x in data):
        msg = f"{path}: expected a LoCoMo list of objects with a 'conversation' key"
        raise ValueError(msg)
    parsed = [parse_conversation(item) for item in data]
    if conversations is None:
        return parsed
    wanted = set(conversations)
    missing = wanted - {c.sample_id for c in parsed}
    if missing:
        msg = f"conversations: unknown sample_id(s) {sorted(missing)}; the file has {[c.sample_id for c in parsed]}"
        raise ValueError(msg)
    return [c for c in parsed if c.sample_id in wanted]
