"""LLM mode under the benchmark: memstrata asked with a reader model, and the cost of every query.

``--reader oracle`` uses :class:`~memstrata_bench.oracle_reader.OracleReader`, an
upper-bound instrument that knows the gold evidence (``oracle-deep`` is the same
with the light self-check always failing: the pipeline forced onto the deep
path). ``--reader URL`` uses a real OpenAI-compatible server. Ingestion stays
offline in both, so only retrieval is metered. LLM cost is recorded at one
budget per question (the latency budget), since every budget is a separate query.

Example:
    >>> method = ReaderMethod(embeddings=MiniLMEmbeddings(), reader="oracle")  # doctest: +SKIP
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from langchain_core.embeddings import Embeddings

from memstrata_bench.locomo import HEADLINE_CATEGORIES, LocomoConversation, LocomoQuestion
from memstrata_bench.oracle_reader import OracleReader, summary_links
from memstrata_bench.system import BENCH_USER, MemstrataMethod

READER_TIMEOUT_S = 120.0


def chat_model(url: str, name: str, *, max_tokens: int = 256) -> Any:
    """A ChatOpenAI client for an OpenAI-compatible server (temperature 0, usage streamed)."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        base_url=url,
        api_key="sk-local",
        model=name,
        temperature=0,
        timeout=READER_TIMEOUT_S,
        max_retries=0,
        stream_usage=True,
        max_tokens=max_tokens,
    )


class ReaderMethod(MemstrataMethod):
    """memstrata in LLM mode with a reader model; ``rows`` holds one cost record per question.

    Args:
        embeddings: the shared embedder (``None``: ``Memstrata``'s default).
        reader: ``"oracle"``, ``"oracle-deep"`` or an OpenAI-compatible base URL.
        model_name: the model name sent to a URL reader.
        record_budget: the budget at which cost is recorded.
        settings: extra Context fields.
    """

    def __init__(
        self,
        *,
        embeddings: Embeddings | None,
        reader: str,
        model_name: str = "smollm2",
        record_budget: int = 1500,
        settings: dict[str, Any] | None = None,
    ) -> None:
        if not reader.startswith("oracle"):  # a local server answers parallel branches one by one: wait as long
            settings = {"llm_timeout_s": READER_TIMEOUT_S, **(settings or {})}  # as the client does
        super().__init__(embeddings=embeddings, settings=settings)
        self.reader = reader
        self.oracle = OracleReader(force_deep=reader == "oracle-deep") if reader.startswith("oracle") else None
        self.model = self.oracle.model if self.oracle else chat_model(reader, model_name)
        self.record_budget = record_budget
        self.rows: list[dict[str, Any]] = []
        self._question: LocomoQuestion | None = None

    def prepare(self, conversation: LocomoConversation) -> None:
        """Ingest the conversation as the base method does; the oracle, if any, learns the summaries' turn links."""
        super().prepare(conversation)
        if self.oracle is not None:
            from memstrata.memory.index import MemoryIndex

            index = MemoryIndex.load(self._mem.store, user_id=BENCH_USER, conversation_id=conversation.sample_id)
            self.oracle.summaries = summary_links(index)

    def begin_question(self, question: LocomoQuestion, conversation: LocomoConversation) -> None:
        """Called by the runner before a question's budgets: the oracle learns its gold evidence."""
        self._question = question
        if self.oracle is not None:
            texts = conversation.turn_texts()
            self.oracle.begin({t: texts[t] for t in question.evidence})

    def context(self, question: str, conversation: LocomoConversation, budget: int) -> str:
        """Ask with the reader model and return the context; the query at ``record_budget`` also adds a cost row."""
        result = self._mem.ask(
            question,
            user_id=BENCH_USER,
            conversation_id=conversation.sample_id,
            context_budget=budget,
            model=self.model,
        )
        if budget == self.record_budget and self._question is not None:
            self.rows.append(cost_row(self._question, result))
        return str(result.context)


def cost_row(question: LocomoQuestion, result: Any) -> dict[str, Any]:
    """One query's LLM cost and path, from its trace."""
    llm = result.trace["llm"]
    backs = [e for e in result.trace["events"] if e["node"] == "backtrack_level2"]
    return {
        "category": question.category,
        "path": result.trace["path"],
        "calls": llm["calls"],
        "prompt_tokens": llm["prompt_tokens"],
        "completion_tokens": llm["completion_tokens"],
        "fallbacks": llm["fallbacks"],
        "context_tokens": result.context_tokens,
        "selection_empty": any(e.get("fallback") for e in backs),
        "halted": result.trace["budget"]["halted_at"],
        "rounds": result.trace["iterations"],
        "per_node": {
            n: {k: v[k] for k in ("calls", "prompt_tokens", "completion_tokens")} for n, v in llm["per_node"].items()
        },
    }


def cost_report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per category (and over categories 1-4): light share, calls and tokens per query by node, context tokens."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[str(row["category"])].append(row)
        if row["category"] in HEADLINE_CATEGORIES:
            groups["1-4"].append(row)
    return {key: _summarize(items) for key, items in sorted(groups.items())}


def _mean(items: list[dict[str, Any]], key: str) -> float:
    return round(sum(r[key] for r in items) / len(items), 1)


def _summarize(items: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(items)
    nodes: dict[str, dict[str, float]] = defaultdict(
        lambda: {"calls": 0.0, "prompt_tokens": 0.0, "completion_tokens": 0.0}
    )
    for row in items:
        for node, vals in row["per_node"].items():
            for k, v in vals.items():
                nodes[node][k] += v / n
    return {
        "questions": n,
        "light_share": round(sum(r["path"] == "light" for r in items) / n, 3),
        "calls": _mean(items, "calls"),
        "prompt_tokens": _mean(items, "prompt_tokens"),
        "completion_tokens": _mean(items, "completion_tokens"),
        "tokens": round(_mean(items, "prompt_tokens") + _mean(items, "completion_tokens"), 1),
        "context_tokens": _mean(items, "context_tokens"),
        "fallback_rate": round(sum(r["fallbacks"] for r in items) / max(1, sum(r["calls"] for r in items)), 3),
        "selection_empty_share": round(sum(r["selection_empty"] for r in items) / n, 3),
        "tokens_by_path": {
            path: round(sum(r["prompt_tokens"] + r["completion_tokens"] for r in rows) / len(rows), 1)
            for path in ("light", "deep")
            if (rows := [r for r in items if r["path"] == path])
        },
        "per_node": {k: {kk: round(vv, 1) for kk, vv in v.items()} for k, v in sorted(nodes.items())},
    }
