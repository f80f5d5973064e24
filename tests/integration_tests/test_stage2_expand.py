"""xMemory's Stage II at the lookup (:mod:`memstrata.nodes.retrieve.stage2`) on a real store: the coarse start on the
picked themes whether or not the reader sees them, and the expansion of an admitted episode to its other turns, with
the scripted reader and offline.

The store is the theme tests' conversation (packaged MiniLM, embedded Chroma). Its episodes, as ingestion cuts them:
``ep:s1:0-3`` (turns s1:0-s1:3), ``ep:s1:3-6``, ``ep:s2:0-5`` and ``ep:s3:0-5``. The theme path's turns are built here
as it builds them (one chosen fact's turn per episode, ``found_by="theme"``, ``via`` naming theme and fact), so the
episodes offered and their order are known.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_theme_retrieval import _scripted_reader, theme_mem  # noqa: F401 - the real store fixture

from memstrata.context import Context, with_settings
from memstrata.memory.index import MemoryIndex
from memstrata.memory.query import Hit
from memstrata.memory.search.themes import episode_rest, episode_turn_rows
from memstrata.nodes.retrieve.stage2 import reader_stage2
from memstrata.prompts import PROMPTS
from memstrata.runtime.step import Step

QUESTION = "What do we know about Ann's cat Miso?"
# one fact per episode, best first: (fact id, its turn)
OFFERED = [("fact:s1:0-3:0", "s1:0"), ("fact:s1:3-6:0", "s1:4"), ("fact:s2:0-5:0", "s2:0"), ("fact:s3:0-5:0", "s3:0")]
THEMES = [["ann-bo", "theme:0"]]


@pytest.fixture(scope="module")
def index(theme_mem) -> MemoryIndex:  # noqa: F811 - the fixture imported above
    return MemoryIndex.load(theme_mem.store, user_id="ann")


def _theme_turns(index: MemoryIndex) -> list[Hit]:
    """The theme path's turns of the facts in :data:`OFFERED`, their scores falling in that order, and one turn
    another path found (which Stage II never removes).
    """
    hits = []
    for n, (fact, turn) in enumerate(OFFERED):
        t = index.turns[index.rows_of("ann-bo", [turn])[0]]
        hits.append(
            Hit(
                kind="turn",
                unit_id=t.id,
                conversation_id="ann-bo",
                score=0.9 - 0.1 * n,
                found_by="theme",
                level="level1",
                text=t.text,
                session_id=t.session_id,
                position=t.position,
                via=f"theme:0 -> {fact}",
            )
        )
    return [*hits, Hit(kind="turn", unit_id="s2:2", conversation_id="ann-bo", score=0.95, found_by="turn")]


def _run(
    index: MemoryIndex, confidences: list[float] | None, *, scenes: list[list[str]] | None = THEMES, **settings: Any
) -> tuple[list[Hit], dict[str, Any] | None, Any]:
    """Stage II over :func:`_theme_turns` with the scripted reader saying ``confidences`` (``None``: offline)."""
    model = None if confidences is None else _scripted_reader(confidences)
    base = Context(user_id="ann", model=model, experimental={"theme_stage2": True}, themes={"patience": 2})
    ctx = with_settings(base, **settings)
    kept, trace = asyncio.run(reader_stage2(Step.for_query(ctx), index, QUESTION, _theme_turns(index), scenes=scenes))
    return kept, trace, model


def _checks(model: Any) -> list[str]:
    """The lines of every self-check the reader was asked, in order."""
    return [m[1].content for m in model.calls if m[0].content == PROMPTS["STAGE2_PROMPT"]]


def _ids(hits: list[Hit]) -> list[str]:
    return [h.unit_id for h in hits]


@pytest.mark.integration
def test_an_episodes_turns_are_its_summarys_and_the_rest_are_those_its_theme_turns_do_not_hold(index) -> None:
    assert [index.turns[r].id for r in episode_turn_rows(index, "ann-bo", "ep:s1:0-3")] == [
        "s1:0",
        "s1:1",
        "s1:2",
        "s1:3",
    ]
    assert (
        episode_turn_rows(index, "ann-bo", "ep:s9:0-1") == [] and episode_turn_rows(index, "other", "ep:s1:0-3") == []
    )
    first = _theme_turns(index)[0]
    rest = episode_rest(index, "ep:s1:0-3", [first])
    assert _ids(rest) == ["s1:1", "s1:2", "s1:3"]
    assert all(h.found_by == "theme" and h.score == first.score and h.parts == {} for h in rest)
    assert all(h.via == "theme:0 -> fact:s1:0-3:0 -> ep:s1:0-3" for h in rest)
    assert rest[0].text == "Lovely! Is she settling in?" and rest[0].speaker == "Bo" and rest[0].position == 1
    assert {h.time for h in rest} == {"2 March 2024"}  # dated as the context dates turns


@pytest.mark.integration
def test_the_first_check_is_on_the_themes_even_when_the_reader_is_not_shown_them(index) -> None:
    # scene_lines is 0 (the default): the themes are Stage II's coarse context all the same. Doubt 0.4 on them;
    # the first episode leaves 0.5: it does not lower the doubt, so it is not admitted (from 1.0 it would have been)
    kept, how, model = _run(index, [0.6, 0.5, 0.5])
    assert how is not None and how["coarse_uncertainty"] == 0.4 and how["admitted"] == 0
    assert how["checked"] == 3 and how["uncertainty_left"] == 0.4  # the coarse check, then patience
    shown = _checks(model)[0].split("<lines>\n")[1].split("\n</lines>")[0].splitlines()
    assert shown == [line for line in shown if line.startswith("theme:0 Miso knocked")] != []  # the themes alone
    assert _ids(kept) == ["s2:2"]  # every theme turn left; the other path's stayed
    # with no theme picked there is no coarse context: the doubt starts at 1.0 and the first episode is admitted
    kept, how, _ = _run(index, [0.5, 0.5, 0.5], scenes=None)
    assert how is not None and how["coarse_uncertainty"] is None and how["admitted"] == 1
    assert _ids(kept) == ["s1:0", "s2:2"]


@pytest.mark.integration
def test_an_admitted_episodes_other_turns_join_when_they_lower_the_doubt(index) -> None:
    # coarse 0.6; episode 1 0.5 (admitted); its whole episode 0.3 (joins); episodes 2 and 3 leave 0.4: patience
    kept, how, model = _run(
        index,
        [0.4, 0.5, 0.7, 0.6, 0.6],
        experimental={"theme_stage2_expand": True},
        themes={"stage2_checks": 8},
    )
    assert how is not None and how["admitted"] == 1 and how["checked"] == 5 and how["uncertainty_left"] == 0.3
    assert how["expanded"] == [
        {
            "episode": "ann-bo/ep:s1:0-3",
            "turns": ["s1:1", "s1:2", "s1:3"],
            "admitted": 0.5,
            "expanded": 0.3,
            "joined": True,
        }
    ]
    assert how["added"] == 3 and _ids(kept) == ["s1:0", "s2:2", "s1:1", "s1:2", "s1:3"]
    whole = _checks(model)[2]  # the expansion's check shows the whole episode, in order, after the coarse lines
    assert (
        whole.index("theme:0") < whole.index("I adopted a grey cat") < whole.index("Lovely!") < whole.index("Cats love")
    )
    assert "Cats love" in _checks(model)[3]  # the next episode is judged with the expansion shown


@pytest.mark.integration
def test_an_expansion_that_lowers_nothing_is_refused_and_does_not_count_towards_early_stopping(index) -> None:
    # coarse 0.6; episode 1 0.5 (admitted); its whole episode 0.5 (refused); episodes 2, 3 leave 0.5; episode 4 0.4
    kept, how, _ = _run(
        index,
        [0.4, 0.5, 0.5, 0.5, 0.5, 0.6, 0.6],
        experimental={"theme_stage2_expand": True},
        themes={"stage2_checks": 8},
    )
    assert how is not None and how["expanded"][0]["joined"] is False and how["expanded"][0]["expanded"] == 0.5
    # a refused expansion is not an episode that said nothing new: patience (2) stops after episodes 2 and 3
    assert how["checked"] == 5 and how["admitted"] == 1 and how["added"] == 0
    assert _ids(kept) == ["s1:0", "s2:2"]


@pytest.mark.integration
def test_expansions_take_their_checks_from_stage2s_budget(index) -> None:
    # 3 checks: the coarse one, episode 1 (admitted), its expansion (joined); no episode after is offered
    kept, how, model = _run(
        index,
        [0.4, 0.5, 0.7, 0.9, 0.9],
        experimental={"theme_stage2_expand": True},
        themes={"stage2_checks": 3},
    )
    assert how is not None and how["checked"] == 3 == len(_checks(model)) and how["admitted"] == 1
    assert _ids(kept) == ["s1:0", "s2:2", "s1:1", "s1:2", "s1:3"]
    # 2 checks: the coarse one and episode 1; no check is left for its expansion
    kept, how, model = _run(
        index,
        [0.4, 0.5, 0.9],
        experimental={"theme_stage2_expand": True},
        themes={"stage2_checks": 2},
    )
    assert how is not None and how["checked"] == 2 == len(_checks(model)) and how["expanded"] == []
    assert _ids(kept) == ["s1:0", "s2:2"]


@pytest.mark.integration
def test_without_expansion_stage2_is_what_it_was(index) -> None:
    kept, how, _ = _run(
        index,
        [0.4, 0.5, 0.7, 0.6, 0.6],
        themes={"stage2_checks": 8},
    )
    # the same confidences as the expansion test: 0.7 is now episode 2's, which is admitted; 3 and 4 are not
    assert how is not None and "expanded" not in how and "added" not in how
    assert how["admitted"] == 2 and how["checked"] == 5 and _ids(kept) == ["s1:0", "s1:4", "s2:2"]
    offline, how, _ = _run(index, None)  # offline without expansion: the theme path's Stage II was all
    assert how is None and _ids(offline) == _ids(_theme_turns(index))


@pytest.mark.integration
def test_offline_an_admitted_episode_is_expanded_only_when_its_other_turns_say_a_query_word(index) -> None:
    kept, how, _ = _run(
        index,
        None,
        experimental={"theme_stage2_expand": True},
    )
    assert how is not None and how["checked"] == 0 and how["measure"].startswith("offline proxy")
    assert how["admitted"] == 4 and how["removed"] == 0  # the theme path admitted them: the proxy only follows
    # the query's words: what do we know about ann cat miso; the theme says ann, cat and miso (0.625 unsaid)
    assert how["coarse_uncertainty"] == 0.625 and how["uncertainty_left"] == 0.375
    assert [(e["episode"], e["admitted"], e["expanded"], e["joined"]) for e in how["expanded"]] == [
        ("ann-bo/ep:s1:0-3", 0.625, 0.625, False),  # grey cat, settling in, boxes: nothing unsaid is said
        ("ann-bo/ep:s1:3-6", 0.625, 0.375, True),  # "How far do you run now?", "About ten kilometres": do, about
        ("ann-bo/ep:s2:0-5", 0.375, 0.375, False),
        ("ann-bo/ep:s3:0-5", 0.375, 0.375, False),
    ]
    assert _ids(kept)[5:] == ["s1:3", "s1:5", "s1:6"] and how["added"] == 3  # the joined turns, and only they


@pytest.mark.integration
def test_offline_an_expansion_joins_when_its_turns_say_a_word_nothing_else_said(index) -> None:
    ctx = Context(
        user_id="ann",
        experimental={"theme_stage2": True, "theme_stage2_expand": True},
    )
    question = "Is Miso settling in?"  # "settling" is said only by s1:1, a turn no fact was drawn from
    kept, how = asyncio.run(reader_stage2(Step.for_query(ctx), index, question, _theme_turns(index), scenes=THEMES))
    assert how is not None
    [first, *others] = how["expanded"]
    assert first["episode"] == "ann-bo/ep:s1:0-3" and first["joined"] and first["expanded"] < first["admitted"]
    assert not any(e["joined"] for e in others)
    assert _ids(kept)[5:] == ["s1:1", "s1:2", "s1:3"] and how["added"] == 3


@pytest.mark.integration
def test_an_empty_user_has_no_stage2(theme_mem) -> None:  # noqa: F811 - the fixture imported above
    empty = MemoryIndex.load(theme_mem.store, user_id="nobody")
    ctx = Context(
        user_id="nobody",
        model=_scripted_reader([]),
        experimental={"theme_stage2": True, "theme_stage2_expand": True},
    )
    assert asyncio.run(reader_stage2(Step.for_query(ctx), empty, QUESTION, [], scenes=[])) == ([], None)
    result = theme_mem.retrieve(
        QUESTION,
        user_id="nobody",
        context_budget=400,
        model=_scripted_reader([0.9] * 9),
        experimental={"theme_stage2": True, "theme_stage2_expand": True},
        llm_depth=None,
    )
    assert result.evidence == [] and "stage2" not in result.trace["llm"]["per_node"]
    assert all("stage2" not in e for e in result.trace["events"] if e["node"] == "lookup_level1")


@pytest.mark.integration
def test_a_retrieval_with_expansion_meters_every_check_and_traces_what_was_expanded(theme_mem) -> None:  # noqa: F811
    result = theme_mem.retrieve(
        QUESTION,
        user_id="ann",
        context_budget=400,
        model=_scripted_reader([0.4, 0.5, 0.7] + [0.6] * 9),
        experimental={"theme_stage2": True, "theme_stage2_expand": True},
        themes={"stage2_checks": 6},
        llm_depth=None,
    )
    rounds = [e["stage2"] for e in result.trace["events"] if e["node"] == "lookup_level1" and "stage2" in e]
    first = rounds[0]
    assert first["coarse_uncertainty"] == 0.6 and first["admitted"] >= 1 and first["expanded"]
    assert first["expanded"][0]["admitted"] == 0.5 and first["expanded"][0]["expanded"] == 0.3
    assert first["added"] == len(first["expanded"][0]["turns"]) > 0
    checks = result.trace["llm"]["per_node"]["stage2"]
    assert checks["calls"] == sum(r["checked"] for r in rounds) and all(r["checked"] <= 6 for r in rounds)
    assert all(e.conversation_id == "ann-bo" for e in result.evidence)
