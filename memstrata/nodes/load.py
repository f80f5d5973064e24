"""Ingestion stage 1: read and validate the input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from memstrata.context import Context
from memstrata.memory.normalize import load_path, normalize_input
from memstrata.nodes.common import progress
from memstrata.state import IngestState


async def load_conversations(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Normalize the input into conversations; every check runs before anything is written."""
    ctx = runtime.context
    source = state.get("source")
    name = "<input>"
    if isinstance(source, (str, Path)):
        name = str(source)
        source = load_path(source)
    convs = normalize_input(
        source, user_id=ctx.user_id, conversation_id=state.get("conversation_id") or ctx.conversation_id,
        source=name, only_conversation=state.get("only_conversation"),
    )
    total = sum(c.turn_count for c in convs)
    progress("load", f"read {len(convs)} conversation(s), {total} turns", total_turns=total)
    warnings = [w for c in convs for w in c.warnings]
    return {
        "conversations": [c.model_dump(mode="json") for c in convs],
        "stats": {"conversations": len(convs), "turns_seen": total, "warnings": warnings},
    }
