"""Ingestion stage 2: cut the touched sessions into episodes."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import numpy as np
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from memstrata.context import Context, aresolve_store, resolve_model
from memstrata.llm import GOOD_OUTCOMES, Meter, decide
from memstrata.memory.episodes import build_episodes
from memstrata.memory.models import Conversation, Session, UnitKind
from memstrata.memory.segmentation import segment_session
from memstrata.nodes.common import progress
from memstrata.prompts.ingestion import BOUNDARY_PROMPT
from memstrata.state import IngestState


class Boundaries(BaseModel):
    """Indices of the messages that start a new episode."""

    starts: list[int] = Field(default_factory=list, description="0-based indices of messages that begin an episode")


async def segment_episodes(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Segment every touched session (offline cuts, or the model's boundaries in LLM mode)."""
    ctx = runtime.context
    store = await aresolve_store(ctx)
    model = resolve_model(ctx)
    meter = Meter()
    touched = {tuple(p) for p in state.get("touched", [])}
    episodes = []
    for raw in state["conversations"]:
        conv = Conversation.model_validate(raw)
        for session in conv.sessions:
            if (conv.conversation_id, session.session_id) not in touched:
                continue
            vecs = await asyncio.to_thread(_vectors, store, conv, session)
            forced = await _llm_cuts(model, ctx, session, meter) if model is not None else None
            spans = segment_session(
                vecs, [t.timestamp for t in session.turns], max_turns=ctx.max_episode_turns,
                min_turns=ctx.min_episode_turns, overlap=ctx.episode_overlap, max_gap=timedelta(minutes=30),
                forced=forced,
            )
            episodes += [e.model_dump(mode="json") for e in build_episodes(session, spans)]
    progress("segment", f"cut {len(touched)} session(s) into {len(episodes)} episodes", episodes=len(episodes))
    return {"episodes": episodes, "stats": {"llm": {"segment": meter.summary()}} if model else {}}


def _vectors(store: Any, conv: Conversation, session: Session) -> np.ndarray:
    records = store.get(UnitKind.TURN, user_id=conv.user_id, conversation_id=conv.conversation_id,
                        unit_ids=[t.id for t in session.turns], with_vectors=True)
    by_id = {r.unit_id: r.metadata["_vector"] for r in records}
    return np.asarray([by_id[t.id] for t in session.turns], dtype=float)


async def _llm_cuts(model: Any, ctx: Context, session: Session, meter: Meter) -> set[int] | None:
    """The model's episode starts for one session; ``None`` means "use the offline cuts"."""
    n = len(session.turns)
    listing = "\n".join(f"[{i}] {t.render()}" for i, t in enumerate(session.turns))

    def valid(b: Boundaries) -> Boundaries:
        if any(i < 0 or i >= n for i in b.starts):
            msg = f"indices must be between 0 and {n - 1}"
            raise ValueError(msg)
        return b

    value, outcome = await decide(
        model, Boundaries, ctx.prompt("BOUNDARY_PROMPT", BOUNDARY_PROMPT).format(max_turns=ctx.max_episode_turns),
        f"<messages session=\"{session.session_id}\">\n{listing}\n</messages>",
        node="segment", fallback=lambda: Boundaries(starts=[-1]), meter=meter,
        timeout=ctx.llm_timeout_s, retries=ctx.llm_retries, validate=valid,
    )
    if outcome not in GOOD_OUTCOMES:
        return None
    return {i for i in value.starts if 0 < i < n}
