"""memstrata inside LangChain and LangGraph: agent middleware (:mod:`.middleware`), a LangGraph ``BaseStore``
(:mod:`.store`), and a retriever and memory tools (:mod:`.langchain`). Each is built once and serves every user: the
user comes from the run (:mod:`.tenant`, or the store's namespace). Behind a LangGraph server that callers reach,
:mod:`.deploy` binds each run to the authenticated caller and keeps the store where the deployment put it.
"""
