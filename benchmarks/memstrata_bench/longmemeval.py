r"""LongMemEval-S in its own record format: loading, question selection and the paper's retrieval metrics.

Each record is one question with its own haystack (about 48 sessions, 490 turns). Every turn gets a stable id
from its place in the record, ``D<session index + 1>:<turn index + 1>`` (the paper's ``<session>_<turn + 1>``), so
a method's evidence maps back to ``has_answer`` turns and ``answer_session_ids``. Sessions are kept in time order
(the records list some sessions of a day out of order), and the few turns with empty content are left out.

The paper's metrics score a ranked list of items (Wu et al., 2025, ``src/retrieval/eval_utils.py``):
``recall_any@k`` (some evidence item in the top k), ``recall_all@k`` (every one) and ``NDCG@k`` with the paper's
gain (``rel_1 + sum_{i>=2} rel_i / log2(i)``). Here a method's ranked turns give three lists: its sessions in
order of their first turn, its turns, and its user turns only (the official turn-level corpus).

Example:
    >>> ranked_metrics(["a", "b", "c"], {"b"}, ks=(1, 2))
    {'recall_any@1': 0.0, 'recall_all@1': 0.0, 'ndcg@1': 0.0, 'recall_any@2': 1.0, 'recall_all@2': 1.0, 'ndcg@2': 1.0}
    >>> parse_question_date("2023/05/30 (Tue) 23:40")
    datetime.datetime(2023, 5, 30, 23, 40)
"""

from __future__ import annotations

import gzip
import json
import math
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from memstrata_bench.baselines import RankedTurnsMethod
from memstrata_bench.locomo import LocomoConversation, LocomoTurn
from memstrata_bench.system import BENCH_USER, MemstrataMethod

QUESTION_TYPES: tuple[str, ...] = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "temporal-reasoning",
    "knowledge-update",
)
ABSTENTION = "abstention"
"""The stratum of ``..._abs`` questions: the answer is not in the history, so they are reported apart."""
KS: tuple[int, ...] = (5, 10)
LEVELS: tuple[str, ...] = ("session", "turn", "turn_user")
_REQUIRED = ("question_id", "question_type", "question", "question_date", "haystack_sessions", "haystack_dates")
_DATE = re.compile(r"^(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\([A-Za-z]+\))?\s*(\d{1,2}):(\d{2})$")


def turn_key(session_index: int, turn_index: int) -> str:
    """The id of a haystack turn, from its 0-based session and turn index.

    Example:
        >>> turn_key(0, 2)
        'D1:3'
    """
    return f"D{session_index + 1}:{turn_index + 1}"


def parse_question_date(raw: str) -> datetime:
    """A LongMemEval date, ``"2023/05/30 (Tue) 23:40"`` (or ISO 8601), as a naive datetime.

    Raises:
        ValueError: when the text is neither.
    """
    match = _DATE.match(raw.strip())
    if match:
        year, month, day, hour, minute = map(int, match.groups())
        return datetime(year, month, day, hour, minute)
    try:
        return datetime.fromisoformat(raw.strip())
    except ValueError:
        msg = f"cannot read {raw!r} as a LongMemEval date (expected like '2023/05/30 (Tue) 23:40')"
        raise ValueError(msg) from None


