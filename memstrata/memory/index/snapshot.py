"""The search snapshot of one user's memory (optionally one conversation), built per registered kind.

Chroma is the store of record. For query latency, every searched kind of
:mod:`memstrata.memory.levels` is loaded once per process and store (kept in ``store.caches``,
:mod:`memstrata.memory.index.caches`, within ``Context.cache_mb``) into a
:class:`KindTable` (its units, their vectors and, for ``event`` kinds, BM25
over their text). The raw kind gets what turn search needs on top: neighbour
links, the aligned vectors of every ``view`` kind, and BM25 over each turn,
from which the BM25 of windows of 0, 1, 2, 4 and 8 neighbours each side
(``retrieval.window_widths``; the wider windows stand for the scene the turn belongs to)
is computed at query time (:meth:`MemoryIndex.window_bm25`). Nothing here names
a kind: a new kind's module is enough for it to be indexed.

Writes through the same store are applied in place (:meth:`MemoryIndex.apply`):
the store's write log hands over the written units and vectors, rows are added
or replaced, the BM25 statistics and the windows around a new turn are updated,
so a query right after a write does not rebuild anything. What the log cannot
describe (a user deleted, raw turns deleted, a log that no longer reaches back)
rebuilds from Chroma, as do writes from another process, which are noticed by a
count check every ``refresh_seconds``. Rows added in place sit after the rows
a rebuild would sort before them; scores are the same, only the order of exact
ties can differ.

Example:
    >>> idx = MemoryIndex.load(store, user_id="alice")  # doctest: +SKIP
    >>> idx.dense_turns(vec)[:3]  # doctest: +SKIP
"""

from __future__ import annotations

import gc
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from memstrata.memory import levels
from memstrata.memory.conversation import session_order
from memstrata.memory.index.bm25 import Bm25, tokenize
from memstrata.memory.index.rows import Rows
from memstrata.memory.index.settings import ScaleSettings
from memstrata.memory.levels import Level, Turn
from memstrata.memory.models import Unit
from memstrata.memory.plan.settings import RetrievalSettings

if TYPE_CHECKING:
    from memstrata.memory.store import MemoryStore

UnitT = TypeVar("UnitT", bound=Unit)
READERS = 4
"""Threads reading a new snapshot's kinds from the store at once."""
TRACKED_PER_RECORD = 8
"""Objects the garbage collector tracks per record a snapshot reads (measured: 2,476 for 306 records)."""


class KindTable:
    """One kind's part of the snapshot: its units, their vectors, BM25 over their text (``event`` kinds).

    ``turn_rows`` maps each unit to the rows of its raw turns (filled by :class:`MemoryIndex`).
    """

    def __init__(self, level: Level, units: list[Unit], vecs: np.ndarray) -> None:
        self.level = level
        self.units = list(units)
        self._vecs = Rows(np.asarray(vecs, dtype=np.float32))
        self.by_key = {(u.conversation_id, u.id): i for i, u in enumerate(self.units)}
        self.bm25 = (
            Bm25.from_tokens(tokenize([u.embed_text() for u in self.units]) if self.units else [])
            if level.role == "event"
            else None
        )
        self.turn_rows: list[list[int]] = []
        self._columns: dict[str, tuple[Callable[[Unit], Any], list[Any]]] = {}

    @property
    def kind(self) -> str:
        """The kind of the table's units (its level's kind)."""
        return self.level.kind

    @property
    def vecs(self) -> np.ndarray:
        """The units' vectors, one row per unit."""
        return self._vecs.array

    def __len__(self) -> int:
        return len(self.units)

    def units_as(self, unit: type[UnitT]) -> list[UnitT]:
        """:attr:`units` typed as their class ``unit``, the table's ``level.unit`` (``Fact`` for the facts)."""
        return cast("list[UnitT]", self.units)

    def dense(self, qvec: np.ndarray) -> np.ndarray:
        """Cosine similarity of the query to every unit (vectors are normalized)."""
        return self.vecs @ qvec if len(self.units) else np.zeros(0)

    def column(self, name: str, of: Callable[[Unit], Any]) -> list[Any]:
        """``of(unit)`` for every row, worked out on first use and then kept through upserts and removals.

        ``name`` stands for ``of``: one name, one function. Per-row values derived from a unit alone (a
        fact's validity, a turn's shown date) so survive the in-place updates that drop the memo.
        """
        held = self._columns.get(name)
        if held is None:
            held = self._columns[name] = (of, [of(u) for u in self.units])
        return held[1]

    def upsert(self, unit: Unit, vec: Any) -> int:
        """Add the unit, or replace it when its key is known; returns its row."""
        key = (unit.conversation_id, unit.id)
        row = self.by_key.get(key)
        if row is None:
            row = len(self.units)
            self.units.append(unit)
            self._vecs.append(vec)
            self.by_key[key] = row
            self.turn_rows.append([])
            for of, values in self._columns.values():
                values.append(of(unit))
        else:
            self.units[row] = unit
            self._vecs.set(row, vec)
            for of, values in self._columns.values():
                values[row] = of(unit)
        if self.bm25 is not None:
            self.bm25.set_doc(row, tokenize([unit.embed_text()])[0])
        return row

    def rekey(self, old: tuple[str, str], new: tuple[str, str]) -> bool:
        """Give the row of unit ``old`` to the (unknown) key ``new``, for the upsert that follows to fill it."""
        row = self.by_key.pop(old, None)
        if row is not None:
            self.by_key[new] = row
        return row is not None

    def remove(self, key: tuple[str, str]) -> None:
        """Drop a unit: the last row moves into its place (rows are not ordered)."""
        row = self.by_key.pop(key, None)
        if row is None:
            return
        last = len(self.units) - 1
        if row != last:
            moved = self.units[last]
            self.units[row], self.turn_rows[row] = moved, self.turn_rows[last]
            self._vecs.set(row, self._vecs.array[last])
            self.by_key[(moved.conversation_id, moved.id)] = row
            if self.bm25 is not None:
                self.bm25.set_doc(row, list(self.bm25.docs[last].elements()))
            for _, values in self._columns.values():
                values[row] = values[last]
        self.units.pop()
        self.turn_rows.pop()
        for _, values in self._columns.values():
            values.pop()
        self._vecs.pop()
        if self.bm25 is not None:
            self.bm25.pop()


