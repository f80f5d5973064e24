"""Ingestion, after the Level-1 summaries: H-Mem's temporal-semantic tree over them, updated incrementally.

The leaves are the summaries of closed episodes (an open session tail joins once it closes, so
the tree is never recomputed per message). For each conversation with newly closed episodes (or
a tree that misses some, after a crash), new leaves are placed bottom-up in their windows, and only the nodes
whose children changed, and their ancestors, are recomputed: with a model, the
consolidation prompt (at most ``Context.tree.llm_calls`` per ingest), else
the extractive consolidation. A node whose window still holds the conversation's
newest turn is consolidated extractively, and once by the model when a later
turn falls past its window, so a chat's tree costs the same model calls as a batch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime
from typing import Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.memory.levels.level1.tree_node import TREE_NODE, TreeNode
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.reads import open_episodes
from memstrata.memory.tokens import TokenCounter
from memstrata.memory.tree import tree_levels
from memstrata.memory.tree.build import age_of
from memstrata.memory.tree.persist import (
    TreeUpdate,
    header,
    load_tree,
    offline_text,
    refresh,
    save_tree,
    unstored_children,
)
from memstrata.memory.tree.windows import UPPER, window_span
from memstrata.nodes.common import progress, touched_conversations
from memstrata.runtime.llm import GOOD_OUTCOMES
from memstrata.runtime.node import open_node
from memstrata.runtime.step import Step
from memstrata.state import IngestState

logger = logging.getLogger(__name__)
_TREE_ATTEMPTS = 3  # reads and writes of one conversation's tree, when another writer deletes its leaves meanwhile


class Consolidation(BaseModel):
    """The model's consolidated entry for one tree node."""

    summary: str = Field(description="the consolidated entry: plain statements keeping names, places, dates, numbers")