@dataclass
class LongMemEvalQuestion:
    """One question and its haystack.

    Attributes:
        question_id: the record's id (``..._abs`` for an abstention question).
        question_type: the record's type, e.g. ``"multi-session"``.
        question: the question text.
        answer: the gold answer (not used for retrieval scores).
        asked_at: ``question_date``, the time the question is asked.
        conversation: the haystack as turns (``dia_id`` = :func:`turn_key`, speaker = role) in time order, with
            the ``memstrata`` ingestion payload as ``raw``.
        session_of: each turn's haystack session id.
        roles: each turn's role, ``"user"`` or ``"assistant"``.
        evidence: ids of the turns with ``has_answer``, in haystack order.
        answer_sessions: ``answer_session_ids``.
    """

    question_id: str
    question_type: str
    question: str
    answer: str
    asked_at: datetime
    conversation: LocomoConversation
    session_of: dict[str, str]
    roles: dict[str, str]
    evidence: tuple[str, ...]
    answer_sessions: tuple[str, ...]

    @property
    def abstention(self) -> bool:
        """Whether this is an abstention question (its id ends with ``_abs``)."""
        return self.question_id.endswith("_abs")

    @property
    def category(self) -> str:
        """The stratum it is selected and reported in: its type, or ``"abstention"``."""
        return ABSTENTION if self.abstention else self.question_type

    def gold_texts(self) -> list[str]:
        """The verbatim texts of the evidence turns (what the budget recall looks for)."""
        texts = self.conversation.turn_texts()
        return [texts[key] for key in self.evidence]

    def user_evidence(self) -> tuple[str, ...]:
        """The evidence turns said by the user (the official turn-level scoring counts only those)."""
        return tuple(key for key in self.evidence if self.roles[key] == "user")


def parse_record(record: dict[str, Any], *, where: str = "<record>") -> LongMemEvalQuestion:
    """One LongMemEval record as a :class:`LongMemEvalQuestion`.

    Raises:
        ValueError: a missing field, mismatched haystack lists or an unreadable date (the message names it).
    """
    missing = [key for key in _REQUIRED if key not in record]
    if missing:
        msg = f"{where}: missing field(s) {missing}; is this a LongMemEval record?"
        raise ValueError(msg)
    sessions, dates = record["haystack_sessions"], record["haystack_dates"]
    ids = record.get("haystack_session_ids") or [f"session_{i + 1}" for i in range(len(sessions))]
    if not len(sessions) == len(dates) == len(ids):
        msg = f"{where}: haystack_sessions, haystack_dates and haystack_session_ids differ in length"
        raise ValueError(msg)
    times = [parse_question_date(str(d)) for d in dates]
    qid = str(record["question_id"])
    turns, session_of, roles, evidence, messages = [], {}, {}, [], []
    for rank, index in enumerate(sorted(range(len(sessions)), key=lambda i: (times[i], i))):
        for position, raw in enumerate(sessions[index]):
            text, key = str(raw.get("content") or ""), turn_key(index, position)
            if not text.strip():  # memstrata refuses an empty message, so no method gets one
                continue
            role = str(raw.get("role", "user"))
            turns.append(LocomoTurn(dia_id=key, session=index + 1, speaker=role, text=text))
            session_of[key], roles[key] = str(ids[index]), role
            if raw.get("has_answer"):
                evidence.append(key)
            stamp = times[index].isoformat()
            messages.append({"id": key, "role": role, "content": text, "session": str(rank + 1), "timestamp": stamp})
    payload = [{"conversation_id": qid, "messages": messages}]
    conversation = LocomoConversation(sample_id=qid, turns=turns, questions=[], raw=payload)  # type: ignore[arg-type]
    return LongMemEvalQuestion(
        question_id=qid,
        question_type=str(record["question_type"]),
        question=str(record["question"]),
        answer=str(record.get("answer", "")),
        asked_at=parse_question_date(str(record["question_date"])),
        conversation=conversation,
        session_of=session_of,
        roles=roles,
        evidence=tuple(sorted(evidence, key=_haystack_order)),
        answer_sessions=tuple(str(s) for s in record.get("answer_session_ids") or ()),
    )