class MemoryIndex:
    """A search snapshot: one :class:`KindTable` per searched kind, plus the turn-level structures.

    Args:
        tables: the tables by kind; the raw kind's units are :class:`Turn` objects.
        window_widths: neighbours on each side of the BM25 window views of a turn.
    """

    def __init__(
        self,
        tables: dict[str, KindTable],
        *,
        window_widths: Sequence[int] = RetrievalSettings.window_widths,
        version: int = 0,
        counts: tuple[int, ...] = (),
    ) -> None:
        self.tables = tables
        self.version, self.counts, self.loaded_at = version, counts, time.monotonic()
        self.memo: dict[str, Any] = {}
        # set by the bounded path (memstrata.memory.index.bounded): the conversations whose edges are read
        self.bounded: list[str] | None = None
        # structures derived from the snapshot or read beside it that in-place updates keep; each refreshes
        # the conversations whose counts in ``writes`` moved (memstrata.memory.index.held)
        self.held: dict[str, Any] = {}
        # in-place writes per (kind, conversation); (kind, "*") counts removals, which move other rows
        self.writes: Counter[tuple[str, str]] = Counter()
        self.lock = threading.Lock()
        raw = tables[levels.raw_kind()]
        self.raw = raw
        self.turns_kind = raw.kind
        self.turns: list[Turn] = raw.units  # type: ignore[assignment]
        self.by_key = raw.by_key
        self.view_tables = [t for t in tables.values() if t.level.role == "view"]
        self._views = [Rows(self._aligned(t)) for t in self.view_tables]
        self.events = {k: t for k, t in tables.items() if t.level.role == "event"}
        for table in (t for t in tables.values() if t is not raw):  # every table keeps one entry per row
            table.turn_rows = [self.rows_of(u.conversation_id, u.linked_turn_ids()) for u in table.units]
        self._link_turns()
        self.window_widths = tuple(window_widths)
        # BM25 over each turn alone; a window's scores are derived from it at query time (window_bm25)
        self.turn_bm25 = Bm25.from_tokens(tokenize([t.render() for t in self.turns]) if self.turns else [])
        self._offsets: list[np.ndarray] | None = None

    @property
    def turn_vecs(self) -> np.ndarray:
        """The raw turns' vectors, one row per turn."""
        return self.raw.vecs

    @property
    def views(self) -> list[np.ndarray]:
        """Every view kind's vectors in turn order (the turn's own vectors when there is no view kind)."""
        return [v.array for v in self._views] or [self.turn_vecs]

    def _link_turns(self) -> None:
        turns = self.turns
        self.by_position = {(t.conversation_id, t.session_id, t.position): i for i, t in enumerate(turns)}
        self._prev = Rows(
            np.array(
                [self.by_position.get((t.conversation_id, t.session_id, t.position - 1), -1) for t in turns], dtype=int
            )
        )
        self._next = Rows(
            np.array(
                [self.by_position.get((t.conversation_id, t.session_id, t.position + 1), -1) for t in turns], dtype=int
            )
        )
        self._ts = Rows(np.array([t.timestamp.timestamp() if t.timestamp else np.nan for t in turns], dtype=float))
        stamps = [t.timestamp for t in turns if t.timestamp]
        self.latest: datetime | None = max(stamps) if stamps else None
        self.speakers = sorted({t.speaker for t in turns})

    @property
    def prev_idx(self) -> np.ndarray:
        """Each turn's row of the previous turn in its session (-1 when there is none)."""
        return self._prev.array

    @property
    def next_idx(self) -> np.ndarray:
        """Each turn's row of the next turn in its session (-1 when there is none)."""
        return self._next.array

    @property
    def ts_seconds(self) -> np.ndarray:
        """Each turn's timestamp in epoch seconds (NaN when it has none)."""
        return self._ts.array

    def _aligned(self, view: KindTable) -> np.ndarray:
        """A view kind's vectors in turn order; a turn without a view stands alone (older stores)."""
        by_turn = {(u.conversation_id, u.linked_turn_ids()[0]): view.vecs[i] for i, u in enumerate(view.units)}
        rows = [by_turn.get((t.conversation_id, t.id), self.turn_vecs[i]) for i, t in enumerate(self.turns)]
        return np.asarray(rows, dtype=np.float32).reshape(self.turn_vecs.shape)

    # ---- loading -----------------------------------------------------------
    @classmethod
    def fresh(
        cls, store: MemoryStore, *, user_id: str, conversation_id: str | None = None, refresh_seconds: float = 5.0
    ) -> MemoryIndex | None:
        """The cached snapshot when it needs no I/O to trust (same version, checked recently), else ``None``."""
        cached = cached_snapshot(store, user_id, conversation_id)
        if (
            cached is not None
            and cached.version == store.versions.get(user_id)
            and time.monotonic() - cached.loaded_at < refresh_seconds
        ):
            return cached
        return None

    @classmethod
    def load(
        cls,
        store: MemoryStore,
        *,
        user_id: str,
        conversation_id: str | None = None,
        refresh_seconds: float = ScaleSettings.refresh_s,
        window_widths: Sequence[int] = RetrievalSettings.window_widths,
        freeze: bool = False,
    ) -> MemoryIndex:
        """The cached snapshot, updated in place after this process's writes, rebuilt after other processes'.

        Snapshots are kept on the store (``store.caches``, :mod:`memstrata.memory.index.caches`).
        """
        cached = cached_snapshot(store, user_id, conversation_id)
        if cached is not None and cached.window_widths == tuple(window_widths):
            with cached.lock:
                version = store.versions.get(user_id)
                changes = store.versions.since(user_id, cached.version)
                if changes is not None and cached.apply(changes, conversation_id=conversation_id):
                    cached.version = version
                    if time.monotonic() - cached.loaded_at < refresh_seconds or cached.counts == _counts(
                        store, user_id, conversation_id
                    ):
                        cached.loaded_at = time.monotonic()
                        return cached
        version = store.versions.get(user_id)
        index = cls.build(store, user_id, conversation_id, version=version, window_widths=window_widths)
        caches = store.caches
        with caches.snapshots_lock:
            caches.snapshots[(user_id, conversation_id)] = index
        if freeze:
            _Frozen.pending += sum(index.counts)
            _settle_gc()
        return index

    @classmethod
    def build(
        cls,
        store: MemoryStore,
        user_id: str,
        conversation_id: str | None,
        *,
        version: int = 0,
        window_widths: Sequence[int] = RetrievalSettings.window_widths,
    ) -> MemoryIndex:
        """Read every searched kind of one user from the store into a new snapshot.

        The kinds are read at once, ``READERS`` at a time: each is a Chroma read whose fixed cost dominates a small
        user's (eleven reads of 2-30 ms for a user of 58 turns among 200 users), and Chroma's reads leave the GIL.
        Each is read by key where the keys are known without Chroma's filtered read, which grows with the
        collection (:meth:`~memstrata.memory.store.vectors.VectorStore.read_all`). A view kind whose unit names
        its id after its turn's (``view_id``) and stands for itself by its turn (``reference``) is read once the
        turns are in, by those keys and its vectors alone: a view is searched by its vector, never by its text.
        """

        def table(level: Level) -> KindTable:
            records = store.read_all(level.kind, user_id=user_id, conversation_id=conversation_id, with_vectors=True)
            return kind_table(level, records)

        def view_table(level: Level, raw: KindTable) -> KindTable:
            view_id, reference = getattr(level.unit, "view_id", None), getattr(level.unit, "reference", None)
            if view_id is None or reference is None:
                return table(level)
            keys = [(t.conversation_id, view_id(t.id)) for t in raw.units]
            vectors = store.vectors_by_key(level.kind, user_id=user_id, keys=keys)
            held = [(t, vec) for t, key in zip(raw.units, keys, strict=True) if (vec := vectors.get(key)) is not None]
            vecs = np.asarray([vec for _, vec in held], dtype=np.float32).reshape(-1, raw.vecs.shape[1])
            return KindTable(level, [reference(t) for t, _ in held], vecs)

        searched = levels.levels(searched=True)
        raw = next(lv.kind for lv in searched if lv.role == "raw")
        with ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="memstrata-snapshot") as pool:
            read = {lv.kind: pool.submit(table, lv) for lv in searched if lv.role != "view"}
            turns = read[raw].result()
            read |= {lv.kind: pool.submit(view_table, lv, turns) for lv in searched if lv.role == "view"}
            tables = {lv.kind: read[lv.kind].result() for lv in searched}
        return cls(tables, window_widths=window_widths, version=version, counts=tuple(len(t) for t in tables.values()))

    def remember(self, key: str, value: Any, *, limit: int = 512) -> None:
        """Memoize per-query work on this snapshot (dropped whenever the snapshot changes)."""
        if len(self.memo) >= limit:
            self.memo.pop(next(iter(self.memo)))
        self.memo[key] = value

    # ---- in-place updates ---------------------------------------------------------
    def apply(self, changes: Sequence[Any], *, conversation_id: str | None = None) -> bool:
        """Replay the store's logged writes; ``False`` means they need a rebuild instead.

        Rows stay where they are as far as the changes allow, so that what is kept per conversation
        (:mod:`memstrata.memory.index.held`) stays valid for the conversations not written: a unit deleted
        and written again later in the same changes is replaced in its row, and a new unit takes the row
        of a unit of its kind and conversation that the changes delete (an episode re-summarized under a
        new id as its session grows). Only deletes left over remove rows, which moves others (counted
        under ``(kind, "*")`` in ``writes``).
        """
        if not changes:
            return True
        self.memo.clear()
        self._offsets = None
        self.turn_bm25.windows_changed()
        freed: dict[tuple[str, str], list[tuple[str, str]]] = {}  # (kind, conversation) -> keys to delete
        touched: dict[str, set[tuple[str, str]]] = {}
        for change in changes:
            table = self.tables.get(change.kind)
            if table is None:
                continue  # a kind the snapshot does not search
            if change.op == "delete":
                if table is self.raw:
                    return False
                freed.setdefault((change.kind, change.conversation_id), []).extend(
                    (change.conversation_id, u) for u in change.unit_ids
                )
                continue
            for unit, vec in zip(change.units, change.vectors, strict=True):
                if conversation_id is None or unit.conversation_id == conversation_id:
                    key, spare = (unit.conversation_id, unit.id), freed.get((change.kind, unit.conversation_id))
                    if spare and key in spare:  # written again after its delete: replaced in its row
                        spare[:] = [k for k in spare if k != key]
                    while spare and key not in table.by_key:
                        table.rekey(spare.pop(), key)  # a new unit takes a deleted row
                    if not self._upsert(table, unit, vec, touched):
                        return False
                    self.writes[(change.kind, unit.conversation_id)] += 1
        for (kind, _), keys in freed.items():
            table = self.tables[kind]
            gone = [key for key in keys if key in table.by_key]
            for key in gone:
                table.remove(key)
            self.writes[(kind, "*")] += bool(gone)
        for kind, written in touched.items():  # by key: a later delete in the batch may have moved the row
            table = self.tables[kind]
            for row in (r for key in written if (r := table.by_key.get(key)) is not None):
                u = table.units[row]
                table.turn_rows[row] = self.rows_of(u.conversation_id, u.linked_turn_ids())
        self.counts = tuple(len(t) for t in self.tables.values())
        return True

    def stamp(self, kinds: Sequence[str]) -> dict[str, int]:
        """The in-place write counts of these kinds per conversation (``"*"``: removals), to compare later."""
        out: dict[str, int] = {}
        for (kind, conv), n in self.writes.items():
            if kind in kinds:
                out[conv] = out.get(conv, 0) + n
        return out

    def _upsert(self, table: KindTable, unit: Unit, vec: Any, touched: dict[str, set[tuple[str, str]]]) -> bool:
        if table is self.raw:
            self._upsert_turn(unit, vec)  # type: ignore[arg-type]
            return True
        if table.level.role == "view":
            row = self.by_key.get((unit.conversation_id, unit.linked_turn_ids()[0]))
            if row is None:
                return False  # a view of a turn this snapshot lacks: rebuild
            self._views[self.view_tables.index(table)].set(row, vec)
            reference = getattr(table.level.unit, "reference", None)
            unit = reference(self.turns[row]) if reference is not None else unit  # as a build holds it
        table.upsert(unit, vec)
        touched.setdefault(table.kind, set()).add((unit.conversation_id, unit.id))
        return True

    def _upsert_turn(self, turn: Turn, vec: Any) -> None:
        """Add or replace a raw turn: its links, its time, its view rows and the windows around it."""
        new = (turn.conversation_id, turn.id) not in self.by_key
        row = self.raw.upsert(turn, vec)
        here = (turn.conversation_id, turn.session_id, turn.position)
        before = self.by_position.get((*here[:2], turn.position - 1), -1)
        after = self.by_position.get((*here[:2], turn.position + 1), -1)
        if new:
            self.by_position[here] = row
            self._prev.append(before)
            self._next.append(after)
            self._ts.append(turn.timestamp.timestamp() if turn.timestamp else np.nan)
            for view in self._views:
                view.append(vec)
        else:
            self._ts.set(row, turn.timestamp.timestamp() if turn.timestamp else np.nan)
        if before >= 0:
            self._next.set(before, row)
        if after >= 0:
            self._prev.set(after, row)
        if turn.timestamp and (self.latest is None or turn.timestamp > self.latest):
            self.latest = turn.timestamp
        if turn.speaker not in self.speakers:
            self.speakers = sorted({*self.speakers, turn.speaker})
        self.turn_bm25.set_doc(row, tokenize([turn.render()])[0])

    # ---- turn structure --------------------------------------------------------
    def rows_of(self, conversation_id: str, turn_ids: Sequence[str]) -> list[int]:
        """Rows of the given raw turns of one conversation (unknown ids are skipped)."""
        return [i for tid in turn_ids if (i := self.by_key.get((conversation_id, tid))) is not None]

    def _members(self, i: int, width: int) -> list[int]:
        """Turn ``i``'s window as rows in order: up to ``width`` neighbours each side, within its session."""
        prev, nxt = self.prev_idx, self.next_idx
        before, after, j, k = list[int](), list[int](), i, i
        for _ in range(width):
            j = prev[j] if j >= 0 else -1
            k = nxt[k] if k >= 0 else -1
            if j >= 0:
                before.insert(0, int(j))
            if k >= 0:
                after.append(int(k))
        return [*before, i, *after]

    def window_members(self, width: int) -> list[list[int]]:
        """Each turn's window as turn rows in order: up to ``width`` neighbours each side, within its session."""
        return [self._members(i, width) for i in range(len(self.turns))]

    def windows(self, width: int) -> list[str]:
        """Each turn's rendered text with up to ``width`` neighbours each side, within its session."""
        return ["\n".join(self.turns[j].render() for j in members) for members in self.window_members(width)]

    def window_bm25(self, qtokens: list[str]) -> list[np.ndarray]:
        """BM25 of each turn's window (``width`` neighbours each side, within its session), per window width.

        Scores equal BM25 over every window's joined text, computed from the turns' own postings.
        """
        if self._offsets is None:  # the rows ``s`` steps before and after each turn, for s = 1..max width
            offsets, back, ahead = [], np.arange(len(self.turns)), np.arange(len(self.turns))
            prev, nxt = np.append(self.prev_idx, -1), np.append(self.next_idx, -1)
            for _ in range(max(self.window_widths, default=0)):
                back, ahead = prev[back], nxt[ahead]  # -1 stays -1 (the padding entry)
                offsets.append(np.stack([back, ahead]))
            self._offsets = offsets
        return self.turn_bm25.window_scores(qtokens, self._offsets, self.window_widths)

    # ---- dense search ------------------------------------------------------------
    def dense_turns(self, qvec: np.ndarray) -> np.ndarray:
        """Similarity of the query to every turn's own vector."""
        return self.turn_vecs @ qvec if len(self.turns) else np.zeros(0)

    def dense_views(self, qvec: np.ndarray) -> list[np.ndarray]:
        """Similarity of the query to each turn in every view kind (e.g. the turn read with its neighbours)."""
        return [v @ qvec if len(self.turns) else np.zeros(0) for v in self.views]


