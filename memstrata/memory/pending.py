"""What deferred or stopped writes left underived, read from the store alone.

A deferred write (``ingest(..., defer=True)``) stores its raw turns and their views, and stops where an inline write
would go on to cut episodes and distil them. Nothing records that it stopped: the store then looks as it does after
an inline write killed at the same point, and these reads find the work there. So a process that dies before it
derived what it deferred loses nothing; the next write of the conversation, or ``Memstrata.complete``, derives it.

A session is pending when

- a stored turn of it is covered by no finished episode and waits in no open tail, or lacks its view
  (:func:`~memstrata.memory.store.reads.incomplete_sessions`);
- the turns waiting after its open episode would not all have waited, written inline: the tail is full, a silence
  lies among them, or they have gone quiet by the present (through
  :func:`~memstrata.memory.store.reads.appended_to_open_tail`, the check an inline write makes);
- a later session exists and its tail is still open (:func:`~memstrata.memory.store.reads.ended_tails`), or, among
  the sessions before the newest, it is unfinished (:func:`unfinished_before`).

Example:
    >>> found = pending_sessions(store, "ann", "chat-1", now=None, max_turns=12, quiet=q, max_gap=q)  # doctest: +SKIP
    >>> found.sessions, found.unfinished  # doctest: +SKIP
    (['3'], True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from memstrata.memory.conversation import Conversation, Session, session_order
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.reads import (
    appended_to_open_tail,
    ended_tails,
    incomplete_sessions,
    open_episodes,
    read_session_ends,
)


@dataclass(frozen=True)
class Pending:
    """The sessions of one conversation to derive, and the present to derive them at.

    Attributes:
        sessions: session ids, in session order.
        unfinished: a session that no deferred write named holds a turn no finished episode covers (a stopped
            write's): the conversation's graph and tree are redone.
        present: the write's present (naive UTC): ``now`` when given, else the conversation's latest message time.
    """

    sessions: list[str]
    unfinished: bool
    present: datetime


def pending_sessions(
    store: MemoryStore,
    user_id: str,
    conversation_id: str,
    sessions: Sequence[str] | None = None,
    *,
    now: datetime | None,
    max_turns: int,
    quiet: timedelta,
    max_gap: timedelta,
) -> Pending:
    """The sessions of a conversation that deferred or stopped writes left underived (see the module).

    ``sessions`` are those a deferred write left (its stats name them): they are redone whatever the store shows, as
    that write would have redone them inline, and only the conversation's newest session is searched besides.
    ``None`` searches every session, a read of the whole conversation.
    """
    marks = store.sequences.sessions(user_id, conversation_id)
    numbered = [s for s in marks if s.isdigit()]
    newest = max(numbered, key=int) if numbered else None
    wanted = set(marks) if sessions is None else {s for s in [*sessions, newest] if s in marks}
    examined = sorted(wanted, key=session_order)
    latest = [m.latest for m in marks.values() if m.latest is not None]
    present = now or (datetime.fromtimestamp(max(latest)) if latest else datetime.now(UTC).replace(tzinfo=None))
    conv = Conversation(
        user_id=user_id,
        conversation_id=conversation_id,
        sessions=[Session(session_id=s, turns=[]) for s in examined],
    )
    left = {s for s in sessions or [] if s in marks}
    unfinished = incomplete_sessions(store, conv)
    later = {newest} if newest is not None else set()
    ended, underived = ended_tails(store, conv, later), unfinished_before(store, conv, later | left)
    rest = [s for s in examined if s not in {*left, *unfinished, *ended, *underived}]
    waiting = _tails_that_close(store, conv, rest, present=present, max_turns=max_turns, quiet=quiet, max_gap=max_gap)
    found = sorted({*left, *unfinished, *ended, *underived, *waiting}, key=session_order)
    # A session a deferred write left is unfinished by design: only other unfinished work redoes the graph and tree.
    return Pending(found, bool({*unfinished, *underived} - left), present)


def unfinished_before(store: MemoryStore, conv: Conversation, written: set[str]) -> list[str]:
    """Earlier sessions than the newest of ``written`` (and not in it) that a stopped write left unfinished
    (:func:`~memstrata.memory.store.reads.incomplete_sessions`): a killed write's, or a deferred one's whose process
    died before deriving it. Read from the newest back, up to the first finished session: one session's reads when
    nothing is left.
    """
    numbers = [int(s) for s in written if s.isdigit()]
    if not numbers:
        return []
    marks = store.sequences.sessions(conv.user_id, conv.conversation_id)
    earlier = sorted((s for s in marks if s.isdigit() and int(s) < max(numbers) and s not in written), key=int)
    out = []
    for session in reversed(earlier):
        alone = conv.model_copy(update={"sessions": [Session(session_id=session, turns=[])]})
        if not incomplete_sessions(store, alone):
            break
        out.append(session)
    return sorted(out, key=int)


def _tails_that_close(
    store: MemoryStore,
    conv: Conversation,
    sessions: list[str],
    *,
    present: datetime,
    max_turns: int,
    quiet: timedelta,
    max_gap: timedelta,
) -> list[str]:
    """Of these sessions, those whose turns waiting after the open episode would have closed something, written
    inline: the check an inline append makes, over every waiting turn at once.
    """
    tails = {
        str(r.payload["session_id"]): int(r.payload["end_position"])
        for r in open_episodes(store, conv.user_id, conv.conversation_id)
    }
    out = []
    for session in sessions:
        if session not in tails:
            continue
        after = [[conv.conversation_id, session, tails[session] + 1]]
        waiting = read_session_ends(store, conv.user_id, after, back=0)[(conv.conversation_id, session)][0]
        if not waiting:
            continue
        alone = conv.model_copy(update={"sessions": [Session(session_id=session, turns=waiting)]})
        first = appended_to_open_tail(
            store, alone, waiting, present=present, max_turns=max_turns, quiet=quiet, max_gap=max_gap
        )
        if first is None:
            out.append(session)
    return out


__all__ = ["Pending", "pending_sessions", "unfinished_before"]
