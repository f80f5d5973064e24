"""The oracle reader: an UPPER-BOUND INSTRUMENT for measuring LLM mode's economics. Never a measure of answers.

It is a deterministic scripted chat model for the benchmark only. It is told the
gold evidence of the question being asked, and it answers every retrieval
prompt as a perfect model would decide, so the pipeline's control flow (light
or deep path, what is selected, how many rounds) and its token cost can be
measured without depending on how good a real model is:

* the light self-check passes iff, for every gold turn, a Level-1 summary that
  links to it is among the summaries shown (``force_deep`` makes it always fail:
  the same pipeline forced onto the deep path, for comparison);
* the deep selection picks exactly the entries whose episodes hold gold turns;
* reflection passes iff the graded answer cites every gold turn, and the oracle's
  own answers cite exactly the gold turns that were in what they read;
* the plan (decomposition) and the missing-info query reply with what the offline
  method produces for the same input (the plan leaves scopes and time windows to
  the offline rules), and the answers are short cited sentences,
  so those calls are metered at realistic sizes.

Completion tokens are counted by the local tokenizer from its scripted output
(tool-call arguments or text), like any reply without usage metadata.

Example:
    >>> oracle = OracleReader(summaries={"Ann moved to Porto.": {"D1:2"}})
    >>> oracle.begin({"D1:2": "We moved to Porto last May!"})
    >>> oracle.light_verdict("[8 May 2023] Ann moved to Porto.")["finished"]
    0
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import BaseMessage

from memstrata.memory.plan.rules import anchored_follow_up, decompose_query, expand_query
from memstrata.memory.query import Hit
from memstrata.testing import ScriptedChatModel

_ROLE = re.compile(r"<role>(.*?)</role>", re.S)
_LINE = re.compile(r"^\[(?P<id>[^\]·]+?)(?: · (?P<time>[^\]]+))?\] (?P<speaker>[^:]+): (?P<text>.*)$")
_CITED = re.compile(r"\b(D\d+:\d+)\b")
_NODES = {
    "DECOMPOSE_PROMPT": "decompose",
    "LIGHT_ANSWER_PROMPT": "gate",
    "LIGHT_CHECK_PROMPT": "gate_check",
    "SELECT_PROMPT": "select_level1",
    "FOLLOW_UP_PROMPT": "follow_up",
    "DEPENDENT_PROMPT": "rewrite_dependent",
    "REFLECT_PROMPT": "reflect",
    "ANSWER_PROMPT": "answer",
}


def _section(text: str, tag: str) -> str:
    match = re.search(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.S)
    return match.group(1) if match else ""


def _roles() -> dict[str, str]:
    from memstrata.prompts import PROMPTS

    return {_ROLE.search(PROMPTS[name]).group(1): node for name, node in _NODES.items()}  # type: ignore[union-attr]


class OracleReader:
    """A scripted model that knows each bench question's gold evidence (see the module docstring).

    Args:
        summaries: each Level-1 summary's text -> the turn ids it links to.
        force_deep: make the light self-check always fail (the forced-deep comparison).
    """

    def __init__(self, *, summaries: Mapping[str, set[str]] | None = None, force_deep: bool = False) -> None:
        self.summaries = dict(summaries or {})
        self.force_deep = force_deep
        self.gold: dict[str, str] = {}
        self.roles = _roles()
        self.model = ScriptedChatModel(default=self.reply)

    def begin(self, gold: Mapping[str, str]) -> None:
        """The next question's gold evidence: turn id -> verbatim text."""
        self.gold = dict(gold)

    def reply(self, messages: list[BaseMessage]) -> Any:
        """Dispatch on the system prompt's role; the user message is the second one (a repair follows it)."""
        role = _ROLE.search(str(messages[0].content))
        node = self.roles.get(role.group(1) if role else "", "answer")
        system, user = str(messages[0].content), str(messages[1].content)
        handlers = {
            "decompose": lambda: self.plan(user, system),
            "gate": lambda: self.light_verdict(_section(user, "memory")),
            "gate_check": lambda: self.checked(_section(user, "memory")),
            "select_level1": lambda: self.selection(_section(user, "memory")),
            "follow_up": lambda: self.sub_answer(user),
            "rewrite_dependent": lambda: self.rewrite(user),
            "reflect": lambda: self.reflection(user),
            "answer": lambda: self.cite(user),
        }
        return handlers[node]()

    # ---- what the oracle knows ---------------------------------------------------------------------------------
    def _linking(self, turn_id: str) -> list[str]:
        return [text for text, ids in self.summaries.items() if turn_id in ids]

    def present(self, text: str) -> list[str]:
        """The gold turns whose verbatim text is in ``text``."""
        return [t for t, body in self.gold.items() if body and body in text]

    def cite(self, text: str) -> str:
        """A short answer citing the gold turns present in what was read (empty of citations when none is)."""
        found = self.present(text)
        if not found:
            return "The memory does not say."
        return (
            "From the memory: " + "; ".join(self.gold[t][:120] for t in found) + " " + " ".join(f"[{t}]" for t in found)
        )

    # ---- decisions --------------------------------------------------------------------------------------------
    def light_verdict(self, memory: str) -> dict[str, Any]:
        """The light self-check: 0 iff every gold turn has a linking summary shown and not ``force_deep``, else 2."""
        ok = bool(self.gold) and all(any(s in memory for s in self._linking(t)) for t in self.gold)
        if self.force_deep or not ok:
            return {"finished": 2, "answer": ""}
        shown = list(dict.fromkeys(s for t in self.gold for s in self._linking(t) if s in memory))
        words = " ".join(" ".join(shown).split()[:60])
        return {"finished": 0, "answer": f"{words} " + " ".join(f"[{t}]" for t in self.gold)}

    def checked(self, memory: str) -> str:
        """The streamed self-check: ``ANSWER`` and the light answer on the next line, or ``SEARCH``."""
        verdict = self.light_verdict(memory)
        return f"ANSWER\n{verdict['answer']}" if verdict["finished"] == 0 else "SEARCH"

    def selection(self, memory: str) -> dict[str, Any]:
        """The deep selection: the ids of the ``memory`` lines that end with a summary linking to a gold turn."""
        wanted = {s for t in self.gold for s in self._linking(t)}
        ids = []
        for line in memory.splitlines():
            match = re.match(r"id:(\d+),", line)
            if match and any(line.endswith(s) for s in wanted):
                ids.append(int(match.group(1)))
        return {"ids": ids}

    def reflection(self, user: str) -> dict[str, Any]:
        """Reflection: finished iff there are gold turns and the graded answers cite them all, else a new question."""
        graded = _section(user, "answer") + _section(user, "sub_answers")
        cited = set(_CITED.findall(graded))
        if self.gold and set(self.gold) <= cited:
            return {"finished": True, "new_question": ""}
        question = _section(user, "question")
        return {"finished": False, "new_question": expand_query(question, [graded])}

    def sub_answer(self, user: str) -> dict[str, Any]:
        """A sub-query's answer citing the gold turns shown, and the offline rule's missing-info query, if any."""
        lines = [m for m in (_LINE.match(x) for x in _section(user, "memory").splitlines()) if m]
        hits = [
            Hit(
                kind="turn",
                unit_id=m["id"].strip(),
                conversation_id="",
                score=0.0,
                speaker=m["speaker"],
                text=m["text"],
                time=m["time"],
            )
            for m in lines
        ]
        rule = anchored_follow_up(
            _section(user, "sub_question"), [f"{h.speaker}: {h.text}" for h in hits[:10]], hits[:3]
        )
        return {"answer": self.cite(_section(user, "memory")), "missing": rule is not None, "query": rule or ""}

    def rewrite(self, user: str) -> dict[str, Any]:
        """The dependent rewrite: the sub-question followed by the first 12 words of its prerequisite answers."""
        answers = _section(user, "prerequisite_answers").replace("- ", " ").split()
        return {"question": " ".join([_section(user, "sub_question"), *answers[:12]])}

    def plan(self, user: str, system: str) -> dict[str, Any]:
        """The decomposition: the offline ``decompose_query`` sub-questions (or the question itself if none)."""
        question = _section(user, "question")
        most = re.search(r"At most (\d+) sub-questions", system)
        parts = decompose_query(question, max_parts=int(most.group(1)) if most else 4)[1:]
        return {
            "sub_queries": [{"id": q.id, "question": q.text} for q in parts] or [{"id": "q1", "question": question}]
        }


def summary_links(index: Any, kind: str = "summary") -> dict[str, set[str]]:
    """Each Level-1 summary's text (as prompts show it) -> the ids of the turns it links to."""
    table = index.events.get(kind)
    if table is None:
        return {}
    return {u.embed_text(): set(u.linked_turn_ids()) for u in table.units if u.embed_text().strip()}
