"""The model a context names, robust structured LLM decisions, streamed answers, metering and the token budget.

:func:`chat_model` turns ``Context.model`` (or, for ingestion, ``Context.ingest_model``) into a chat model: a
name becomes a ``ChatOpenAI`` at ``Context.base_url``; a name that would go to OpenAI's API with no
``OPENAI_API_KEY`` is a :class:`ModelConfigError`.

Every LLM decision goes through :func:`decide`: a pydantic schema, tool calling
(the schema bound as the one required tool), tenacity retries with backoff on
transport errors only, a per-attempt timeout, one repair attempt on a
validation error, and then the caller's deterministic fallback. The answer
node streams through :func:`stream_answer`, which bounds the wait for every
chunk and turns any failure into :class:`LLMError`. The :class:`Meter` records
every call, with its tokens and where the counts came from, and enforces
``Context.llm_token_budget``.

- :mod:`.model`: the chat model a context names, and the options that cap a reply;
- :mod:`.errors`: the errors, and which transport failures are retried;
- :mod:`.meter`: the :class:`Meter`, its :class:`CallRecord` outcomes, token counting, and the share of the budget
  each parallel branch gets (:func:`branch_budget`);
- :mod:`.parsing`: the tool call or JSON object read out of a reply, and the repair prompt;
- :mod:`.structured`: :func:`decide`, a structured decision with retries, one repair and a fallback;
- :mod:`.stream`: :func:`stream_answer`, the streamed answer;
- :mod:`.relay`: text relayed as a chat-model run's tokens (:func:`relay_text`);
- :mod:`.verdict`: :func:`stream_checked`, a verdict word, then a streamed answer.

Example:
    >>> meter = Meter(budget=100)
    >>> meter.remaining
    100
    >>> is_transient(TimeoutError()), is_transient(ValueError())
    (True, False)
"""

from memstrata.errors import AnswerError, EmptyReplyError, LLMError, ModelConfigError
from memstrata.runtime.llm.meter import GOOD_OUTCOMES, CallRecord, Meter, branch_budget, usage_of
from memstrata.runtime.llm.model import INTERNAL_TAGS, OPENAI_KEY_ENV, PLACEHOLDER_KEY, chat_model, check_model_name
from memstrata.runtime.llm.parsing import extract_json
from memstrata.runtime.llm.relay import relay_text
from memstrata.runtime.llm.stream import stream_answer
from memstrata.runtime.llm.structured import decide
from memstrata.runtime.llm.transport import is_transient, retry_after
from memstrata.runtime.llm.verdict import Checked, read_verdict, stream_checked

__all__ = [
    "GOOD_OUTCOMES",
    "INTERNAL_TAGS",
    "OPENAI_KEY_ENV",
    "PLACEHOLDER_KEY",
    "AnswerError",
    "CallRecord",
    "Checked",
    "EmptyReplyError",
    "LLMError",
    "Meter",
    "ModelConfigError",
    "branch_budget",
    "chat_model",
    "check_model_name",
    "decide",
    "extract_json",
    "is_transient",
    "read_verdict",
    "relay_text",
    "retry_after",
    "stream_answer",
    "stream_checked",
    "usage_of",
]
