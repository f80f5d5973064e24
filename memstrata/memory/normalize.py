"""Input normalization: LoCoMo files, plain message lists and LangChain messages.

Everything is validated before anything is written, so bad input never leaves a
half-written store. Errors name the file, the conversation and the message.

Example:
    >>> convs = normalize_input(
    ...     [{"speaker": "Ann", "text": "I moved to Lisbon.", "timestamp": "2024-03-01T10:00"}], user_id="u1"
    ... )
    >>> convs[0].sessions[0].turns[0].id
    's1:t0'
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from memstrata.errors import IngestError
from memstrata.memory.conversation import Conversation, Session
from memstrata.memory.levels.level2.turn import Turn
from memstrata.memory.timeparse import parse_timestamp

_SESSION_KEY = re.compile(r"^session_(\d+)$")


def load_path(path: str | Path) -> Any:
    """Read a JSON file, with a clear error for a missing or malformed file."""
    p = Path(path)
    if not p.is_file():
        msg = f"{p}: no such file"
        raise IngestError(msg)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        msg = f"{p}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        raise IngestError(msg) from exc
    except UnicodeDecodeError as exc:
        msg = f"{p}: not UTF-8 text ({exc.reason})"
        raise IngestError(msg) from exc


def normalize_input(
    data: Any,
    *,
    user_id: str,
    conversation_id: str | None = None,
    source: str = "<input>",
    only_conversation: str | None = None,
    session_gap: timedelta = timedelta(hours=6),
    tail: Callable[[str], Tail | None] | None = None,
    metadata: dict[str, Any] | None = None,
    stamp: datetime | None = None,
) -> list[Conversation]:
    """Turn any accepted input into validated :class:`Conversation` objects.

    Args:
        data: parsed JSON (LoCoMo object or list, a message list, or
            ``{"messages": [...]}``) or a list of LangChain messages.
        user_id: the tenant every unit is stamped with.
        conversation_id: id for inputs that carry none (default ``"default"``).
        source: the file name used in error messages.
        only_conversation: keep just this LoCoMo ``sample_id``.
        session_gap: in a plain message list without session keys, a longer silence starts a new session.
        tail: the stored end of a conversation by its id (its last session and that session's latest time),
            so a message list continues the conversation: its first message joins the last session unless
            the silence since is longer than ``session_gap``. ``None``: every conversation starts empty.
        metadata: fields attached to every message (a message's own ``metadata`` wins on a shared name).
        stamp: the time of a message (of a message list or LangChain messages) written without one: the write's
            time, so it has a date, ``since``/``until`` match it and the session gap applies. ``None``: it stays
            untimed.
    """
    kind = detect_format(data, source)
    shared = _meta(metadata, f"{source}: the write's")
    try:
        convs = _conversations(data, kind, user_id, conversation_id, source, session_gap, tail or _no_tail, stamp)
    except ValidationError as exc:  # a value no unit accepts: say which field, never a traceback
        problem = exc.errors()[0]
        where = ".".join(str(p) for p in problem.get("loc", ()))
        msg = f"{source}: invalid input ({where}: {problem.get('msg')})"
        raise IngestError(msg) from exc
    if only_conversation is not None:
        convs = [c for c in convs if c.conversation_id == only_conversation]
        if not convs:
            msg = f"{source}: no conversation with id {only_conversation!r}"
            raise IngestError(msg)
    if shared:
        for session in (s for c in convs for s in c.sessions):
            session.turns = [t.model_copy(update={"meta": {**shared, **t.meta}}) for t in session.turns]
    return convs


class Tail(NamedTuple):
    """Where a stored conversation ends: its last numbered session and that session's latest message time."""

    session: int
    latest: datetime | None


def _no_tail(conversation_id: str) -> Tail | None:
    return None


def _conversations(
    data: Any,
    kind: str,
    user_id: str,
    conversation_id: str | None,
    source: str,
    session_gap: timedelta,
    tail: Callable[[str], Tail | None],
    stamp: datetime | None = None,
) -> list[Conversation]:
    if kind == "locomo":
        items = data if isinstance(data, list) else [data]
        return [_locomo(item, user_id, source, i) for i, item in enumerate(items)]
    if kind == "langchain":
        messages = [_from_langchain(m) for m in data]
        return [_messages(messages, user_id, conversation_id, source, session_gap, tail, stamp)]
    if kind == "conversations":  # [{"conversation_id": ..., "messages": [...]}, ...]
        return [
            c
            for i, item in enumerate(data)
            for c in _conversations(
                item, "messages", user_id, conversation_id, f"{source}: conversation #{i}", session_gap, tail, stamp
            )
        ]
    if isinstance(data, dict) and not isinstance(data.get("messages"), list):
        data = [data]  # one message on its own
    messages = data["messages"] if isinstance(data, dict) else data
    conv_id = conversation_id or (data.get("conversation_id") if isinstance(data, dict) else None)
    if conv_id is not None and (not isinstance(conv_id, str) or not conv_id.strip()):
        msg = f"{source}: 'conversation_id' must be a non-empty string, got {conv_id!r}"
        raise IngestError(msg)
    return [_messages(messages, user_id, conv_id, source, session_gap, tail, stamp)]


def detect_format(data: Any, source: str = "<input>") -> str:
    """``"locomo"``, ``"messages"`` (one message, a list, or ``{"messages": [...]}``), ``"conversations"`` (a list of
    ``{"conversation_id", "messages"}``) or ``"langchain"``; anything else is an error.
    """
    first = data[0] if isinstance(data, list) and data else data
    if isinstance(data, list) and not data:
        msg = f"{source}: the input is an empty list; nothing to ingest"
        raise IngestError(msg)
    if isinstance(first, dict) and "conversation" in first:
        return "locomo"
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        return "messages"
    if isinstance(data, list) and isinstance(first, dict) and isinstance(first.get("messages"), list):
        return "conversations"
    if isinstance(first, dict) and ("text" in first or "speaker" in first or {"role", "content"} <= set(first)):
        return "messages"  # ours, or OpenAI's role/content shape
    if _is_langchain_message(first) or (isinstance(first, dict) and {"type", "content"} <= set(first)):
        return "langchain"
    shape = type(first).__name__ if not isinstance(first, dict) else f"an object with keys {sorted(first)[:6]}"
    msg = (
        f"{source}: unknown input format ({shape}). Expected a LoCoMo file (objects with "
        "'conversation'), messages ({speaker, text, timestamp} or {role, content}, alone, in a list or under "
        "'messages'), a list of {conversation_id, messages}, or LangChain messages"
    )
    raise IngestError(msg)


def _is_langchain_message(obj: Any) -> bool:
    try:
        from langchain_core.messages import BaseMessage
    except ImportError:  # pragma: no cover
        return False
    return isinstance(obj, BaseMessage)


def _from_langchain(message: Any) -> dict[str, Any]:
    if isinstance(message, dict):
        role, content, meta = message.get("type"), message.get("content"), message
        speaker = message.get("name") or {"human": "user", "ai": "assistant"}.get(str(role), str(role))
        return {"speaker": speaker, "text": content, "timestamp": meta.get("timestamp")}
    role = {"human": "user", "ai": "assistant"}.get(message.type, message.type)
    extra = {**getattr(message, "response_metadata", {}), **getattr(message, "additional_kwargs", {})}
    content = message.content if isinstance(message.content, str) else message.text
    return {"speaker": message.name or role, "text": content, "timestamp": extra.get("timestamp"), "id": message.id}


def _locomo(item: Any, user_id: str, source: str, index: int) -> Conversation:
    where = f"{source}: conversation #{index}"
    if not isinstance(item, dict) or not isinstance(item.get("conversation"), dict):
        msg = f"{where}: expected an object with a 'conversation' object"
        raise IngestError(msg)
    conv_id = str(item.get("sample_id") or f"conv-{index}")
    where = f"{source}: conversation {conv_id}"
    body = item["conversation"]
    numbers = sorted(int(m.group(1)) for k in body if (m := _SESSION_KEY.match(k)) and isinstance(body[k], list))
    warnings: list[str] = []
    sessions = []
    for n in numbers:
        raw_time = body.get(f"session_{n}_date_time")
        when = parse_timestamp(raw_time)
        if raw_time and when is None:
            warnings.append(f"{where}, session {n}: unparseable timestamp {raw_time!r} (kept as text)")
        turns = [
            _turn(t, user_id, conv_id, str(n), pos, f"{where}, session {n}, message #{pos}", when, raw_time)
            for pos, t in enumerate(body[f"session_{n}"])
        ]
        if turns:
            sessions.append(Session(session_id=str(n), timestamp=when, timestamp_raw=raw_time, turns=turns))
    if not sessions:
        msg = f"{where}: no non-empty 'session_N' lists"
        raise IngestError(msg)
    return Conversation(user_id=user_id, conversation_id=conv_id, sessions=sessions, source=source, warnings=warnings)


def _turn(
    raw: Any,
    user_id: str,
    conv_id: str,
    session_id: str,
    pos: int,
    where: str,
    session_time: datetime | None = None,
    session_raw: str | None = None,
    warnings: list[str] | None = None,
) -> Turn:
    if not isinstance(raw, dict):
        msg = f"{where}: expected an object, got {type(raw).__name__}"
        raise IngestError(msg)
    speaker = raw.get("speaker", raw.get("role"))
    if speaker is None or not str(speaker).strip():
        msg = f"{where}: missing 'speaker'"
        raise IngestError(msg)
    text = raw.get("text", raw.get("content"))
    if isinstance(text, list):  # multi-part content (OpenAI, LangChain): the text parts, in order
        kept = [
            p if isinstance(p, str) else str(p.get("text", ""))
            for p in text
            if isinstance(p, str) or (isinstance(p, dict) and p.get("type") == "text")
        ]
        others = [
            str(p.get("type", "?")) if isinstance(p, dict) else type(p).__name__
            for p in text
            if not (isinstance(p, str) or (isinstance(p, dict) and p.get("type") == "text"))
        ]
        if others and warnings is not None:
            warnings.append(f"{where}: kept the text parts; not stored: {', '.join(others)}")
        text = "\n".join(kept)
    if not isinstance(text, str) or not text.strip():
        msg = f"{where}: empty or missing 'text' (content with no text part counts as empty)"
        raise IngestError(msg)
    for name, value in (("speaker", str(speaker)), ("text", text)):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: no store can keep it
            msg = f"{where}: '{name}' is not valid Unicode at character {exc.start} ({exc.reason})"
            raise IngestError(msg) from exc
    raw_time = raw.get("timestamp", raw.get("time"))
    when = parse_timestamp(raw_time) if raw_time is not None else session_time
    meta = _meta(raw.get("metadata"), where)
    given = raw.get("position")  # a message written alone (a chat app's append) says where it goes
    if given is not None and (not isinstance(given, int) or isinstance(given, bool) or given < 0):
        msg = f"{where}: 'position' must be a non-negative integer, got {given!r}"
        raise IngestError(msg)
    return Turn(
        user_id=user_id,
        conversation_id=conv_id,
        session_id=session_id,
        position=pos if given is None else given,
        speaker=str(speaker).strip(),
        text=text,
        image_caption=raw.get("blip_caption") or raw.get("image_caption"),
        source_id=_source_id(raw),
        timestamp=when,
        meta=meta,
        timestamp_raw=str(raw_time) if raw_time is not None else session_raw,
    )


def _meta(value: Any, where: str) -> dict[str, str | int | float | bool]:
    """A message's ``metadata``: an object of names to strings, numbers or booleans (what a filter can match)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        msg = (
            f"{where}: 'metadata' must be an object of names to strings, numbers or booleans, "
            f"got {type(value).__name__}"
        )
        raise IngestError(msg)
    for key, item in value.items():
        if not isinstance(key, str) or not key.strip() or key.startswith("$"):
            msg = f"{where}: metadata name {key!r} must be a non-empty string not starting with '$'"
            raise IngestError(msg)
        if not isinstance(item, (str, int, float, bool)):
            msg = (
                f"{where}: metadata {key!r} must be a string, number or boolean, got {type(item).__name__} "
                "(store nested values as a JSON string)"
            )
            raise IngestError(msg)
    return dict(value)


def _untimed(raw: dict[str, Any]) -> bool:
    return raw.get("timestamp", raw.get("time")) is None


def _source_id(raw: dict[str, Any]) -> str | None:
    value = raw.get("dia_id", raw.get("id"))
    return str(value) if value not in (None, "") else None


def _messages(
    messages: Any,
    user_id: str,
    conv_id: str | None,
    source: str,
    gap: timedelta,
    tail: Callable[[str], Tail | None],
    stamp: datetime | None = None,
) -> Conversation:
    conv_id = conv_id or "default"
    where = f"{source}: conversation {conv_id}"
    if not isinstance(messages, list) or not messages:
        msg = f"{where}: 'messages' must be a non-empty list"
        raise IngestError(msg)
    try:
        conv_id.encode("utf-8")
    except UnicodeEncodeError as exc:  # checked before the stored tail is looked up under it
        msg = f"{source}: 'conversation_id' is not valid Unicode at character {exc.start} ({exc.reason})"
        raise IngestError(msg) from exc
    warnings: list[str] = []
    groups: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    end = tail(conv_id) if any(isinstance(m, dict) and "session" not in m for m in messages) else None
    previous: datetime | None = end.latest if end else None
    session_no = end.session if end else 1
    for i, raw in enumerate(messages):
        if not isinstance(raw, dict):
            msg = f"{where}, message #{i}: expected an object, got {type(raw).__name__}"
            raise IngestError(msg)
        when = parse_timestamp(raw.get("timestamp")) if not _untimed(raw) else stamp
        if raw.get("timestamp") not in (None, "") and when is None:
            warnings.append(f"{where}, message #{i}: unparseable timestamp {raw.get('timestamp')!r} (kept as text)")
        if "session" in raw:
            key = str(raw["session"])
        else:
            if when and previous and when - previous > gap:
                session_no += 1
            key = str(session_no)
        previous = max(when, previous) if when and previous else when or previous  # re-sent older ones don't count
        groups.setdefault(key, []).append((i, raw))
    sessions = []
    for key, items in groups.items():
        turns = [
            _turn(
                raw,
                user_id,
                conv_id,
                key,
                pos,
                f"{where}, message #{i}",
                stamp if _untimed(raw) else None,
                warnings=warnings,
            )
            for pos, (i, raw) in enumerate(items)
        ]
        first = turns[0]
        sessions.append(
            Session(
                session_id=key,
                timestamp=first.timestamp,
                timestamp_raw=first.timestamp_raw,
                turns=turns,
                unplaced=[k for k, (_, raw) in enumerate(items) if "position" not in raw],
            )
        )
    return Conversation(user_id=user_id, conversation_id=conv_id, sessions=sessions, source=source, warnings=warnings)
