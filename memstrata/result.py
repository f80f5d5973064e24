"""What a query returns: the answer, cited raw-turn evidence, the rendered context and the trace."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class Evidence(BaseModel):
    """One cited raw turn."""

    turn_id: str
    conversation_id: str
    session_id: str
    position: int | None = Field(
        default=None, description="the turn's place in its session (cited as s<session>:t<position>)"
    )
    speaker: str
    text: str
    time: str | None = None
    image_caption: str | None = None
    level: str = Field(description="'level1' (reached through a summary) or 'level2' (raw-turn search / backtrack)")
    found_by: str = Field(
        default="", description="the unit kind whose search led to this turn, e.g. 'summary', 'fact', or 'entity_graph'"
    )
    via: str = Field(default="", description="for 'entity_graph': the entity path and the fact that reached it")
    scope: str = Field(default="", description="H-Mem scope of the query that found it: Short, Long or Mixed")
    window: str = Field(
        default="",
        description="the temporal-tree window that led to it, e.g. 'month 2023-05' "
        "(the query's hint window holding it, or the tree node that reached it)",
    )
    open_episode: bool = Field(
        default=False,
        description=("the turn is in its session's open tail: no model summary, tree node or entity covers it yet"),
    )
    excerpt: list[int] | None = Field(
        default=None,
        description="for a long turn the context quotes in part: the [start, end) characters of its text quoted "
        "(``text`` is then that part between ellipses)",
    )
    score: float = 0.0
    score_parts: dict[str, float] = Field(default_factory=dict)


class RetrievalResult(BaseModel):
    """The result of one query."""

    query: str
    answer: str | None = None
    answer_error: str | None = Field(
        default=None, description="why the model's answer failed, when it did (unreachable, timing out, empty)"
    )
    evidence: list[Evidence] = Field(default_factory=list)
    context: str = ""
    context_tokens: int = 0
    trace: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RetrievalResult:
        """Build from the retrieval graph's output state."""
        return cls(
            query=state.get("query", ""),
            answer=state.get("answer"),
            answer_error=state.get("answer_error"),
            evidence=[Evidence.model_validate(e) for e in state.get("evidence", [])],
            context=state.get("context", ""),
            context_tokens=state.get("context_tokens", 0),
            trace=state.get("trace", {}),
        )
