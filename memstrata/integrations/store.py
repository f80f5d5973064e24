"""``MemstrataStore``: memstrata as a LangGraph ``BaseStore`` (``create_agent(store=...)``, ``compile(store=...)``).

Namespaces are ``(user_id,)`` or ``(user_id, conversation_id)``: the first part is
the tenant, the second the conversation (``"default"`` when left out). With ``prefix=("memories",)`` they are
``("memories", user_id)`` and ``("memories", user_id, conversation_id)`` (LangMem's layout). A namespace whose user
part is a collection word (``"memories"``, ``"profiles"``...) is refused: it would make that word the tenant. A value
is a message (``{"speaker", "text", "timestamp"}`` or ``{"role", "content"}``), a list of them under ``"messages"``,
or any other JSON object (LangMem's ``{"content": ...}``, a profile...), stored as one message of speaker
``"memory"``; putting it stores the value as given and appends its
messages to the conversation, in the order they were put (the item key is their id). ``get`` returns
the value as it was put. ``search(namespace, query=...)`` runs memstrata's
retrieval over that user (and conversation) and returns the items whose
messages were found, best first, with the score and the citation under
``value["memstrata"]``. Deleting an item removes its messages from memory and
rebuilds the conversation's episodes and summaries without them.

Every read and write names its user; listing namespaces needs a prefix that
names one, so no call ever sees another user's items. The user comes from the
namespace, which the caller fills per run: LangMem's tools fill a template such
as ``("memories", "{user_id}")`` from ``config["configurable"]`` before they call
the store, and leave the placeholder as written when the run has no such key. A
namespace still holding a ``{...}`` placeholder is refused, so those runs never
share one ``"{user_id}"`` tenant.

Example:
    >>> store = MemstrataStore(Memstrata(path=".memstrata"))  # doctest: +SKIP
    >>> store.put(("ann", "chat-1"), "m1", {"speaker": "Ann", "text": "I moved to Lisbon."})  # doctest: +SKIP
    >>> store.search(("ann",), query="Where does Ann live?")[0].value["text"]  # doctest: +SKIP
    'I moved to Lisbon.'
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Literal, overload

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from memstrata.client import Memstrata
from memstrata.memory.levels import Turn
from memstrata.memory.store import tenant
from memstrata.memory.store.tables import TableRow

DEFAULT_CONVERSATION = "default"


class MemstrataStore(BaseStore):
    """A LangGraph store whose items are conversation messages in memstrata's memory.

    Args:
        memstrata: the memory.
        context_budget: tokens of evidence a search reads (more evidence, more items found).
        prefix: fixed leading namespace parts before the user id, e.g. ``("memories",)`` for LangMem's
            ``("memories", user_id)`` layout.
    """

    def __init__(self, memstrata: Memstrata, *, context_budget: int = 1500, prefix: tuple[str, ...] = ()) -> None:
        self.memory = memstrata
        self.context_budget = context_budget
        self.prefix = tuple(prefix)

    @property
    def _items(self) -> Any:
        return self.memory.store.items

    # ---- the BaseStore interface ------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order (get, put or delete, search, list namespaces), one result each."""
        return [self._one(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """The async form of :meth:`batch`: each operation runs in a worker thread."""
        return [await asyncio.to_thread(self._one, op) for op in ops]

    def _one(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, PutOp):
            if op.value is None:
                self._delete(op)
            else:
                self._put(op)
            return None
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list(op)
        msg = f"MemstrataStore: unsupported operation {type(op).__name__}"
        raise TypeError(msg)

    # ---- operations --------------------------------------------------------------------
    def _get(self, op: GetOp) -> Item | None:
        user, conv = self._split(op.namespace)
        rows = self._items.get(user_id=user, conversation_id=conv, keys=[_key(user, conv, op.key)])
        return _item(rows[0], layout=self.prefix) if rows else None

    def _put(self, op: PutOp) -> None:
        user, conv = self._split(op.namespace)
        value = dict(op.value or {})
        messages = _messages(value, op.key)
        key = _key(user, conv, op.key)
        old = self._items.get(user_id=user, conversation_id=conv, keys=[key])
        if old:  # a new value for the same key replaces the old messages
            self._delete(PutOp(op.namespace, op.key, None))
        now = time.time()
        created = float(old[0].fields["created_at"]) if old else now
        # A put is deliberate: what an earlier delete of this key buried is written again.
        self.memory.store.tombstones.lift(user, conv, [m["id"] for m in messages])
        self.memory.ingest(messages, user_id=user, conversation_id=conv)  # appended, like any message
        self._items.upsert(
            [
                TableRow(
                    key,
                    user,
                    conv,
                    {
                        "key": op.key,
                        "namespace": json.dumps(list(op.namespace)),  # as put: (user,) reads back as (user,)
                        "value": json.dumps(value),
                        "turn_ids": json.dumps([m["id"] for m in messages]),
                        "created_at": created,
                        "updated_at": now,
                    },
                )
            ]
        )

    def _delete(self, op: PutOp) -> None:
        user, conv = self._split(op.namespace)
        key = _key(user, conv, op.key)
        rows = self._items.get(user_id=user, conversation_id=conv, keys=[key])
        if not rows:
            return
        gone = json.loads(str(rows[0].fields["turn_ids"]))
        store = self.memory.store
        # Buried first (no write in between brings them back), then the turns and every unit and edge built from
        # them; what remains is rebuilt below.
        store.tombstones.bury(
            [
                Turn.model_validate(r.payload)
                for r in store.get("turn", user_id=user, conversation_id=conv, unit_ids=gone)
            ],
            event="delete",
        )
        store.delete_turns(user, conv, gone)
        self._items.delete(user_id=user, keys=[key])
        remaining = self._conversation_messages(user, conv)
        if remaining:
            self.memory.ingest(remaining, user_id=user, conversation_id=conv)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        user, conv = self._split(op.namespace_prefix, prefix=True)
        rows = self._items.get(user_id=user, conversation_id=conv)
        rows = [r for r in rows if _matches(json.loads(str(r.fields["value"])), op.filter)]
        if not op.query:
            rows.sort(key=lambda r: -float(r.fields["updated_at"]))
            return [_item(r, search=True, layout=self.prefix) for r in rows[op.offset : op.offset + op.limit]]
        by_turn = {(r.conversation_id, t): r for r in rows for t in json.loads(str(r.fields["turn_ids"]))}
        result = self.memory.retrieve(op.query, user_id=user, conversation_id=conv, context_budget=self.context_budget)
        found: dict[str, SearchItem] = {}
        for e in result.evidence:
            row = by_turn.get((e.conversation_id, e.turn_id))
            if row is not None and row.key not in found:
                hit = {
                    "score": e.score,
                    "citation": f"{e.conversation_id}/{e.turn_id}",
                    "found_by": e.found_by,
                    "level": e.level,
                }
                found[row.key] = _item(row, search=True, score=e.score, extra=hit, layout=self.prefix)
        return list(found.values())[op.offset : op.offset + op.limit]

    def _list(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        prefix = next((c.path for c in op.match_conditions or () if c.match_type == "prefix"), None)
        n = len(self.prefix)
        if not prefix or len(prefix) <= n or tuple(prefix[:n]) != self.prefix or prefix[n] == "*":
            msg = (
                f"MemstrataStore.list_namespaces needs a prefix that names the user: "
                f"{(*self.prefix, 'user_id')!r} or {(*self.prefix, 'user_id', '...')!r}"
            )
            raise InvalidNamespaceError(msg)
        _check_filled(tuple(prefix))
        user = tenant.check_user(prefix[n])
        found = sorted({_item(r, layout=self.prefix).namespace for r in self._items.get(user_id=user)})
        for cond in op.match_conditions or ():
            found = [ns for ns in found if _condition(ns, cond.match_type, cond.path)]
        if op.max_depth is not None:
            found = sorted(dict.fromkeys(ns[: op.max_depth] for ns in found))
        return found[op.offset : op.offset + op.limit]

    # ---- helpers --------------------------------------------------------------------------
    @overload
    def _split(self, namespace: tuple[str, ...], *, prefix: Literal[False] = ...) -> tuple[str, str]: ...
    @overload
    def _split(self, namespace: tuple[str, ...], *, prefix: bool) -> tuple[str, str | None]: ...
    def _split(self, namespace: tuple[str, ...], *, prefix: bool = False) -> tuple[str, str | None]:
        """(user, conversation) of a namespace laid out as ``prefix + (user_id,)`` or ``prefix + (user_id, conv)``."""
        if tuple(namespace[: len(self.prefix)]) != self.prefix:
            msg = (
                f"MemstrataStore namespaces here start with {self.prefix!r}, then the user id (and a conversation "
                f"id); got {namespace!r}"
            )
            raise InvalidNamespaceError(msg)
        _check_filled(tuple(namespace))
        return _split(tuple(namespace[len(self.prefix) :]), prefix=prefix, layout=self.prefix)

    def _conversation_messages(self, user: str, conv: str) -> list[dict[str, Any]]:
        """Every message still put in a conversation, for re-ingestion (their ids keep their stored places)."""
        out = []
        for row in self._items.get(user_id=user, conversation_id=conv):
            out += _messages(json.loads(str(row.fields["value"])), str(row.fields["key"]))
        return out


COLLECTION_WORDS = frozenset({"memories", "memory", "users", "user", "profile", "profiles", "facts", "episodes"})


@overload
def _split(
    namespace: tuple[str, ...], *, prefix: Literal[False] = ..., layout: tuple[str, ...] = ...
) -> tuple[str, str]: ...
@overload
def _split(namespace: tuple[str, ...], *, prefix: bool, layout: tuple[str, ...] = ...) -> tuple[str, str | None]: ...
def _split(namespace: tuple[str, ...], *, prefix: bool = False, layout: tuple[str, ...] = ()) -> tuple[str, str | None]:
    if not namespace or len(namespace) > 2 or any(not isinstance(p, str) or not p for p in namespace):
        msg = (
            f"MemstrataStore namespaces are {(*layout, 'user_id')!r} or {(*layout, 'user_id', 'conversation_id')!r}, "
            f"got {(*layout, *namespace)!r}"
        )
        raise InvalidNamespaceError(msg)
    if namespace[0].casefold() in COLLECTION_WORDS:  # ("memories", "ann") would make "memories" the tenant
        msg = (
            f"namespace {(*layout, *namespace)!r} starts with {namespace[0]!r}, a collection name, where the user "
            f"id goes: MemstrataStore namespaces are (user_id,) or (user_id, conversation_id); for a layout such as "
            f"LangMem's ('memories', user_id) build MemstrataStore(memory, prefix=('memories',))"
        )
        raise InvalidNamespaceError(msg)
    user = tenant.check_user(namespace[0])
    conv = namespace[1] if len(namespace) == 2 else (None if prefix else DEFAULT_CONVERSATION)
    return user, conv


def _check_filled(namespace: tuple[str, ...]) -> None:
    """Refuse a namespace template left unfilled, such as LangMem's ``("memories", "{user_id}")`` in a run whose
    config has no ``user_id``: the placeholder would become one tenant shared by every such run.
    """
    part = next((p for p in namespace if isinstance(p, str) and p.startswith("{") and p.endswith("}")), None)
    if part is not None:
        key = part.strip("{}")
        msg = (
            f"MemstrataStore namespace {namespace!r} holds the unfilled template {part!r}: name the user per run, "
            f"e.g. config={{'configurable': {{{key!r}: 'ann'}}}} for LangMem's tools, which fill it from there"
        )
        raise InvalidNamespaceError(msg)


def _key(user: str, conv: str | None, key: str) -> str:
    return tenant.storage_key(user, conv or DEFAULT_CONVERSATION, key, namespace="item")


MEMORY_SPEAKER = "memory"


def _messages(value: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The value's messages with stable ids (the item key, plus an index for lists).

    A message ({speaker, text} or {role, content}) or ``{"messages": [...]}`` is stored as those messages; any other
    value (LangMem's ``{"content": ...}``, a profile object...) as one message of speaker ``"memory"`` whose text is
    its ``content`` or ``text`` when that is a string, else the value as compact JSON.
    """
    if "messages" in value:
        raw = value["messages"]
        if not isinstance(raw, list) or not raw or not all(isinstance(m, dict) for m in raw):
            msg = "a MemstrataStore value's 'messages' must be a non-empty list of message objects"
            raise ValueError(msg)
    else:
        raw = [value if _is_message(value) else {"speaker": MEMORY_SPEAKER, "text": _text_of(value)}]
    return [
        {k: v for k, v in m.items() if k in ("speaker", "text", "role", "content", "timestamp", "session")}
        | {"id": key if len(raw) == 1 else f"{key}#{i}"}
        for i, m in enumerate(raw)
    ]


def _is_message(value: dict[str, Any]) -> bool:
    said = value.get("text", value.get("content"))
    return bool(value.get("speaker") or value.get("role")) and isinstance(said, (str, list))


def _text_of(value: dict[str, Any]) -> str:
    said = value.get("content", value.get("text"))
    if isinstance(said, str) and said.strip():
        return said
    if not value:
        msg = "a MemstrataStore value must not be empty"
        raise ValueError(msg)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _matches(value: dict[str, Any], wanted: dict[str, Any] | None) -> bool:
    return all(value.get(k) == v for k, v in (wanted or {}).items())


def _condition(ns: tuple[str, ...], kind: str, path: tuple[str, ...]) -> bool:
    part = ns[: len(path)] if kind == "prefix" else ns[-len(path) :]
    return len(part) == len(path) and all(p in ("*", q) for p, q in zip(path, part, strict=True))


@overload
def _item(
    row: TableRow,
    *,
    search: Literal[True],
    score: float | None = ...,
    extra: dict[str, Any] | None = ...,
    layout: tuple[str, ...] = ...,
) -> SearchItem: ...
@overload
def _item(
    row: TableRow,
    *,
    search: bool = ...,
    score: float | None = ...,
    extra: dict[str, Any] | None = ...,
    layout: tuple[str, ...] = ...,
) -> Item: ...
def _item(
    row: TableRow,
    *,
    search: bool = False,
    score: float | None = None,
    extra: dict[str, Any] | None = None,
    layout: tuple[str, ...] = (),
) -> Item:
    value = json.loads(str(row.fields["value"]))
    if extra:
        value = {**value, "memstrata": extra}
    stamps = {
        k: datetime.fromtimestamp(float(row.fields[k]), tz=UTC)  # type: ignore[arg-type]
        for k in ("created_at", "updated_at")
    }
    put = row.fields.get("namespace")
    namespace = tuple(json.loads(str(put))) if put else (*layout, row.user_id, row.conversation_id)
    if search:
        return SearchItem(
            namespace, str(row.fields["key"]), value, stamps["created_at"], stamps["updated_at"], score=score
        )
    return Item(value=value, key=str(row.fields["key"]), namespace=namespace, **stamps)
