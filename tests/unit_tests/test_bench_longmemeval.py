"""LongMemEval-S bench: records, selection, the paper's metrics, the run, resume, shards and merge, the CLI."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from memstrata_bench.locomo import LocomoConversation
from memstrata_bench.longmemeval import (
    ABSTENTION,
    SharedEncoding,
    dcg,
    first_appearance,
    ndcg_at,
    parse_question_date,
    parse_record,
    ranked_metrics,
    retrieval_scores,
    select_records,
    shard_of,
)
from memstrata_bench.longmemeval_run import merge_longmemeval, read_log, run_longmemeval

REPO = Path(__file__).resolve().parents[2]
CAT = "I adopted a grey cat named Miso last spring."
RECIPE = "For the lentil soup, simmer the lentils for exactly 25 minutes with cumin."
LISBON = "I moved to Lisbon for a new job at a bakery."


def _turn(role: str, content: str, *, answer: bool | None = None) -> dict[str, Any]:
    return {"role": role, "content": content, **({"has_answer": answer} if answer is not None else {})}


def tiny_records() -> list[dict[str, Any]]:
    """Three questions of three sessions each; dates out of haystack order, one empty turn, one abstention."""
    filler = [
        [_turn("user", "Can you recommend a good book about rivers?"), _turn("assistant", "Try 'Rivers of Time'.")],
        [_turn("user", "What's the weather like in spring?"), _turn("assistant", "Mild, with some rain.")],
    ]
    dates = ["2023/05/03 (Wed) 09:00", "2023/05/01 (Mon) 10:00", "2023/05/02 (Tue) 08:00"]
    cat_session = [
        _turn("user", "Hi there!", answer=False),
        _turn("user", "", answer=False),
        _turn("user", CAT, answer=True),
        _turn("assistant", "What a lovely name for a cat.", answer=False),
    ]
    soup_session = [
        _turn("user", "How long should I cook lentil soup?", answer=False),
        _turn("assistant", RECIPE, answer=True),
    ]
    move_session = [_turn("user", LISBON, answer=False), _turn("assistant", "Congratulations on the move!")]
    return [
        {
            "question_id": "q-cat",
            "question_type": "single-session-user",
            "question": "What is the name of my cat?",
            "answer": "Miso",
            "question_date": "2023/05/30 (Tue) 23:40",
            "haystack_session_ids": ["f1", "answer_cat", "f2"],
            "haystack_dates": dates,
            "haystack_sessions": [filler[0], cat_session, filler[1]],
            "answer_session_ids": ["answer_cat"],
        },
        {
            "question_id": "q-soup",
            "question_type": "single-session-assistant",
            "question": "How many minutes did you tell me to simmer the lentils for the soup?",
            "answer": "25",
            "question_date": "2023/06/01 (Thu) 12:00",
            "haystack_session_ids": ["f1", "f2", "answer_soup"],
            "haystack_dates": dates,
            "haystack_sessions": [filler[0], filler[1], soup_session],
            "answer_session_ids": ["answer_soup"],
        },
        {
            "question_id": "q-move_abs",
            "question_type": "multi-session",
            "question": "Which city did I move to for my job at the bank?",
            "answer": "You did not mention this information.",
            "question_date": "2023/06/02 (Fri) 12:00",
            "haystack_session_ids": ["answer_move", "f1", "f2"],
            "haystack_dates": dates,
            "haystack_sessions": [move_session, filler[0], filler[1]],
            "answer_session_ids": ["answer_move"],
        },
    ]


@pytest.fixture
def tiny_path(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_lme.json.gz"
    path.write_bytes(gzip.compress(json.dumps(tiny_records()).encode()))
    return path


class CountingEmbeddings(Embeddings):
    """Hash-like bag-of-words vectors that count the texts encoded."""

    name = "counting-bow"
    dimension = 32

    def __init__(self) -> None:
        self.documents = 0

    def _vec(self, text: str) -> list[float]:
        v = [0.0] * self.dimension
        for word in text.lower().split():
            v[sum(map(ord, word.strip(".,!?'"))) % self.dimension] += 1.0
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / norm for x in v]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents += len(texts)
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)


class RecordingMethod:
    """Returns the whole haystack at every budget and records which questions it prepared for."""

    name = "everything"

    def __init__(self) -> None:
        self.prepared: list[str] = []

    def prepare(self, conversation: LocomoConversation) -> None:
        self.prepared.append(conversation.sample_id)
        self.conversation = conversation

    def context(self, question: str, conversation: LocomoConversation, budget: int) -> str:
        return "\n".join(t.render() for t in conversation.turns)


# ---- records --------------------------------------------------------------------------------------------------
def test_a_record_becomes_time_ordered_turns_with_stable_ids_and_no_empty_turn() -> None:
    q = parse_record(tiny_records()[0])
    assert q.asked_at == datetime(2023, 5, 30, 23, 40)
    # f1 (index 0) is dated 3 May, answer_cat (1) 1 May, f2 (2) 2 May: in time order, sessions 1, 2, 0
    assert [t.dia_id for t in q.conversation.turns] == ["D2:1", "D2:3", "D2:4", "D3:1", "D3:2", "D1:1", "D1:2"]
    assert "D2:2" not in q.session_of  # the empty turn
    assert q.evidence == ("D2:3",) and q.gold_texts() == [CAT]
    assert q.session_of["D2:3"] == "answer_cat" and q.roles["D2:4"] == "assistant"
    assert q.category == "single-session-user" and not q.abstention
    messages = q.conversation.raw[0]["messages"]
    assert [m["session"] for m in messages] == ["1", "1", "1", "2", "2", "3", "3"]
    assert messages[1] == {
        "id": "D2:3",
        "role": "user",
        "content": CAT,
        "session": "1",
        "timestamp": "2023-05-01T10:00:00",
    }
    assert parse_record(tiny_records()[2]).category == ABSTENTION


def test_a_record_missing_a_field_is_refused_by_name() -> None:
    record = tiny_records()[0]
    del record["haystack_dates"]
    with pytest.raises(ValueError, match=r"x\.json: missing field\(s\) \['haystack_dates'\]"):
        parse_record(record, where="x.json")
    with pytest.raises(ValueError, match="LongMemEval date"):
        parse_question_date("someday")


def test_per_type_draws_each_stratum_with_its_seed_and_shards_interleave() -> None:
    records = [
        {"question_id": f"{t}-{i}{'_abs' if i == 9 else ''}", "question_type": t} for t in ("a", "b") for i in range(10)
    ]
    picked = select_records(records, per_type=2, seed=3)
    assert picked == select_records(records, per_type=2, seed=3)
    assert picked != select_records(records, per_type=2, seed=4)
    strata = [r["question_id"].split("-")[0] if not r["question_id"].endswith("_abs") else "abs" for r in picked]
    assert sorted(strata) == ["a", "a", "abs", "abs", "b", "b"]
    assert picked == [r for r in records if r in picked]  # file order kept
    assert select_records(records, limit=3) == records[:3]
    shards = [shard_of(records, (i, 3)) for i in range(3)]
    assert shards[1][:2] == [records[1], records[4]]
    assert sorted(r["question_id"] for part in shards for r in part) == sorted(r["question_id"] for r in records)
    with pytest.raises(ValueError, match="shard"):
        shard_of(records, (3, 3))


# ---- the paper's metrics, by hand -----------------------------------------------------------------------------
def test_ndcg_uses_the_papers_gain_and_its_ideal() -> None:
    assert dcg([1, 1, 1], 3) == pytest.approx(1 + 1 + 1 / math.log2(3))
    assert dcg([], 5) == 0.0
    # relevant at ranks 2 and 4 of 4: (1/log2 2 + 1/log2 4) / (1 + 1/log2 2) = 1.5 / 2
    assert ndcg_at(["a", "b", "c", "d"], {"b", "d"}, 4) == pytest.approx(0.75)
    assert ndcg_at(["a", "b"], {"b", "d"}, 2) == pytest.approx(0.5)
    assert ndcg_at(["b", "d", "a"], {"b", "d"}, 10) == pytest.approx(1.0)
    assert ndcg_at(["a"], {"z"}, 5) == 0.0


def test_recall_any_and_all_at_k() -> None:
    scores = ranked_metrics(["a", "b", "c", "d"], {"b", "d"}, ks=(1, 2, 4))
    assert (scores["recall_any@1"], scores["recall_all@1"]) == (0.0, 0.0)
    assert (scores["recall_any@2"], scores["recall_all@2"]) == (1.0, 0.0)
    assert (scores["recall_any@4"], scores["recall_all@4"]) == (1.0, 1.0)
    assert ranked_metrics([], {"a"}, ks=(5,)) == {"recall_any@5": 0.0, "recall_all@5": 0.0, "ndcg@5": 0.0}
    with pytest.raises(ValueError, match="relevant"):
        ranked_metrics(["a"], set())


def test_session_and_turn_levels_from_one_ranked_list() -> None:
    q = parse_record(tiny_records()[0])
    ranked = ["D3:1", "D3:2", "D1:1", "D2:4", "D2:3", "D1:2", "unknown"]
    assert first_appearance(q.session_of[k] for k in ranked[:-1]) == ["f2", "f1", "answer_cat"]
    scores = retrieval_scores(q, ranked, ks=(2, 3))
    session = scores["session"]
    assert session is not None
    # sessions f2, f1, answer_cat: the answer session is third
    assert (session["recall_any@2"], session["recall_any@3"]) == (0.0, 1.0)
    assert session["ndcg@3"] == pytest.approx(1 / math.log2(3))
    turn = scores["turn"]
    assert turn is not None and turn["recall_any@3"] == 0.0
    # user turns only: D3:1, D1:1, D2:3 -> the evidence is the third user turn
    user = scores["turn_user"]
    assert user is not None and (user["recall_any@2"], user["recall_all@3"]) == (0.0, 1.0)
    assert user["ndcg@3"] == pytest.approx(1 / math.log2(3))
    # evidence said by the assistant: no user-turn score, the all-turn score finds it
    soup = parse_record(tiny_records()[1])
    assert soup.user_evidence() == ()
    both = retrieval_scores(soup, ["D3:2", "D3:1"], ks=(1,))
    assert both["turn_user"] is None
    assert both["turn"] == {"recall_any@1": 1.0, "recall_all@1": 1.0, "ndcg@1": 1.0}


def test_shared_encoding_encodes_each_text_once_until_cleared() -> None:
    inner = CountingEmbeddings()
    shared = SharedEncoding(inner, max_texts=4)
    assert shared.embed_documents(["a", "b", "a"]) == [inner._vec("a"), inner._vec("b"), inner._vec("a")]
    shared.embed_documents(["b", "a"])
    assert inner.documents == 2
    shared.clear()
    shared.embed_documents(["a"])
    assert inner.documents == 3
    shared.embed_documents(["c", "d", "e", "f"])  # over the bound: starts again
    assert inner.documents == 7


# ---- the run --------------------------------------------------------------------------------------------------
def test_bm25_dense_and_memstrata_in_one_run(tiny_path: Path, tmp_path: Path) -> None:
    embeddings = CountingEmbeddings()
    log = tmp_path / "run.jsonl"
    result = run_longmemeval(
        tiny_path,
        log=log,
        methods=["bm25", "dense", "hybrid_rrf", "memstrata"],
        budgets=(40, 400),
        embeddings=embeddings,
        progress=False,
        command="test",
    )
    assert result["questions"] == 2 and result["questions_per_type"][ABSTENTION] == 1
    assert result["latency_budget"] == 400 and result["rank_budget"] == 400
    methods = result["methods"]
    assert set(methods) == {"bm25", "dense", "hybrid_rrf", "memstrata"}
    for name, m in methods.items():
        assert m["budget_violations"] == 0, name
        assert m["recall_all"]["400"] == 1.0, name  # a whole haystack fits in 400 tokens
        assert m["retrieval"]["session"]["recall_any@5"] == 1.0, name  # three sessions only
        assert m["retrieval"]["turn_user"]["questions"] == 1, name  # the soup's evidence is the assistant's
        assert m["abstention"]["questions"] == 1 and m["abstention"]["recall_questions"] == 0, name
        assert set(m["per_type"]) == {"single-session-user", "single-session-assistant"}, name
        assert set(m["latency_ms"]) >= {"p50", "p95"}
    assert methods["memstrata"]["mean_ranked_turns"] > 0
    assert methods["memstrata"]["stage_seconds"]
    assert result["embedding_floor_seconds"] == methods["dense"]["prepare_seconds"]
    # dense and hybrid share one encoding of each question's turns (memstrata encodes its own)
    rows = read_log(log)[1]
    assert list(rows) == ["q-cat", "q-soup", "q-move_abs"]
    assert rows["q-cat"]["haystack_turns"] == 7
    assert rows["q-cat"]["methods"]["bm25"]["retrieval"]["turn"]["recall_any@5"] == 1.0


def test_dense_and_hybrid_encode_each_turn_once(tiny_path: Path, tmp_path: Path) -> None:
    embeddings = CountingEmbeddings()
    run_longmemeval(
        tiny_path,
        log=tmp_path / "r.jsonl",
        methods=["hybrid_rrf", "dense"],
        budgets=(400,),
        embeddings=embeddings,
        progress=False,
    )
    turns = sum(len(parse_record(r).conversation.turns) for r in tiny_records())
    assert embeddings.documents == turns + 1  # and one warm-up text, encoded before any timed ingestion


def test_the_encoder_is_loaded_before_any_timed_ingestion() -> None:
    """Whichever method prepared first used to pay the encoder's one-time load inside its ingestion time."""
    from memstrata_bench.longmemeval_run import build_methods
    from memstrata_bench.runner import resolve_methods

    for build in (
        lambda e: resolve_methods(["bm25", "dense"], embeddings=e),
        lambda e: build_methods(["bm25", "dense"], embeddings=e, settings=None, budgets=(400,)),
    ):
        embeddings = CountingEmbeddings()
        build(embeddings)
        assert embeddings.documents == 1


