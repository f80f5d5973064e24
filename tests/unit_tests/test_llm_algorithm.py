"""LLM mode's control flow (HyMem Algorithm 1, H-Mem's dependent sub-queries), the query's budget, and the oracle."""

from __future__ import annotations

import asyncio
import gc
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage
from memstrata_bench.oracle_reader import OracleReader
from pydantic import BaseModel

from memstrata import Memstrata
from memstrata.memory.index import MemoryIndex
from memstrata.memory.plan.rules import anchored_follow_up, dependent_rewrite
from memstrata.memory.query import Hit
from memstrata.runtime import llm, node, step
from memstrata.runtime.llm import Meter, branch_budget, decide, usage_of
from memstrata.runtime.step import MeterView, SharedMeter
from memstrata.testing import ScriptedChatModel

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "conversation.json"
QUESTION = "Where does Priya work?"
MARKERS = {
    "plan memory lookups": "decompose",
    "answer questions from summaries": "gate",
    "pick memory entries": "select_level1",
    "find what is still missing": "follow_up",
    "rewrite a sub-question": "rewrite_dependent",
    "review whether a question": "reflect",
    "answer questions about past conversations": "answer",
}
DEFAULTS: dict[str, Any] = {
    "decompose": {"sub_queries": [{"id": "q1", "question": QUESTION}]},
    "gate": {"finished": 2, "answer": ""},
    "select_level1": {"ids": [0]},
    "follow_up": {"answer": "Tidewater Labs [s1:t6]", "missing": False, "query": ""},
    "rewrite_dependent": {"question": "Where is the Tidewater Labs office?"},
    "reflect": {"finished": True, "new_question": ""},
    "answer": "Priya works at Tidewater Labs [s1:t6].",
}


class Script:
    """Replies per node; the last reply of a node repeats. Records every prompt per node."""

    def __init__(self, **replies: list[Any]) -> None:
        self.replies = {k: deque(v) for k, v in replies.items()}
        self.prompts: dict[str, list[str]] = defaultdict(list)

    def __call__(self, messages: list[BaseMessage]) -> Any:
        system = str(messages[0].content)
        node = next(n for marker, n in MARKERS.items() if marker in system)
        self.prompts[node].append(str(messages[1].content))
        queue = self.replies.get(node) or deque([DEFAULTS[node]])
        return queue.popleft() if len(queue) > 1 else queue[0]

    def seen(self, node: str) -> int:
        return len(self.prompts[node])


@pytest.fixture
def mem(data_dir: str, hash_embeddings: Any) -> Memstrata:
    m = Memstrata(path=data_dir, embeddings=hash_embeddings)
    m.ingest(EXAMPLE, user_id="u")
    return m


async def _ask(mem: Memstrata, script: Script, question: str = QUESTION, **overrides: Any) -> Any:
    # HyMem's Algorithm 1 as published: every step may ask the model, and reflection grades the light answer.
    paper = {"llm_depth": None, "retrieval.light_check": "structured", **overrides}
    return await mem.aask(question, user_id="u", model=ScriptedChatModel(default=script), **paper)


def _events(result: Any, node: str) -> list[dict[str, Any]]:
    return [e for e in result.trace["events"] if e["node"] == node]


# ---- Algorithm 1 ------------------------------------------------------------------------------------------------


async def test_light_accept_answers_from_the_summaries_and_cites_raw_turns(mem: Memstrata) -> None:
    script = Script(gate=[{"finished": 0, "answer": "Tidewater Labs"}])
    result = await _ask(mem, script)
    assert result.trace["path"] == "light" and result.answer == "Tidewater Labs"
    assert script.seen("select_level1") == 0 and script.seen("answer") == 0 and script.seen("follow_up") == 0
    assert "<answer>Tidewater Labs</answer>" in script.prompts["reflect"][0]  # R grades the light answer
    index = MemoryIndex.load(mem.store, user_id="u")
    summaries = {u.embed_text() for u in index.events["summary"].units}
    memory = script.prompts["gate"][0].split("<memory>\n")[1].split("\n</memory>")[0].splitlines()
    assert memory and all(line.split("] ", 1)[1] in summaries for line in memory)  # summaries only, no facts
    assert index.events["fact"].units  # (the facts exist: the light generator is not shown them)
    turns = {t.id: t.text for t in index.turns}
    assert result.evidence and all(turns[e.turn_id] == e.text for e in result.evidence)  # users cite raw turns


