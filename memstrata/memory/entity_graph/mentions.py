"""Offline entity mentions, by rules: speakers, capitalised spans, and kin or pets after a possessive.

What this is, truthfully: pattern rules, not a named-entity recogniser.

- a speaker named in the clause (and the speaker behind "I", the other behind "you");
- capitalised spans that do not start a sentence (``"Sweden"``, ``"Ms. Okafor"``, ``"Cais do Sodré"``),
  without months, weekdays and sentence-initial words; typed ``organization`` after a word of employment ("works
  at", "an offer from", "joined", "hired by"), ``place`` after a place preposition ("in", "to", "from", "at",
  "near", "visited"), else ``name``;
- noun phrases after possessives: ``"my sister"`` is the entity *Caroline's sister* (a relative), and
  ``"my dog Max"`` is *Max* (a pet); each also yields the relation ``(Caroline, dog, Max)``.

Example:
    >>> [
    ...     (m.name, m.type, m.links)
    ...     for m in find_mentions("my dog Max loves Porto", speaker="Ann", other=None, speakers=["Ann"])
    ... ]
    [('Ann', 'speaker', []), ('Max', 'pet', [('Ann', 'dog', 'Max')]), ('Porto', 'name', [])]
    >>> [
    ...     m.name
    ...     for m in find_mentions("Mel, You've got this. Woah, Tues was fun", speaker="Ann", other=None, speakers=[])
    ... ]
    []
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from memstrata.memory.text import STOPWORDS

KIN = [
    "sister",
    "brother",
    "mom",
    "mother",
    "dad",
    "father",
    "parents",
    "son",
    "daughter",
    "kids",
    "kid",
    "children",
    "child",
    "husband",
    "wife",
    "partner",
    "boyfriend",
    "girlfriend",
    "fiance",
    "fiancee",
    "friend",
    "bestie",
    "cousin",
    "aunt",
    "uncle",
    "niece",
    "nephew",
    "grandma",
    "grandmother",
    "grandpa",
    "grandfather",
    "family",
    "baby",
    "boss",
    "coworker",
    "colleague",
    "neighbor",
    "neighbour",
    "teacher",
    "mentor",
    "roommate",
]
PETS = [
    "dog",
    "dogs",
    "cat",
    "cats",
    "puppy",
    "kitten",
    "pet",
    "pets",
    "horse",
    "bird",
    "fish",
    "rabbit",
    "hamster",
    "turtle",
    "guinea",
]
_POSSESSIVE = re.compile(
    rf"\b(?i:(my|your|our)\s+(?:(?:little|older|younger|big|best|new|old|two|three)\s+)?({'|'.join(KIN + PETS)})s?)\b"
    r"(?:,?\s+([A-Z][a-z]+))?"
)
_NOT_NAMES = frozenset(
    {
        *(m.lower() for m in calendar.month_name if m),
        *(d.lower() for d in calendar.day_name),
        "i",
        "im",
        "omg",
        "ok",
        "okay",
        "hey",
        "wow",
        "yes",
        "no",
        "oh",
        "thanks",
        "god",
        "lol",
        # interjections people capitalise mid-sentence ("Mel, Woah!")
        "woah",
        "whoa",
        "yay",
        "yeah",
        "yep",
        "nope",
        "aww",
        "haha",
        "hmm",
        "ugh",
        "hi",
        "hello",
        "bye",
        # weekday shorthands beside calendar's three-letter ones
        "tues",
        "thur",
        "thurs",
        "weds",
        *(d.lower() for d in calendar.day_abbr),
        *(m.lower() for m in calendar.month_abbr if m),
    }
)
_CONTRACTION = re.compile(r"'(?:ve|re|ll|d|s|m|t)$", re.IGNORECASE)
_NAME = r"[A-ZÀ-Þ][\w'-]*"
_TITLE = r"(?:Mr|Ms|Mrs|Dr|Prof)\.?\s+"
_SPAN = re.compile(rf"(?<![.!?]\s)(?<!^)\b((?:{_TITLE})?{_NAME}(?:\s+(?:(?:of|do|da|de|del|la|van|von)\s+)?{_NAME})*)")
_PLACE_BEFORE = re.compile(r"\b(?:in|to|from|at|near|visit(?:ed|ing)?|around)\s+(?:the\s+)?$", re.IGNORECASE)
_ORG_BEFORE = re.compile(
    r"\b(?:work(?:s|ed|ing)?|job|offer|intern(?:s|ed|ing)?|hired|employed|joined)\s+"
    r"(?:at|for|by|with|from)?\s*(?:the\s+)?$",
    re.IGNORECASE,
)


@dataclass
class Mention:
    """An entity named in a clause: its name as written, a type, and relations the phrase implies."""

    name: str
    type: str
    links: list[tuple[str, str, str]] = field(default_factory=list)


def find_mentions(clause: str, *, speaker: str, other: str | None, speakers: Sequence[str]) -> list[Mention]:
    """Every entity the clause names, in order of first appearance, each once."""
    found: dict[str, Mention] = {}
    if re.search(r"\b(?:I|I'm|I've|my|me|we|our)\b", clause, re.IGNORECASE):
        found[speaker] = Mention(speaker, "speaker")
    if other and re.search(r"\b(?:you|your|you're)\b", clause, re.IGNORECASE):
        found.setdefault(other, Mention(other, "speaker"))
    for name in speakers:
        if re.search(rf"\b{re.escape(name.split()[0])}\b", clause):
            found.setdefault(name, Mention(name, "speaker"))
    for m in _POSSESSIVE.finditer(clause):
        owner = speaker if m.group(1).lower() in {"my", "our"} else other
        if owner is None:
            continue
        noun = m.group(2).lower()
        kind = "pet" if noun in PETS else "relative"
        name = m.group(3) if m.group(3) and m.group(3).lower() not in STOPWORDS else f"{owner}'s {noun}"
        found.setdefault(name, Mention(name, kind, [(owner, noun, name)]))
    for m in _SPAN.finditer(clause):
        name = _trimmed(m.group(1).removesuffix("'s"))
        bare = _CONTRACTION.sub("", name).lower()  # "You've" is "you": a pronoun, not a name
        if name in found or bare in _NOT_NAMES or bare in STOPWORDS or len(name) < 2:
            continue
        if any(name == s or name == s.split()[0] for s in speakers):
            continue
        before = clause[: m.start()]
        kind = "organization" if _ORG_BEFORE.search(before) else "place" if _PLACE_BEFORE.search(before) else "name"
        found[name] = Mention(name, kind)
    return list(found.values())


def _trimmed(span: str) -> str:
    """A capitalised span without the words at either end that are never names ("Friday I" is no one)."""
    words = span.split()
    while words and _CONTRACTION.sub("", words[-1]).lower() in _NOT_NAMES:
        words.pop()
    while words and _CONTRACTION.sub("", words[0]).lower() in _NOT_NAMES:
        words.pop(0)
    return " ".join(words)
