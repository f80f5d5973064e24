"""Level-2: the raw record the deep module backtracks to (turns, their contextual views, and the episodes
that group them).
"""