async def test_light_reject_goes_deep_and_the_deep_answer_is_graded(mem: Memstrata) -> None:
    script = Script()
    result = await _ask(mem, script, retrieval={"llm_batch_size": 3}, max_fanout=3)
    assert result.trace["path"] == "deep" and script.seen("select_level1") >= 2
    back = _events(result, "backtrack_level2")[0]
    assert back["how"] == "llm-selection" and back["episodes"] == script.seen("select_level1")  # one id per batch
    chosen = [e for e in result.evidence if e.score_parts.get("chosen")]
    assert chosen and result.evidence[0].score_parts.get("chosen")  # the selected episodes come first
    assert result.trace["pool"] == [
        {"iteration": 0, "round": 1, "path": "deep", "query": QUESTION, "answer": "Tidewater Labs [s1:t6]"}
    ]
    assert "<answer>Tidewater Labs [s1:t6]</answer>" in script.prompts["reflect"][0]  # R grades answer_i
    assert "<earlier_answers>" in script.prompts["answer"][0] and result.answer == DEFAULTS["answer"]


async def test_reflection_rewrites_with_the_pool_carried_and_selection_reads_q_i(mem: Memstrata) -> None:
    script = Script(
        reflect=[{"finished": False, "new_question": "Priya employer office Tidewater"}, {"finished": True}],
        follow_up=[
            {"answer": "first round: a lab", "missing": False},
            {"answer": "second round: Tidewater Labs [s1:t6]", "missing": False},
        ],
    )
    result = await _ask(
        mem,
        script,
        max_iterations=2,
        retrieval={"llm_batch_size": 30},
    )
    assert script.seen("gate") == 2 and script.seen("reflect") == 2
    assert "<question>Where does Priya work?</question>" in script.prompts["select_level1"][0]
    assert "<question>Priya employer office Tidewater</question>" in script.prompts["select_level1"][-1]
    assert "first round: a lab" in script.prompts["gate"][1]  # M_1 reaches the light generator
    assert "first round: a lab" in script.prompts["follow_up"][-1]  # and the deep generator
    assert [p["answer"] for p in result.trace["pool"]] == ["first round: a lab", "second round: Tidewater Labs [s1:t6]"]
    assert "second round" in script.prompts["reflect"][1]


async def test_selecting_nothing_falls_back_explicitly(mem: Memstrata) -> None:
    script = Script(select_level1=[{"ids": []}])
    result = await _ask(
        mem,
        script,
        retrieval={"select_fallback": 2},
    )
    back = _events(result, "backtrack_level2")[0]
    assert back["fallback"] is True and back["how"] == "selection-empty: fallback to coarse top-2"
    assert back["episodes"] == 2


def test_offline_gate_and_backtrack_unchanged(mem: Memstrata) -> None:
    result = mem.retrieve("When did Tom run the Brighton half marathon?", user_id="u")
    assert result.trace["llm"]["calls"] == 0 and result.trace["pool"] == []
    for back in _events(result, "backtrack_level2"):
        assert back["how"] == "coarse-top-n"
    assert all(not e.score_parts.get("chosen") for e in result.evidence)


# ---- the budget ---------------------------------------------------------------------------------------------------


class Slow(BaseModel):
    ok: bool


class SlowModel(ScriptedChatModel):
    """Yields to the event loop before replying, so parallel calls interleave."""

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        await asyncio.sleep(0.02)
        return self._generate(messages, stop)


async def _three_parallel(meters: list[Meter]) -> list[str]:
    model = SlowModel(default={"ok": True})
    runs = [
        decide(
            model, Slow, "system", "a user message of a few words", node="n", fallback=lambda: Slow(ok=False), meter=m
        )
        for m in meters
    ]
    return [how for _value, how in await asyncio.gather(*runs)]


