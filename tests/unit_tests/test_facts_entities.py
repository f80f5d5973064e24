"""Facts, entities and the entity graph: the pure parts (extraction, resolution, supersession, expansion)."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata.memory.entity_graph.expansion import GraphSearch, GraphView, expand, graph_reach, reached_facts
from memstrata.memory.entity_graph.mentions import find_mentions
from memstrata.memory.entity_graph.resolution import OVERLAP, link_entities, same_entity
from memstrata.memory.facts.clauses import carries_content, clauses, extract_facts, resolve_persons
from memstrata.memory.facts.supersession import supersede
from memstrata.memory.levels import Fact, Turn
from memstrata.memory.search.scoring import nearest_entities

MAY_8 = datetime(2023, 5, 8, 13, 56)


def turn(
    text: str, speaker: str = "Caroline", position: int = 0, session: str = "1", when: datetime | None = MAY_8
) -> Turn:
    return Turn(
        user_id="u",
        conversation_id="c",
        session_id=session,
        position=position,
        speaker=speaker,
        text=text,
        timestamp=when,
    )


def facts_of(*texts: str, speakers=("Caroline", "Melanie")) -> list[Fact]:
    turns = [turn(t, speaker=speakers[i % 2], position=i) for i, t in enumerate(texts)]
    return extract_facts(turns, episode_id="ep:s1:0-9", speakers=list(speakers))


# ---- clauses and facts ---------------------------------------------------------------------------
def test_turns_split_into_clauses_and_only_content_survives() -> None:
    assert clauses("I went hiking, but my knee hurt; we stopped early.") == [
        "I went hiking",
        "my knee hurt",
        "we stopped early",
    ]
    assert clauses("How was your trip to Paris?") == []  # questions are not statements
    assert not carries_content("Hey, thanks!") and not carries_content("That is so cool")
    assert carries_content("I adopted a puppy named Max")


def test_first_person_is_the_speaker_and_second_person_the_other_speaker() -> None:
    assert resolve_persons("I love hiking with my dog", speaker="Ann", other="Bo") == "Ann loves hiking with Ann's dog"
    assert resolve_persons("I'm moving to Lisbon", speaker="Ann", other=None) == "Ann is moving to Lisbon"
    assert resolve_persons("you've got a great voice", speaker="Ann", other="Bo") == "Bo has got a great voice"
    assert resolve_persons("you've got a great voice", speaker="Ann", other=None) == "you've got a great voice"
    [fact] = facts_of("Your painting of the lake sunrise looks amazing", speakers=("Caroline", "Melanie"))
    assert fact.subject == "Melanie" and fact.text.startswith("Melanie's painting")


def test_relative_dates_are_resolved_against_the_session_time() -> None:
    [fact] = facts_of("I went to a support group yesterday.")
    assert fact.text == "Caroline went to a support group yesterday (7 May 2023)."
    assert fact.event_date.date() == datetime(2023, 5, 7).date() and fact.valid_from == fact.event_date
    [fact] = facts_of("I ran a charity race last Saturday for mental health.")
    assert fact.event_date.date() == datetime(2023, 5, 6).date()
    untimed = extract_facts(
        [turn("I went to a support group yesterday.", when=None)], episode_id="ep:s1:0-0", speakers=["Caroline"]
    )
    assert untimed[0].event_date is None and "yesterday" in untimed[0].text  # no date invented


def test_fact_fields_relation_and_ids_are_deterministic() -> None:
    first = facts_of("I moved to Lisbon last month with my cat Miso.")
    again = facts_of("I moved to Lisbon last month with my cat Miso.")
    assert [f.model_dump() for f in first] == [f.model_dump() for f in again]
    fact = first[0]
    assert (fact.id, fact.subject, fact.relation, fact.object) == ("fact:s1:0-9:0", "Caroline", "move", "Lisbon")
    assert fact.turn_ids == ["s1:t0"] and "Miso" in fact.mentions
    assert ["Caroline", "cat", "Miso"] in fact.links


def test_mentions_find_names_places_and_possessive_kin_and_pets() -> None:
    found = {
        m.name: m.type
        for m in find_mentions(
            "my sister and I flew to Sweden with my dog Max", speaker="Ann", other=None, speakers=["Ann"]
        )
    }
    assert found == {"Ann": "speaker", "Ann's sister": "relative", "Max": "pet", "Sweden": "place"}
    months = find_mentions("We met in May on a Friday", speaker="Ann", other=None, speakers=["Ann"])
    assert [m.name for m in months] == ["Ann"]  # months and weekdays are dates, not entities


# ---- entity resolution ----------------------------------------------------------------------------
def fact(n: int, subject: str, *, mentions=(), types=None, relation="", obj="", day=1, links=()) -> Fact:
    return Fact(
        user_id="u",
        conversation_id="c",
        episode_id=f"ep:s{n}:0-0",
        session_id=str(n),
        n=0,
        text=f"{subject} {relation} {obj}".strip() + ".",
        subject=subject,
        relation=relation,
        object=obj,
        mentions=list(mentions),
        types=dict(types or {}),
        links=[list(x) for x in links],
        turn_ids=[f"s{n}:t0"],
        timestamp=datetime(2023, 1, day),
    )


def test_resolution_merges_case_and_typos_but_not_different_people() -> None:
    assert same_entity("porto", "Porto") and same_entity("Melbourne", "Melborne")
    assert not same_entity("Anna Lee", "Anna Park") and not same_entity("Mel", "Melanie")
    facts = [
        fact(1, "Ann", mentions=["Melbourne"], types={"Ann": "speaker", "Melbourne": "place"}),
        fact(2, "Ann", mentions=["melbourne"], types={"melbourne": "place"}),
        fact(3, "Ann", mentions=["Melborne"], types={"Melborne": "place"}),
        fact(4, "Ann", mentions=["Anna Lee", "Anna Park"], types={"Anna Lee": "person", "Anna Park": "person"}),
        fact(5, "Ann", mentions=["Anna"], types={"Anna": "person"}),
    ]
    linked = link_entities(facts, speakers=["Ann", "Anne"])
    ids = {e.id: e for e in linked.entities}
    assert set(ids) == {"ent:ann", "ent:melbourne", "ent:anna-lee", "ent:anna-park", "ent:anna"}
    assert sorted(ids["ent:melbourne"].aliases) == ["Melborne", "Melbourne", "melbourne"]
    overlaps = {(r.src, r.dst) for r in linked.relations if r.rel == OVERLAP}
    assert {("ent:anna", "ent:anna-lee"), ("ent:anna", "ent:anna-park")} <= overlaps  # traversal only
    assert all(f.subject_id == "ent:ann" for f in linked.facts)


def test_two_speakers_are_never_merged_and_a_nickname_is_only_an_overlap() -> None:
    facts = [
        fact(1, "Jon", mentions=["John"], types={"Jon": "speaker", "John": "speaker"}),
        fact(2, "John", types={"John": "speaker"}),
        fact(3, "Jon", mentions=["Johnny"], types={"Johnny": "name"}),
    ]
    linked = link_entities(facts, speakers=["John", "Jon"])
    assert {"ent:jon", "ent:john", "ent:johnny"} <= {e.id for e in linked.entities}
    assert {("ent:john", OVERLAP, "ent:johnny"), ("ent:johnny", OVERLAP, "ent:john")} <= {
        (r.src, r.rel, r.dst) for r in linked.relations
    }


def test_relations_and_profiles_come_from_the_facts() -> None:
    facts = [
        fact(
            1,
            "Ann",
            relation="adopt",
            obj="Max",
            mentions=["Max"],
            types={"Ann": "speaker", "Max": "pet"},
            links=[("Ann", "dog", "Max")],
            day=1,
        ),
        fact(2, "Ann", relation="like", obj="hiking", types={"Ann": "speaker"}, day=2),
        fact(3, "Ann", relation="run", obj="race", types={"Ann": "speaker"}, day=3),
    ]
    linked = link_entities(facts, speakers=["Ann"])
    assert {(r.src, r.rel, r.dst, r.turn_ids) for r in linked.relations} == {
        ("ent:ann", "dog", "ent:max", ("s1:t0",)),
        ("ent:ann", "adopt", "ent:max", ("s1:t0",)),
    }
    ann = next(e for e in linked.entities if e.id == "ent:ann")
    assert ann.attributes == ["fact:s2:0-0:0"] and ann.events == ["fact:s3:0-0:0", "fact:s1:0-0:0"]


def test_a_repeated_relation_merges_its_evidence_into_one_edge() -> None:
    """H-Mem A.2: the second statement of (Ann, dog, Max) adds its turns to the edge, it does not replace them."""
    pet = {"mentions": ["Max"], "types": {"Ann": "speaker", "Max": "pet"}, "links": [("Ann", "dog", "Max")]}
    facts = [fact(1, "Ann", day=1, **pet), fact(2, "Ann", day=5, **pet), fact(3, "Ann", day=3, **pet)]
    [edge] = [r for r in link_entities(facts, speakers=["Ann"]).relations if r.rel == "dog"]
    assert edge.turn_ids == tuple(f.turn_ids[0] for f in facts)
    assert edge.created_at == max(f.timestamp.timestamp() for f in facts if f.timestamp)


# ---- supersession -----------------------------------------------------------------------------------
def linked_facts(*specs: tuple[str, str, int]) -> list[Fact]:
    facts = [
        fact(i + 1, "Ann", relation=rel, obj=obj, day=day, types={"Ann": "speaker"})
        for i, (rel, obj, day) in enumerate(specs)
    ]
    return link_entities(facts, speakers=["Ann"]).facts


def test_a_move_supersedes_where_someone_lived_and_keeps_history() -> None:
    facts = linked_facts(("live", "Porto", 1), ("move", "Lisbon", 5), ("move", "Berlin", 9))
    assert [(old.object, new) for old, new in supersede(facts)] == [
        ("Porto", "fact:s2:0-0:0"),
        ("Lisbon", "fact:s3:0-0:0"),
    ]


@pytest.mark.parametrize(
    "specs",
    [
        [("like", "Hiking", 1), ("like", "Painting", 5)],  # two hobbies
        [("have", "Max", 1), ("have", "Luna", 5)],  # two children
        [("visit", "Paris", 1), ("move", "Lisbon", 5)],  # a visit and a move
        [("live", "Porto", 1), ("move", "the couch", 5)],  # moving furniture is no move
        [("live", "Porto", 1), ("live", "porto", 5)],  # the same value again
    ],
)
def test_supersession_leaves_these_alone(specs) -> None:
    assert supersede(linked_facts(*specs)) == []


# ---- graph expansion ---------------------------------------------------------------------------------
def test_expansion_follows_relations_with_decay_and_reaches_facts() -> None:
    facts = [
        fact(
            1,
            "Ann",
            relation="adopt",
            obj="Max",
            mentions=["Max"],
            types={"Ann": "speaker", "Max": "pet"},
            links=[("Ann", "dog", "Max")],
        ),
        fact(2, "Max", relation="love", obj="Rex", mentions=["Rex"], types={"Rex": "pet"}),
        fact(3, "Bo", types={"Bo": "speaker"}),
    ]
    linked = link_entities(facts, speakers=["Ann", "Bo"])
    view = GraphView.build(linked.entities, linked.facts, linked.relations)
    assert view.seeds("What does ann's dog Max eat?") == [("c", "ent:ann"), ("c", "ent:max")]
    assert view.seeds("Where did Maxx go?") == []  # short names need an exact match
    assert view.seeds("Where does Ann walk her dog?") == [("c", "ent:ann"), ("c", "ent:max")]  # "her dog" = Max
    reach = expand(view, [("c", "ent:ann")], hops=2, decay=0.5)
    assert reach[("c", "ent:ann")].weight == 1.0 and reach[("c", "ent:max")].weight == 0.5
    assert reach[("c", "ent:rex")].weight == 0.25 and ("c", "ent:bo") not in reach
    assert reach[("c", "ent:rex")].describe().startswith("Ann -")
    only_one_hop = expand(view, [("c", "ent:ann")], hops=1, decay=0.5)
    assert ("c", "ent:rex") not in only_one_hop
    scores = np.array([0.2, 0.9, 1.0])
    ranked = reached_facts(view, reach, scores, top=2)
    assert [(row, round(score, 2)) for row, score, _ in ranked] == [(1, 0.45), (0, 0.2)]  # Bo's fact: unreached


def test_entities_near_the_query_vector_seed_the_graph_beside_the_named_ones() -> None:
    """H-Mem's seeds by vector: a query that names no entity reaches the facts of one given as near."""
    facts = [
        fact(1, "Ann", mentions=["Max"], types={"Ann": "speaker", "Max": "pet"}, links=[("Ann", "dog", "Max")]),
        fact(2, "Bo", types={"Bo": "speaker"}),
    ]
    linked = link_entities(facts, speakers=["Ann", "Bo"])
    search = GraphSearch(GraphView.build(linked.entities, linked.facts, linked.relations), hops=1)
    scores = np.array([0.5, 0.9])
    assert graph_reach(search, "What did the puppy eat?", scores) == []  # nothing named, nothing near
    reached = graph_reach(search, "What did the puppy eat?", scores, near=[("c", "ent:max"), ("c", "ent:nobody")])
    assert [(row, score) for row, score, _ in reached] == [(0, 0.5)]  # Max's fact, at the seed's full weight
    named = graph_reach(search, "What did Bo eat?", scores, near=[("c", "ent:max")])
    assert sorted(row for row, _, _ in named) == [0, 1]  # the named seed and the near one together


