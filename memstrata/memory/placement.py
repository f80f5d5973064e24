"""Where a written message goes: appended after the stored turns, or back in its own place when it is known.

The rule, the same for every entry point (client, CLI, LangChain messages, the store
adapter, the middleware):

- a message with its own id (``dia_id``, ``id``, a LangChain message id) is identified by it:
  sent again, it keeps its stored session, position and time (a changed text updates it in place);
- a message without an id but with a time is the stored turn of the same speaker, text and time,
  if there is one (a re-sent or re-ingested message), else it is new; it claims its place under
  that content, so two writers sending it at the same moment store it once (the loser's reserved
  position stays unused);
- a new message without a ``position`` is appended: it takes the next free positions of its session,
  reserved atomically in the store (:class:`~memstrata.memory.store.sequences.Sequences`), so two
  writers appending to one conversation never share a position and no stored turn is ever replaced;
- a message with an explicit ``position`` (a LoCoMo file, the store adapter's own) goes where it says,
  and later appends follow it.

Which session a message joins (the conversation's last one, unless the silence since its latest
message is longer than the session gap) is decided by :func:`memstrata.memory.normalize.normalize_input`
from :func:`stored_tail`.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from memstrata.memory.conversation import Conversation, Session
from memstrata.memory.levels.level2.turn import Turn
from memstrata.memory.normalize import Tail
from memstrata.memory.store import MemoryStore, stable_hash

_TURN = "turn"


def stored_tail(store: MemoryStore, user_id: str, conversation_id: str) -> Tail | None:
    """The conversation's last numbered session and its latest time (``None``: nothing stored yet).

    Times are naive, as turns keep them; a stored ``ts`` is their ``timestamp()``, read back the same way.

    Read from the session counters (every write sets them before it stores a turn).
    """
    marks = store.sequences.sessions(user_id, conversation_id)
    numbered = [m for m in marks.values() if m.session_id.isdigit()]
    if not numbered:
        return None
    last = max(numbered, key=lambda m: int(m.session_id))
    latest = datetime.fromtimestamp(last.latest) if last.latest is not None else None
    return Tail(int(last.session_id), latest)


def place_turns(store: MemoryStore, conv: Conversation) -> Conversation:
    """The conversation with every turn at its final session and position (see the module's rule)."""
    user, conv_id = conv.user_id, conv.conversation_id
    loose = [(s, i) for s in conv.sessions for i in s.unplaced]
    known = _known(store, user, conv_id, [s.turns[i] for s, i in loose])
    placed: list[Turn] = []
    fresh: dict[str, list[Turn]] = {}
    for session in conv.sessions:
        unplaced = set(session.unplaced)
        for i, turn in enumerate(session.turns):
            if i not in unplaced:
                placed.append(turn)
            elif (stored := known.get(id(turn))) is not None:
                placed.append(
                    stored.model_copy(
                        update={
                            "text": turn.text,
                            "speaker": turn.speaker,
                            "image_caption": turn.image_caption,
                            "meta": turn.meta or stored.meta,
                        }
                    )
                )
            else:
                fresh.setdefault(session.session_id, []).append(turn)
    marks = store.sequences.sessions(user, conv_id)
    for session_id, turns in _by_session(placed).items():  # explicit places: later appends come after them
        past = max(t.position for t in turns) + 1
        if session_id not in marks or marks[session_id].next < past:
            store.sequences.advance(user, conv_id, session_id, past, _latest(turns))
    seen: Counter[tuple[str, str, float | None]] = Counter()
    for session_id, turns in fresh.items():
        start = store.sequences.reserve(user, conv_id, session_id, len(turns), floor=0, latest=_latest(turns))
        places = [(session_id, start + k) for k in range(len(turns))]
        timed = [k for k, t in enumerate(turns) if not t.source_id and t.timestamp is not None]
        keys = []
        for k in timed:
            seen[_content(turns[k])] += 1
            keys.append(f"{stable_hash(*map(str, _content(turns[k])))}#{seen[_content(turns[k])]}")
        claimed = store.sequences.claim_places(
            user, conv_id, [(key, *places[k]) for key, k in zip(keys, timed, strict=True)]
        )
        for k, place in zip(timed, claimed, strict=True):
            places[k] = place  # another writer's place for the same message, if it claimed it first
        placed += [
            t.model_copy(update={"session_id": s, "position": p, "id": t.source_id or f"s{s}:t{p}"})
            for t, (s, p) in zip(turns, places, strict=True)
        ]
    sessions = []
    for session_id, turns in _by_session(placed).items():
        turns.sort(key=lambda t: t.position)
        first = turns[0]
        sessions.append(
            Session(session_id=session_id, timestamp=first.timestamp, timestamp_raw=first.timestamp_raw, turns=turns)
        )
    return conv.model_copy(update={"sessions": sessions})


def _known(store: MemoryStore, user_id: str, conv_id: str, turns: list[Turn]) -> dict[int, Turn]:
    """The stored turn each of these is (by id, else by speaker, text and time), keyed by ``id(turn)``."""
    out: dict[int, Turn] = {}
    with_ids = [t for t in turns if t.source_id]
    if with_ids:
        ids = sorted({t.source_id for t in with_ids if t.source_id})  # every one has an id: `if` tells mypy so
        found = {r.unit_id: r for r in store.get(_TURN, user_id=user_id, conversation_id=conv_id, unit_ids=ids)}
        out |= {id(t): Turn.model_validate(found[t.source_id].payload) for t in with_ids if t.source_id in found}
    timed = [t for t in turns if not t.source_id and t.timestamp is not None]
    if timed:
        stamps = sorted({t.timestamp.timestamp() for t in timed})  # type: ignore[union-attr]
        stored = [
            Turn.model_validate(r.payload)
            for r in store.get(_TURN, user_id=user_id, conversation_id=conv_id, where={"ts": {"$in": stamps}})
        ]
        free: dict[tuple[str, str, float | None], list[Turn]] = {}
        for t in sorted(stored, key=lambda t: (t.session_id, t.position), reverse=True):
            free.setdefault(_content(t), []).append(t)
        for t in timed:
            same = free.get(_content(t))
            if same:  # each stored turn answers for one message of the input, in order
                out[id(t)] = same.pop()
    return out


def _content(turn: Turn) -> tuple[str, str, float | None]:
    return turn.speaker, turn.text, turn.timestamp.timestamp() if turn.timestamp else None


def _by_session(turns: list[Turn]) -> dict[str, list[Turn]]:
    groups: dict[str, list[Turn]] = {}
    for t in turns:
        groups.setdefault(t.session_id, []).append(t)
    return groups


def _latest(turns: list[Turn]) -> datetime | None:
    stamps = [t.timestamp for t in turns if t.timestamp is not None]
    return max(stamps) if stamps else None
