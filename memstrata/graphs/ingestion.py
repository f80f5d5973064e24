"""The ingestion graph: raw turns -> turn contexts -> Level-2 episodes -> Level-1 summaries and atomic facts ->
entity graph -> themes -> persona (and, with a model, the scenes' calibration) -> HMO's importance and tiers ->
temporal tree -> derived kinds.

A message without a position is appended after its session's stored turns. A write that only appends to a
session's open tail and closes nothing ends after the turn contexts: the turns wait raw in the tail (searched as raw
turns) until a write closes or fills it. A deferred write (``defer``) ends there too, unless it closes or changes a
stored message: what it leaves underived is found in the store and derived by a write with no new message
(``complete``, which starts at ``find_pending``) or by the next write of the conversation (see
:mod:`memstrata.memory.pending`). Each session's open tail is then cut into episodes; closed ones are never
cut again, and only closed episodes reach the entity graph and the tree, so one message costs the same however
long its conversation is (see :mod:`memstrata.nodes.ingest.episodes`).

Wiring only; each stage lives in :mod:`memstrata.nodes.ingest` and writes its own kinds to the store.
``distill_batch`` stores a batch's summaries, then its episodes, then their facts: a stored unit's parent is
always stored, and an episode counts as done once its summary and all its facts are, so an ingest stopped
anywhere redoes exactly the unfinished episodes (entities, themes, personas, the tree and derived kinds are recomputed
per conversation after them).
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from memstrata.context import Context
from memstrata.nodes.ingest.contexts import route_contexts, write_turn_contexts
from memstrata.nodes.ingest.derived import derive_units
from memstrata.nodes.ingest.distill import distill_batch, route_episodes
from memstrata.nodes.ingest.entities import link_entities
from memstrata.nodes.ingest.episodes import segment_episodes
from memstrata.nodes.ingest.persona import distill_persona
from memstrata.nodes.ingest.themes import group_themes
from memstrata.nodes.ingest.tiers import rank_tiers
from memstrata.nodes.ingest.tree import consolidate_tree
from memstrata.nodes.ingest.turns import find_pending, route_input, store_turns
from memstrata.state import IngestInput, IngestOutput, IngestState

builder = StateGraph(IngestState, context_schema=Context, input_schema=IngestInput, output_schema=IngestOutput)
builder.add_node("store_turns", store_turns)
builder.add_node("find_pending", find_pending)
builder.add_node("write_turn_contexts", write_turn_contexts)
builder.add_node("segment_episodes", segment_episodes)
# LangGraph passes a node its input by position, but its type stub wants that parameter named `state`; this one
# takes a Send payload and names it for what it is.
builder.add_node("distill_batch", distill_batch)  # type: ignore[call-overload]  # stub: 1st param must be named state
builder.add_node("link_entities", link_entities)
builder.add_node("group_themes", group_themes)
builder.add_node("distill_persona", distill_persona)
builder.add_node("rank_tiers", rank_tiers)
builder.add_node("consolidate_tree", consolidate_tree)
builder.add_node("derive_units", derive_units)

builder.add_conditional_edges(START, route_input, ["store_turns", "find_pending"])
builder.add_edge("store_turns", "write_turn_contexts")
builder.add_edge("find_pending", "write_turn_contexts")
builder.add_conditional_edges("write_turn_contexts", route_contexts, ["segment_episodes", END])
builder.add_conditional_edges("segment_episodes", route_episodes, ["distill_batch", "link_entities"])
builder.add_edge("distill_batch", "link_entities")
builder.add_edge("link_entities", "group_themes")
builder.add_edge("group_themes", "distill_persona")
builder.add_edge("distill_persona", "rank_tiers")
builder.add_edge("rank_tiers", "consolidate_tree")
builder.add_edge("consolidate_tree", "derive_units")
builder.add_edge("derive_units", END)

graph = builder.compile(name="memstrata-ingestion")

__all__ = ["builder", "graph"]
