"""The pure operations under the graphs, with no LangGraph import: the unit kinds and their levels, input
normalization, segmentation, facts, the entity graph, themes, persona, the temporal tree, planning, search, the
store and its indexes.
"""
