"""Keeping a conversation's themes as its facts arrive: the first grouping, then attach, split and merge.

:func:`regroup` takes the conversation's facts (ids and vectors, in a stable order) and the theme each
already belonged to, and returns the new grouping:

* with no theme yet, Bi-Mem's label propagation groups all facts (:func:`~.partition.label_propagation`);
* otherwise facts keep their theme, and each new fact attaches to the most similar centroid or starts a
  theme (xMemory's attach);
* then every theme that changed and is over ``cap`` facts is split by the f(P)-best candidate, and every
  theme that changed and holds fewer than ``floor`` facts is merged into the f(P)-best neighbour.

Only themes that gained or lost facts are split or merged, so a write that adds one episode's facts
touches the themes those facts reach. Theme ids stay with the part of a theme that keeps most of its
facts; new themes take the next free number. The reassignment ratio (xMemory §5.3) is the share of
facts placed before whose theme changed.

:func:`theme_text` is the offline text: the members nearest the centroid, within a word cap.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from memstrata.memory.themes.partition import Partition, attach, label_propagation, theme_sums, unit_rows


@dataclass
class Regrouped:
    """A conversation's grouping after one write."""

    themes: dict[str, list[str]]  # theme id -> member fact ids, in the order of the input
    changed: set[str] = field(default_factory=set)  # theme ids whose members changed (new ones included)
    removed: set[str] = field(default_factory=set)  # theme ids that no longer exist
    placed_before: int = 0  # facts that already had a theme
    reassigned: int = 0  # of those, facts whose theme changed

    @property
    def reassignment_ratio(self) -> float:
        """The share of the facts that already had a theme whose theme changed (0 when none had one)."""
        return self.reassigned / self.placed_before if self.placed_before else 0.0


def regroup(
    fact_ids: Sequence[str],
    vectors: np.ndarray,
    previous: dict[str, str],
    *,
    tau: float,
    attach_at: float,
    cap: int,
    floor: int,
    knn: int,
    max_steps: int,
    eps: float,
) -> Regrouped:
    """The themes of ``fact_ids`` (rows of ``vectors``), given the theme each fact had (``previous``).

    ``knn`` is the first grouping's neighbours per fact; ``max_steps`` bounds the splits and merges of one write;
    ``eps`` is Eq. 3's floor on the spread of nearest-theme similarities.
    """
    ids = list(fact_ids)
    x = unit_rows(vectors)
    before = {f: previous[f] for f in ids if f in previous}
    if not before:
        labels: list[Hashable] = [None] * len(ids)
        for g, members in enumerate(label_propagation(x, tau=tau, k=knn)):
            for i in members:
                labels[i] = ("new", g)
        touched = set(labels)
    else:
        labels = [before.get(f) for f in ids]
        present = set(ids)
        lost: set[Hashable] = {previous[f] for f in previous if f not in present}
        touched = lost & set(labels)  # themes that lost facts
        known = [i for i, label in enumerate(labels) if label is not None]
        known_keys, _, known_sums = theme_sums(x[known], [labels[i] for i in known])
        keys, sums = list(known_keys), list(known_sums)  # a theme's centroid is its sum's direction
        mu = list(unit_rows(known_sums)) if known else []
        fresh = 0
        for i, label in enumerate(labels):
            if label is not None:
                continue
            row = attach(x[i], np.asarray(mu), threshold=attach_at) if mu else None
            if row is None:
                keys.append(("new", fresh))
                mu.append(x[i])
                sums.append(x[i].copy())
                fresh += 1
                row = len(keys) - 1
            else:  # the centroid moves towards its new member
                sums[row] = sums[row] + x[i]
                mu[row] = unit_rows(sums[row][None, :])[0]
            labels[i] = keys[row]
            touched.add(keys[row])
    labels = _balance(x, labels, touched, cap=cap, floor=floor, max_steps=max_steps, eps=eps)
    return _named(ids, labels, previous)


def _balance(
    x: np.ndarray, labels: list[Hashable], touched: set[Hashable], *, cap: int, floor: int, max_steps: int, eps: float
) -> list[Hashable]:
    """Split the touched themes over ``cap`` and merge the touched ones under ``floor``, f(P)-best each."""
    partition = Partition(x, labels)
    steps = 0
    queue = [t for t in partition.ordered() if t in touched]
    while queue and steps < max_steps:
        theme = queue.pop(0)
        size = len(partition.members.get(theme, ()))
        if size > cap:
            if partition.split(theme, eps=eps):
                queue += [t for t in partition.ordered() if isinstance(t, tuple) and t[:1] == (theme,)]
        elif 0 < size < floor and len(partition.members) > 1:
            partition.merge(theme, eps=eps)
            queue = [t for t in queue if t in partition.members]
        steps += 1
    return partition.labels


def _named(ids: list[str], labels: list[Hashable], previous: dict[str, str]) -> Regrouped:
    """Stable theme ids: an old id goes to the new group holding most of its old facts (largest first)."""
    groups: dict[Hashable, list[str]] = {}
    for f, label in zip(ids, labels, strict=True):
        groups.setdefault(label, []).append(f)
    claims = Counter((label, previous[f]) for f, label in zip(ids, labels, strict=True) if f in previous)
    name: dict[Hashable, str] = {}
    taken: set[str] = set()
    for (label, old), _ in sorted(claims.items(), key=lambda kv: (-kv[1], str(kv[0][1]), str(kv[0][0]))):
        if label not in name and old not in taken:
            name[label], taken = old, taken | {old}
    numbers = [int(t.rsplit(":", 1)[1]) for t in set(previous.values()) if t.rsplit(":", 1)[-1].isdigit()]
    next_n = max(numbers, default=-1) + 1
    for label in groups:
        if label not in name:
            name[label], next_n = f"theme:{next_n}", next_n + 1
    themes = {name[label]: members for label, members in groups.items()}
    old_members: dict[str, set[str]] = {}
    for f, t in previous.items():
        old_members.setdefault(t, set()).add(f)
    changed = {t for t, members in themes.items() if set(members) != old_members.get(t, set())}
    placed = [f for f in ids if f in previous]
    now = {f: t for t, members in themes.items() for f in members}
    return Regrouped(
        themes=themes,
        changed=changed,
        removed=set(old_members) - set(themes),
        placed_before=len(placed),
        reassigned=sum(now[f] != previous[f] for f in placed),
    )


def central_order(vectors: np.ndarray) -> list[int]:
    """Rows by cosine to their centroid, nearest first (ties by row)."""
    x = unit_rows(vectors)
    centre = unit_rows(x.sum(axis=0)[None, :])[0]
    return sorted(range(len(x)), key=lambda i: (-float(x[i] @ centre), i))


def theme_text(texts: Sequence[str], vectors: np.ndarray, *, words: int) -> tuple[str, list[int]]:
    """The offline text of a theme: its facts nearest the centroid first (a text repeated word for word shown
    once), while ``words`` allows (at least one); returns the text and the rows it shows.
    """
    shown: list[int] = []
    used = 0
    seen: set[str] = set()
    for i in central_order(vectors):
        key = " ".join(texts[i].split()).casefold()
        if key in seen:  # overlapping episodes can state the same fact twice: show it once
            continue
        n = len(texts[i].split())
        if shown and used + n > words:
            break
        shown.append(i)
        seen.add(key)
        used += n
    return " ".join(texts[i].strip() for i in shown), shown
