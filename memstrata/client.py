"""The facade for apps that don't drive LangGraph themselves.

Example:
    >>> from memstrata import Memstrata
    >>> mem = Memstrata(path="/tmp/memstrata-demo")  # doctest: +SKIP
    >>> mem.ingest([{"speaker": "Ann", "text": "I adopted a cat named Miso."}], user_id="ann")  # doctest: +SKIP
    >>> mem.retrieve("What is the cat called?", user_id="ann").context  # doctest: +SKIP
    '...Ann: I adopted a cat named Miso...'
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import fields
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel

from memstrata.backlog import Backlog
from memstrata.context import Context, nested, with_settings
from memstrata.errors import AnswerError
from memstrata.memories import Memories
from memstrata.memory.levels import DIMENSIONS, Persona
from memstrata.memory.persona.versions import valid_at
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.reads import read_personas
from memstrata.memory.timeparse import parse_timestamp
from memstrata.result import RetrievalResult
from memstrata.runtime.resolve import StoreKey, hold_store, release_store, resolve_store

if TYPE_CHECKING:
    from memstrata.state import IngestInput

logger = logging.getLogger("memstrata")


class Memstrata:
    """Long-term memory for one app: ingest conversations, retrieve cited evidence, ask.

    Every method that reads or writes a user's memory takes ``user_id`` by keyword only, and ``conversation_id``
    too: what a call is scoped to is always named. What the call acts on comes first and may be passed by
    position: the source, the query, the memory or turn id and the new text, the speaker, the output file.
    ``mem.update("s1:t0", "I moved to Porto.", user_id="ann", conversation_id="c1")``,
    ``mem.persona("Ann", user_id="ann")``, ``mem.history(user_id="ann")``.

    Args:
        path: embedded Chroma folder (default ``$MEMSTRATA_DATA_DIR`` or ``~/.memstrata``).
        url: a Chroma server URL instead of the embedded store.
        embeddings: any LangChain ``Embeddings`` (default: packaged MiniLM).
        model: a chat model or model name; LLM mode is on only when this is set.
        **settings: any other :class:`~memstrata.context.Context` field (``level1_k``, ``context_budget``...).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        url: str | None = None,
        embeddings: Embeddings | None = None,
        model: BaseChatModel | str | None = None,
        **settings: Any,
    ) -> None:
        settings = nested(settings)  # "themes.search_k": 0 is themes={"search_k": 0}
        known = {f.name for f in fields(Context)} - {"user_id"}
        unknown = set(settings) - known
        if unknown:
            from memstrata.context import unknown_settings

            msg = unknown_settings(unknown, known)
            raise TypeError(msg)
        self._base = dict(
            data_dir=str(path) if path else None, chroma_url=url, embeddings=embeddings, model=model, **settings
        )
        self._runner: asyncio.Runner | None = None
        # this instance's own loop, in a thread: blocking calls made inside a running loop, and background derivations
        self._worker: tuple[asyncio.AbstractEventLoop, threading.Thread] | None = None
        self._loop_lock = threading.Lock()
        self._backlog = Backlog(self._loop, self.acomplete)
        self.managed = Memories(lambda: self.store, self.ingest)  # single memories: list, get, update, delete
        self._hold_lock = threading.Lock()
        self._held: StoreKey | None = None  # the store this instance holds open (see close)
        self._hold()

    def context(self, *, user_id: str, **overrides: Any) -> Context:
        """The run context for one user, with per-call overrides."""
        self._hold()
        ctx = Context(user_id=user_id, **self._base)
        return with_settings(ctx, **nested(overrides)) if overrides else ctx

    @property
    def store(self) -> MemoryStore:
        """The underlying store (shared by every user of this instance)."""
        self._hold()
        return resolve_store(Context(user_id="_", **self._base))

    def _hold(self) -> None:
        """Hold the store open (again, when used after :meth:`close`)."""
        if self._held is None:
            with self._hold_lock:
                if self._held is None:
                    self._held = hold_store(Context(user_id="_", **self._base))

    # ---- ingestion -----------------------------------------------------------
    async def aingest(
        self,
        source: Any,
        *,
        user_id: str,
        conversation_id: str | None = None,
        only_conversation: str | None = None,
        close: bool = False,
        defer: bool = False,
        metadata: dict[str, Any] | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        **overrides: Any,
    ) -> dict[str, Any]:
        """Ingest a file path, parsed JSON, a message list or LangChain messages; returns stats.

        A message with an id is stored once however often it is sent; one without an id is appended
        after the turns already stored (or, when it has a time, recognised as the stored turn of the same
        speaker, text and time). A session's newest episode stays open while messages may still join it
        (see ``Context.episodes.quiet_minutes``); ``close=True`` closes it now (a finished record).
        ``metadata`` (names to strings, numbers or booleans) is attached to every message written, under a
        message's own ``metadata``; :meth:`memories` filters on it.
        ``defer=True`` stores the raw turns and their views and returns: the episodes, summaries, facts and what
        is built on them wait for :meth:`complete` (or :meth:`complete_later`, or the next write of the
        conversation). The stats count ``turns_deferred`` and name the sessions left (``deferred``, as
        ``[conversation_id, session_id]`` pairs). A write that changes a stored message, or passes ``close=True``,
        is derived at once all the same.
        ``overrides`` are :class:`~memstrata.context.Context` fields for this call (``now``...).
        """
        payload: IngestInput = {
            "source": str(source) if isinstance(source, Path) else source,
            "conversation_id": conversation_id,
            "only_conversation": only_conversation,
            "close": close,
            "defer": defer,
            "metadata": metadata,
        }
        return await self._ingestion(payload, self.context(user_id=user_id, **overrides), on_progress)

    def ingest(self, source: Any, **kwargs: Any) -> dict[str, Any]:
        """Blocking twin of :meth:`aingest`."""
        return self._run(self.aingest(source, **kwargs))

    async def _ingestion(
        self, payload: IngestInput, ctx: Context, on_progress: Callable[[dict[str, Any]], None] | None
    ) -> dict[str, Any]:
        from memstrata.graphs.ingestion import graph

        final: dict[str, Any] = {}
        started = time.perf_counter()
        # with a list of stream modes LangGraph yields (mode, chunk) pairs; its stub types a chunk, not the pair
        mode: str
        chunk: Any
        async for mode, chunk in graph.astream(
            payload, context=ctx, stream_mode=["custom", "values"], config={"max_concurrency": ctx.max_fanout}
        ):
            if mode == "custom" and on_progress:
                on_progress(chunk)
            elif mode == "values":
                final = chunk
        stats = dict(final.get("stats", {}))
        stats["seconds"] = round(time.perf_counter() - started, 3)
        stats["turns_per_second"] = round(stats.get("turns_seen", 0) / max(stats["seconds"], 1e-9), 1)
        return stats

    # ---- deferred derivation ---------------------------------------------------
    async def acomplete(
        self,
        *,
        user_id: str,
        conversation_id: str,
        sessions: Sequence[str] | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        **overrides: Any,
    ) -> dict[str, Any]:
        """Derive what deferred writes (``ingest(..., defer=True)``), or writes that were stopped, left undone in a
        conversation, with no new message; returns the write's stats.

        The work is found in the store (:mod:`memstrata.memory.pending`), so it is found after a restart too. With
        nothing pending it writes nothing and stops after a few reads; run twice, the second finds nothing.
        By default every session is searched, a read of the whole conversation. ``sessions`` names those a deferred
        write left (its stats' ``deferred``): they are derived as that write would have derived them inline, and
        only the conversation's newest session is searched besides (the background worker's way).

        Example:
            >>> stats = mem.ingest(messages, user_id="ann", conversation_id="c1", defer=True)  # doctest: +SKIP
            >>> stats["turns_deferred"], stats["summaries_written"]  # doctest: +SKIP
            (2, 0)
            >>> mem.complete(user_id="ann", conversation_id="c1")["summaries_written"]  # doctest: +SKIP
            1
        """
        payload: IngestInput = {
            "conversation_id": conversation_id,
            "complete": True,
            "pending": list(sessions) if sessions is not None else None,
        }
        return await self._ingestion(payload, self.context(user_id=user_id, **overrides), on_progress)

    def complete(self, *, user_id: str, conversation_id: str, **kwargs: Any) -> dict[str, Any]:
        """Blocking twin of :meth:`acomplete`."""
        return self._run(self.acomplete(user_id=user_id, conversation_id=conversation_id, **kwargs))

    def complete_later(
        self, *, user_id: str, conversation_id: str, sessions: Sequence[str] | None = None, **overrides: Any
    ) -> concurrent.futures.Future[dict[str, Any]]:
        """Queue :meth:`acomplete` to run in the background, on this instance's own event loop (a thread), and return
        at once; the future holds its stats.

        One derivation runs at a time per conversation, in the order queued; one queued behind a running one takes
        in the next requests for the same conversation (their ``sessions`` together). :meth:`flush`, :meth:`close`
        and a normal process exit wait for what is queued; a process killed first leaves it pending in the store,
        and the next write of the conversation (or :meth:`complete`) derives it.
        """
        return self._backlog.submit(user_id, conversation_id, sessions, overrides)

    def queued(self, *, user_id: str | None = None, conversation_id: str | None = None) -> int:
        """How many background derivations are queued or running (of one user, of one of its conversations)."""
        return len(self._backlog.futures(user_id, conversation_id))

    def flush(self, *, timeout: float | None = None) -> bool:
        """Wait for every background derivation queued so far (and any queued meanwhile); ``False`` if ``timeout``
        seconds passed first. A derivation that failed is logged; its future holds the error.
        """
        return self._backlog.wait(timeout=timeout)

    async def aflush(self, *, timeout: float | None = None) -> bool:
        """The async form of :meth:`flush`: the running loop goes on while it waits."""
        return await asyncio.to_thread(self._backlog.wait, timeout=timeout)

    # ---- retrieval -----------------------------------------------------------
    async def aretrieve(self, query: str, *, user_id: str, **overrides: Any) -> RetrievalResult:
        """Cited raw-turn evidence for a query, inside ``context_budget`` tokens (no answer)."""
        return await self._run_retrieval(
            query, self.context(user_id=user_id, **{"generate_answer": False, **overrides})
        )

    def retrieve(self, query: str, *, user_id: str, **overrides: Any) -> RetrievalResult:
        """Blocking twin of :meth:`aretrieve`."""
        return self._run(self.aretrieve(query, user_id=user_id, **overrides))

    async def aask(self, query: str, *, user_id: str, **overrides: Any) -> RetrievalResult:
        """Evidence plus an answer when a model is configured (``answer`` is ``None`` offline).

        Raises:
            AnswerError: a model is configured but the answer failed (unreachable, timing out, replying with
                nothing) and no earlier round had an answer; its ``result`` holds the evidence and the trace.
        """
        result = await self._run_retrieval(query, self.context(user_id=user_id, **overrides))
        if result.answer is None and result.answer_error is not None:
            msg = f"answer failed: {result.answer_error} (the evidence and the trace are on this error's .result)"
            raise AnswerError(msg, result)
        return result

    def ask(self, query: str, *, user_id: str, **overrides: Any) -> RetrievalResult:
        """Blocking twin of :meth:`aask`."""
        return self._run(self.aask(query, user_id=user_id, **overrides))

    async def astream(self, query: str, *, user_id: str, **overrides: Any) -> AsyncIterator[tuple[str, Any]]:
        """Yield ``("progress", event)``, ``("token", text)`` and finally ``("result", RetrievalResult)``."""
        from memstrata.graphs.retrieval import graph

        ctx = self.context(user_id=user_id, **overrides)
        final: dict[str, Any] = {}
        # with a list of stream modes LangGraph yields (mode, chunk) pairs; its stub types a chunk, not the pair
        mode: str
        chunk: Any
        async for mode, chunk in graph.astream(
            {"query": query}, context=ctx, stream_mode=["custom", "messages", "values"]
        ):
            if mode == "custom":
                yield "progress", chunk
            elif mode == "messages":
                message, _meta = chunk
                if message.content:
                    yield "token", message.content
            else:
                final = chunk
        yield "result", RetrievalResult.from_state(final)

    async def _run_retrieval(self, query: str, ctx: Context) -> RetrievalResult:
        from memstrata.graphs.retrieval import graph

        state = await graph.ainvoke({"query": query}, context=ctx)
        return RetrievalResult.from_state(state)

    # ---- single memories (memstrata.memories.Memories) ----------------------------
    def conversations(self, *, user_id: str) -> list[dict[str, Any]]:
        """The user's conversations: id, turns, sessions, first and last time."""
        return self.managed.conversations(user_id=user_id)

    def memories(self, *, user_id: str, **filters: Any) -> list[dict[str, Any]]:
        """One page of the user's memories: ``kind`` ("turn", "fact", "summary"...), ``conversation_id``,
        ``speaker``, ``since``, ``until``, ``metadata`` (what the app attached at write time), ``limit``,
        ``offset``.
        """
        return self.managed.memories(user_id=user_id, **filters)

    def memory(
        self, memory_id: str, *, user_id: str, kind: str = "turn", conversation_id: str | None = None
    ) -> dict[str, Any]:
        """One memory by id (``LookupError`` when there is none)."""
        return self.managed.memory(memory_id, user_id=user_id, kind=kind, conversation_id=conversation_id)

    def update(self, turn_id: str, text: str, *, user_id: str, conversation_id: str) -> dict[str, Any]:
        """Replace what a turn says; what was built from it is rebuilt (after the conversation's background
        derivations, which could otherwise write what the update removes).
        """
        self._backlog.wait(user_id, conversation_id)
        return self.managed.update(turn_id, text, user_id=user_id, conversation_id=conversation_id)

    def delete(self, turn_id: str | None = None, *, user_id: str, conversation_id: str) -> dict[str, int]:
        """Delete one turn (its session rebuilt without it), or the whole conversation, once the conversation's
        background derivations are done.
        """
        self._backlog.wait(user_id, conversation_id)
        return self.managed.delete(turn_id, user_id=user_id, conversation_id=conversation_id)

    def history(self, *, user_id: str, conversation_id: str | None = None) -> list[dict[str, Any]]:
        """What was updated or deleted, oldest first."""
        return self.managed.history(user_id=user_id, conversation_id=conversation_id)

    # ---- persona ----------------------------------------------------------------
    def persona(
        self, speaker: str, *, user_id: str, conversation_id: str | None = None, at: datetime | str | None = None
    ) -> dict[str, Persona]:
        """A speaker's persona: per dimension, the version valid at ``at`` (default: the current one).

        ``at`` takes a datetime or a date string ("1 March 2024"). A dimension with no version then is left out.

        Raises:
            LookupError: no persona for the speaker, or one in several conversations and no ``conversation_id``.
        """
        when = parse_timestamp(at) if at is not None else None
        if at is not None and when is None:
            msg = f"could not read {at!r} as a date"
            raise ValueError(msg)
        versions = read_personas(self.store, user_id, speaker, conversation_id)
        out = {d: valid_at([v for v in versions if v.dimension == d], when) for d in DIMENSIONS}
        return {d: v for d, v in out.items() if v is not None}

    def persona_history(
        self, speaker: str, *, user_id: str, conversation_id: str | None = None
    ) -> dict[str, list[Persona]]:
        """Every version of each dimension of a speaker's persona, oldest first."""
        versions = read_personas(self.store, user_id, speaker, conversation_id)
        return {
            d: [v for v in versions if v.dimension == d] for d in DIMENSIONS if any(v.dimension == d for v in versions)
        }

    def forget_persona_item(
        self, speaker: str, dimension: str, fact_id: str, *, user_id: str, conversation_id: str | None = None
    ) -> int:
        """Remove one item (named by its fact id) from a dimension, in every version; no rebuild brings it back.

        Nothing raw is deleted: the fact and its turns stay. Returns how many versions held the item.

        Raises:
            LookupError: no persona for the speaker, or no version of the dimension holds that item.
        """
        versions = [v for v in read_personas(self.store, user_id, speaker, conversation_id) if v.dimension == dimension]
        held = [v for v in versions if any(fact_id in (i.fact_id, *i.fact_ids) for i in v.items)]
        if not held:
            msg = (
                f"no {dimension!r} item of {speaker!r} cites {fact_id!r}; its items cite "
                f"{sorted({i.fact_id for v in versions for i in v.items})}"
            )
            raise LookupError(msg)
        edited = [
            Persona.model_validate(
                {
                    **v.model_dump(),
                    "text": "",
                    "excluded": sorted({*v.excluded, fact_id}) if v.current else v.excluded,
                    "items": [i.model_dump() for i in v.items if fact_id not in (i.fact_id, *i.fact_ids)],
                }
            )
            for v in held
        ]
        current = next((v for v in versions if v.current and v not in held), None)
        if current is not None:  # the item is gone from the current version already: still keep it out
            edited.append(current.model_copy(update={"excluded": sorted({*current.excluded, fact_id})}))
        self.store.upsert(
            "persona", edited, documents=[p.embed_text() for p in edited], extra=[p.metadata() for p in edited]
        )
        return len(held)

    # ---- housekeeping ----------------------------------------------------------
    def users(self) -> list[str]:
        """Every user id with memory in the store, sorted."""
        from memstrata.portable import users

        return users(self)

    def export(self, out: str | Path | IO[str], *, user_id: str) -> dict[str, int]:
        """Write everything of a user that cannot be rebuilt (turns, sessions, store items, history, tombstones,
        persona exclusions) as JSON lines to a path or text file; returns counts. See :mod:`memstrata.portable`.

        Raises:
            LookupError: the user has no memory.
        """
        from memstrata.portable import export_user

        return export_user(self, out, user_id=user_id)

    def import_(
        self, source: str | Path | IO[str], *, user_id: str | None = None, replace: bool = False
    ) -> dict[str, int]:
        """Read an :meth:`export` into this store (under ``user_id``, default the exported one) and rebuild what is
        derived; ``replace`` deletes that user's memory first.

        Raises:
            ValueError: not a memstrata export, or the user already has memory and ``replace`` is off; nothing is
                written then.
        """
        from memstrata.portable import import_user

        self._backlog.wait(user_id)
        return import_user(self, source, user_id=user_id, replace=replace)

    def rebuild(self, *, user_id: str, conversation_id: str | None = None) -> dict[str, int]:
        """Delete every unit derived from the user's raw turns (of one conversation, or of all) and build them again
        from those turns; ``memstrata check`` is clean after it. Turns, store items, history, tombstones and persona
        exclusions are kept. See :func:`memstrata.repair.rebuild`.

        Raises:
            LookupError: no such user or conversation.
        """
        from memstrata.repair import rebuild

        self._backlog.wait(user_id, conversation_id)
        return rebuild(self, user_id=user_id, conversation_id=conversation_id)

    def score_tiers(self, *, user_id: str | None = None) -> dict[str, int]:
        """Score and tier, with HMO, what was written while ``tiers`` was off (of one user, or of every user).

        Ingestion scores records only with ``tiers`` on, so that off costs a write nothing; this replays each
        conversation's stored turns unchanged with ``tiers=True``, so every closed episode without a score gets one.
        """
        done = {"users": 0, "conversations": 0, "records_scored": 0}
        for user in [user_id] if user_id is not None else self.users():
            done["users"] += 1
            for conv in self.conversations(user_id=user):
                stats = self.managed.replay(user_id=user, conversation_id=conv["conversation_id"], tiers=True)
                done["conversations"] += 1
                done["records_scored"] += int(stats.get("records_scored", 0))
        return done

    def delete_user(self, *, user_id: str) -> dict[str, int]:
        """Remove every trace of a user; returns how many units of each kind went. The user's background
        derivations finish first, so none writes after the delete what it read before.
        """
        self._backlog.wait(user_id)
        return self.store.delete_user(user_id)

    def close(self) -> None:
        """Wait for the background derivations (:meth:`complete_later`), release the event loops of the blocking API,
        and close the store once no other open instance uses it (its files stay; a later call opens it again).
        Calling it twice is harmless.
        """
        self._backlog.wait()
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        with self._loop_lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            loop, thread = worker
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=30)
            loop.close()
        self._backlog.abandon()  # queued while closing: left pending in the store, for the next write
        with self._hold_lock:
            held, self._held = self._held, None
        if held is not None:
            release_store(held)

    async def aclose(self) -> None:
        """The async form of :meth:`close`: the running loop goes on while the background derivations finish."""
        await self.aflush()
        await asyncio.to_thread(self.close)

    def _loop(self) -> asyncio.AbstractEventLoop:
        """This instance's own event loop, running in a daemon thread (started on first use)."""
        with self._loop_lock:
            if self._worker is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="memstrata-loop", daemon=True)
                thread.start()
                self._worker = (loop, thread)
            return self._worker[0]

    def _run(self, coro: Any) -> Any:
        """Run a coroutine on this instance's own loop, so HTTP clients of a model survive between calls.

        Called where an event loop already runs (a notebook, an async app), it runs on a loop of this instance's
        own in a worker thread and waits for it there; the async twins (``aingest``, ``aretrieve``, ``aask``) do
        not block the running loop.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            if self._runner is None:
                self._runner = asyncio.Runner()
            # Not Runner.run(): it installs a SIGINT handler per call, and Python formats the handler's repr
            # (task, coroutine and its arguments) each time, a few ms per call. Ctrl-C still interrupts.
            return self._runner.get_loop().run_until_complete(coro)
        return asyncio.run_coroutine_threadsafe(coro, self._loop()).result()
