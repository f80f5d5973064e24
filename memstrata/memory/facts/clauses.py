"""Offline fact extraction: content-bearing clauses of each turn, with the speaker and dates resolved.

What this is, truthfully: a deterministic rule-based extractor, not a parser and
not a model. For each turn it

1. splits the text into sentences, then into clauses at ``;``, dashes and
   conjunctions that start a new statement ("but", "because", "so", ", and I");
2. drops questions, greetings, fillers and clauses with fewer than two content words;
3. rewrites first person as the speaker ("I'm" -> "Caroline is", "my" -> "Caroline's"),
   and second person as the other speaker when the session has exactly two, with the
   verb put in the third person by ``lemminflect`` (``"I love"`` -> ``"Caroline loves"``);
4. appends the absolute date to relative phrases, resolved against the session time
   (``"yesterday"`` -> ``"yesterday (7 May 2023)"``), and keeps it as ``event_date``;
5. takes as relation label the lemma of the first verb after the subject (empty when
   there is none), and as object the first name after it (else its next content words;
   a possessive such as "Caroline's" is not an object).

Entity mentions and possessive relations ("my sister Anna") come from
:mod:`memstrata.memory.entity_graph.mentions`. The output is a list of
:class:`~memstrata.memory.levels.level1.fact.Fact` with ``subject`` and ``mentions`` as
written; entity linking resolves them to ids afterwards.

Example:
    >>> from datetime import datetime
    >>> from memstrata.memory.levels.level2.turn import Turn
    >>> t = Turn(
    ...     user_id="u",
    ...     session_id="1",
    ...     position=0,
    ...     speaker="Caroline",
    ...     timestamp=datetime(2023, 5, 8),
    ...     text="I went to a support group yesterday. It was so powerful!",
    ... )
    >>> [f.text for f in extract_facts([t], episode_id="ep:s1:0-0", speakers=["Caroline", "Melanie"])]
    ['Caroline went to a support group yesterday (7 May 2023).']
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache

from lemminflect import getAllLemmas, getInflection

from memstrata.memory.entity_graph.mentions import Mention, find_mentions
from memstrata.memory.levels.level1.fact import Fact
from memstrata.memory.levels.level2.turn import Turn
from memstrata.memory.text import PLEASANTRY, SENTENCE, STOPWORDS, content_words, resolve_dates_in, split_at
from memstrata.memory.timeparse import RELATIVE_PATTERN, resolve_relative

_CLAUSE = re.compile(
    r"\s*(?:;|\s-+\s|—|–|,?\s+(?:but|because|so that|although|though|whereas)\s+|,\s+so\s+|"
    r",\s*and\s+(?=(?:i|i'm|i've|we|my|our|he|she|they|you)\b))\s*",
    re.IGNORECASE,
)
_FILLER = re.compile(r",?\s*\b(?:you know|i mean|i guess|to be honest|honestly|like)\b,", re.IGNORECASE)
_LEADING = re.compile(
    r"^(?:(?:yeah|yes|yep|no|nope|well|oh|so|and|but|haha|hah|lol|wow|omg|aww|hey|hi|also|anyway|"
    r"actually|totally|definitely|true|right|thanks|thank you|ok|okay|of course|by the way|"
    r"guess what|btw|sure|cool|great|awesome|nice)\b[\s,!.]*)+",
    re.IGNORECASE,
)
_LEAD_NAME = re.compile(r"^([A-ZÀ-Þ][\w'-]*(?: [A-ZÀ-Þ][\w'-]*)*)")
_FIRST = [  # (pattern, replacement with {s} for the speaker); order matters: contractions first
    (r"\bI'm\b|\bI am\b", "{s} is"),
    (r"\bI've\b", "{s} has"),
    (r"\bI'd\b", "{s} would"),
    (r"\bI'll\b", "{s} will"),
    (r"\bI was\b", "{s} was"),
    (r"\bI have\b", "{s} has"),
    (r"\bmyself\b", "{s}"),
    (r"\b[Mm]y\b", "{s}'s"),
    (r"\b[Mm]ine\b", "{s}'s"),
    (r"\b[Mm]e\b", "{s}"),
    (r"\bI\b", "{s}"),
    (r"\b[Ww]e're\b|\b[Ww]e are\b", "{s} and others are"),
    (r"\b[Ww]e've\b", "{s} and others have"),
    (r"\b[Ww]e\b", "{s} and others"),
    (r"\b[Oo]ur\b", "{s}'s"),
    (r"\b[Uu]s\b", "{s} and others"),
]
_SECOND = [
    (r"\b[Yy]ou're\b|\b[Yy]ou are\b", "{o} is"),
    (r"\b[Yy]ou've\b", "{o} has"),
    (r"\b[Yy]ou were\b", "{o} was"),
    (r"\b[Yy]ou have\b", "{o} has"),
    (r"\b[Yy]ou'll\b", "{o} will"),
    (r"\b[Yy]ou'd\b", "{o} would"),
    (r"\b[Yy]ourself\b", "{o}"),
    (r"\b[Yy]our\b", "{o}'s"),
    (r"\b[Yy]ours\b", "{o}'s"),
    (r"\b[Yy]ou\b", "{o}"),
]
_AUX = frozenset(
    [
        "is",
        "was",
        "are",
        "were",
        "am",
        "be",
        "been",
        "being",
        "has",
        "have",
        "had",
        "do",
        "does",
        "did",
        "will",
        "would",
        "can",
        "could",
        "shall",
        "should",
        "may",
        "might",
        "must",
        "just",
        "really",
        "also",
        "finally",
        "recently",
        "never",
        "always",
        "still",
        "even",
        "actually",
        "already",
        "not",
        "n't",
        "gonna",
        "wanna",
        "got",
        "to",
    ]
)
_QUESTION = frozenset(["what", "when", "where", "who", "why", "how", "which", "whose", "whom"])
_MODALS = frozenset(
    ["can", "could", "will", "would", "shall", "should", "may", "might", "must", "did", "had", "was", "were"]
)
_STARTS_WITH_PERSON = re.compile(r"^\s*(?:I\b|I'm|I've|I'd|I'll|[Mm]y\b|[Ww]e\b|[Ww]e're|[Oo]ur\b|[Mm]e\b)")


def extract_facts(
    turns: Sequence[Turn], *, episode_id: str, speakers: Sequence[str], session_time: datetime | None = None
) -> list[Fact]:
    """The facts of one episode's turns, numbered in order (see the module docstring)."""
    out: list[Fact] = []
    people = list(dict.fromkeys(speakers))
    for turn in turns:
        other = next((p for p in people if p != turn.speaker), None) if len(people) == 2 else None
        anchor = turn.timestamp or session_time
        for clause, start, end in clause_spans(turn.text):
            fact = _fact(turn, clause, other=other, anchor=anchor, episode_id=episode_id, n=len(out), speakers=people)
            if fact is not None:
                out.append(fact.model_copy(update={"quotes": [(turn.id, start, end)]}))
    return out


