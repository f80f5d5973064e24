"""Prompt templates as UPPER_SNAKE constants; override any of them through ``Context.prompts``.

``PROMPTS`` maps every prompt's name to its text; :meth:`memstrata.context.Context.prompt` reads it.
"""

from memstrata.prompts import ingestion, retrieval

PROMPTS: dict[str, str] = {
    name: value
    for module in (ingestion, retrieval)
    for name, value in vars(module).items()
    if name.endswith("_PROMPT") and isinstance(value, str)
}

__all__ = ["PROMPTS"]
