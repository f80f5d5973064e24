"""What the runner needs from a benchmarked method.

A method is prepared once per conversation (indexing or ingestion, timed) and
then asked for a context per question and budget. The runner scores only the
returned string, so any system can be plugged in.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from memstrata_bench.locomo import LocomoConversation


@runtime_checkable
class Method(Protocol):
    """A retrieval method under test.

    Attributes:
        name: the key of the method in the results.
    """

    name: str

    def prepare(self, conversation: LocomoConversation) -> None:
        """Index or ingest one conversation; called before its questions."""
        ...

    def context(self, question: str, conversation: LocomoConversation, budget: int) -> str:
        """The context handed to the reader for ``question``, at most ``budget`` tokens."""
        ...