def test_nearest_entities_are_the_n_best_above_the_floor() -> None:
    units = [SimpleNamespace(conversation_id="c", id=f"ent:{n}") for n in ("a", "b", "c")]
    vecs = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]], dtype=np.float32)
    index = SimpleNamespace(tables={"entity": SimpleNamespace(units=units, vecs=vecs)})
    qvec = np.array([0.8, 0.6])
    assert nearest_entities(index, qvec, 2, 0.0) == [("c", "ent:b"), ("c", "ent:a")]  # cosines 0.96, 0.8
    assert nearest_entities(index, qvec, 3, 0.85) == [("c", "ent:b")]
    assert nearest_entities(index, qvec, 0, 0.0) == []


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 11), max_size=8), min_size=1, max_size=6),
    st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=12, max_size=12),
    st.lists(st.sampled_from([1.0, 0.5, 0.25]), min_size=6, max_size=6),
    st.integers(1, 12),
)
def test_reached_facts_equals_the_plain_loop_ties_included(named, scores, weights, top) -> None:
    """Best product per fact, the first entity wins a tie, equal scores keep first-reached order."""
    from memstrata.memory.entity_graph.expansion import GraphPart, Reach

    view = GraphView({"c": GraphPart.build([], [])}, {})
    reach = {}
    for i, rows in enumerate(named):
        view.parts["c"].rows[("c", f"e{i}")] = np.array(sorted(set(rows)), dtype=np.intp)
        reach[("c", f"e{i}")] = Reach(weights[i], [f"e{i}"])
    fact_scores = np.array(scores, dtype=np.float32)
    best: dict[int, tuple[float, Reach]] = {}
    for node, how in reach.items():
        for row in view.fact_rows(node).tolist():
            score = float(fact_scores[row]) * how.weight
            if row not in best or score > best[row][0]:
                best[row] = (score, how)
    plain = [(row, score, how) for row, (score, how) in sorted(best.items(), key=lambda kv: -kv[1][0])[:top]]
    assert [(r, s, h.path) for r, s, h in reached_facts(view, reach, fact_scores, top=top)] == [
        (r, s, h.path) for r, s, h in plain
    ]