def _settle_gc() -> None:
    """Take a new whole-memory snapshot out of the garbage collector's scans (``gc.freeze``), when that is due.

    A snapshot holds many long-lived objects (units, postings). Python's full collections scan every tracked object,
    and the allocations of a write-then-read trigger them: measured on one user with 20k turns, a query after a
    one-message write took 0.84 s, 0.19 s with the snapshot frozen. The objects frozen before are released first and
    a full collection runs, so cyclic garbage waits at most until the next settle. Process-wide: ``Context.gc_freeze``.

    That full collection scans the whole process (0.16-0.25 s with the encoder loaded), so it runs only when the
    objects not frozen are at least a quarter of those frozen, CPython's own rule for when a full collection is due
    (counting the objects not frozen walks only those; the frozen count is the one kept when they were frozen). A
    server that reads many small users' snapshots then pays it once in several users, not at every user's first
    query; until then their objects stay with the collector, which frees them when the cache drops them.

    Counting the objects not frozen is itself a walk (12 ms at 150k objects), so it is skipped while the records
    read into snapshots since the last settle, at ``TRACKED_PER_RECORD`` objects each, cannot reach that quarter.
    Objects made elsewhere are not counted then, so a settle may come later than the rule says; the collector's own
    full collections of the objects not frozen go on as before.
    """
    frozen = _Frozen.count
    if frozen and _Frozen.pending * TRACKED_PER_RECORD * 4 < frozen:  # the snapshots since then cannot be due yet
        return
    if frozen and len(gc.get_objects()) * 4 < frozen:  # the objects not frozen: a walk of those alone
        return
    gc.unfreeze()
    gc.collect()
    _Frozen.count = len(gc.get_objects())
    _Frozen.pending = 0
    gc.freeze()


