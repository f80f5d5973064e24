"""What ``memstrata inspect`` and ``memstrata ask`` show: HTML pages, the tree and entity views, and the
CLI's short extractive answer. Read-only: nothing here writes to the store.
"""
