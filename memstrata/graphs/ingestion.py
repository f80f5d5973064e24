"""The ingestion graph: raw turns -> turn contexts -> Level-2 episodes -> Level-1 summaries -> derived kinds.

Wiring only; each stage lives in :mod:`memstrata.nodes.ingest` and writes its own kind to the store.
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from memstrata.context import Context
from memstrata.nodes.ingest.contexts import write_turn_contexts
from memstrata.nodes.ingest.derived import derive_units
from memstrata.nodes.ingest.episodes import segment_episodes
from memstrata.nodes.ingest.summaries import route_summaries, summarize_batch
from memstrata.nodes.ingest.turns import store_turns
from memstrata.state import IngestInput, IngestOutput, IngestState

builder = StateGraph(IngestState, context_schema=Context, input_schema=IngestInput, output_schema=IngestOutput)
builder.add_node("store_turns", store_turns)
builder.add_node("write_turn_contexts", write_turn_contexts)
builder.add_node("segment_episodes", segment_episodes)
builder.add_node("summarize_batch", summarize_batch)
builder.add_node("derive_units", derive_units)

builder.add_edge(START, "store_turns")
builder.add_edge("store_turns", "write_turn_contexts")
builder.add_edge("write_turn_contexts", "segment_episodes")
builder.add_conditional_edges("segment_episodes", route_summaries, ["summarize_batch", "derive_units"])
builder.add_edge("summarize_batch", "derive_units")
builder.add_edge("derive_units", END)

graph = builder.compile(name="memstrata-ingestion")

__all__ = ["builder", "graph"]