def clauses(text: str) -> list[str]:
    """Sentences split into clauses, fillers removed, stripped of trailing punctuation noise."""
    return [clause for clause, _, _ in clause_spans(text)]


def clause_spans(text: str) -> list[tuple[str, int, int]]:
    """:func:`clauses`, each with the characters ``[start, end)`` of ``text`` it was cut from.

    Example:
        >>> clause_spans("Yeah, I moved to Porto; it is sunny.")
        [('I moved to Porto', 6, 22), ('it is sunny', 24, 35)]
    """
    out = []
    text = (text or "").replace("\u2019", "'").replace("\u2018", "'")  # same length: offsets hold
    kept, where = _without_fillers(text)
    for at, sentence in split_at(SENTENCE, kept):
        question = sentence.rstrip().endswith("?")
        for start, part in split_at(_CLAUSE, sentence, at):
            lead, part = _trimmed(part)
            if part and not question:
                first = start + lead
                out.append((part, where[first], where[first + len(part) - 1] + 1))
    return out


def _without_fillers(text: str) -> tuple[str, list[int]]:
    """``text`` with each filler (``, you know,``) replaced by a comma, and where each kept character came from."""
    pieces, where, last = [], [], 0
    for m in _FILLER.finditer(text):
        pieces += [text[last : m.start()], ","]
        where += [*range(last, m.start()), m.start()]
        last = m.end()
    pieces.append(text[last:])
    where += range(last, len(text))
    return "".join(pieces), where


