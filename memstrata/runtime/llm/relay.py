"""Relaying text as a chat-model run's streamed tokens, so a chat UI receives it like any answer: the answer after
a verdict (:func:`~memstrata.runtime.llm.verdict.stream_checked`) and an answer written earlier (:func:`relay_text`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from pydantic import ConfigDict

if TYPE_CHECKING:
    from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
    from langchain_core.runnables import RunnableConfig


class _Relay(BaseChatModel):
    """Streams text that another call produces as its own reply.

    The call that produces it is internal (tagged ``nostream``) because its reply opens with a verdict no chat UI
    may show; what follows the verdict is passed through this model, whose run is an ordinary streamed chat-model
    run: its tokens reach ``stream_mode="messages"``, ``astream_events`` and tracing like any answer's.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)
    pieces: Any = None  # an async iterator of text

    @property
    def _llm_type(self) -> str:
        return "memstrata-relay"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        msg = "the relay only streams"
        raise NotImplementedError(msg)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        async for text in self.pieces:
            yield ChatGenerationChunk(message=AIMessageChunk(content=text))


async def relay_text(text: str, *, node: str) -> None:
    """Stream an answer that no call streams now (written earlier, e.g. HyMem's light answer) as a chat-model run's
    tokens, word by word, so a chat UI on ``stream_mode="messages"`` receives every answer the same way.

    Example:
        >>> import asyncio
        >>> asyncio.run(relay_text("Miso is a cat.", node="answer"))
    """

    async def words() -> AsyncIterator[str]:
        parts = text.split(" ")
        for i, word in enumerate(parts):
            yield word + (" " if i < len(parts) - 1 else "")

    config: RunnableConfig = {"run_name": f"memstrata.{node}", "metadata": {"memstrata_node": node}}
    async for _ in _Relay(pieces=words()).astream([HumanMessage(text)], config=config):
        pass
