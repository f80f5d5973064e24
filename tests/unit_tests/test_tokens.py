"""The MiniLM token counter: joined lines cost the sum of their lines, so packing can count from memoized lines."""

from __future__ import annotations

import json
import random
from pathlib import Path

from memstrata.memory.query import Hit
from memstrata.memory.search.packing import pack_context
from memstrata.memory.tokens import TokenCounter


def _locomo_lines(path: Path) -> list[str]:
    data = json.loads(path.read_text())
    lines = []
    for sample in data[:3]:
        conv = sample["conversation"]
        for key, turns in conv.items():
            if key.startswith("session_") and isinstance(turns, list):
                lines += [
                    f"{t['dia_id'].split(':')[1]} {t['speaker']}: {t['text']}"
                    + (f" [shares a photo: {t['blip_caption']}]" if t.get("blip_caption") else "")
                    for t in turns
                ]
    return lines


def test_joined_lines_cost_the_sum_of_their_lines(locomo_path: Path) -> None:
    counter = TokenCounter()
    lines = _locomo_lines(locomo_path)
    assert len(lines) > 1000
    rng = random.Random(7)
    for _ in range(200):
        chosen = rng.sample(lines, rng.randint(1, 60))
        chosen.insert(rng.randrange(len(chosen) + 1), "[D3 · 8 May 2023 · conv-26]")
        assert counter.count_lines(chosen) == counter.count("\n".join(chosen))  # the whole text, encoded


class _WholeText:
    """A counter without ``count_lines``: one token per character, so joining is never free."""

    def count(self, text: str) -> int:
        return len(text)


def test_packing_keeps_its_budget_with_either_counter() -> None:
    items = [
        Hit(
            kind="turn",
            unit_id=f"D{1 + i % 3}:{i}",
            conversation_id="c",
            score=1.0 - i / 100,
            session_id=str(1 + i % 3),
            position=i,
            speaker="Ann",
            text=f"I moved to Porto in year {2000 + i}.",
            time=f"{1 + i % 3} May 2023",
        )
        for i in range(40)
    ]
    for counter in (TokenCounter(), _WholeText()):
        for budget in (20, 60, 200, 2000):
            context, chosen, tokens = pack_context(items, budget=budget, counter=counter)
            whole = len(context) if isinstance(counter, _WholeText) else TokenCounter().count(context)
            assert tokens == whole <= budget
            assert chosen == sorted(chosen, key=lambda h: -h.score)


def test_a_tokenizer_that_keeps_newlines_counts_the_joined_text(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2, "Ċ": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    counter = TokenCounter(str(path))
    lines = ["a b", "b a", "a"]
    assert counter.count_lines(lines) == counter.count("\n".join(lines)) != sum(map(counter.count, lines))
