"""The ingestion graph: raw turns -> Level-2 episodes -> Level-1 summaries, in Chroma.

Wiring only; the stages live in :mod:`memstrata.nodes`.
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from memstrata.context import Context
from memstrata.nodes.load import load_conversations
from memstrata.nodes.segment import segment_episodes
from memstrata.nodes.summarize import route_summaries, summarize_batch
from memstrata.nodes.write import write_episodes, write_summaries, write_turns
from memstrata.state import IngestInput, IngestOutput, IngestState

builder = StateGraph(IngestState, context_schema=Context, input_schema=IngestInput, output_schema=IngestOutput)
builder.add_node("load_conversations", load_conversations)
builder.add_node("write_turns", write_turns)
builder.add_node("segment_episodes", segment_episodes)
builder.add_node("write_episodes", write_episodes)
builder.add_node("summarize_batch", summarize_batch)
builder.add_node("write_summaries", write_summaries)

builder.add_edge(START, "load_conversations")
builder.add_edge("load_conversations", "write_turns")
builder.add_edge("write_turns", "segment_episodes")
builder.add_edge("segment_episodes", "write_episodes")
builder.add_conditional_edges("write_episodes", route_summaries, ["summarize_batch", "write_summaries"])
builder.add_edge("summarize_batch", "write_summaries")
builder.add_edge("write_summaries", END)

graph = builder.compile(name="memstrata-ingestion")

__all__ = ["builder", "graph"]
