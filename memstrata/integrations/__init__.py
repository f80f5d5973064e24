"""memstrata inside LangChain and LangGraph: agent middleware (:mod:`.middleware`), a LangGraph ``BaseStore``
(:mod:`.store`), and a retriever and memory tools (:mod:`.langchain`). Each is built once and serves every user: the
user comes from the run (:mod:`.tenant`, or the store's namespace).
"""