async def test_budget_holds_exactly_across_a_node_runs_concurrent_calls() -> None:
    """The calls one node run makes side by side (e.g. ``next_wave``'s rewrites) reserve on its one meter."""
    probe = Meter()
    await _three_parallel([probe])
    cost = probe.calls[0].prompt_tokens + probe.calls[0].completion_tokens
    cap = probe.calls[0].completion_tokens  # replies are exactly this long
    budget = 2 * cost + cost // 2  # room for two calls, not three
    shared = SharedMeter(budget=budget, completion_cap=cap)
    outcomes = await _three_parallel([MeterView(shared) for _ in range(3)])
    assert sorted(outcomes) == ["ok", "ok", "skipped_budget"]
    assert shared.spent == 2 * cost <= budget and shared.reserved == {}
    copies = await _three_parallel([Meter(budget=budget) for _ in range(3)])  # unshared copies
    assert copies == ["ok"] * 3  # ... each saw the whole budget: 3 * cost > budget


def test_branch_budgets_never_sum_above_what_is_left() -> None:
    assert branch_budget(None, [], 3) is None
    for budget in (0, 1, 7, 100, 20000):
        for spent in (0, 1, budget // 2, budget, budget + 5):
            calls = [{"prompt_tokens": spent, "completion_tokens": 0}]
            for ways in range(1, 9):
                ceiling = branch_budget(budget, calls, ways)
                assert ceiling is not None and ceiling >= spent
                assert ways * (ceiling - spent) <= max(0, budget - spent), (budget, spent, ways)


SHARED = {"llm_max_tokens": 60, "retrieval.llm_batch_size": 3, "max_fanout": 3}  # three selection branches


@pytest.mark.parametrize("room", ["for one call", "for every call"])
async def test_parallel_branches_share_what_is_left_and_never_overspend_it(
    mem: Memstrata, monkeypatch: pytest.MonkeyPatch, room: str
) -> None:
    """Each selection branch gets a third of what the plan and the gate left: when each alone could afford its call
    from the whole remainder but not all three could, none is made (and branches that each saw the whole remainder
    would overspend it); when the remainder holds all three, all are made.
    """
    full = await _ask(mem, Script(gate=[{"finished": 2, "answer": ""}]), **SHARED)
    records = full.trace["llm"]["records"]
    assert [r["node"] for r in records[:2]] == ["decompose", "gate"]
    before = sum(r["prompt_tokens"] + r["completion_tokens"] for r in records[:2])
    prompts = [r["prompt_tokens"] for r in records if r["node"] == "select_level1"]
    need = max(prompts) + SHARED["llm_max_tokens"]  # what one selection call reserves
    assert len(prompts) == 3 and sum(prompts) > need + 1
    budget = before + (need + 1 if room == "for one call" else 3 * need + 3)
    result = await _ask(mem, Script(gate=[{"finished": 2, "answer": ""}]), llm_token_budget=budget, **SHARED)
    outcomes = [r["outcome"] for r in result.trace["llm"]["records"] if r["node"] == "select_level1"]
    assert result.trace["budget"]["spent"] <= budget
    if room == "for every call":
        assert outcomes == ["ok"] * 3
        return
    assert outcomes == ["skipped_budget"] * 3 and result.trace["budget"]["halted_at"] == "select_level1"
    monkeypatch.setattr(llm, "branch_budget", lambda budget, calls, ways: budget)  # every branch: the whole rest
    copies = await _ask(mem, Script(gate=[{"finished": 2, "answer": ""}]), llm_token_budget=budget, **SHARED)
    assert copies.trace["budget"]["spent"] > budget


async def test_no_meter_outlives_its_query(mem: Memstrata) -> None:
    """A query's meter is built from its state: the runtime keeps no registry of meters, and none survives 300
    queries (the old registry held up to 256).
    """
    for module in (step, node):
        held = [k for k, v in vars(module).items() if not k.startswith("__") and isinstance(v, (dict, list, set))]
        assert held == [], f"{module.__name__} keeps {held} at module level"
    await _ask(mem, Script(gate=[{"finished": 2, "answer": ""}]), **SHARED)  # with Send branches
    for _ in range(300):
        await mem.aretrieve(QUESTION, user_id="u")
    gc.collect()
    assert [o for o in gc.get_objects() if isinstance(o, (step.SharedMeter, step.MeterView, step.Step))] == []


async def test_at_the_budget_the_query_stops_deepening_and_says_so(mem: Memstrata) -> None:
    script = Script(gate=[{"finished": 2, "answer": ""}])
    full = await _ask(mem, script, llm_max_tokens=60)
    records = full.trace["llm"]["records"]
    before_select = sum(r["prompt_tokens"] + r["completion_tokens"] for r in records[:2])  # the plan, the gate
    assert [r["node"] for r in records[:2]] == ["decompose", "gate"]
    script = Script(gate=[{"finished": 2, "answer": ""}])
    result = await _ask(mem, script, llm_max_tokens=60, llm_token_budget=before_select + 70)
    assert result.trace["budget"]["halted_at"] == "select_level1"
    assert result.trace["budget"]["spent"] <= before_select + 70
    assert _events(result, "backtrack_level2")[0]["how"].startswith("skipped: budget")
    assert not _events(result, "follow_up") and not _events(result, "reflect")
    assert "llm_token_budget reached at select_level1" in result.trace["answer"] and result.evidence


# ---- H-Mem: dependent sub-queries and the missing-info query ------------------------------------------------------


async def test_dependent_sub_query_waits_and_is_rewritten_from_its_prerequisite(mem: Memstrata) -> None:
    plan = {
        "sub_queries": [
            {"id": "q1", "question": "Which company hired Priya?"},
            {"id": "q2", "question": "Where is that company's office?", "depends_on": ["q1"]},
        ]
    }
    script = Script(decompose=[plan])
    result = await _ask(mem, script, "Where is the office of the company that hired Priya?")
    lookups = _events(result, "lookup_level1")
    assert "Where is that company's office?" not in lookups[0]["queries"]
    assert "Which company hired Priya?" in lookups[0]["queries"]
    assert lookups[1]["queries"] == ["Where is the Tidewater Labs office?"]
    assert "Tidewater Labs [s1:t6]" in script.prompts["rewrite_dependent"][0]  # from q1's answer
    assert script.seen("answer") == 1 and "<sub_answers>" in script.prompts["answer"][0]  # synthesis over A_k


async def test_offline_dependent_rewrite_uses_the_prerequisites_evidence(mem: Memstrata) -> None:
    plan = {
        "sub_queries": [
            {"id": "q1", "question": "Which company hired Priya?"},
            {"id": "q2", "question": "Where is that company's office?", "depends_on": ["q1"]},
        ]
    }
    script = Script(decompose=[plan], rewrite_dependent=["not json at all"], gate=[{"finished": 0, "answer": "x"}])
    result = await _ask(mem, script, "Where is the office of the company that hired Priya?")
    wave = _events(result, "next_wave")[0]
    assert wave["how"] == ["no-prerequisite-answer"] or wave["how"] == ["fallback"]
    text = wave["rewrites"]["q2"]
    assert text.startswith("Where is that company's office?") and len(text) > len("Where is that company's office?")


def test_dependent_rewrite_offline_is_anchored_on_names_and_dates() -> None:
    top = [
        Hit(
            kind="turn",
            unit_id="D1:2",
            conversation_id="c",
            score=1.0,
            speaker="Ann",
            text="I joined Tidewater Labs in Lisbon.",
            time="8 May 2023",
        )
    ]
    assert (
        dependent_rewrite("Where is that office?", top) == "Where is that office? Ann Tidewater Labs Lisbon 8 May 2023"
    )


async def test_missing_info_query_per_sub_query_and_anchored(mem: Memstrata) -> None:
    plan = {
        "sub_queries": [
            {"id": "q1", "question": "Where does Priya work?"},
            {"id": "q2", "question": "Where does Tom work?"},
        ]
    }
    script = Script(decompose=[plan], follow_up=[{"answer": "", "missing": True, "query": "zebra quantum teapot"}])
    result = await _ask(mem, script, "Where do Priya and Tom work?")
    events = _events(result, "follow_up")
    assert {e["sub_query"] for e in events} >= {"q0", "q1", "q2"}  # one branch per sub-query
    assert all(e["how"] == "fallback" for e in events)  # an unanchored query is refused, twice
    anchored = [e for e in events if e["query"]]
    assert anchored and all("zebra" not in e["query"] for e in anchored)


def test_offline_missing_info_is_anchored_on_the_evidence_not_the_question() -> None:
    top = [
        Hit(
            kind="turn",
            unit_id="D1:2",
            conversation_id="c",
            score=1.0,
            speaker="Ann",
            text="I adopted a puppy from the Porto shelter.",
            time="8 May 2023",
        )
    ]
    text = anchored_follow_up("What breed is the dog Ben adopted?", ["Ann: " + top[0].text], top)
    assert text.split() == ["Ann", "Porto", "breed", "dog", "ben"]  # anchors first, then the missing slot
    assert anchored_follow_up("Where did Ann adopt the puppy?", ["Ann: adopted puppy where"], top) is None


# ---- the oracle reader --------------------------------------------------------------------------------------------


def _oracle(**kw: Any) -> OracleReader:
    oracle = OracleReader(
        summaries={"Ann moved to Porto in May.": {"D1:1", "D1:2"}, "Ben started a bakery.": {"D2:1"}}, **kw
    )
    oracle.begin({"D1:2": "We finally moved to Porto!"})
    return oracle


def test_oracle_light_check_selection_and_reflection() -> None:
    oracle = _oracle()
    assert oracle.light_verdict("[May 2023] Ann moved to Porto in May.\n[June] Ben started a bakery.")["finished"] == 0
    assert oracle.light_verdict("[June] Ben started a bakery.")["finished"] == 2
    assert _oracle(force_deep=True).light_verdict("Ann moved to Porto in May.")["finished"] == 2
    listing = "id:0, date: June, Ben started a bakery.\nid:1, date: May, Ann moved to Porto in May."
    assert oracle.selection(listing) == {"ids": [1]}
    assert oracle.reflection("<question>q</question>\n<answer>Porto [D1:2]</answer>")["finished"] is True
    assert oracle.reflection("<question>Where?</question>\n<answer>Lisbon [D1:1]</answer>")["finished"] is False


async def test_oracle_answers_cite_only_gold_it_read_and_completion_is_metered() -> None:
    oracle = _oracle()
    read = (
        "<sub_question>Where did Ann move?</sub_question>\n<memory>\n[D1:2 · 8 May 2023] Ann: We finally moved "
        "to Porto!\n</memory>"
    )
    assert "[D1:2]" in oracle.sub_answer(read)["answer"]
    assert "[D1:2]" not in oracle.sub_answer(read.replace("Porto", "Lisbon"))["answer"]
    from memstrata.nodes.retrieve.follow_up import SubAnswer
    from memstrata.prompts.retrieval import FOLLOW_UP_PROMPT

    meter = Meter()
    value, how = await decide(
        oracle.model, SubAnswer, FOLLOW_UP_PROMPT, read, node="follow_up", fallback=SubAnswer, meter=meter
    )
    assert how == "ok" and "[D1:2]" in value.answer
    reply = AIMessage("", tool_calls=[{"name": "SubAnswer", "args": value.model_dump(), "id": "1"}])
    assert meter.calls[0].completion_tokens == usage_of([], reply)[1] > 0
    plan = oracle.plan("<question>What do Ann and Ben like?</question>", "At most 4 sub-questions")
    assert [p["question"] for p in plan["sub_queries"]] == ["What do Ann like?", "What do Ben like?"]
    assert oracle.checked("[May 2023] Ann moved to Porto in May.").startswith("ANSWER\nAnn moved to Porto")
    assert oracle.checked("[June] Ben started a bakery.") == "SEARCH"
