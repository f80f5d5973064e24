"""Writing one user's memory out: what no ingestion can rebuild, as sorted JSON lines; and the users a store holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from memstrata.memory.levels import Turn, raw_kind
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.chroma_table import ChromaTable
from memstrata.memory.store.reads import open_episodes
from memstrata.memory.store.sqlite_table import SqliteTable, sqlite_connection
from memstrata.memory.store.tables import Table
from memstrata.portable.format import FORMAT, VERSION, _counts, _holds, _side_tables, _turn_order, _user
from memstrata.repair import persona_exclusions

if TYPE_CHECKING:
    from memstrata.client import Memstrata

_PAGE = 5000


def export_user(mem: Memstrata, out: str | Path | IO[str], *, user_id: str) -> dict[str, int]:
    """Write everything of ``user_id``'s memory that cannot be rebuilt to ``out`` (a path or a text file).

    Returns:
        How many records of each kind were written: ``turns``, ``sessions``, ``items``, ``journal``,
        ``tombstones``, ``persona_exclusions``.

    Raises:
        LookupError: the store holds no memory of the user (:func:`users` lists those it does).
    """
    store = mem.store
    _user(user_id, "user_id")
    if not _holds(store, user_id):
        msg = f"no memory for user {user_id!r} in this store; users with memory: {users(mem)[:20]}"
        raise LookupError(msg)
    turns = [Turn.model_validate(r.payload) for r in store.get(raw_kind(), user_id=user_id)]
    body = [
        *sorted((_turn_record(t) for t in turns), key=_turn_order),
        *_session_records(store, user_id, turns),
        *_row_records(store, user_id),
        *_exclusion_records(store, user_id),
    ]
    counts = _counts(body)
    lines = [{"format": FORMAT, "version": VERSION, "user_id": user_id}, *body, {"type": "end", "counts": counts}]
    _write(out, "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in lines))
    return counts


def _turn_record(t: Turn) -> dict[str, Any]:
    return {
        "type": "turn",
        "conversation_id": t.conversation_id,
        "session_id": t.session_id,
        "position": t.position,
        "id": t.id,
        "speaker": t.speaker,
        "text": t.text,
        "image_caption": t.image_caption,
        "time_raw": t.timestamp_raw,
        "time": t.timestamp.isoformat() if t.timestamp is not None else None,
        "metadata": dict(t.meta),
    }


def _session_records(store: MemoryStore, user_id: str, turns: list[Turn]) -> list[dict[str, Any]]:
    """Every session with turns or a position counter: closed or not, its counter and latest time."""
    with_turns = {(t.conversation_id, t.session_id) for t in turns}
    convs = {c for c, _ in with_turns} | {r.conversation_id for r in store.sequences.table.get(user_id=user_id)}
    out = []
    for conv in sorted(convs):
        marks = store.sequences.sessions(user_id, conv)
        tails = {str(r.metadata.get("session_id")) for r in open_episodes(store, user_id, conv)}
        for session in sorted({s for c, s in with_turns if c == conv} | set(marks)):
            mark = marks.get(session)
            out.append(
                {
                    "type": "session",
                    "conversation_id": conv,
                    "session_id": session,
                    "closed": session not in tails,
                    "next": mark.next if mark is not None else None,
                    "latest": mark.latest if mark is not None else None,
                }
            )
    return out


def _row_records(store: MemoryStore, user_id: str) -> list[dict[str, Any]]:
    out = [
        {"type": "row", "table": name, "conversation_id": r.conversation_id, "key": r.key, "fields": r.fields}
        for name, table in _side_tables(store).items()
        for r in table.get(user_id=user_id)
    ]
    return sorted(out, key=lambda r: (r["table"], r["conversation_id"], r["key"]))


def _exclusion_records(store: MemoryStore, user_id: str) -> list[dict[str, Any]]:
    """The fact ids removed from a current persona version, with the fact's text and turns (to find it again when a
    re-ingest gives it another id): :func:`memstrata.repair.persona_exclusions`, as records.
    """
    return [
        {
            "type": "persona_exclusion",
            "conversation_id": e.conversation_id,
            "speaker": e.speaker,
            "dimension": e.dimension,
            "fact_id": e.fact_id,
            "fact_text": e.text,
            "fact_turn_ids": list(e.turn_ids),
        }
        for e in persona_exclusions(store, user_id)
    ]


def _write(out: str | Path | IO[str], text: str) -> None:
    if not isinstance(out, str | Path):
        out.write(text)
        return
    path = Path(out)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8", newline="\n")
    partial.replace(path)  # a reader never sees half a file


def users(mem: Memstrata) -> list[str]:
    """Every user id with memory in the store, sorted.

    Read from the side tables, not the turns: every ingest writes its sessions' position counters
    (:mod:`memstrata.memory.store.sequences`), and the items, journal and tombstones hold the rest of what an export
    carries. On an embedded store that is one ``SELECT DISTINCT`` per table; on a Chroma server, a read of the
    counter rows' metadata.
    """
    store = mem.store
    found: set[str] = set()
    for name, table in {"sequences": store.sequences.table, **_side_tables(store)}.items():
        found |= _table_users(table, sessions_only=name == "sequences")
    return sorted(found)


def _table_users(table: Table, *, sessions_only: bool) -> set[str]:
    if isinstance(table, SqliteTable):
        with sqlite_connection(table.path) as db:
            return {u for (u,) in db.execute(f'SELECT DISTINCT user_id FROM "{table.name}"')}
    if isinstance(table, ChromaTable):
        # The sequences collection also holds one row per reservation and per claimed message: the session
        # counters (one row per session) name every user as well.
        where = {"kind": "session"} if sessions_only else None
        found: set[str] = set()
        offset = 0
        while metas := table.collection.get(where=where, include=["metadatas"], limit=_PAGE, offset=offset)[
            "metadatas"
        ]:
            found |= {str(m["user_id"]) for m in metas}
            offset += _PAGE
        return found
    msg = f"users: unknown table backend {type(table).__name__}"
    raise TypeError(msg)