def test_a_capitalised_common_word_at_a_clause_start_is_not_a_name() -> None:
    from memstrata.memory.facts.clauses import common_word, leading_name

    assert [w for w in ("Come", "Perfect", "Welcome", "Practise", "Speaking", "Three", "Maybe") if common_word(w)] == [
        "Come",
        "Perfect",
        "Welcome",
        "Practise",
        "Speaking",
        "Three",
        "Maybe",
    ]
    assert not any(common_word(w) for w in ("Berlin", "Miso", "Okafor", "Anika", "Tom"))  # "tom" is only a noun
    assert leading_name("Maybe Berlin") == "Berlin" and leading_name("Perfect") == ""
    [m] = [
        m
        for m in find_mentions(
            "I got an offer from Tidewater Labs", speaker="Priya", other="Tom", speakers=["Priya", "Tom"]
        )
        if m.name == "Tidewater Labs"
    ]
    assert m.type == "organization"


@pytest.mark.integration
def test_the_bundled_example_lists_no_common_word_as_an_entity(tmp_path) -> None:
    from conftest import EXAMPLE, HashEmbeddings

    from memstrata import Memstrata
    from memstrata.memory.facts.clauses import common_word

    mem = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())
    mem.ingest(EXAMPLE, user_id="demo", close=True)
    names = {r.payload["name"]: r.payload["type"] for r in mem.store.get("entity", user_id="demo")}
    noise = {"Three", "Come", "Perfect", "Practise", "Speaking", "Welcome", "Maybe Berlin", "Shipping"}  # were listed
    assert not noise & set(names) and all(common_word(w) for n in noise for w in n.split()[:1])
    assert names["Tidewater Labs"] == "organization" and {"Berlin", "Miso", "Lisbon"} <= set(names)
    mem.close()


@pytest.mark.integration
def test_overlapping_episodes_write_each_fact_once(tmp_path) -> None:
    from conftest import EXAMPLE, HashEmbeddings

    from memstrata import Memstrata

    mem = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())
    mem.ingest(EXAMPLE, user_id="demo", close=True)
    episodes = [r.payload for r in mem.store.get("episode", user_id="demo")]
    assert any(e["repeated"] for e in episodes)  # the example's episodes do overlap
    texts = [r.document for r in mem.store.get("fact", user_id="demo")]
    assert texts and len(texts) == len(set(texts)), sorted(t for t in texts if texts.count(t) > 1)
    by_episode = {e["id"]: set(e["turn_ids"][e["repeated"] :]) for e in episodes}
    for r in mem.store.get("fact", user_id="demo"):  # a fact comes from its episode's own turns
        assert set(r.payload["turn_ids"]) <= by_episode[r.payload["episode_id"]]
    mem.close()