class _Frozen:
    """How many objects :func:`_settle_gc` last froze. ``gc.get_freeze_count()`` would walk every frozen object:
    70 ms at 560k, on every new user's first query (measured). Another freeze elsewhere in the process is not
    counted, so a settle then comes sooner, never later.
    """

    count = 0
    pending = 0
    """Records read into snapshots since the last settle."""


def cached_snapshot(store: MemoryStore, user_id: str, conversation_id: str | None) -> MemoryIndex | None:
    """The whole-memory snapshot this process holds for one scope, if any (however old)."""
    caches = store.caches
    with caches.snapshots_lock:
        return caches.snapshots.get((user_id, conversation_id))


def forget_snapshot(store: MemoryStore, user_id: str, conversation_id: str | None) -> None:
    """Drop one scope's cached snapshot (it grew past the whole-memory path)."""
    caches = store.caches
    with caches.snapshots_lock:
        caches.snapshots.pop((user_id, conversation_id), None)


def _counts(store: MemoryStore, user_id: str, conversation_id: str | None) -> tuple[int, ...]:
    return tuple(
        store.count(lv.kind, user_id=user_id, conversation_id=conversation_id) for lv in levels.levels(searched=True)
    )


def kind_table(level: Level, records: list[Any], parse: Callable[[Any], Unit] | None = None) -> KindTable:
    """A kind's table from its stored records; raw turns are put in conversation order.

    ``parse`` turns a record into its unit (default: validate its payload); a caller that builds
    tables over the same records again passes a memoized one.
    """
    units = [parse(r) if parse else level.unit.model_validate(r.payload) for r in records]
    vecs = [r.metadata["_vector"] for r in records]
    if level.role == "raw":
        order = sorted(
            range(len(units)),
            key=lambda i: (
                units[i].conversation_id,
                session_order(getattr(units[i], "session_id", "")),
                getattr(units[i], "position", 0),
            ),
        )
        units, vecs = [units[i] for i in order], [vecs[i] for i in order]
    dim = len(vecs[0]) if vecs else 1
    return KindTable(level, units, np.asarray(vecs, dtype=np.float32).reshape(-1, dim))
