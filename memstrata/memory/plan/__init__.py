"""Planning a query without a model: the offline rules that stand in for each LLM planning decision
(:mod:`.rules`: decomposition, scope, follow-up, rewrite) and the temporal hints a question carries
(:mod:`.temporal_hints`).
"""
