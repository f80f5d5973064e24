"""The LoCoMo harness: evidence normalization, packing, the presence rule, recall, baselines, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_bench
from langchain_core.embeddings import Embeddings
from memstrata_bench.baselines import RandomMethod, reciprocal_rank_fusion
from memstrata_bench.locomo import LocomoConversation, LocomoTurn, load_locomo, normalize_evidence, parse_conversation
from memstrata_bench.metric import is_present, score_context
from memstrata_bench.packing import pack_lines
from memstrata_bench.report import llm_table
from memstrata_bench.runner import run_locomo

from memstrata.memory.tokens import TokenCounter

BUDGETS = (500, 1000, 1500, 2000, 4000)


class WordCounter:
    """One token per whitespace-separated word: makes budgets easy to reason about."""

    def count(self, text: str) -> int:
        return len(text.split())


def _turn(dia_id: str, speaker: str, text: str, **extra: str) -> dict[str, str]:
    return {"speaker": speaker, "dia_id": dia_id, "text": text, **extra}


def tiny_locomo() -> list[dict]:
    """One conversation, two sessions, a dangling date key and five QA items."""
    body = {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_1_date_time": "1:00 pm on 8 May, 2023",
        "session_1": [
            _turn("D1:1", "Ann", "I adopted a grey cat named Miso."),
            _turn("D1:2", "Bo", "Lovely! Send a picture.", blip_caption="a grey cat on a sofa"),
            _turn("D1:3", "Ann", "I start a pottery class on Friday."),
        ],
        "session_2_date_time": "2:00 pm on 9 June, 2023",
        "session_2": [
            _turn("D2:1", "Bo", "I am moving to Lisbon next month."),
            _turn("D2:2", "Ann", "Lisbon is wonderful in summer."),
        ],
        "session_3_date_time": "3:00 pm on 1 July, 2023",
    }
    qa = [
        {"question": "What is Ann's cat called?", "answer": "Miso", "evidence": ["D1:1"], "category": 4},
        {"question": "Where is Bo moving?", "answer": "Lisbon", "evidence": ["D2:1; D2:2"], "category": 2},
        {"question": "What did Ann start?", "answer": "pottery", "evidence": ["D1:03", "D:2:1"], "category": 1},
        {"question": "What does Bo hate?", "adversarial_answer": "rain", "evidence": ["D1:2"], "category": 5},
        {"question": "Dangling", "answer": "x", "evidence": ["D9:9", "D"], "category": 3},
    ]
    return [{"sample_id": "conv-t", "conversation": body, "qa": qa}]


@pytest.fixture
def tiny_path(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_locomo.json"
    path.write_text(json.dumps(tiny_locomo()), encoding="utf-8")
    return path


# ---- evidence normalization -------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (["D:11:26"], ["D11:26"]),
        (["D30:05"], ["D30:5"]),
        (["D1:3; D2:4"], ["D1:3", "D2:4"]),
        (["D8:6,D9:17"], ["D8:6", "D9:17"]),
        (["D9:1 D4:4\tD4:6"], ["D9:1", "D4:4", "D4:6"]),
        (["D", ""], []),
        (["D3:7", "D3:07"], ["D3:7"]),
    ],
)
def test_normalize_evidence(raw: list[str], expected: list[str]) -> None:
    assert normalize_evidence(raw) == expected


def test_parse_conversation_drops_missing_ids_and_empty_questions() -> None:
    conv = parse_conversation(tiny_locomo()[0])
    assert [t.dia_id for t in conv.turns] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2"]
    assert [q.evidence for q in conv.questions] == [("D1:1",), ("D2:1", "D2:2"), ("D1:3", "D2:1"), ("D1:2",)]
    assert conv.dropped_questions == 1
    assert conv.dropped_ids == ["D9:9"]
    assert conv.questions[3].answer == "rain"


def test_render_adds_photo_caption() -> None:
    conv = parse_conversation(tiny_locomo()[0])
    assert conv.turns[0].render() == "Ann: I adopted a grey cat named Miso."
    assert conv.turns[1].render() == "Bo: Lovely! Send a picture. [shares a photo: a grey cat on a sofa]"


def test_load_locomo_counts_the_real_file(locomo_path: Path) -> None:
    convs = load_locomo(locomo_path)
    questions = [q for c in convs for q in c.questions]
    assert sum(len(c.turns) for c in convs) == 5882
    assert len({(c.sample_id, t.session) for c in convs for t in c.turns}) == 272
    assert sum(1 for q in questions if q.category in (1, 2, 3, 4)) == 1536
    assert sum(len(c.dropped_ids) for c in convs) == 2


def test_load_locomo_rejects_unknown_conversation(tiny_path: Path) -> None:
    with pytest.raises(ValueError, match="conv-nope"):
        load_locomo(tiny_path, conversations=["conv-nope"])


# ---- packing ------------------------------------------------------------------------
def test_packing_stops_at_first_overflow() -> None:
    lines = ["a b", "c d e f g", "h"]
    assert pack_lines(lines, budget=4, counter=WordCounter()) == "a b"
    assert pack_lines(lines, budget=7, counter=WordCounter()) == "a b\nc d e f g"
    assert pack_lines(lines, budget=8, counter=WordCounter()) == "a b\nc d e f g\nh"
    assert pack_lines(lines, budget=1, counter=WordCounter()) == ""


def test_packing_never_exceeds_budget_with_minilm_tokens() -> None:
    counter = TokenCounter()
    conv = parse_conversation(tiny_locomo()[0])
    lines = [t.render() for t in conv.turns] * 40
    for budget in (1, 7, 13, 50, 99, 500, 1000):
        context = pack_lines(lines, budget=budget, counter=counter)
        assert counter.count(context) <= budget
        taken = len(context.split("\n")) if context else 0
        if taken < len(lines):
            assert counter.count("\n".join(lines[: taken + 1])) > budget


def test_packing_verifies_a_non_additive_counter() -> None:
    class Joiner(WordCounter):
        """Each newline costs two extra tokens that per-line counts cannot see."""

        def count(self, text: str) -> int:
            return super().count(text) + (2 * text.count("\n") if text != "\n" else 0)

    context = pack_lines(["a", "b", "c"], budget=4, counter=Joiner(), line_tokens=[1, 1, 1])
    assert Joiner().count(context) <= 4
    assert context == "a\nb"


# ---- presence rule and recall -------------------------------------------------------
def test_presence_is_verbatim() -> None:
    text = "I adopted a grey cat named Miso."
    assert is_present(text, f"[2023-05-08] Ann: {text} (D1:1)")
    assert not is_present(text, "Ann: I adopted a gray cat named Miso.")
    assert not is_present(text, "Ann: I adopted a grey cat named")
    assert not is_present(text, "Ann adopted a cat (Miso).")
    assert not is_present("", "anything")


def test_score_context_counts_each_gold_turn() -> None:
    assert score_context("x A y B", ["A", "B"]) == (True, 1.0)
    assert score_context("x A y", ["A", "B"]) == (False, 0.5)
    with pytest.raises(ValueError, match="gold_texts"):
        score_context("x", [])


class ScriptedMethod:
    """Returns fixed contexts: the first gold turn at 500, everything at 1000, a too-long string at 1500."""

    name = "scripted"

    def __init__(self) -> None:
        self.prepared: list[str] = []

    def prepare(self, conversation: LocomoConversation) -> None:
        self.prepared.append(conversation.sample_id)
        self.turns: list[LocomoTurn] = conversation.turns

    def context(self, question: str, conversation: LocomoConversation, budget: int) -> str:
        gold = next(q for q in conversation.questions if q.question == question).evidence
        texts = conversation.turn_texts()
        if budget == 500:
            return texts[gold[0]]
        if budget == 1000:
            return "\n".join(t.render() for t in self.turns)
        return "word " * (budget + 1)


def test_recall_on_tiny_dataset(tiny_path: Path) -> None:
    result = run_locomo(
        tiny_path, budgets=(500, 1000, 1500), methods=[ScriptedMethod()], progress=False, command="test"
    )
    stats = result["methods"]["scripted"]
    assert result["questions"] == 3
    assert result["command"] == "test"
    # 500: only the first gold turn -> the single-evidence question is complete, the two others half.
    assert stats["recall_all"]["500"] == pytest.approx(1 / 3)
    assert stats["recall_frac"]["500"] == pytest.approx((1 + 0.5 + 0.5) / 3)
    assert stats["recall_all"]["1000"] == pytest.approx(1.0)
    # Over budget scores zero even though every turn is in the string.
    assert stats["recall_all"]["1500"] == 0.0
    assert stats["budget_violations"] == 4
    assert stats["per_category"]["4"]["recall_all"] == {"500": 1.0, "1000": 1.0, "1500": 0.0}
    assert stats["per_category"]["2"]["recall_frac"]["500"] == pytest.approx(0.5)
    assert stats["per_category"]["3"]["recall_all"]["1000"] == 0.0
    assert stats["category_5"]["questions"] == 1
    assert stats["category_5"]["recall_all"]["1000"] == 1.0
    assert set(stats["latency_ms"]) >= {"p50", "p95"}
    assert result["ingest_seconds"] is None


def test_rrf_and_random_are_deterministic() -> None:
    import numpy as np

    assert reciprocal_rank_fusion([np.array([2, 0, 1]), np.array([2, 1, 0])]).tolist() == [2, 0, 1]
    conv = parse_conversation(tiny_locomo()[0])
    first, second = RandomMethod(counter=WordCounter()), RandomMethod(counter=WordCounter())
    first.prepare(conv)
    second.prepare(conv)
    assert first.rank("q").tolist() == second.rank("q").tolist()
    assert sorted(first.rank("q").tolist()) == list(range(len(conv.turns)))


def test_cli_writes_json_and_plot(tiny_path: Path, tmp_path: Path) -> None:
    from memstrata_bench.cli import bench_app
    from typer.testing import CliRunner

    out, plot = tmp_path / "r.json", tmp_path / "r.png"
    args = [
        "locomo",
        str(tiny_path),
        "--methods",
        "bm25,random",
        "--budgets",
        "20,40",
        "--out",
        str(out),
        "--plot",
        str(plot),
        "--no-progress",
    ]
    outcome = CliRunner().invoke(bench_app, args)
    assert outcome.exit_code == 0, outcome.output
    result = json.loads(out.read_text())
    assert set(result["methods"]) == {"bm25", "random"}
    assert result["budgets"] == [20, 40]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "bm25" in outcome.output
    provenance = result["provenance"]
    assert set(provenance) == {"commit", "date", "machine", "command"}
    assert provenance["command"] == result["command"]  # under CliRunner, this process's own argv
    assert provenance["date"].endswith("Z") and provenance["machine"]["cores"] >= 1
    assert provenance["commit"]  # a short hash, or "not recorded" outside a git checkout


def test_provenance_names_the_commit_the_machine_and_the_command() -> None:
    from memstrata_bench.provenance import NOT_RECORDED, git_commit, provenance

    block = provenance("memstrata bench locomo data.json")
    assert block["command"] == "memstrata bench locomo data.json"
    assert set(block["machine"]) == {"cores", "memory_gib", "platform"}
    assert block["commit"] == git_commit()
    assert git_commit(Path("/")) == NOT_RECORDED  # no checkout there


def test_the_recall_plot_is_titled_with_its_dataset(tiny_path: Path) -> None:
    from memstrata_bench.report import dataset_name, recall_figure, recall_table

    result = run_locomo(tiny_path, budgets=(500, 1000), methods=[ScriptedMethod()], progress=False, command="test")
    title = recall_figure(result).axes[0].get_title()
    assert title.startswith("tiny_locomo evidence recall") and "LoCoMo" not in title
    assert str(recall_table(result).title).startswith("tiny_locomo ")
    assert dataset_name({"dataset": {"path": "../shared/data/locomo/locomo10.json"}}) == "locomo10"
    assert dataset_name({}) == "LoCoMo"  # an old results file without its dataset


def test_cli_rejects_unknown_method(tiny_path: Path) -> None:
    from memstrata_bench.cli import bench_app
    from typer.testing import CliRunner

    outcome = CliRunner().invoke(bench_app, ["locomo", str(tiny_path), "--methods", "bm25,nope"])
    assert outcome.exit_code != 0
    assert "nope" in outcome.output


# ---- integration: the real baselines on a slice of conv-26 -------------------------------
class MemoEmbeddings(Embeddings):
    """Real MiniLM vectors, computed once per text: dense and hybrid embed the same turns."""

    name = "memo-minilm"
    dimension = 384

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner
        self.cache: dict[str, list[float]] = {}

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        self.cache.update(zip(missing, self.inner.embed_documents(missing), strict=True))
        return [self.cache[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


@pytest.mark.integration
def test_baselines_on_conv26(locomo_path: Path, minilm) -> None:  # type: ignore[no-untyped-def]
    result = run_locomo(
        locomo_path,
        conversations=["conv-26"],
        methods=["bm25", "dense", "hybrid_rrf", "random"],
        questions_per_conversation=8,
        embeddings=MemoEmbeddings(minilm),
        progress=False,
    )
    assert result["conversations"] == ["conv-26"]
    assert result["questions"] == sum(result["questions_per_category"][c] for c in "1234")
    for name, stats in result["methods"].items():
        assert stats["budget_violations"] == 0, name
        recall = [stats["recall_all"][str(b)] for b in BUDGETS]
        frac = [stats["recall_frac"][str(b)] for b in BUDGETS]
        assert all(0.0 <= r <= f <= 1.0 for r, f in zip(recall, frac, strict=True)), name
        # Packing takes a prefix of one ranking, so recall cannot drop as the budget grows.
        assert recall == sorted(recall) and frac == sorted(frac), name
        assert stats["latency_ms"]["queries"] == 8
        assert stats["mean_context_tokens"]["500"] <= 500
    methods = result["methods"]
    assert methods["hybrid_rrf"]["recall_frac"]["1500"] > methods["random"]["recall_frac"]["1500"]
    assert methods["bm25"]["recall_frac"]["1500"] > methods["random"]["recall_frac"]["1500"]


@pytest.mark.integration
def test_memstrata_method_stays_within_budget(tiny_path: Path, hash_embeddings) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("memstrata.graphs.retrieval", reason="the retrieval graph is not written yet")
    result = run_locomo(tiny_path, methods=["memstrata"], embeddings=hash_embeddings, budgets=(50, 500), progress=False)
    stats = result["methods"]["memstrata"]
    assert stats["budget_violations"] == 0
    assert result["ingest_seconds"] > 0
    assert stats["recall_frac"]["500"] > 0


@pytest.mark.integration
def test_oracle_reader_bench_reports_cost_per_path(tiny_path: Path, hash_embeddings) -> None:  # type: ignore[no-untyped-def]
    """``--reader oracle`` meters every query; ``oracle-deep`` is the same pipeline forced onto the deep path."""
    runs = {
        r: run_locomo(
            tiny_path, methods=["memstrata"], embeddings=hash_embeddings, budgets=(1500,), progress=False, reader=r
        )["methods"]["memstrata"]["llm"]
        for r in ("oracle", "oracle-deep")
    }
    light, deep = runs["oracle"]["per_category"]["1-4"], runs["oracle-deep"]["per_category"]["1-4"]
    assert light["questions"] == deep["questions"] == 3 and deep["light_share"] == 0.0
    assert set(deep["tokens_by_path"]) == {"deep"} and "select_level1" in deep["per_node"]
    assert light["light_share"] > 0 and "light" in light["tokens_by_path"]  # a 5-turn store: its summaries suffice
    assert light["tokens_by_path"]["light"] < deep["tokens_by_path"]["deep"]
    assert light["fallback_rate"] == deep["fallback_rate"] == 0.0  # the oracle's replies always validate
    table = llm_table({"methods": {"memstrata": {"llm": runs["oracle"], "recall_all": {}, "per_category": {}}}})
    assert table is not None and table.row_count == len(runs["oracle"]["per_category"])


def test_bench_scale_smoke(tmp_path, locomo_path) -> None:
    """``memstrata bench scale`` at its smallest: one original conversation, then copies; both search paths,
    queries in a separate process, the chat pattern, JSON and plot.
    """
    out, plot = tmp_path / "scale.json", tmp_path / "scale.png"
    done = run_bench(
        "scale",
        str(locomo_path),
        "--sizes",
        "400,1200",
        "--originals",
        "1",
        "--questions",
        "8",
        "--chat-turns",
        "500",
        "--chat-rounds",
        "3",
        "--out",
        str(out),
        "--plot",
        str(plot),
        timeout=1500,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    small, grown = result["sizes"]
    assert small["copied_turns"] == 0 and small["original_turns"] == small["turns"] >= 400
    assert grown["turns"] >= 1200 and grown["copied_turns"] == grown["turns"] - small["turns"]
    assert grown["copy_turns_per_second"] > 0 and grown["disk_mb"] > small["disk_mb"]
    for row in (small, grown):
        assert set(row["paths"]) == {"snapshot", "bounded", "tiered"} and row["default_path"] == "snapshot"
        tiered = row["paths"]["tiered"]
        shares = [v for k, v in tiered.items() if k.startswith("answered_from_tier_")]
        assert shares and sum(shares) == pytest.approx(100, abs=0.5)  # every question says which tier answered
        assert not any(k.startswith("answered_from_tier_") for k in row["paths"]["bounded"])
        for measured in row["paths"].values():
            assert measured["questions"] == 8 and 0 <= measured["planted_recall_all@1500"] <= 100
            assert measured["query_process_peak_mb"] > 0
    assert result["chat"]["rounds"] == 3 and result["chat"]["ratio_p50"] > 0
    assert "reusing their vectors" in result["note"] and plot.stat().st_size > 0


def test_bench_scale_reports_each_path_as_soon_as_it_is_measured(
    tmp_path, locomo_path, monkeypatch, hash_embeddings
) -> None:
    """A long run stopped midway keeps the paths it measured: ``report`` gets the size's row after each path."""
    from memstrata_bench import scale

    grown = scale.GrowingStore
    monkeypatch.setattr(scale, "GrowingStore", lambda *a, **kw: grown(*a, **{**kw, "embeddings": hash_embeddings}))
    seen: list[list[str]] = []
    monkeypatch.setattr(scale, "measure", lambda store, path, **kw: {"search": kw["search"]})
    rows = scale.run_sizes(
        locomo_path,
        [300],
        questions=1,
        budget=1500,
        workdir=tmp_path,
        threshold=100,
        originals=1,
        report=lambda row: seen.append(list(row["paths"])),
    )
    assert seen == [["bounded"], ["bounded", "tiered"]]  # past the threshold: archive-only, then tiered
    assert rows[0]["paths"]["tiered"] == {"search": "tiered"} and rows[0]["turns"] >= 300