def test_a_stopped_run_resumes_where_its_log_ends(tiny_path: Path, tmp_path: Path) -> None:
    log = tmp_path / "r.jsonl"
    first = RecordingMethod()
    run_longmemeval(tiny_path, log=log, methods=[first], budgets=(100,), questions=2, progress=False)
    assert first.prepared == ["q-cat", "q-soup"]
    with log.open("a") as out:
        out.write('{"kind": "question", "question_id": "q-mo')  # a line cut off by a kill
    again = RecordingMethod()
    result = run_longmemeval(tiny_path, log=log, methods=[again], budgets=(100,), progress=False)
    assert again.prepared == ["q-move_abs"]
    assert list(read_log(log)[1]) == ["q-cat", "q-soup", "q-move_abs"]  # the new row is not glued to the cut line
    assert result["questions"] == 2 and result["methods"]["everything"]["recall_all"]["100"] == 1.0
    with pytest.raises(ValueError, match="other budgets"):
        run_longmemeval(tiny_path, log=log, methods=[RecordingMethod()], budgets=(200,), progress=False)


def test_shards_merge_into_what_one_run_gives(tiny_path: Path, tmp_path: Path) -> None:
    from memstrata_bench.cli import bench_app
    from typer.testing import CliRunner

    def run(*args: str) -> dict[str, Any]:
        out = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
        base = ["longmemeval", str(tiny_path), "--methods", "bm25,random", "--budgets", "30,300", "--no-progress"]
        outcome = CliRunner().invoke(bench_app, [*base, "--out", str(out), *args])
        assert outcome.exit_code == 0, outcome.output
        return json.loads(out.read_text())

    whole = run()
    shard0 = run("--shard", "0/2", "--log", str(tmp_path / "s0.jsonl"))
    assert shard0["questions_missing"] == [] and shard0["questions"] == 1  # q-cat and the abstention
    run("--shard", "1/2", "--log", str(tmp_path / "s1.jsonl"))
    partial = run("--merge", str(tmp_path / "s0.jsonl"), "--log", str(tmp_path / "p.jsonl"))
    assert partial["questions_missing"] == ["q-soup"]
    merged = run("--merge", str(tmp_path / "s0.jsonl"), "--merge", str(tmp_path / "s1.jsonl"))
    assert merged["questions_missing"] == [] and merged["questions"] == whole["questions"] == 2

    def scores(part: dict[str, Any]) -> dict[str, Any]:
        return {k: part[k] for k in ("questions", "recall_all", "recall_frac", "retrieval")}

    for name in ("bm25", "random"):
        ours, theirs = merged["methods"][name], whole["methods"][name]
        assert scores(ours) == scores(theirs) and scores(ours["abstention"]) == scores(theirs["abstention"])
        assert {t: scores(v) for t, v in ours["per_type"].items()} == {
            t: scores(v) for t, v in theirs["per_type"].items()
        }
    assert len(merged["runs"]) == 2


