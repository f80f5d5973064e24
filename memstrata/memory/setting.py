"""What each group of settings is built with: a field's description, as LangGraph Studio and the docs show it.

The groups themselves live beside the code that reads them (:class:`~memstrata.memory.themes.settings.ThemeSettings`
in ``memory/themes/``, and so on); :class:`~memstrata.context.Context` holds one of each.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field


def setting(description: str) -> Any:
    """The description of one field of a group of settings, as its ``Annotated`` metadata shows it."""
    return Field(description=description)
