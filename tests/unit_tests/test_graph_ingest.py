"""Facts, entities and the entity graph through ingestion and retrieval, offline and with a scripted model."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from conftest import EXAMPLE
from langchain_core.messages import BaseMessage

from memstrata import Memstrata
from memstrata.context import Context
from memstrata.memory.index import MemoryIndex
from memstrata.memory.levels import Fact, levels
from memstrata.memory.query import Query
from memstrata.memory.search.scoring import score_query
from memstrata.prompts.ingestion import FACT_PROMPT, SUPERSEDE_PROMPT
from memstrata.runtime.search import weights as weights_of
from memstrata.testing import ScriptedChatModel

GRAPH_KINDS = ("fact", "entity")


def counts(mem: Memstrata, user: str) -> dict[str, int]:
    return {**{k: mem.store.count(k, user_id=user) for k in GRAPH_KINDS}, "edges": mem.store.edges.count(user)}


def renamed_copy(tmp_path, old: str, new: str) -> str:
    """The example conversation with one name changed: near-identical content for another user."""
    text = EXAMPLE.read_text().replace(old, new)
    path = tmp_path / f"copy-{new}.json"
    path.write_text(text)
    return str(path)


def test_ingest_writes_facts_entities_and_edges_once(data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    stats = mem.ingest(EXAMPLE, user_id="u", close=True)
    assert stats["facts_written"] > 10 and stats["entities_written"] >= 4 and stats["relations_written"] > 0
    before = counts(mem, "u")
    assert before["fact"] == stats["facts_written"] and before["edges"] > 0
    facts = [Fact.model_validate(r.payload) for r in mem.store.get("fact", user_id="u")]
    assert all(f.subject_id.startswith("ent:") and f.turn_ids for f in facts)
    assert any(f.text.startswith("Priya") and "Lisbon" in f.text for f in facts)  # "I'm moving" -> Priya
    entities = {r.unit_id: r.payload for r in mem.store.get("entity", user_id="u")}
    assert {"ent:priya", "ent:tom", "ent:lisbon"} <= set(entities)
    again = mem.ingest(EXAMPLE, user_id="u", close=True)
    assert again["facts_written"] == again["entities_written"] == 0
    assert counts(mem, "u") == before  # re-ingesting adds nothing


def test_one_new_message_rewrites_only_what_it_changes_and_the_graph_stays_whole(data_dir, hash_embeddings) -> None:
    from memstrata.memory.entity_graph.resolution import link_entities
    from memstrata.memory.levels import Entity

    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    messages = json.loads(EXAMPLE.read_text())["messages"]
    mem.ingest({"conversation_id": "c", "messages": messages}, user_id="u", close=True)
    total = mem.store.count("entity", user_id="u")
    stats = mem.ingest(
        {
            "conversation_id": "c",
            "messages": [
                *messages,
                {
                    "speaker": "Priya",
                    "text": "My cousin Dario visited Porto with me.",
                    "timestamp": "2024-05-21T10:00:00",
                },
            ],
        },
        user_id="u",
        close=True,
    )
    assert 0 < stats["entities_written"] < total and stats["relations_written"] < mem.store.edges.count("u")
    # what is stored equals the graph resolved afresh from every stored fact: nothing lost, nothing stale
    facts = sorted(
        (Fact.model_validate(r.payload) for r in mem.store.get("fact", user_id="u")), key=lambda f: (f.episode_id, f.n)
    )
    linked = link_entities(facts, speakers=sorted({n for f in facts for n, k in f.types.items() if k == "speaker"}))
    stored = {r.unit_id: Entity.model_validate(r.payload) for r in mem.store.get("entity", user_id="u")}
    assert stored == {e.id: e for e in linked.entities} and "ent:dario" in stored
    edges = {e for e in mem.store.edges.get("u", conversation_id="c") if e.src_kind == "entity"}
    assert edges == set(linked.relations)


def test_graph_evidence_names_its_entity_path(data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest(EXAMPLE, user_id="u")
    result = mem.retrieve("What is Ms. Okafor like as a teacher?", user_id="u", context_budget=800)
    lookup = next(e for e in result.trace["events"] if e["node"] == "lookup_level1")
    assert lookup["found_by"].get("entity_graph", 0) > 0
    graph_items = [e for e in result.evidence if e.via]  # reached through the graph (maybe also otherwise)
    assert graph_items and all("-> fact:" in e.via for e in graph_items)
    assert any(e.via.startswith("Ms. Okafor") for e in graph_items)
    # the seeds reach tree events too: the summaries holding those facts' turns join the coarse pool
    assert lookup["graph_events"] > 0


def test_a_nodes_fact_rows_are_the_facts_that_name_it(data_dir, hash_embeddings) -> None:
    from memstrata.memory.entity_graph.expansion import GraphView

    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest(EXAMPLE, user_id="u")
    index = MemoryIndex.build(mem.store, "u", None)
    facts = index.events["fact"]
    edges = [e for e in mem.store.edges.get("u") if e.src_kind == "entity"]
    view = GraphView.build(index.tables["entity"].units, facts.units, edges)
    same = GraphView.build(index.tables["entity"].units, facts.units, edges, fact_row=facts.by_key)
    named: dict[tuple[str, str], list[int]] = {}
    for row, fact in enumerate(facts.units):  # the inverted index, from the facts' side
        for eid in fact.entity_ids:
            named.setdefault((fact.conversation_id, eid), []).append(row)
    assert named and set(named) <= set(view.names)
    for node in view.names:
        assert view.fact_rows(node).tolist() == same.fact_rows(node).tolist() == named.get(node, [])


def test_entity_seeds_reach_the_event_summaries_holding_their_facts(data_dir, hash_embeddings) -> None:
    from memstrata.memory.entity_graph.expansion import GraphSearch, GraphView
    from memstrata.memory.search.scoring import graph_events, query_graph

    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest(EXAMPLE, user_id="u")
    index = MemoryIndex.build(mem.store, "u", None)
    view = GraphView.build(
        index.tables["entity"].units,
        index.events["fact"].units,
        [e for e in mem.store.edges.get("u") if e.src_kind == "entity"],
    )
    query = Query(id="q0", text="What is Ms. Okafor like as a teacher?")
    vec = np.asarray(hash_embeddings.embed_documents([query.text])[0], dtype=np.float32)
    graph = GraphSearch(view)
    ranked, _ = score_query(
        index,
        query,
        vec,
        event_kinds=list(index.events),
        top_events=1000,
        weights=weights_of(Context(user_id="t")),
        now=None,
        graph=graph,
    )
    reached = query_graph(index, query, graph)
    events = graph_events(index, query, reached, ranked)
    assert reached and events
    summaries = index.events["summary"]
    facts = index.events["fact"]
    for hit in events:
        row = summaries.by_key[(hit.conversation_id, hit.unit_id)]
        fact_id = hit.via.split(" -> ")[-2]
        fact_row = facts.by_key[(hit.conversation_id, fact_id)]
        assert set(facts.turn_rows[fact_row]) & set(summaries.turn_rows[row])  # the summary holds the fact's turns
        assert hit.found_by == "entity_graph" and hit.via.endswith(f"-> {hit.unit_id}")
        assert hit.score == round(next(s for k, r, s in ranked if k == "summary" and r == row), 4)
    assert len({h.unit_id for h in events}) == len(events)


def test_users_never_see_each_others_facts_entities_or_edges(tmp_path, data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest(EXAMPLE, user_id="a")
    mem.ingest(renamed_copy(tmp_path, "Lisbon", "Lyon"), user_id="b")
    for user, own, other in (("a", "Lisbon", "Lyon"), ("b", "Lyon", "Lisbon")):
        texts = [r.document for k in GRAPH_KINDS for r in mem.store.get(k, user_id=user)]
        assert any(own in t for t in texts) and not any(other in t for t in texts)
        assert all(other not in json.dumps(e.__dict__) for e in mem.store.edges.get(user))
        result = mem.retrieve(f"When is Priya moving to {other}?", user_id=user, context_budget=4000)
        assert result.evidence and not any(other in e.text or other in e.via for e in result.evidence)
    removed = mem.delete_user(user_id="a")
    assert removed["fact"] > 0 and removed["entity"] > 0 and removed["edges"] > 0
    assert all(mem.store.count(lv.kind, user_id="a") == 0 for lv in levels()) and mem.store.edges.count("a") == 0
    assert counts(mem, "b")["fact"] > 0 and mem.store.edges.count("b") > 0  # the other user keeps everything


def conversation(*sessions: list[str], speaker: str = "Ann") -> dict[str, Any]:
    messages = []
    for day, texts in enumerate(sessions, start=1):
        for i, text in enumerate(texts):
            messages.append(
                {
                    "speaker": speaker if i % 2 == 0 else "Bo",
                    "text": text,
                    "timestamp": f"2023-0{day}-0{day}T10:0{i}:00",
                }
            )
    return {"conversation_id": "moves", "messages": messages}


def test_a_move_supersedes_the_old_home_which_stays_as_history(data_dir, hash_embeddings) -> None:
    mem = Memstrata(
        path=data_dir,
        embeddings=hash_embeddings,
        episodes={"session_gap_hours": 6},
    )
    source = conversation(
        ["I live in Porto with my cat Miso.", "Porto is lovely."],
        ["I moved to Lisbon last week, the flat is great.", "Lisbon, wow!"],
    )
    stats = mem.ingest(source, user_id="u", close=True)
    assert stats["facts_superseded"] == 1
    facts = {f.object: f for f in (Fact.model_validate(r.payload) for r in mem.store.get("fact", user_id="u"))}
    assert facts["Porto"].superseded_by == facts["Lisbon"].id and facts["Lisbon"].current
    index = MemoryIndex.load(mem.store, user_id="u")
    table = index.events["fact"]
    row = table.by_key[("moves", facts["Porto"].id)]

    def porto_score(text: str, factor: float) -> float:
        q = Query(id="q0", text=text)
        qvec = np.asarray(mem.store.embeddings.embed_query(text), dtype=np.float32)
        ranked, _ = score_query(
            index,
            q,
            qvec,
            event_kinds=["fact"],
            top_events=5,
            weights=weights_of(Context(user_id="t")),
            now=None,
            superseded=factor,
        )
        return next(s for k, r, s in ranked if r == row)

    assert porto_score("Where does Ann live?", 0.8) == pytest.approx(0.8 * porto_score("Where does Ann live?", 1.0))
    assert porto_score("Where did Ann live before?", 0.8) == porto_score("Where did Ann live before?", 1.0)


def fact_script(reply_for_facts: Any):
    """A scripted model that answers the fact prompt with ``reply_for_facts`` and every other prompt with junk."""

    def reply(messages: list[BaseMessage]) -> Any:
        if str(messages[0].content) == FACT_PROMPT:
            return reply_for_facts(messages) if callable(reply_for_facts) else reply_for_facts
        return "not json at all"

    return reply


def test_the_models_facts_are_used_and_garbage_falls_back_per_episode(data_dir, hash_embeddings) -> None:
    good = {
        "facts": [
            {
                "statement": "Priya signed a lease in Lisbon on 1 March 2024.",
                "subject": "Priya",
                "relation": "sign",
                "object": "lease",
                "messages": [0],
                "date": "2024-03-01",
            }
        ],
        "entities": [{"name": "Lisbon", "type": "place"}],
    }
    model = ScriptedChatModel(default=fact_script(good))
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings, model=model, llm_retries=0)
    stats = mem.ingest(EXAMPLE, user_id="u", close=True)
    facts = [Fact.model_validate(r.payload) for r in mem.store.get("fact", user_id="u")]
    assert stats["facts_fallbacks"] == 0 and facts and all(f.method == "llm" for f in facts)
    assert facts[0].event_date is not None and "ent:lisbon" in facts[0].entity_ids

    junk = ScriptedChatModel(default=fact_script("{ this is not the schema"))
    mem2 = Memstrata(path=data_dir + "-junk", embeddings=hash_embeddings, model=junk, llm_retries=0)
    stats = mem2.ingest(EXAMPLE, user_id="u", close=True)
    episodes = mem2.store.count("episode", user_id="u")
    assert stats["facts_fallbacks"] == episodes > 0  # every episode fell back, and it is counted
    offline = [Fact.model_validate(r.payload) for r in mem2.store.get("fact", user_id="u")]
    assert offline and all(f.method == "clauses" for f in offline)


def test_with_a_model_the_model_decides_supersession_and_garbage_keeps_the_rule(data_dir, hash_embeddings) -> None:
    source = conversation(["I love hiking in the hills.", "Nice."], ["I love painting landscapes now.", "Cool!"])

    def model_saying(verdict: Any) -> ScriptedChatModel:
        def reply(messages: list[BaseMessage]) -> Any:
            return verdict if str(messages[0].content) == SUPERSEDE_PROMPT else "not json at all"

        return ScriptedChatModel(default=reply)

    mem = Memstrata(path=data_dir, embeddings=hash_embeddings, model=model_saying({"replaced": [0]}), llm_retries=0)
    stats = mem.ingest(source, user_id="u", close=True)
    facts = {f.object: f for f in (Fact.model_validate(r.payload) for r in mem.store.get("fact", user_id="u"))}
    assert stats["facts_superseded"] == 1 and stats["llm"]["supersede"]["calls"] >= 1
    assert facts["hiking hills"].superseded_by == facts["painting landscapes"].id  # the model said so, not the rule

    garbage = Memstrata(path=data_dir + "-2", embeddings=hash_embeddings, model=model_saying("{{{"), llm_retries=0)
    assert garbage.ingest(source, user_id="u")["facts_superseded"] == 0  # the rule's verdict: hobbies stay


def test_with_a_model_every_supersession_pair_of_a_write_goes_in_one_call(data_dir, hash_embeddings) -> None:
    source = conversation(
        ["I live in Porto.", "I work at Acme.", "I love hiking in the hills."],
        ["I moved to Lisbon.", "I work at Globex now.", "I love painting landscapes now."],
    )
    asked: list[str] = []

    def reply(messages: list[BaseMessage]) -> Any:
        if str(messages[0].content) != SUPERSEDE_PROMPT:
            return "not json at all"  # every other stage falls back to its offline output
        asked.append(str(messages[-1].content))
        return {"replaced": [n for n, pair in enumerate(asked[-1].split("<pair ")[1:]) if "Lisbon" in pair]}

    mem = Memstrata(path=data_dir, embeddings=hash_embeddings, model=ScriptedChatModel(default=reply), llm_retries=0)
    stats = mem.ingest(source, user_id="u", close=True)
    pairs = asked[0].count("<pair ") if asked else 0
    assert len(asked) == stats["llm"]["supersede"]["calls"] == 1 and pairs >= 2  # one call for all the pairs
    facts = {f.object: f for f in (Fact.model_validate(r.payload) for r in mem.store.get("fact", user_id="u"))}
    assert facts["Porto"].superseded_by == facts["Lisbon"].id  # listed: replaced
    assert not facts["Acme"].superseded_by  # not listed: stays current, though the rule would replace it

    out_of_range = ScriptedChatModel(
        default=lambda m: {"replaced": [99]} if str(m[0].content) == SUPERSEDE_PROMPT else "not json at all"
    )
    rule = Memstrata(path=data_dir + "-2", embeddings=hash_embeddings, model=out_of_range, llm_retries=0)
    rule.ingest(source, user_id="u", close=True)
    kept = {f.object: f for f in (Fact.model_validate(r.payload) for r in rule.store.get("fact", user_id="u"))}
    assert kept["Acme"].superseded_by == kept["Globex"].id  # an invalid reply: the rule's verdicts stand