def test_merging_logs_of_other_settings_is_refused(tiny_path: Path, tmp_path: Path) -> None:
    for name, budgets in (("a", (100,)), ("b", (200,))):
        run_longmemeval(tiny_path, log=tmp_path / f"{name}.jsonl", methods=["bm25"], budgets=budgets, progress=False)
    with pytest.raises(ValueError, match=r"b\.jsonl was written with other budgets"):
        merge_longmemeval(tiny_path, [tmp_path / "a.jsonl", tmp_path / "b.jsonl"], log=tmp_path / "m.jsonl")


def test_the_cli_writes_results_a_plot_and_tables_and_render_makes_a_section(tiny_path: Path, tmp_path: Path) -> None:
    from memstrata_bench.cli import bench_app
    from typer.testing import CliRunner

    out = tmp_path / "lme.json"
    args = ["longmemeval", str(tiny_path), "--methods", "bm25,random", "--per-type", "1", "--out", str(out)]
    outcome = CliRunner().invoke(bench_app, [*args, "--budgets", "20,200", "--no-progress"])
    assert outcome.exit_code == 0, outcome.output
    result = json.loads(out.read_text())
    assert (tmp_path / "lme.jsonl").is_file()
    assert (tmp_path / "lme_recall.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(result["provenance"]) == {"commit", "date", "machine", "command"}
    assert result["selection"] == {"questions": None, "per_type": 1, "seed": 0, "shard": None}
    assert "session" in outcome.output and "bm25" in outcome.output
    spec = importlib.util.spec_from_file_location("benchmarks_render", REPO / "benchmarks" / "render.py")
    assert spec is not None and spec.loader is not None
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    section = render.longmemeval({"longmemeval": result})
    assert section.startswith("## LongMemEval-S")
    bm25 = result["methods"]["bm25"]
    assert f"| bm25 | {render.pct(bm25['recall_all']['20'])} / {render.pct(bm25['recall_frac']['20'])} |" in section
    bad = CliRunner().invoke(bench_app, [*args, "--shard", "2/2"])
    assert bad.exit_code != 0 and "--shard" in bad.output


@pytest.mark.integration
@pytest.mark.slow  # about 60 s on 2 busy cores: MiniLM and three memstrata stores; tests/conftest.py's SLOW may list it
def test_the_command_with_minilm_runs_bm25_dense_and_memstrata(tiny_path: Path, tmp_path: Path) -> None:
    from memstrata_bench.cli import bench_app
    from typer.testing import CliRunner

    out = tmp_path / "lme.json"
    args = ["longmemeval", str(tiny_path), "--methods", "bm25,dense,memstrata", "--budgets", "50,500"]
    outcome = CliRunner().invoke(bench_app, [*args, "--out", str(out), "--no-progress"])
    assert outcome.exit_code == 0, outcome.output
    methods = json.loads(out.read_text())["methods"]
    assert methods["memstrata"]["recall_all"]["500"] == 1.0
    assert methods["memstrata"]["retrieval"]["session"]["recall_any@5"] == 1.0
    assert methods["dense"]["retrieval"]["turn"]["questions"] == 2