def _trimmed(part: str) -> tuple[int, str]:
    """A clause stripped of punctuation noise and leading fillers (``"Yeah, so I"`` -> ``"I"``), and how many
    characters went from its start.
    """
    noise = " ,.!;:-\"'"
    lead = len(part) - len(part.lstrip(noise))
    part = part.strip(noise)
    if m := _LEADING.match(part):
        lead += m.end()
        part = part[m.end() :]
    lead += len(part) - len(part.lstrip(noise))
    return lead, part.strip(noise)


def carries_content(clause: str) -> bool:
    """A statement worth keeping: not a greeting, at least four words, two of them content words."""
    if PLEASANTRY.match(clause) or len(clause.split()) < 4:
        return False
    return len(content_words(clause)) >= 2


def resolve_persons(clause: str, *, speaker: str, other: str | None) -> str:
    """First person -> the speaker, second person -> the other speaker (if known), verbs in third person."""
    text = clause
    for pattern, repl in _FIRST:
        text = re.sub(pattern, repl.format(s=speaker), text)
    if other:
        for pattern, repl in _SECOND:
            text = re.sub(pattern, repl.format(o=other), text)
    names = [n for n in (speaker, other) if n]
    return _third_person(text, names)


def _third_person(text: str, names: Sequence[str]) -> str:
    """``"Caroline love"`` -> ``"Caroline loves"``: a base-form verb right after a resolved name."""
    if not names:
        return text
    pattern = re.compile(rf"\b({'|'.join(re.escape(n) for n in names)}) ([a-z]+)\b")

    def fix(m: re.Match[str]) -> str:
        return f"{m.group(1)} {_vbz(m.group(2))}"

    return pattern.sub(fix, text)


@lru_cache(maxsize=4096)
def _vbz(word: str) -> str:
    lemmas = getAllLemmas(word)
    if word in _MODALS or word.endswith(("ed", "s")) or word not in lemmas.get("VERB", ()):
        return word
    inflected = getInflection(word, tag="VBZ")
    return inflected[0] if inflected else word


@lru_cache(maxsize=8192)
def verb_lemma(word: str) -> str | None:
    """The verb lemma of a word, or ``None`` when it is not a verb form (``"moved"`` -> ``"move"``)."""
    lemmas = getAllLemmas(word.lower()).get("VERB")
    return lemmas[0] if lemmas else None


def relation_of(statement: str, subject: str) -> tuple[str, str]:
    """``(label, object)``: the first verb lemma after the subject, and the first name (or words) after it."""
    rest = statement.split(subject, 1)[1] if subject in statement else statement
    words = re.findall(r"[A-Za-z][\w'-]*|\d[\d,.:/]*", rest)
    label, start, saw_be, saw_have = "", len(words), False, False
    for i, w in enumerate(words):
        low = w.lower().removesuffix("'s")
        if low in _AUX:
            saw_be |= low in {"is", "was", "are", "were", "am", "been", "be"}
            saw_have |= low in {"has", "have", "had"}
            continue
        lemma = verb_lemma(low) if not w[0].isupper() else None
        if lemma:
            label, start = lemma, i + 1
        else:
            label, start = ("be" if saw_be else "have" if saw_have else ""), i
        break
    tail = words[start:]
    first = next((i for i, w in enumerate(tail) if _is_name(w)), None)
    if first is None:
        return label, " ".join([w for w in tail if w.lower() not in STOPWORDS][:4])
    span = [tail[first]]
    for w in tail[first + 1 :]:
        if not _is_name(w):
            break
        span.append(w)
    return label, " ".join(span)


