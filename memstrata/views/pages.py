"""Self-contained HTML pages: a user's memory (every level, linked) and one query's trace.

Both pages are one file each, with their CSS and script inline: they open
offline, with no CDN. The memory page shows conversations, sessions, episodes,
summaries and raw turns, plus a section for every other registered kind, as
collapsible sections with a search box, and, when the user has edges between
units (an entity graph, tree links), a drawing of them laid out by networkx; the trace page shows the path a query
took through the retrieval graph, each node's decision and why, every evidence
item with its score parts and the kind that found it, the packed context with
its token count, and the LLM calls. Templates are Jinja2 (autoescaped).

Example:
    >>> html = memory_page(store, user_id="demo")  # doctest: +SKIP
    >>> Path("memory.html").write_text(html)  # doctest: +SKIP
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from jinja2 import Environment

from memstrata.memory import levels

if TYPE_CHECKING:
    from memstrata.memory.store import MemoryStore

_ENV = Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True)

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5rem auto;max-width:70rem;color:#1d1d1f;padding:0 1rem}
h1{font-size:1.4rem} h2{font-size:1.1rem;margin-top:1.6rem} .dim{color:#6e6e73}
details{margin:.2rem 0 .2rem 1rem;border-left:2px solid #e5e5ea;padding-left:.6rem}
summary{cursor:pointer} .turn{margin:.1rem 0 .1rem 1rem;font-family:ui-monospace,monospace;font-size:12.5px}
.kind{display:inline-block;border-radius:4px;padding:0 .35rem;font-size:11px;background:#eef;color:#334}
table{border-collapse:collapse;width:100%} td,th{border-bottom:1px solid #e5e5ea;padding:.3rem;text-align:left;
vertical-align:top} pre{white-space:pre-wrap;background:#f5f5f7;padding:.7rem;border-radius:6px}
#search{width:100%;padding:.45rem;font-size:14px;margin:.5rem 0} .hidden{display:none}
"""

_SCRIPT = """
const box = document.getElementById('search');
function filter() {
  const q = box.value.toLowerCase();
  let shown = 0;
  document.querySelectorAll('[data-text]').forEach(el => {
    const hit = !q || el.dataset.text.toLowerCase().includes(q);
    el.classList.toggle('hidden', !hit);
    if (hit) { shown++; let p = el.parentElement; while (p) { if (p.tagName === 'DETAILS' && q) p.open = true; p = p.parentElement; } }
  });
  document.getElementById('shown').textContent = shown;
}
box.addEventListener('input', filter);
filter();
document.body.dataset.ready = '1';
"""  # noqa: E501 - the page's markup, kept byte for byte

_MEMORY = _ENV.from_string("""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>memstrata · {{ user }}</title><style>{{ style }}</style></head><body>
<h1>memstrata memory of <code>{{ user }}</code></h1>
<p class="dim">{% for kind, n in counts.items() %}<span class="kind">{{ kind }}</span> {{ n }} &nbsp;{% endfor %}</p>
<input id="search" type="search" placeholder="search turns, episodes and summaries">
<p class="dim"><span id="shown">0</span> items match</p>
<h2>Conversations → sessions → episodes (Level-2) → summaries (Level-1) → raw turns</h2>
{% for conv in conversations %}
<details open><summary><b>{{ conv.id }}</b> · {{ conv.sessions|length }} sessions</summary>
{% for session in conv.sessions %}
<details><summary>session {{ session.id }} <span class="dim">{{ session.when }}</span> · {{ session.episodes|length }} episodes</summary>
{% for ep in session.episodes %}
<details data-text="{{ ep.summary }} {{ ep.text }}"><summary><span class="kind">episode</span> {{ ep.id }} ·
{{ ep.turns|length }} turns</summary>
<p><span class="kind">summary</span> {{ ep.summary or "— none —" }}</p>
{% for t in ep.turns %}<div class="turn" data-text="{{ t.text }}">{{ t.id }} {{ t.text }}</div>{% endfor %}
</details>
{% endfor %}
</details>
{% endfor %}
</details>
{% endfor %}
{% if graph %}
<h2>Graph: {{ graph.nodes|length }} units, {{ graph.edges|length }} edges</h2>
<svg id="graph" viewBox="0 0 {{ graph.size }} {{ graph.size }}" width="100%" style="max-width:{{ graph.size }}px;border:1px solid #e5e5ea">
{% for e in graph.edges %}<line x1="{{ e.x1 }}" y1="{{ e.y1 }}" x2="{{ e.x2 }}" y2="{{ e.y2 }}" stroke="#aab" stroke-width="1"><title>{{ e.label }}</title></line>
{% endfor %}{% for n in graph.nodes %}<g data-text="{{ n.label }}"><circle cx="{{ n.x }}" cy="{{ n.y }}" r="5" fill="#5b6ee1"><title>{{ n.label }}</title></circle>
<text x="{{ n.x + 7 }}" y="{{ n.y + 4 }}" font-size="11">{{ n.label }}</text></g>
{% endfor %}</svg>
{% endif %}
{% for kind, units in others.items() %}
<h2><span class="kind">{{ kind }}</span> {{ descriptions[kind] }}</h2>
{% for u in units %}<details data-text="{{ u.text }}"><summary>{{ u.id }}{% if u.children %} · {{ u.children|length }}
{{ u.child_kind }}{% endif %}</summary><p>{{ u.text }}</p>
{% if u.children %}<ul>{% for c in u.children %}<li><b>{{ c.id }}</b> {{ c.text }}
{% if c.turns %}<ul class="dim">{% for t in c.turns %}<li>{{ t.id }} {{ t.text }}</li>{% endfor %}</ul>{% endif %}</li>
{% endfor %}</ul>{% endif %}
<p class="dim">turns: {{ u.turn_ids|join(", ") }}</p></details>{% endfor %}
{% endfor %}
<script>{{ script|safe }}</script></body></html>""")  # noqa: E501 - the page's markup, kept byte for byte