def _haystack_order(key: str) -> tuple[int, int]:
    session, _, turn = key[1:].partition(":")
    return int(session), int(turn)


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``.json`` or ``.json.gz`` file (gzip is recognised by its first bytes).

    Raises:
        ValueError: when the file is not a JSON list of objects.
    """
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        records = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        msg = f"{path}: not a JSON file ({exc})"
        raise ValueError(msg) from exc
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        msg = f"{path}: expected a JSON list of LongMemEval records (objects)"
        raise ValueError(msg)
    return records


def select_records(
    records: Sequence[dict[str, Any]],
    *,
    per_type: int | None = None,
    limit: int | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """The records a run asks, in file order: ``per_type`` drawn from each stratum, then the first ``limit``.

    A stratum is a question type, with the abstention questions in their own. The draw is seeded by ``seed`` and
    the stratum's name, so it does not depend on which other records the file holds.
    """
    kept = list(records)
    if per_type is not None:
        strata: dict[str, list[int]] = {}
        for index, record in enumerate(kept):
            strata.setdefault(_stratum(record), []).append(index)
        chosen = {
            index
            for name, rows in strata.items()
            for index in random.Random(f"{seed}:{name}").sample(rows, k=min(per_type, len(rows)))
        }
        kept = [record for index, record in enumerate(kept) if index in chosen]
    return kept if limit is None else kept[:limit]


def _stratum(record: dict[str, Any]) -> str:
    return ABSTENTION if str(record.get("question_id", "")).endswith("_abs") else str(record.get("question_type"))


def shard_of(items: Sequence[Any], shard: tuple[int, int] | None) -> list[Any]:
    """Shard ``i`` of ``n``: every n-th item from the i-th, so each shard holds every type.

    Example:
        >>> shard_of([0, 1, 2, 3, 4], (1, 2))
        [1, 3]
    """
    if shard is None:
        return list(items)
    index, count = shard
    if not 0 <= index < count:
        msg = f"shard: expected i/n with 0 <= i < n, got {index}/{count}"
        raise ValueError(msg)
    return list(items[index::count])


# ---- the paper's retrieval metrics -----------------------------------------------------------------------------
def first_appearance(items: Iterable[str]) -> list[str]:
    """The items in order of their first appearance (a ranked session list from ranked turns' sessions).

    Example:
        >>> first_appearance(["s2", "s1", "s2", "s3"])
        ['s2', 's1', 's3']
    """
    return list(dict.fromkeys(items))


def dcg(relevances: Sequence[float], k: int) -> float:
    """The paper's discounted gain of the top ``k``: ``rel_1 + sum_{i>=2} rel_i / log2(i)``.

    Example:
        >>> dcg([0, 1, 1], 3)  # 0 + 1/log2(2) + 1/log2(3)
        1.6309297535714575
    """
    top = list(relevances)[:k]
    return float(top[0] + sum(rel / math.log2(i) for i, rel in enumerate(top[1:], start=2))) if top else 0.0


def ndcg_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """NDCG@k of a ranked list against the relevant items (0 when nothing is relevant)."""
    ideal = dcg([1.0] * min(len(relevant), k), k)
    return dcg([1.0 if item in relevant else 0.0 for item in ranked], k) / ideal if ideal else 0.0


def ranked_metrics(ranked: Sequence[str], relevant: set[str], *, ks: Sequence[int] = KS) -> dict[str, float]:
    """``recall_any@k``, ``recall_all@k`` and ``ndcg@k`` of one ranked list, for each k."""
    if not relevant:
        msg = "relevant: a scored list needs at least one relevant item"
        raise ValueError(msg)
    out: dict[str, float] = {}
    for k in ks:
        top = set(ranked[:k])
        out[f"recall_any@{k}"] = float(bool(relevant & top))
        out[f"recall_all@{k}"] = float(relevant <= top)
        out[f"ndcg@{k}"] = ndcg_at(ranked, relevant, k)
    return out


def retrieval_scores(
    question: LongMemEvalQuestion, ranked: Sequence[str], *, ks: Sequence[int] = KS
) -> dict[str, dict[str, float] | None]:
    """The paper's metrics of one method's ranked turn ids at the three levels (``None`` where there is no
    evidence at that level: an abstention question, or a user-turn list for evidence said by the assistant).

    - ``session``: sessions ranked by their first turn in ``ranked``; relevant = ``answer_session_ids``;
    - ``turn``: every turn; relevant = the ``has_answer`` turns;
    - ``turn_user``: the ranked list cut to user turns; relevant = the user's ``has_answer`` turns.
    """
    known = [key for key in ranked if key in question.session_of]
    sessions = first_appearance(question.session_of[key] for key in known)
    users = [key for key in known if question.roles[key] == "user"]
    levels = (
        (sessions, set(question.answer_sessions)),
        (known, set(question.evidence)),
        (users, set(question.user_evidence())),
    )
    return {
        name: ranked_metrics(items, relevant, ks=ks) if relevant else None
        for name, (items, relevant) in zip(LEVELS, levels, strict=True)
    }


# ---- the methods, adapted: the question's time, a ranked list, one encoding for dense and hybrid ----------------
class MemstrataAtQuestionTime(MemstrataMethod):
    """memstrata asked at the question's date (``Context.now``); its cited turns, in rank order, are its ranking.

    Each haystack goes into a fresh store (see :class:`~memstrata_bench.system.MemstrataMethod`), so each question
    has a fresh user. The evidence of a retrieval is the packed turns in the order they were admitted, which is
    rank order; the ranking scored is that of the ``rank_budget`` call.

    Args:
        embeddings: the embedder (not the shared encoding: memstrata's ingestion is timed on its own).
        rank_budget: the budget whose cited turns are the ranked list (the run's largest).
        settings: extra :class:`~memstrata.context.Context` fields.
    """

    def __init__(self, *, embeddings: Embeddings, rank_budget: int, settings: dict[str, Any] | None = None) -> None:
        super().__init__(embeddings=embeddings, settings=settings)
        self.rank_budget = rank_budget
        self.asked_at: datetime | None = None
        self._cited: dict[int, list[str]] = {}

    def begin(self, question: LongMemEvalQuestion) -> None:
        """Set the present of the questions to come and forget the last one's citations."""
        self.asked_at, self._cited = question.asked_at, {}

    def context(self, question: str, conversation: LocomoConversation, budget: int) -> str:
        """The retrieval context for ``question`` within ``budget`` tokens, asked at :attr:`asked_at`."""
        if self._mem is None:
            msg = f"{self.name}: prepare({conversation.sample_id!r}) must run before its questions"
            raise RuntimeError(msg)
        result = self._mem.retrieve(
            question,
            user_id=BENCH_USER,
            conversation_id=conversation.sample_id,
            context_budget=budget,
            now=self.asked_at,
        )
        self._cited[budget] = [e.turn_id for e in result.evidence]
        return str(result.context)

    def ranked(self, question: str, conversation: LocomoConversation) -> list[str]:
        """The turn ids cited at :attr:`rank_budget`, best first (empty before that call)."""
        return list(self._cited.get(self.rank_budget, []))


def ranked_turns(method: Any, question: str, conversation: LocomoConversation) -> list[str] | None:
    """A method's ranked turn ids for the question it was just asked; ``None`` when it offers no ranking.

    A method may define ``ranked(question, conversation)``; a baseline's ranking is the order it packs in.
    """
    ranked = getattr(method, "ranked", None)
    if callable(ranked):
        return list(ranked(question, conversation))
    if isinstance(method, RankedTurnsMethod):
        order = method.ranking(question)  # memoized by the context() calls just made: no second ranking
        return [conversation.turns[i].dia_id for i in order]
    return None


class SharedEncoding(Embeddings):
    """One encoding of each document text, reused by every method embedding through this object.

    Dense and hybrid rank the same rendered turns with the same model: the first to prepare pays the encoding
    (the embedding floor), the second reads it back. The runner clears it at each question, so no haystack is
    served from another's encodings (LongMemEval haystacks share filler sessions); queries are never cached.

    Args:
        embeddings: the model.
        max_texts: the most texts kept; past it the memory starts again empty.
    """

    def __init__(self, embeddings: Embeddings, *, max_texts: int = 8192) -> None:
        self.embeddings = embeddings
        self.max_texts = max_texts
        self._vectors: dict[str, list[float]] = {}

    def clear(self) -> None:
        """Forget every encoding."""
        self._vectors.clear()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """The texts' vectors, encoding only those not seen since the last :meth:`clear`."""
        missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if len(self._vectors) + len(missing) > self.max_texts:
            self._vectors.clear()
            missing = list(dict.fromkeys(texts))
        self._vectors.update(zip(missing, self.embeddings.embed_documents(missing), strict=True))
        return [self._vectors[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        """The query's vector, encoded every time (a query's latency includes it)."""
        return self.embeddings.embed_query(text)
