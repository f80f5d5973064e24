"""Bi-Mem's persona and reflective calibration: the offline distillation (pure), versions and point-in-time reads,
stale themes, the persona path in retrieval, calibration with a scripted model, isolation and forgetting.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import PORTO, assert_store_ok, session_messages
from test_pages import chromium  # noqa: F401 - the real browser fixture

from memstrata.memory.levels import DIMENSIONS, Fact, Persona, PersonaItem, Theme
from memstrata.memory.persona.calibrate import appended, due, due_scenes, scene_speakers
from memstrata.memory.persona.distill import PersonaDraft, Trait, basis, check_draft, offline_dimensions
from memstrata.memory.persona.versions import successor, valid_at
from memstrata.memory.search.packing import parse_context
from memstrata.memory.search.persona import asks_inference
from memstrata.memory.themes.maintain import Regrouped
from memstrata.nodes.ingest.themes import stale_themes


def _fact(i: int, text: str, session: int, *, subject: str = "Ann", superseded_by: str = "") -> Fact:
    return Fact(
        user_id="u",
        episode_id=f"ep:s{session}:0-9",
        session_id=str(session),
        n=i,
        text=text,
        subject=subject,
        turn_ids=[f"s{session}:{i}"],
        superseded_by=superseded_by,
        timestamp=datetime(2024, 1, session),
    )


# ---- pure: distillation -----------------------------------------------------------------------------------
def test_offline_items_are_the_facts_own_words_ranked_by_recurrence_and_deterministic() -> None:
    cues = np.eye(5, 4)
    facts = [
        _fact(0, "Ann paints.", 1),
        _fact(1, "Ann paints again.", 2),
        _fact(2, "Ann likes jazz.", 3),
        _fact(3, "Ann lives in Porto.", 1),
        _fact(4, "Ann swims.", 4, superseded_by="x"),
    ]
    x = np.array([[0, 1, 0.1, 0], [0, 1, 0.1, 0], [0, 1, -0.6, 0], [1, 0, 0, 0], [0, 1, 0, 0]], dtype=float)
    first = offline_dimensions(facts, x, cues, floor=0.3, same=0.95, per_dimension=5)
    again = offline_dimensions(list(facts), x.copy(), cues, floor=0.3, same=0.95, per_dimension=5)
    assert first == again
    interests = first["interests"]
    # said in two sessions: one item, first wording, both facts and turns, ranked above the one said once
    assert [i.text for i in interests] == ["Ann paints.", "Ann likes jazz."]
    assert interests[0].fact_ids == ["fact:s2:0-9:1"] and interests[0].turn_ids == ["s1:0", "s2:1"]
    assert [i.text for i in first["basic_info"]] == ["Ann lives in Porto."]
    every = {i.fact_id for items in first.values() for i in items} | {
        f for items in first.values() for i in items for f in i.fact_ids
    }
    assert every <= {f.id for f in facts} and "fact:s4:0-9:4" not in every  # superseded: never an item
    assert offline_dimensions(facts, x, cues, floor=0.999)["interests"] == []  # nothing near enough: nothing


def test_a_model_draft_citing_a_fact_it_was_not_shown_is_rejected() -> None:
    good = PersonaDraft(interests=[Trait(text="Ann paints.", fact_ids=["f1"])])
    assert check_draft(good, ["f1", "f2"]) is good
    with pytest.raises(ValueError, match="cites"):
        check_draft(PersonaDraft(values=[Trait(text="Ann is kind.", fact_ids=["f9"])]), ["f1"])
    with pytest.raises(ValueError):
        check_draft(PersonaDraft(values=[Trait(text="Ann is kind.", fact_ids=[])]), ["f1"])


def test_the_basis_changes_when_a_fact_is_superseded_or_an_item_removed() -> None:
    facts = [_fact(0, "Ann lives in Porto.", 1)]
    b = basis(facts)
    assert basis(list(facts)) == b
    assert basis([_fact(0, "Ann lives in Porto.", 1, superseded_by="fact:x")]) != b
    assert basis(facts, ["fact:s1:0-9:0"]) != b


# ---- pure: versions ---------------------------------------------------------------------------------------
def test_versions_end_where_the_next_starts_and_a_point_in_time_read_picks_the_one_valid_then() -> None:
    template = Persona(user_id="u", speaker="Ann", dimension="basic_info", version=1)
    porto = [PersonaItem(text="Ann lives in Porto.", fact_id="f1")]
    v1, ended = successor(None, porto, basis="a", built_at=datetime(2024, 1, 1), template=template)
    assert ended is None and v1.version == 1 and v1.current
    assert successor(v1, porto, basis="a", built_at=datetime(2024, 2, 1)) == (None, None)  # nothing changed
    kept, none = successor(v1, porto, basis="b", built_at=datetime(2024, 2, 1))
    assert none is None and kept.id == v1.id and kept.basis == "b"  # same items: same version, new basis
    lisbon = [PersonaItem(text="Ann moved to Lisbon.", fact_id="f2")]
    v2, old = successor(v1, lisbon, basis="c", built_at=datetime(2024, 3, 1))
    assert (v2.version, v2.valid_from, old.valid_to, old.text) == (
        2,
        datetime(2024, 3, 1),
        datetime(2024, 3, 1),
        "Ann lives in Porto.",
    )
    history = [old, v2]
    assert valid_at(history, datetime(2024, 2, 15)).text == "Ann lives in Porto."
    assert valid_at(history, datetime(2024, 3, 1)).text == "Ann moved to Lisbon."
    assert valid_at(history, None) == v2 and valid_at(history, datetime(2023, 1, 1)) is None


# ---- pure: stale themes and calibration -------------------------------------------------------------------
def test_a_kept_theme_whose_member_was_superseded_is_stale() -> None:
    facts = [_fact(0, "Ann lives in Porto.", 1, superseded_by="fact:new"), _fact(1, "Ann paints.", 1)]
    before = {
        "theme:0": Theme(user_id="u", n=0, text="t", fact_ids=[f.id for f in facts]),
        "theme:1": Theme(user_id="u", n=1, text="t", fact_ids=[facts[1].id]),
    }
    grouped = Regrouped(themes={"theme:0": [f.id for f in facts], "theme:1": [facts[1].id]})
    assert stale_themes(grouped, before, facts) == {"theme:0"}
    rebuilt = before["theme:0"].model_copy(update={"superseded_ids": [facts[0].id]})
    assert stale_themes(grouped, {**before, "theme:0": rebuilt}, facts) == set()  # rebuilt: fresh again


def test_calibration_appends_and_never_rewrites() -> None:
    scene = Theme(user_id="u", n=0, text="Ann went to a spicy food festival.", fact_ids=["f1", "f2"])
    facts = {"f1": _fact(0, "Ann went to a festival.", 1), "f2": _fact(1, "Bo likes chili.", 1, subject="Bo")}
    facts = {"f1": facts["f1"].model_copy(update={"id": "f1"}), "f2": facts["f2"].model_copy(update={"id": "f2"})}
    assert scene_speakers(scene, facts, ["Ann", "Bo"]) == ["Ann", "Bo"]  # a tie: checked against both personas
    assert scene_speakers(scene, {"f1": facts["f1"]}, ["Ann", "Bo"]) == ["Ann"]  # Bo's fact is gone: Ann's scene
    assert scene_speakers(scene, {}, ["Ann", "Bo"]) == []
    once = appended(scene, "Ann", "b1", "It was a one-off: Ann prefers mild food.")
    twice = appended(once, "Ann", "b2", "")
    assert once.text == twice.text == scene.text
    assert twice.calibrations[0] == once.calibrations[0]  # earlier checks are kept as they were
    assert twice.embed_text() == "Ann went to a spicy food festival. It was a one-off: Ann prefers mild food."
    assert not due(twice, "Ann")  # checked in this form: a new persona alone does not make it due again
    assert due(twice.model_copy(update={"text": "Ann went to a spicy food festival twice."}), "Ann")  # a new form
    assert due(twice, "Bo")


def test_due_scenes_go_to_every_tied_speaker_with_a_persona_until_checked_in_their_form() -> None:
    facts = {
        "f1": _fact(0, "Ann went to a festival.", 1).model_copy(update={"id": "f1"}),
        "f2": _fact(1, "Bo likes chili.", 1, subject="Bo").model_copy(update={"id": "f2"}),
        "f3": _fact(2, "Ann paints.", 1).model_copy(update={"id": "f3"}),
    }
    shared = Theme(user_id="u", n=0, text="A festival with chili.", fact_ids=["f1", "f2"])
    hers = Theme(user_id="u", n=1, text="Ann paints.", fact_ids=["f1", "f3", "f2"])
    assert due_scenes([shared, hers], facts, ["Ann", "Bo"], lambda s: True) == {"Ann": [shared, hers], "Bo": [shared]}
    assert due_scenes([shared, hers], facts, ["Ann", "Bo"], lambda s: s == "Bo") == {"Bo": [shared]}  # no persona
    checked = appended(shared, "Bo", "b1", "")
    assert due_scenes([checked, hers], facts, ["Ann", "Bo"], lambda s: True) == {"Ann": [checked, hers]}


def test_inference_questions() -> None:
    assert asks_inference("What might John's financial status be?")
    assert asks_inference("Would Melanie be considered a member of the LGBTQ community?")
    assert not asks_inference("When did Caroline go to the LGBTQ support group?")
    assert not asks_inference("What did Mel paint?")


# ---- on a real store (packaged MiniLM, embedded Chroma) -----------------------------------------------------
LISBON = [
    ("Ann", "I moved to Lisbon last month."),
    ("Bo", "Wow, why Lisbon?"),
    ("Ann", "Tom got a job there, so we packed up."),
    ("Bo", "Exciting!"),
    ("Ann", "I still paint landscapes every weekend."),
    ("Bo", "Good."),
]


def _ingest(mem: Any, user: str, n: int, when: str, lines: list[tuple[str, str]], **kw: Any) -> dict[str, Any]:
    return mem.ingest(
        {"conversation_id": "c", "messages": session_messages(n, when, lines)}, user_id=user, close=True, **kw
    )


@pytest.fixture
def moved(minilm: Any, tmp_path: Path) -> Any:
    from memstrata import Memstrata

    mem = Memstrata(path=tmp_path / "store", embeddings=minilm)
    _ingest(mem, "ann", 1, "2024-01-10T10:00:00", PORTO)
    before = mem.persona("Ann", user_id="ann")
    _ingest(mem, "ann", 2, "2024-03-05T10:00:00", LISBON)
    yield mem, before
    mem.close()


def test_a_move_updates_basic_info_keeps_the_old_version_and_the_theme_keeps_its_old_text(moved: Any) -> None:
    mem, before = moved
    assert "Porto" in before["basic_info"].text and before["basic_info"].method == "extractive"
    now = mem.persona("Ann", user_id="ann")["basic_info"]
    assert "Lisbon" in now.text and "Porto" not in now.text and now.version == 2
    history = mem.persona_history("Ann", user_id="ann")["basic_info"]
    assert [v.version for v in history] == [1, 2] and "Porto" in history[0].text
    assert history[0].valid_to == now.valid_from == datetime(2024, 2, 4, 10, 0)  # the move's date ("last month")
    assert "Porto" in mem.persona("Ann", user_id="ann", at="1 February 2024")["basic_info"].text
    assert "Lisbon" in mem.persona("Ann", user_id="ann", at="1 March 2024")["basic_info"].text
    assert mem.persona("Ann", user_id="ann", at="1 January 2020") == {}
    # the theme that held the Porto fact was rebuilt from its current facts; what it said is history, with dates
    facts = {r.unit_id: r.payload for r in mem.store.get("fact", user_id="ann")}
    porto = next(f for f, p in facts.items() if "Porto" in p["text"])
    assert facts[porto]["superseded_by"]
    [theme] = [
        Theme.model_validate(r.payload) for r in mem.store.get("theme", user_id="ann") if porto in r.payload["fact_ids"]
    ]
    assert theme.superseded_ids == [porto] and "Porto" not in theme.text
    assert "Porto" in theme.history[-1]["text"] and theme.history[-1]["valid_to"] == "2024-02-04T10:00:00"
    assert_store_ok(mem.store, "ann")


def test_the_persona_cites_only_stored_facts_and_turns(moved: Any) -> None:
    mem, _ = moved
    facts = {r.unit_id for r in mem.store.get("fact", user_id="ann")}
    turns = {r.unit_id for r in mem.store.get("turn", user_id="ann")}
    items = [
        item for versions in mem.persona_history("Ann", user_id="ann").values() for v in versions for item in v.items
    ]
    assert items and all(item.turn_ids for item in items)  # something to check: every item cites its turns
    for item in items:
        assert {item.fact_id, *item.fact_ids} <= facts and set(item.turn_ids) <= turns
        assert item.text in {r.payload["text"] for r in mem.store.get("fact", user_id="ann")}


def test_the_offline_persona_is_the_same_for_the_same_conversation(minilm: Any, tmp_path: Path) -> None:
    from memstrata import Memstrata

    def build(folder: str) -> list[dict[str, Any]]:
        mem = Memstrata(path=tmp_path / folder, embeddings=minilm)
        _ingest(mem, "ann", 1, "2024-01-10T10:00:00", PORTO)
        _ingest(mem, "ann", 2, "2024-03-05T10:00:00", LISBON)
        out = sorted((r.payload for r in mem.store.get("persona", user_id="ann")), key=lambda p: p["id"])
        mem.close()
        return out

    assert build("one") == build("two")


def test_removing_an_item_keeps_it_out_of_every_version_and_of_later_rebuilds(moved: Any) -> None:
    mem, _ = moved
    now = mem.persona("Ann", user_id="ann")["basic_info"]
    nurse = next(i.fact_id for i in now.items if "nurse" in i.text)
    assert mem.forget_persona_item("Ann", "basic_info", nurse, user_id="ann") == 2  # both versions held it
    assert all("nurse" not in v.text for v in mem.persona_history("Ann", user_id="ann")["basic_info"])
    assert mem.store.get("fact", user_id="ann", unit_ids=[nurse])  # nothing raw is deleted
    _ingest(
        mem, "ann", 3, "2024-04-01T10:00:00", [("Ann", "My job at the hospital keeps me busy."), ("Bo", "Take care.")]
    )
    assert all(nurse not in (i.fact_id, *i.fact_ids) for i in mem.persona("Ann", user_id="ann")["basic_info"].items)
    with pytest.raises(LookupError, match="cites"):
        mem.forget_persona_item("Ann", "basic_info", "fact:none", user_id="ann")
    with pytest.raises(LookupError, match="no persona for speaker 'Zed'"):
        mem.persona("Zed", user_id="ann")
    assert_store_ok(mem.store, "ann")


def test_personas_are_per_user_and_go_with_the_user_and_with_their_turns(minilm: Any, tmp_path: Path) -> None:
    from memstrata import Memstrata

    mem = Memstrata(path=tmp_path / "store", embeddings=minilm)
    _ingest(mem, "ann", 1, "2024-01-10T10:00:00", PORTO)
    _ingest(mem, "zed", 1, "2024-01-10T10:00:00", [(s, t.replace("Porto", "Oslo")) for s, t in PORTO])
    assert "Porto" in mem.persona("Ann", user_id="ann")["basic_info"].text
    assert "Oslo" in mem.persona("Ann", user_id="zed")["basic_info"].text  # same speaker name, the other user's own
    result = mem.retrieve("Would Ann likely enjoy a landscape painting class?", user_id="zed", context_budget=500)
    assert "Porto" not in result.context and all(e.conversation_id == "c" for e in result.evidence)
    mem.delete_user(user_id="zed")
    assert mem.store.get("persona", user_id="zed") == [] and mem.persona("Ann", user_id="ann")
    painting = next(r.unit_id for r in mem.store.get("turn", user_id="ann") if "painting" in r.document)
    mem.store.delete_turns("ann", "c", [painting])  # forgetting a turn takes the versions that cite it
    assert all(
        painting not in v.linked_turn_ids() for vs in mem.persona_history("Ann", user_id="ann").values() for v in vs
    )
    assert_store_ok(mem.store, "ann")
    mem.close()


def test_an_inference_question_gets_one_cited_persona_line_inside_the_budget(moved: Any) -> None:
    mem, _ = moved
    result = mem.retrieve("Would Ann likely enjoy a landscape painting class?", user_id="ann", context_budget=300)
    how = result.trace["persona"]
    assert how["included"] and how["speaker"] == "Ann" and how["why"].startswith("the question asks to infer")
    head, body = result.context.split("\n")[:2]
    assert re.fullmatch(r"\[persona · Ann · \w+ · since \d+ \w+ 2024\]", head)
    assert re.search(r"\(cites s\d:\d+(, s\d:\d+)*\)$", body)
    assert result.trace["context_tokens"] <= 300
    assert all(not cite.startswith("persona") for cite, _ in parse_context(result.context))  # not a turn
    recall = mem.retrieve("When did Ann move to Lisbon?", user_id="ann", context_budget=300)
    assert recall.trace["persona"] is None and not recall.context.startswith("[persona")
    off = mem.retrieve(
        "Would Ann likely enjoy a landscape painting class?",
        user_id="ann",
        context_budget=300,
        persona={"search": False},
    )
    assert off.trace["persona"] is None
    tiny = mem.retrieve("Would Ann likely enjoy a landscape painting class?", user_id="ann", context_budget=60)
    assert tiny.trace["persona"]["included"] is False and "persona_share" in tiny.trace["persona"]["why"]


# ---- with a scripted model: Eq. 7 and Eq. 8 -------------------------------------------------------------------
def _scripted(condition: str) -> Any:
    from memstrata.prompts import PROMPTS
    from memstrata.testing import ScriptedChatModel

    def reply(messages: list[Any]) -> Any:
        system, user = str(messages[0].content), str(messages[1].content)  # a repair round keeps the first ask
        if system.startswith(PROMPTS["PERSONA_PROMPT"][:40]):
            ids = re.findall(r'<fact id="([^"]+)">([^<]*)</fact>', user)
            return {
                "interests": [{"text": f"Enjoys: {t}", "fact_ids": [i]} for i, t in ids[:2]],
                "values": [{"text": "Made up", "fact_ids": ["fact:never-shown"]}] if "Oslo" in user else [],
            }
        if system.startswith(PROMPTS["CALIBRATE_PROMPT"][:40]):
            shown = re.findall(r'<scene index="(\d+)"', user)
            return {
                "checks": [
                    {"scene": int(i), "needs_calibration": bool(condition), "condition": condition} for i in shown
                ]
            }
        return "no structured reply"  # other stages fall back to their offline results

    return ScriptedChatModel(default=reply)


def test_with_a_model_the_persona_cites_what_it_was_shown_and_scenes_get_conditions_appended(
    minilm: Any, tmp_path: Path
) -> None:
    from memstrata import Memstrata

    mem = Memstrata(path=tmp_path / "store", embeddings=minilm, model=_scripted("This fits Ann's love of art."))
    stats = _ingest(mem, "ann", 1, "2024-01-10T10:00:00", PORTO)
    assert stats["persona_llm"] == 1 and stats["calibration"] == "with the model"
    interests = mem.persona("Ann", user_id="ann")["interests"]
    facts = {r.unit_id for r in mem.store.get("fact", user_id="ann")}
    assert interests.method == "llm" and all(
        i.text.startswith("Enjoys: ") and i.fact_id in facts for i in interests.items
    )
    themes = {r.unit_id: Theme.model_validate(r.payload) for r in mem.store.get("theme", user_id="ann")}
    checked = [t for t in themes.values() if t.calibrations]
    assert checked and stats["scenes_calibrated"] == len(checked)
    # every scene about a speaker with a persona is checked in this one ingest, several scenes to a call
    facts = {r.unit_id: Fact.model_validate(r.payload) for r in mem.store.get("fact", user_id="ann")}
    speakers = sorted({f.subject for f in facts.values()} & {"Ann", "Tom"})
    assert not due_scenes(list(themes.values()), facts, speakers, lambda s: bool(mem.persona(s, user_id="ann")))
    first = {t.id: (t.text, list(t.calibrations)) for t in checked}
    assert all(t.calibrations[-1]["condition"] == "This fits Ann's love of art." for t in checked)
    # a later write: the scenes it changed are checked (once per form); earlier conditions stay as they were
    _ingest(mem, "ann", 2, "2024-03-05T10:00:00", LISBON)
    for r in mem.store.get("theme", user_id="ann"):
        t = Theme.model_validate(r.payload)
        if t.id in first:
            assert t.calibrations[: len(first[t.id][1])] == first[t.id][1]
            assert len(t.calibrations) == len(first[t.id][1]) + (t.text != first[t.id][0])
    assert_store_ok(mem.store, "ann")
    # a draft citing a fact it was not shown is rejected: the offline items stand, and the fallback is counted
    other = Memstrata(path=tmp_path / "other", embeddings=minilm, model=_scripted(""))
    stats = other.ingest(
        {
            "conversation_id": "c",
            "messages": session_messages(1, "2024-01-10T10:00:00", [(s, t.replace("Porto", "Oslo")) for s, t in PORTO]),
        },
        user_id="zed",
        close=True,
    )
    assert stats["persona_llm"] == 0 and stats["llm"]["persona"]["fallbacks"] == 1
    assert {v.method for v in other.persona("Ann", user_id="zed").values()} == {"extractive"}
    assert stats["scenes_calibrated"] == 0 and stats["scenes_checked"] >= 1  # consistent: an empty condition
    mem.close()
    other.close()


@pytest.mark.integration
def test_one_ingest_of_a_real_conversation_checks_every_scene_several_to_a_call(
    minilm: Any, locomo_path: Path, tmp_path: Path
) -> None:
    import json
    import math

    from memstrata import Memstrata

    item = json.loads(locomo_path.read_text())[0]  # conv-26's first four sessions, in one write
    raw = {**item, "conversation": {k: v for k, v in item["conversation"].items() if k.split("_")[1] in "1234"}}
    mem = Memstrata(
        path=tmp_path / "store",
        embeddings=minilm,
        model=_scripted("It fits."),
        persona={"calibrations": 40},
    )
    stats = mem.ingest(raw, user_id="u", close=True)
    themes = [Theme.model_validate(r.payload) for r in mem.store.get("theme", user_id="u")]
    facts = {r.unit_id: Fact.model_validate(r.payload) for r in mem.store.get("fact", user_id="u")}
    speakers = ["Caroline", "Melanie"]
    due = due_scenes(themes, facts, speakers, lambda s: True)
    assert not due_scenes(themes, facts, speakers, lambda s: bool(mem.persona(s, user_id="u")))  # none left unchecked
    before = due_scenes([t.model_copy(update={"calibrations": []}) for t in themes], facts, speakers, lambda s: True)
    assert not due and sum(map(len, before.values())) > 8  # more scenes than one call checks
    calls = stats["llm"]["persona"]["per_node"]["calibrate"]["calls"]
    assert calls == math.ceil(sum(map(len, before.values())) / 8)  # 8 checks to a call, whoever the speakers
    assert stats["scenes_checked"] == sum(map(len, before.values())) == stats["scenes_calibrated"]
    mem.close()


def test_offline_there_is_no_calibration(moved: Any) -> None:
    mem, _ = moved
    assert all(not r.payload["calibrations"] for r in mem.store.get("theme", user_id="ann"))
    assert set(DIMENSIONS) >= set(mem.persona("Ann", user_id="ann"))


def test_inspect_and_the_memory_page_show_the_dimensions_citations_and_history(moved: Any, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from memstrata.cli import app

    mem, _ = moved
    folder = mem.context(user_id="ann").data_dir
    out = CliRunner().invoke(
        app, ["inspect", "-u", "ann", "--persona", "ann", "--data-dir", folder or ""], env={"COLUMNS": "200"}
    )
    assert out.exit_code == 0, out.output
    assert "basic_info · v2" in out.output and "history: 1 earlier version(s)" in out.output
    assert "I moved to Lisbon last month." in out.output  # the raw turn an item cites
    assert "calibration: none (it needs a model" in out.output
    missing = CliRunner().invoke(app, ["inspect", "-u", "ann", "--persona", "Zed", "--data-dir", folder or ""])
    assert "no persona for speaker 'Zed'; speakers with one: ['Ann']" in missing.output


def test_the_memory_page_lists_persona_versions_with_their_items_in_a_browser(
    moved: Any,
    chromium: str,  # noqa: F811 - the imported fixture
    tmp_path: Path,
) -> None:
    from test_pages import _render

    from memstrata.views.pages import memory_page

    mem, _ = moved
    page = tmp_path / "memory.html"
    page.write_text(memory_page(mem.store, user_id="ann"), encoding="utf-8")
    dom = _render(chromium, page, tmp_path)
    assert "persona:ann:basic_info:2 · 2024-02-04 – now" in dom
    assert "persona:ann:basic_info:1 · 2024-01-10 – 2024-02-04 · history" in dom
    assert "I moved to Lisbon last month." in dom  # an item's raw turn


def test_the_search_tool_cites_the_personas_turns_by_session_and_turn_when_their_ids_are_message_ids(
    minilm: Any, tmp_path: Path
) -> None:
    import uuid

    from memstrata import Memstrata
    from memstrata.integrations.langchain import memory_search_tool

    mem = Memstrata(path=tmp_path / "store", embeddings=minilm)
    ids = [str(uuid.UUID(int=i + 1)) for i in range(len(PORTO))]  # what a chat app or the middleware sends
    messages = [{**m, "id": ids[i]} for i, m in enumerate(session_messages(1, "2024-01-10T10:00:00", PORTO))]
    mem.ingest({"conversation_id": "c", "messages": messages}, user_id="ann", close=True)
    question = "Would Ann likely enjoy a landscape painting class?"
    result = mem.retrieve(question, user_id="ann", context_budget=500)
    assert result.trace["persona"]["included"]
    body = result.context.split("\n")[1]
    assert re.search(r"\(cites s1:t\d+(, s1:t\d+)*\)$", body) and not any(i in body for i in ids)
    text = memory_search_tool(mem, user_id="ann", context_budget=500).invoke({"query": question})
    assert text.startswith("[persona") and not any(i in text for i in ids)  # one citation form, no message ids
    mem.close()