# tojson's output is marked safe yet keeps its double quotes, which would end a data-text attribute early
# (a query or a turn could then add attributes of its own): forceescape escapes it once more.
_TRACE = _ENV.from_string("""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>memstrata · {{ query }}</title><style>{{ style }}</style></head><body>
<h1>{{ query }}</h1>
<p class="dim">path <b>{{ trace.path }}</b> · {{ trace.iterations }} reflection round(s) ·
{{ evidence|length }} turns · {{ context_tokens }} context tokens · {{ trace.llm.calls or 0 }} LLM calls,
{{ trace.llm.prompt_tokens or 0 }}+{{ trace.llm.completion_tokens or 0 }} tokens</p>
{% if answer %}<h2>Answer</h2><p id="answer">{{ answer }}</p>{% endif %}
<input id="search" type="search" placeholder="search the evidence and the steps">
<p class="dim"><span id="shown">0</span> rows match</p>
<h2>Path through the retrieval graph</h2>
<table id="steps"><tr><th>#</th><th>node</th><th>decision and why</th></tr>
{% for e in trace.events %}<tr data-text="{{ e.node }} {{ e|tojson|forceescape }}"><td>{{ loop.index }}</td><td>{{ e.node }}</td>
<td>{% for k, v in e.items() if k != "node" %}<b>{{ k }}</b>: {{ v }}{% if not loop.last %}; {% endif %}{% endfor %}</td></tr>
{% endfor %}</table>
<h2>Evidence, in rank order</h2>
<table id="evidence"><tr><th>#</th><th>cite</th><th>turn</th><th>score</th><th>found by</th><th>score parts</th></tr>
{% for e in evidence %}<tr data-text="{{ e.speaker }} {{ e.text }}"><td>{{ loop.index }}</td><td>{{ e.turn_id }}
<span class="dim">{{ e.time or "" }}</span></td><td>{{ e.speaker }}: {{ e.text }}</td><td>{{ "%.3f"|format(e.score) }}</td>
<td><span class="kind">{{ e.found_by }}</span> {{ e.level }}</td>
<td class="dim">{% for k, v in e.score_parts.items() %}{{ k }} {{ "%.2f"|format(v) }} {% endfor %}</td></tr>
{% endfor %}</table>
<h2>Packed context ({{ context_tokens }} tokens)</h2><pre id="context">{{ context }}</pre>
<h2>LLM calls</h2>
<table><tr><th>node</th><th>outcome</th><th>prompt</th><th>completion</th></tr>
{% for r in trace.llm.records or [] %}<tr><td>{{ r.node }}</td><td>{{ r.outcome }}</td><td>{{ r.prompt_tokens }}</td>
<td>{{ r.completion_tokens }}</td></tr>{% else %}<tr><td colspan="4" class="dim">none (offline)</td></tr>{% endfor %}
</table>
<script>{{ script|safe }}</script></body></html>""")  # noqa: E501 - the page's markup, kept byte for byte


def memory_page(store: MemoryStore, *, user_id: str, conversation_id: str | None = None) -> str:
    """The HTML page of one user's memory: every level, linked, collapsible and searchable."""
    scope: dict[str, Any] = {"user_id": user_id, "conversation_id": conversation_id}
    counts = {lv.kind: store.count(lv.kind, **scope) for lv in levels.levels()}
    turns = {(r.metadata["conversation_id"], r.unit_id): r.document for r in store.get("turn", **scope)}
    summaries = {
        (r.metadata["conversation_id"], r.payload["episode_id"]): r.document for r in store.get("summary", **scope)
    }
    tree: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    when: dict[tuple[str, str], str] = {}
    for r in store.get("episode", **scope):
        p, conv = r.payload, r.metadata["conversation_id"]
        tree[conv][p["session_id"]].append(
            {
                "id": p["id"],
                "start": p["start_position"],
                "text": r.document,
                "summary": summaries.get((conv, p["id"])),
                "turns": [{"id": t, "text": turns.get((conv, t), "?")} for t in p["turn_ids"]],
            }
        )
        when[(conv, p["session_id"])] = p.get("timestamp_raw") or ""
    conversations: list[dict[str, Any]] = [
        {
            "id": conv,
            "sessions": [
                {"id": sid, "when": when[(conv, sid)], "episodes": sorted(eps, key=lambda e: e["start"])}
                for sid, eps in sorted(sessions.items(), key=lambda s: (len(s[0]), s[0]))
            ],
        }
        for conv, sessions in sorted(tree.items())
    ]
    shown = {"turn", "turn_context", "episode", "summary"}
    others = {
        lv.kind: [
            {"id": r.unit_id, "text": r.document, "turn_ids": r.payload.get("turn_ids", [])}
            for r in store.get(lv.kind, **scope)
        ]
        for lv in levels.levels()
        if lv.kind not in shown
    }
    _with_facts(store, scope, others.get("theme", []), turns)
    _with_items(store, scope, others.get("persona", []), turns)
    return _MEMORY.render(
        user=user_id,
        counts=counts,
        conversations=conversations,
        others=others,
        style=_STYLE,
        script=_SCRIPT,
        descriptions={lv.kind: lv.description for lv in levels.levels()},
        graph=_graph(store, user_id, conversation_id),
    )