async def consolidate_tree(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Place the new summaries in the tree and recompute the stale nodes of each touched conversation."""
    started = time.perf_counter()
    run = await open_node(runtime, "consolidate_tree", ingest=True)
    ctx, store, step = run.ctx, run.store, run.step
    # open episodes join the tree once they close; a repaired conversation is checked again
    touched = touched_conversations(state)
    convs = await asyncio.to_thread(_to_update, store, ctx.user_id, touched, state.get("conversations", []))
    calls = {"left": ctx.tree.llm_calls if step.model is not None else 0}
    written: dict[str, int] = dict.fromkeys(UPPER, 0)
    for conv_id in convs:
        # Another writer of the conversation (two processes through one Chroma server) may delete a summary between
        # this read and the write: the tree just written would then hold it. It is read and written again, at most
        # _TREE_ATTEMPTS times; the other writer redoes the tree after its own delete too (see episodes._drop_stale).
        for attempt in range(1, _TREE_ATTEMPTS + 1):
            update, units = await _update_tree(step, ctx, store, conv_id, calls)
            for unit in units:
                written[unit.level] += 1
            missing = await asyncio.to_thread(unstored_children, store, update, units)
            if not missing:
                break
            if attempt == _TREE_ATTEMPTS:  # left for the next write of the conversation, whose update prunes them
                logger.warning(
                    "tree of %s/%s: children %s were deleted by another writer during each of %d updates",
                    ctx.user_id,
                    conv_id,
                    missing[:5],
                    _TREE_ATTEMPTS,
                )
    progress("tree", "tree nodes recomputed: " + ", ".join(f"{k} {n}" for k, n in written.items()), **written)
    stats: dict[str, Any] = {
        "tree_nodes_written": written,
        "stage_seconds": {"tree": round(time.perf_counter() - started, 3)},
    }
    if step.model is not None and step.meter.calls:  # only nodes that called the model report
        stats["llm"] = {"consolidate_tree": step.meter.summary()}
    return {"stats": stats}


async def _update_tree(
    step: Step, ctx: Context, store: MemoryStore, conv_id: str, calls: dict[str, int]
) -> tuple[TreeUpdate, list[TreeNode]]:
    """Read one conversation's tree, place its new leaves, recompute the stale nodes and write them."""
    tails = await asyncio.to_thread(open_episodes, store, ctx.user_id, conv_id)
    update = await asyncio.to_thread(
        load_tree, store, ctx.user_id, conv_id, skip={r.payload.get("summary_id") for r in tails}
    )
    update.grow(tree_levels(ctx.tree.alphas))
    if step.model is not None:  # windows that closed since: their extractive text is now consolidated once
        for node_id in finished_offline(update):
            update.forest.nodes[node_id].stale = True
    newest = (age_of(update.forest) or (None, None))[1]
    units = [
        await _recompute(step, ctx, update, node_id, calls, still_open=window_holds(update, node_id, newest))
        for node_id in update.stale()
    ]
    await asyncio.to_thread(save_tree, store, update, units)
    return update, units


def _to_update(store: MemoryStore, user_id: str, touched: list[str], conversations: list[str]) -> list[str]:
    """Conversations with newly closed episodes, and any whose tree lacks some of its closed episodes' summaries
    (an ingest killed before this stage).
    """
    out = list(dict.fromkeys(touched))
    for conv in dict.fromkeys(conversations):
        if conv in out:
            continue
        weeks = store.get(TREE_NODE.kind, user_id=user_id, conversation_id=conv, where={"level": "week"})
        placed = sum(len(r.payload.get("children", [])) for r in weeks)
        closed = store.count("summary", user_id=user_id, conversation_id=conv) - len(
            open_episodes(store, user_id, conv)
        )
        if placed != closed:
            out.append(conv)
    return out


def window_holds(update: TreeUpdate, node_id: str, when: datetime | None) -> bool:
    """Whether the node's calendar window holds ``when`` (the conversation's newest turn): it may still grow."""
    window = update.forest.nodes[node_id].window
    if when is None or window == "untimed":
        return False
    start, end = window_span(window)
    return start <= when <= end


def finished_offline(update: TreeUpdate) -> list[str]:
    """Stored nodes whose text is extractive (their window was open, or the model failed) and whose window has
    closed since: with a model, they are consolidated now.
    """
    newest = (age_of(update.forest) or (None, None))[1]
    return [
        n
        for n, unit in update.stored.items()
        if unit.method != "llm" and n in update.forest.nodes and not window_holds(update, n, newest)
    ]


async def _recompute(
    step: Step, ctx: Context, update: TreeUpdate, node_id: str, calls: dict[str, int], *, still_open: bool = False
) -> TreeNode:
    """One stale node's new text: the model's consolidation while the budget lasts and its window is closed (a
    window still receiving messages would be consolidated again at every episode that closes in it), else the
    extractive one.
    """
    caps = dict(zip(UPPER, ctx.tree.token_caps, strict=True))
    counter = TokenCounter()
    text = offline_text(update, node_id, caps, counter.count)
    method = "extractive"
    if calls["left"] > 0 and not still_open:
        calls["left"] -= 1
        node = update.forest.nodes[node_id]
        entries = "\n".join(f"<entry>{c.text}</entry>" for c in update.children(node_id))
        value, outcome = await step.decide(
            Consolidation,
            "TREE_CONSOLIDATION_PROMPT",
            f"<entries>\n{entries}\n</entries>",
            node="consolidate_tree",
            fallback=lambda: Consolidation(summary=""),
            level=node.level,
            window=node.window,
            words=int(caps[node.level] * 0.7),
        )
        summary = value.summary.strip() if isinstance(value.summary, str) else ""
        if outcome in GOOD_OUTCOMES and summary:
            text, method = _capped(f"[{header(update, node_id)}] {summary}", caps[node.level], counter), "llm"
    return refresh(update, node_id, text, method=method, leaves_per_node=ctx.tree.node_leaves)


def _capped(text: str, cap: int, counter: TokenCounter) -> str:
    """The text cut at a word boundary so that it fits ``cap`` tokens (a model may overrun its word count)."""
    words = text.split()
    while len(words) > 1 and counter.count(" ".join(words)) > cap:
        words = words[: max(1, int(len(words) * 0.9))]
    return " ".join(words)