def test_a_kept_scale_store_stopped_midway_is_grown_on_to_exactly_a_clean_store(
    tmp_path, locomo_path, hash_embeddings
) -> None:
    from memstrata_bench import scale

    from memstrata.memory.store.invariants import check_store

    folder = tmp_path / "kept"

    def grower(originals: int = 1) -> scale.GrowingStore:
        return scale.GrowingStore(
            locomo_path, embeddings=hash_embeddings, workdir=tmp_path, prefix="s-", originals=originals, folder=folder
        )

    first = grower()
    assert not first.resumed
    first.grow(1)  # the original, through the ingestion graph
    original = first.turns
    scale.copy_conversation(first.mem.store, first.convs[0], 1)  # stopped after writing a copy, before recording it
    first.close()
    again = grower()
    assert again.resumed and (again.turns, again.copy, again.next_conv) == (original, 1, 0)
    again.grow(original + 1)  # the copy is written again, over itself
    assert again.turns == 2 * original == again.mem.store.count("turn", user_id=scale.USER)
    assert check_store(again.mem.store, scale.USER, None) == []
    again.close()
    with pytest.raises(ValueError, match="original conversations"):
        grower(originals=2)


def test_bench_scale_through_a_chroma_server(tmp_path, locomo_path) -> None:
    """``bench scale --server``: the store grows and is queried through a ``chroma run`` the bench starts over the
    store's folder (loopback) and stops; the server's peak memory is reported beside the query process's.
    """
    out = tmp_path / "scale.json"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "memstrata.cli", "bench", "scale", str(locomo_path), "--server"),
            *("--sizes", "300", "--originals", "1", "--questions", "4", "--revisits", "2", "--chat-rounds", "0"),
            *("--out", str(out), "--plot", str(tmp_path / "scale.png"), "--workdir", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=1500,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = json.loads(out.read_text())["sizes"]
    assert row["store"] == "chroma run server" and row["turns"] >= 300
    for path, measured in row["paths"].items():
        assert measured["questions"] == 4 and measured["server_peak_mb"] > 0 and measured["query_process_peak_mb"] > 0
        if path != "snapshot":  # the first two asked again, after the tiers took the first pass's promotions
            assert measured["revisit"]["questions"] == 2 and 0 <= measured["revisit"]["planted_recall_all@1500"] <= 100
    servers = subprocess.run(["pgrep", "-f", f"chroma run --path {tmp_path}"], capture_output=True, check=False)
    assert servers.stdout == b""  # stopped


def test_a_server_reader_waits_as_long_as_its_client(hash_embeddings) -> None:  # type: ignore[no-untyped-def]
    """A local server answers parallel selection branches one at a time; the run's call timeout is the client's."""
    from memstrata_bench.reader import READER_TIMEOUT_S, ReaderMethod

    url = ReaderMethod(embeddings=hash_embeddings, reader="http://127.0.0.1:9/v1")
    assert url.settings["llm_timeout_s"] == READER_TIMEOUT_S == url.model.request_timeout
    assert "llm_timeout_s" not in ReaderMethod(embeddings=hash_embeddings, reader="oracle").settings
    mine = ReaderMethod(embeddings=hash_embeddings, reader="http://127.0.0.1:9/v1", settings={"llm_timeout_s": 5})
    assert mine.settings["llm_timeout_s"] == 5


def test_bench_set_reads_context_fields_and_refuses_unknown_ones() -> None:
    import typer
    from memstrata_bench.cli import _settings

    assert _settings(["themes.search_k=0", "themes.select=top", "experimental.theme_stage2=true", "level1_k=5"]) == {
        "themes": {"search_k": 0, "select": "top"},
        "experimental": {"theme_stage2": True},
        "level1_k": 5,
    }
    for bad in (["no_such_field=1"], ["themes.search_k"], ["theme_search_k=0"], ["themes.serch_k=0"], ["themes=1"]):
        with pytest.raises(typer.BadParameter):
            _settings(bad)


def test_a_signal_stops_growth_after_the_conversation_being_written(
    tmp_path, locomo_path, hash_embeddings, monkeypatch
) -> None:
    """SIGTERM mid-copy: the copy is finished and recorded, then growth stops with ``GrowthStoppedError``; the handlers
    before it are back, and the same folder grows on from there.
    """
    import signal

    from memstrata_bench import scale

    from memstrata.memory.store.invariants import check_store

    folder = tmp_path / "kept"
    grower = scale.GrowingStore(
        locomo_path, embeddings=hash_embeddings, workdir=tmp_path, prefix="s-", originals=1, folder=folder
    )
    grower.grow(1)
    original = grower.turns
    copy = scale.copy_conversation

    def copy_then_signal(store, conv, k):  # the signal arrives while a copy is being written
        os.kill(os.getpid(), signal.SIGTERM)
        return copy(store, conv, k)

    handler = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(scale, "copy_conversation", copy_then_signal)
    with pytest.raises(scale.GrowthStoppedError, match="SIGTERM"):
        grower.grow(10 * original)
    monkeypatch.setattr(scale, "copy_conversation", copy)
    assert signal.getsignal(signal.SIGTERM) is handler
    assert grower.turns == 2 * original == grower.mem.store.count("turn", user_id=scale.USER)
    grower.close()
    again = scale.GrowingStore(
        locomo_path, embeddings=hash_embeddings, workdir=tmp_path, prefix="s-", originals=1, folder=folder
    )
    assert again.resumed and (again.turns, again.copy) == (2 * original, 2)
    again.grow(3 * original)
    assert again.turns == 3 * original and check_store(again.mem.store, scale.USER, None) == []
    again.close()


def test_the_grower_hands_its_store_back_before_a_size_is_measured_and_grows_on(
    locomo_path, hash_embeddings, tmp_path
) -> None:
    """``release`` closes the grower's embedded Chroma client, so the query processes that measure a size do not
    share the machine with a parent holding every index it wrote (10.5 GB at 1M turns); ``grow`` opens it again.
    """
    from chromadb.api.shared_system_client import SharedSystemClient
    from memstrata_bench import scale

    from memstrata.memory.store.invariants import check_store

    grower = scale.GrowingStore(locomo_path, embeddings=hash_embeddings, workdir=tmp_path, prefix="s-", originals=1)
    grower.grow(1)
    original, client = grower.turns, grower.mem.store.client
    assert client._identifier in SharedSystemClient._identifier_to_system
    grower.release()
    assert client._identifier not in SharedSystemClient._identifier_to_system  # stopped: its indexes are freed
    grower.grow(2 * original)  # opened again, and grown on from where it was
    assert grower.turns == 2 * original == grower.mem.store.count("turn", user_id=scale.USER)
    assert check_store(grower.mem.store, scale.USER, None) == []
    grower.close()


def test_the_bench_is_its_own_distribution_and_says_how_to_install_it_when_missing() -> None:
    """``memstrata bench`` comes from ``benchmarks/`` (package ``memstrata_bench``), not from the library: the
    library's modules never import it, and without it the command says how to install it and exits 2.
    """
    import memstrata_bench

    import memstrata

    assert Path(memstrata_bench.__file__).parent.parent.name == "benchmarks"
    assert not (Path(memstrata.__file__).parent / "bench").exists()
    hide = (
        "import sys, importlib.abc\n"
        "class Hide(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] == 'memstrata_bench':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "from memstrata.cli import app\n"
        "app(['bench', 'locomo', 'x.json', '--conversations', 'conv-26'])\n"
    )
    done = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "pip install -e benchmarks/" in done.stderr and "Traceback" not in done.stderr
    installed = run_bench("--help", timeout=120)
    assert installed.returncode == 0 and "locomo" in installed.stdout
