"""The floor under a chat message's write: embedded Chroma's own cost of one record, and MiniLM's of one short text.

A message that closes nothing is one encoder call and two one-record writes (the turn and its view) plus the reads
that tell it closes nothing. This measures those parts alone, with no memstrata code in the loop: one-record
``upsert`` and ``add``, a ``get`` with a ``where`` on four metadata keys and a ``get`` by id, in a collection grown
to each size (random unit vectors, a 200-character document and memstrata-like metadata), and one MiniLM forward
pass of a short sentence.

    python benchmarks/chroma_floor.py --sizes 500,3000,10000,30000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import chromadb
import numpy as np


def _ms(values: list[float]) -> float:
    return round(1000 * statistics.median(values), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,3000,10000,30000")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    client = chromadb.PersistentClient(path=tempfile.mkdtemp())
    col = client.create_collection("floor", metadata={"hnsw:space": "cosine"}, embedding_function=None)
    rng = np.random.default_rng(0)

    def meta(position: int) -> dict[str, object]:
        return {"user_id": "u", "conversation_id": "c", "session_id": "1", "position": position, "payload": "y" * 500}

    def vectors(n: int) -> np.ndarray:
        v = rng.normal(size=(n, 384)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    held = 0
    for size in (int(s) for s in args.sizes.split(",")):
        while held < size:
            k = min(1000, size - held)
            ids = [f"id{held + i}" for i in range(k)]
            col.add(
                ids=ids, embeddings=vectors(k), documents=["x" * 200] * k, metadatas=[meta(held + i) for i in range(k)]
            )
            held += k
        times: dict[str, list[float]] = {"upsert": [], "add": [], "where-get": [], "key-get": []}
        for j in range(args.repeats):
            for op in ("upsert", "add"):
                began = time.perf_counter()
                getattr(col, op)(
                    ids=[f"{op}{size}_{j}"], embeddings=vectors(1), documents=["x" * 200], metadatas=[meta(-1)]
                )
                times[op].append(time.perf_counter() - began)
            where = {"$and": [{"user_id": "u"}, {"conversation_id": "c"}, {"session_id": "1"}, {"position": -1}]}
            began = time.perf_counter()
            col.get(where=where)
            times["where-get"].append(time.perf_counter() - began)
            began = time.perf_counter()
            col.get(ids=[f"id{(j * 7) % size}"])
            times["key-get"].append(time.perf_counter() - began)
        held += 2 * args.repeats
        print(f"{size:>6} records: " + ", ".join(f"{op} {_ms(v)} ms" for op, v in times.items()), flush=True)

    from memstrata.memory.embeddings import MiniLMEmbeddings

    encoder = MiniLMEmbeddings()
    encoder.embed_documents(["warm up"])
    text = "Caroline: I went to a LGBTQ support group yesterday and it was so powerful."
    spent = []
    for _ in range(args.repeats):
        began = time.perf_counter()
        encoder.embed_documents([text])
        spent.append(time.perf_counter() - began)
    print(f"MiniLM, one short text: {_ms(spent)} ms")


if __name__ == "__main__":
    main()
