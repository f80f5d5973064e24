"""memstrata inside LangChain and LangGraph: agent middleware (:mod:`.middleware`), a LangGraph ``BaseStore``
(:mod:`.store`), and a retriever and a memory-search tool (:mod:`.langchain`).
"""
