"""A persona dimension's versions: when a rebuild makes a new one, and which one was valid at a time.

A rebuild whose items say the same as the current version's (the same statements) keeps the version and only
records the new basis and support (a statement said again gathers the new facts and turns; an episode cut again gives
its facts new ids). Otherwise the current version ends (``valid_to``) where the new one starts: at the memory
time of the facts the new one was built from (the latest ``valid_from`` among them), never the wall clock, so a
replay gives the same history. Nothing is deleted: earlier versions are the dimension's history.

Example:
    >>> from datetime import datetime
    >>> from memstrata.memory.levels import Persona, PersonaItem
    >>> item = lambda t, f: PersonaItem(text=t, fact_id=f)
    >>> v1 = Persona(
    ...     user_id="u",
    ...     speaker="Ann",
    ...     dimension="basic_info",
    ...     version=1,
    ...     items=[item("Ann lives in Porto.", "f1")],
    ...     valid_from=datetime(2024, 1, 5),
    ... )
    >>> new, ended = successor(v1, [item("Ann moved to Lisbon.", "f2")], basis="b2", built_at=datetime(2024, 3, 1))
    >>> new.id, ended.valid_to.date().isoformat()
    ('persona:ann:basic_info:2', '2024-03-01')
    >>> valid_at([ended, new], datetime(2024, 2, 1)).text
    'Ann lives in Porto.'
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from memstrata.memory.levels import Persona, PersonaItem


def same_items(a: Sequence[PersonaItem], b: Sequence[PersonaItem]) -> bool:
    """Whether two item lists say the same (the same statements in the same order). The facts behind them may have
    new ids (an episode cut again distils the same statements under new ids): that is the same version, with new
    support.
    """
    return [i.text for i in a] == [i.text for i in b]


def successor(
    current: Persona | None,
    items: list[PersonaItem],
    *,
    basis: str,
    built_at: datetime | None,
    method: str = "extractive",
    template: Persona | None = None,
) -> tuple[Persona | None, Persona | None]:
    """(the version to write, the version it ends) for a rebuild with ``items``.

    ``(None, None)``: nothing to write (no current version and no items). ``(current with the new basis, None)``:
    the items are unchanged. ``template`` supplies user, conversation, speaker and dimension when there is no
    current version.
    """
    if current is None:
        if not items or template is None:
            return None, None
        return _version(template, items, basis=basis, start=built_at, method=method, version=1), None
    if same_items(current.items, items):  # the same statements: the version stays, its support and basis follow
        if current.basis == basis and current.items == items:
            return None, None
        return current.model_copy(update={"basis": basis, "items": items}), None
    start = (
        built_at
        if built_at is not None and (current.valid_from is None or built_at > current.valid_from)
        else current.valid_from
    )
    new = _version(current, items, basis=basis, start=start, method=method, version=current.version + 1)
    return new, current.model_copy(update={"valid_to": start})


def _version(
    like: Persona, items: list[PersonaItem], *, basis: str, start: datetime | None, method: str, version: int
) -> Persona:
    return Persona.model_validate(
        {
            **like.model_dump(),
            "items": [i.model_dump() for i in items],
            "text": "",
            "basis": basis,
            "valid_from": start,
            "valid_to": None,
            "method": method,
            "id": "",
            "version": version,
        }
    )


def valid_at(versions: Sequence[Persona], when: datetime | None) -> Persona | None:
    """The version valid at ``when`` (``None``: the current one): the latest that started at or before it."""
    if when is None:
        return next((v for v in sorted(versions, key=lambda v: -v.version) if v.current), None)
    started = [v for v in versions if v.valid_from is None or v.valid_from <= when]
    return max(started, key=lambda v: v.version, default=None)