def _with_facts(
    store: MemoryStore, scope: dict[str, Any], themes: list[dict[str, Any]], turns: dict[tuple[str, str], str]
) -> None:
    """Each theme's member facts, with the raw turns each fact comes from."""
    facts = {r.unit_id: r for r in store.get("fact", **scope)} if themes else {}
    records = {r.unit_id: r for r in store.get("theme", **scope)} if themes else {}
    for theme in themes:
        record = records[theme["id"]]
        conv = record.metadata["conversation_id"]
        theme["child_kind"] = "facts"
        theme["children"] = [
            {
                "id": f,
                "text": facts[f].document,
                "turns": [{"id": t, "text": turns.get((conv, t), "?")} for t in facts[f].payload.get("turn_ids", [])],
            }
            for f in record.payload.get("fact_ids", [])
            if f in facts and facts[f].metadata["conversation_id"] == conv
        ]


def _with_items(
    store: MemoryStore, scope: dict[str, Any], dimensions: list[dict[str, Any]], turns: dict[tuple[str, str], str]
) -> None:
    """Each persona version's items with the raw turns they cite; the version's dates (and whether it is history)
    in its title, current versions first.
    """
    records = {r.unit_id: r for r in store.get("persona", **scope)} if dimensions else {}
    for unit in dimensions:
        record = records[unit["id"]]
        p, conv = record.payload, record.metadata["conversation_id"]
        span = f"{(p.get('valid_from') or 'untimed')[:10]} – {(p.get('valid_to') or 'now')[:10]}"
        unit["id"] = f"{unit['id']} · {span}" + (" · history" if p.get("valid_to") else "")
        unit["child_kind"] = "items"
        unit["children"] = [
            {
                "id": i["fact_id"],
                "text": i["text"],
                "turns": [{"id": t, "text": turns.get((conv, t), "?")} for t in i["turn_ids"]],
            }
            for i in p.get("items", [])
        ]
    dimensions.sort(key=lambda u: ("history" in u["id"], u["id"]))


def _graph(
    store: MemoryStore, user_id: str, conversation_id: str | None, *, size: int = 900, limit: int = 300
) -> dict[str, Any] | None:
    """The user's edges (entity graph, tree links) laid out with networkx, as SVG coordinates.

    ``None`` without edges.
    """
    import networkx as nx

    graph = store.edges.graph(user_id, conversation_id=conversation_id)
    # fact-to-fact similarity edges (the themes' kNN graph) would crowd the entities and themes out of the drawing
    graph.remove_edges_from(
        [
            (a, b, k)
            for a, b, k, d in graph.edges(keys=True, data=True)
            if d.get("rel") == "similar" and graph.nodes[a].get("kind") == graph.nodes[b].get("kind") == "fact"
        ]
    )
    if graph.number_of_edges() == 0:
        return None
    keep = sorted(graph.nodes, key=lambda n: -graph.degree(n))[:limit]  # the best-connected, so the page stays legible
    graph = graph.subgraph(keep)
    pos = nx.spring_layout(nx.Graph(graph), seed=0)
    xy = {n: (40 + (p[0] + 1) / 2 * (size - 160), 20 + (p[1] + 1) / 2 * (size - 40)) for n, p in pos.items()}
    nodes = [{"label": str(n), "x": round(x, 1), "y": round(y, 1)} for n, (x, y) in xy.items()]
    edges = [
        {
            "x1": round(xy[a][0], 1),
            "y1": round(xy[a][1], 1),
            "x2": round(xy[b][0], 1),
            "y2": round(xy[b][1], 1),
            "label": f"{a} {data.get('rel', '')} {b}",
        }
        for a, b, data in graph.edges(data=True)
    ]
    return {"nodes": nodes, "edges": edges, "size": size}


def trace_page(result: Any) -> str:
    """The HTML page of one query: path, decisions, evidence with score parts, context, LLM calls."""
    return _TRACE.render(
        query=result.query,
        answer=result.answer,
        trace=result.trace,
        evidence=[e.model_dump() for e in result.evidence],
        context=result.context,
        context_tokens=result.context_tokens,
        style=_STYLE,
        script=_SCRIPT,
    )