def _is_name(word: str) -> bool:
    return word[0].isupper() and word.lower() not in STOPWORDS and not word.endswith("'s")


def _fact(
    turn: Turn,
    clause: str,
    *,
    other: str | None,
    anchor: datetime | None,
    episode_id: str,
    n: int,
    speakers: Sequence[str],
) -> Fact | None:
    if not carries_content(clause):
        return None
    first_person = _STARTS_WITH_PERSON.match(clause) is not None
    statement = resolve_persons(clause, speaker=turn.speaker, other=other)
    mentions = find_mentions(clause, speaker=turn.speaker, other=other, speakers=speakers)
    lead = _LEAD_NAME.match(clause)
    name = leading_name(lead.group(1)) if lead and not first_person else ""
    if name and all(m.name != name for m in mentions):
        mentions.insert(0, Mention(name, "name"))  # a name that starts the clause (rules skip sentence starts)
    subject = _subject(clause, statement, turn.speaker, other, mentions, first_person=first_person)
    if subject not in statement:
        statement = f"{turn.speaker}: {statement}"  # a clause about nobody named: keep who said it
    label, obj = relation_of(statement, subject)
    match = RELATIVE_PATTERN.search(statement)
    event_date = resolve_relative(match.group(0), anchor) if match and anchor else None
    return Fact(
        user_id=turn.user_id,
        conversation_id=turn.conversation_id,
        episode_id=episode_id,
        session_id=turn.session_id,
        n=n,
        text=resolve_dates_in(statement, anchor).rstrip(".") + ".",
        subject=subject,
        relation=label,
        object=obj,
        mentions=[m.name for m in mentions if m.name != subject],
        types={m.name: m.type for m in mentions},
        links=[list(link) for m in mentions for link in m.links],
        turn_ids=[turn.id],
        timestamp=anchor,
        timestamp_raw=turn.timestamp_raw,
        event_date=event_date,
    )


_NUMBER_WORDS = frozenset(
    [
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "twenty",
        "thirty",
        "forty",
        "fifty",
        "hundred",
        "thousand",
        "million",
        "first",
        "second",
        "third",
        "last",
        "next",
    ]
)


def common_word(word: str) -> bool:
    """A word English uses as a verb, adjective or adverb (lemminflect knows such a lemma for it), or a number word:
    capitalised at the start of a sentence, it is not a name ("Come", "Perfect", "Maybe", "Three"). A word the
    dictionary knows only as a noun may well be a name ("Tom"), and "Berlin" or "Okafor" it does not know at all.
    """
    low = word.lower().removesuffix("'s")
    return (
        low in STOPWORDS or low in _QUESTION or low in _NUMBER_WORDS or bool(set(getAllLemmas(low)) - {"NOUN", "PROPN"})
    )


def leading_name(span: str) -> str:
    """The name in a clause-initial capitalised span, its leading common words dropped ("Maybe Berlin" -> "Berlin");
    ``""`` when nothing is left.
    """
    words = span.removesuffix("'s").split()
    while words and common_word(words[0]):
        words.pop(0)
    return " ".join(words)


def _subject(
    clause: str, statement: str, speaker: str, other: str | None, mentions: list[Mention], *, first_person: bool
) -> str:
    """Who the clause is about: the speaker for first person, the other for "you", else a leading name."""
    if first_person:
        return speaker
    if other and re.match(r"^\s*(?:you|your)\b", clause, re.IGNORECASE):
        return other
    lead = re.match(r"^\s*([A-Z][\w'-]*(?: [A-Z][\w'-]*)*)", statement)
    named = {m.name for m in mentions}
    if lead and (lead.group(1).removesuffix("'s") in named or lead.group(1) in (speaker, other)):
        return lead.group(1).removesuffix("'s")
    return speaker
