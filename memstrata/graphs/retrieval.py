"""The retrieval graph: decompose -> predict_scope -> lookup_level1 -> gate -> (select_level1 ->)
backtrack_level2 -> follow_up -> search_missing -> next_wave -> (lookup_level1 for dependent sub-queries | reflect) ->
(lookup_level1 again | answer).

Wiring only; the steps live in :mod:`memstrata.nodes.retrieve`. ``gate``, ``next_wave``
and ``reflect`` route with ``Command``. ``select_level1`` is the ``Send`` fan-out of the
deep module's LLM selection (LLM mode only); ``follow_up`` is one ``Send`` branch per
active sub-query; ``search_missing`` then searches the missing-info queries they asked for. With a model,
``decompose`` plans the query in one call (sub-queries with their scopes and time windows; ``predict_scope`` makes
no call), and a light answer skips the deep module and the follow-up: streamed by the gate's self-check, it ends
the query (``retrieval.light_check="structured"``: it goes on to reflection, HyMem's Algorithm 1). ``llm_depth``
bounds the
model calls made one after another before the answer (:mod:`memstrata.nodes.retrieve.depth`).
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from memstrata.context import Context
from memstrata.nodes.retrieve.answer import answer
from memstrata.nodes.retrieve.backtrack import backtrack_level2
from memstrata.nodes.retrieve.decompose import decompose
from memstrata.nodes.retrieve.follow_up import follow_up, route_follow_up, search_missing
from memstrata.nodes.retrieve.gate import gate
from memstrata.nodes.retrieve.lookup import lookup_level1
from memstrata.nodes.retrieve.reflect import reflect
from memstrata.nodes.retrieve.scope import predict_scope
from memstrata.nodes.retrieve.select import select_level1
from memstrata.nodes.retrieve.waves import next_wave
from memstrata.state import RetrievalInput, RetrievalOutput, RetrievalState

builder = StateGraph(RetrievalState, context_schema=Context, input_schema=RetrievalInput, output_schema=RetrievalOutput)
builder.add_node("decompose", decompose)
builder.add_node("predict_scope", predict_scope)
builder.add_node("lookup_level1", lookup_level1)
builder.add_node("gate", gate)
# LangGraph passes a node its input by position, but its type stub wants that parameter named `state`; these two
# take a Send payload and name it for what it is.
builder.add_node("select_level1", select_level1)  # type: ignore[call-overload]  # stub: 1st param must be named state
builder.add_node("backtrack_level2", backtrack_level2)
builder.add_node("follow_up", follow_up)  # type: ignore[call-overload]  # stub: 1st param must be named state
builder.add_node("search_missing", search_missing)
builder.add_node("next_wave", next_wave)
builder.add_node("reflect", reflect)
builder.add_node("answer", answer)

builder.add_edge(START, "decompose")
builder.add_edge("decompose", "predict_scope")
builder.add_edge("predict_scope", "lookup_level1")
builder.add_edge("lookup_level1", "gate")
builder.add_edge("select_level1", "backtrack_level2")
builder.add_conditional_edges("backtrack_level2", route_follow_up, ["follow_up", "answer"])
builder.add_edge("follow_up", "search_missing")
builder.add_edge("search_missing", "next_wave")
builder.add_edge("answer", END)

graph = builder.compile(name="memstrata-retrieval")

__all__ = ["builder", "graph"]
