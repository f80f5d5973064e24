"""An agent that uses memstrata as its long-term memory.

It ingests examples/conversation.json for one user, gives a LangChain agent the
``memory_search`` tool (the user id is bound; the model only writes the query)
and asks a question about the conversation.

    python examples/agent.py                                   # scripted model, temp data dir
    python examples/agent.py --data-dir .memstrata --question "Who is Rui?"
    MEMSTRATA_MODEL=gpt-4.1-mini python examples/agent.py      # a real model (OPENAI_BASE_URL/OPENAI_API_KEY)

With no model configured (no ``--model``, no ``$MEMSTRATA_MODEL``) the agent runs
on memstrata's ``ScriptedChatModel``: it calls the memory tool once, then
answers by quoting the retrieved turns that best match the question. Everything
runs offline.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from memstrata import Context, Memstrata
from memstrata.context import MODEL_ENV
from memstrata.integrations.langchain import memory_search_tool
from memstrata.memory.search.packing import parse_context
from memstrata.runtime.resolve import resolve_model
from memstrata.testing import ScriptedChatModel

EXAMPLE = Path(__file__).resolve().parent / "conversation.json"
SYSTEM_PROMPT = (
    "You are a personal assistant with a long-term memory of your past conversations with the user. "
    "Before answering a question about the past, call memory_search. Answer only from what it returns, "
    "and cite the turn ids you rely on in square brackets, e.g. [s1:t6]."
)
SCRIPTED_NOTICE = (
    "NOTICE: no chat model configured (set MEMSTRATA_MODEL or pass --model), so this agent runs on a "
    "SCRIPTED model (memstrata.testing.ScriptedChatModel): it calls memory_search once, then quotes the "
    "best-matching turns. Memory retrieval itself is real."
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: the data folder, the user, the question and the model."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="where memstrata keeps its store (default: a fresh temp dir)")
    parser.add_argument("--user", default="demo", help="the memory's user id")
    parser.add_argument("--question", default="Who is Priya's manager at her new job?")
    parser.add_argument("--model", default=os.environ.get(MODEL_ENV), help="a model name for ChatOpenAI")
    return parser.parse_args(argv)


def scripted_model(question: str) -> ScriptedChatModel:
    """Calls the memory tool with the question, then answers from the tool's result."""
    return ScriptedChatModel(script=[{"query": question}, lambda messages: quote_memory(question, messages)])


def quote_memory(question: str, messages: list[BaseMessage]) -> str:
    """The cited memory lines sharing the most words with the question."""
    tool_output = next((str(m.content) for m in reversed(messages) if isinstance(m, ToolMessage)), "")
    words = set(_words(question))
    lines = parse_context(tool_output)
    best = sorted(lines, key=lambda ln: -len(words & set(_words(ln[1]))))[:2]
    if not best:
        return "I could not find that in my memory."
    quotes = "; ".join(f"{text} [{cite}]" for cite, text in best)
    return f"From my memory: {quotes}"


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 3]


def choose_model(name: str | None, question: str) -> tuple[BaseChatModel, bool]:
    """The configured model, or the scripted one (and whether it is scripted)."""
    if name:
        model = resolve_model(Context(user_id="agent", model=name))
        if model is not None:
            return model, False
    return scripted_model(question), True


def show(messages: list[BaseMessage]) -> None:
    """Print the exchange: the question, the agent's tool calls, what the tool returned and the answer."""
    for message in messages:
        if isinstance(message, HumanMessage):
            print(f"user: {message.content}")
        elif isinstance(message, AIMessage) and message.tool_calls:
            for call in message.tool_calls:
                print(f"agent -> {call['name']}({call['args']})")
        elif isinstance(message, ToolMessage):
            print(f"{message.name} returned:\n{message.content}")
        elif isinstance(message, AIMessage):
            print(f"agent: {message.content}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Ingest the example conversation, ask the agent the question, print the exchange and return the
    agent's final state.
    """
    args = parse_args(argv)
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="memstrata-agent-")
    memory = Memstrata(path=data_dir)
    stats = memory.ingest(EXAMPLE, user_id=args.user)
    print(f"memory: {data_dir} (user {args.user!r}, {stats.get('turns_seen', 0)} turns ingested)")
    model, is_scripted = choose_model(args.model, args.question)
    if is_scripted:
        print(SCRIPTED_NOTICE)
    tool = memory_search_tool(memory, user_id=args.user, context_budget=400)
    agent = create_agent(model, tools=[tool], system_prompt=SYSTEM_PROMPT, name="memstrata-agent")
    state = agent.invoke({"messages": [HumanMessage(args.question)]})
    show(state["messages"])
    return state


if __name__ == "__main__":
    main()
