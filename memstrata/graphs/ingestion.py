"""The ingestion graph: raw turns -> turn contexts -> Level-2 episodes -> atomic facts -> entity graph ->
Level-1 summaries -> temporal tree -> derived kinds.

Wiring only; each stage lives in :mod:`memstrata.nodes.ingest` and writes its own kind to the store.
Facts and entities come before the summaries on purpose: an episode counts as done once its summary
is stored, so an ingest stopped anywhere before that redoes the episode's facts and links too.
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from memstrata.context import Context
from memstrata.nodes.ingest.contexts import write_turn_contexts
from memstrata.nodes.ingest.derived import derive_units
from memstrata.nodes.ingest.entities import link_entities
from memstrata.nodes.ingest.episodes import segment_episodes
from memstrata.nodes.ingest.facts import extract_facts, route_facts
from memstrata.nodes.ingest.summaries import route_summaries, summarize_batch
from memstrata.nodes.ingest.tree import consolidate_tree
from memstrata.nodes.ingest.turns import store_turns
from memstrata.state import IngestInput, IngestOutput, IngestState

builder = StateGraph(IngestState, context_schema=Context, input_schema=IngestInput, output_schema=IngestOutput)
builder.add_node("store_turns", store_turns)
builder.add_node("write_turn_contexts", write_turn_contexts)
builder.add_node("segment_episodes", segment_episodes)
builder.add_node("extract_facts", extract_facts)
builder.add_node("link_entities", link_entities)
builder.add_node("summarize_batch", summarize_batch)
builder.add_node("consolidate_tree", consolidate_tree)
builder.add_node("derive_units", derive_units)

builder.add_edge(START, "store_turns")
builder.add_edge("store_turns", "write_turn_contexts")
builder.add_edge("write_turn_contexts", "segment_episodes")
builder.add_conditional_edges("segment_episodes", route_facts, ["extract_facts", "link_entities"])
builder.add_edge("extract_facts", "link_entities")
builder.add_conditional_edges("link_entities", route_summaries, ["summarize_batch", "consolidate_tree"])
builder.add_edge("summarize_batch", "consolidate_tree")
builder.add_edge("consolidate_tree", "derive_units")
builder.add_edge("derive_units", END)

graph = builder.compile(name="memstrata-ingestion")

__all__ = ["builder", "graph"]
