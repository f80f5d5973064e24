"""MkDocs hooks: the docs pages that must not drift from the code are generated from it at build time.

A page asks for generated text with a marker on a line of its own:

- ``<!-- gen:mermaid ingestion -->`` / ``<!-- gen:mermaid retrieval -->``: the compiled graph's own Mermaid drawing;
- ``<!-- gen:levels -->``: every registered unit kind, from the registry in ``memstrata.memory.levels``;
- ``<!-- gen:context -->``: every ``memstrata.context.Context`` field with its section, type, default and description;
- ``<!-- gen:cli -->``: the ``--help`` of every command of the ``memstrata`` typer app;
- ``<!-- gen:imports -->``: which rooms (packages) of ``memstrata`` each room imports today.

``BENCHMARKS.md`` lives at the repository root, outside ``docs_dir``: it is added as the page ``results.md``, its
relative links rewritten to the built site, and the repository files it links to (plots) copied beside it.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import typing
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!-- gen:(\w+)(?: (\w+))? -->$", re.M)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
HELP_COLUMNS = 100


# ---- the graphs ----------------------------------------------------------------------------------------------
def mermaid(name: str) -> str:
    """The compiled graph's Mermaid drawing, fenced for pymdownx.superfences."""
    import importlib

    module = importlib.import_module(f"memstrata.graphs.{name}")
    return f"```mermaid\n{module.graph.get_graph().draw_mermaid().strip()}\n```"


# ---- the configuration -----------------------------------------------------------------------------------------
def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    text = repr(hint) if not isinstance(hint, type) else hint.__name__
    text = re.sub(r"\b(?:typing|datetime|langchain_core\.[\w.]+|collections\.abc)\.", "", text)
    return text.replace("NoneType", "None")


def _field_info(hint: Any) -> tuple[str | None, str | None]:
    """(section, description) from the pydantic ``Field`` in the field's ``Annotated`` metadata, if any."""
    for meta in typing.get_args(hint)[1:] if typing.get_origin(hint) is typing.Annotated else ():
        description = getattr(meta, "description", None)
        extra = getattr(meta, "json_schema_extra", None) or {}
        if description is not None:
            section = extra.get("section")
            if section and description.startswith(f"[{section}] "):
                description = description[len(section) + 3 :]
            return section, description
    return None, None


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    return f"`{value!r}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _rows(kind: type, prefix: str, required: set[str]) -> list[dict[str, str]]:
    """One row per field of a dataclass of settings (``prefix``: its group's name and a dot, or nothing)."""
    hints = typing.get_type_hints(kind, include_extras=True)
    rows = []
    for f in dataclasses.fields(kind):
        section, description = _field_info(hints[f.name])
        skipped = "SkipJsonSchema" in repr(hints[f.name])
        rows.append(
            {
                "name": prefix + f.name,
                "section": section or ("python only" if skipped else "unsectioned"),
                "type": _type_name(hints[f.name]).replace("pydantic.json_schema.SkipJsonSchema[", "").rstrip("]")
                if skipped
                else _type_name(hints[f.name]),
                "default": "required" if f.name in required else _default(f),
                "description": (description or "") + (" (a Python object: Studio does not show it)" if skipped else ""),
            }
        )
    return rows


def context_fields() -> list[dict[str, str]]:
    """Every ``Context`` field, in declaration order, with its section, type, default and description; then each
    group's fields (``themes.search_k``), in a section named after the group.
    """
    from pydantic import TypeAdapter

    from memstrata.context import GROUPS, Context

    required = set(TypeAdapter(Context).json_schema().get("required", []))  # user_id: an empty default, yet required
    rows = [row for row in _rows(Context, "", required) if row["name"] not in GROUPS]
    for name, kind in GROUPS.items():
        rows += [{**row, "section": f"{name} ({kind.__name__})"} for row in _rows(kind, f"{name}.", set())]
    return rows


def context_tables() -> str:
    """Markdown tables of every ``Context`` setting (type, default, description), one per section; a group's
    section starts with what the group is for.
    """
    from memstrata.context import GROUPS

    rows = context_fields()
    sections: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        sections.setdefault(row["section"], []).append(row)
    flat = sum(1 for row in rows if "." not in row["name"])
    out = [f"`Context` has {flat} settings of its own and {len(GROUPS)} groups ({len(rows) - flat} settings in all).\n"]
    for section, members in sections.items():
        out.append(f"### {section}\n")
        group = GROUPS.get(section.split(" ")[0])
        if group is not None and group.__doc__:
            out.append(" ".join(group.__doc__.split()) + "\n")
        out.append("| setting | type | default | description |\n|---|---|---|---|")
        # a pipe inside a code span does not split a cell; elsewhere it must be escaped
        out.extend(
            f"| `{row['name']}` | `{row['type']}` | {row['default']} | {_cell(row['description'])} |" for row in members
        )
        out.append("")
    return "\n".join(out)


# ---- the unit kinds ------------------------------------------------------------------------------------------
def levels_table() -> str:
    """Every registered unit kind: its role, the scopes that search it, its module and its description."""
    from memstrata.memory import levels

    rows = ["| kind | role | searched | scopes | module | what it is |", "|---|---|---|---|---|---|"]
    for level in levels.levels():
        scopes = ", ".join(level.scopes) or "none (its own path)"
        module = level.unit.__module__.replace(".", "/") + ".py"
        rows.append(
            f"| `{level.kind}` | {level.role} | {'yes' if level.searched else 'no'} | {scopes} "
            f"| `{module}` | {_cell(level.description)} |"
        )
    return "\n".join(rows)


# ---- the command line ------------------------------------------------------------------------------------------
def cli_commands() -> list[tuple[list[str], str]]:
    """(path, help text) for the app and every command, sub-apps included, as ``--help`` prints them."""
    os.environ["COLUMNS"] = str(HELP_COLUMNS)
    os.environ["TERMINAL_WIDTH"] = str(HELP_COLUMNS)
    os.environ["NO_COLOR"] = "1"
    os.environ.pop("FORCE_COLOR", None)
    import typer
    from typer.testing import CliRunner

    from memstrata.cli import app

    root = typer.main.get_command(app)
    runner = CliRunner()
    env = {"COLUMNS": str(HELP_COLUMNS), "TERMINAL_WIDTH": str(HELP_COLUMNS), "NO_COLOR": "1", "TERM": "dumb"}
    out: list[tuple[list[str], str]] = []

    def walk(command: Any, path: list[str]) -> None:
        done = runner.invoke(app, [*path, "--help"], env=env, color=False, terminal_width=HELP_COLUMNS)
        if done.exit_code != 0:
            msg = f"memstrata {' '.join(path)} --help exited with {done.exit_code}: {done.output}"
            raise RuntimeError(msg)
        text = ANSI.sub("", done.output).replace("Usage: root", "Usage: memstrata")
        out.append((path, "\n".join(line.rstrip() for line in text.strip().splitlines())))
        # typer vendors its own click, so a group is recognised by its commands, in the order they were added
        for name, sub in getattr(command, "commands", {}).items():
            if not getattr(sub, "hidden", False):
                walk(sub, [*path, name])

    walk(root, [])
    return out


def cli_reference() -> str:
    """Every CLI command's ``--help``, one heading and text block each."""
    out = []
    for path, text in cli_commands():
        title = " ".join(["memstrata", *path])
        out.append(f"### `{title}`\n\n```text\n{text}\n```\n")
    return "\n".join(out)


# ---- the rooms and their imports ---------------------------------------------------------------------------------
ROOMED = {"memory": 2, "nodes": 2}


def room_of(module: str) -> str:
    """The room a module lives in: a sub-package of ``memory/`` or ``nodes/``, another package, or a top module."""
    parts = module.split(".")
    if len(parts) == 1:  # ``from memstrata import ...``: the package's own facade
        return "__init__.py"
    if parts[1] in ROOMED and len(parts) > 2:
        sub = parts[2]
        package = ROOT / "memstrata" / parts[1] / sub
        return f"{parts[1]}/{sub}/" if package.is_dir() else f"{parts[1]}/ (modules)"
    package = ROOT / "memstrata" / parts[1]
    return f"{parts[1]}/" if package.is_dir() else f"{parts[1]}.py"


def imports_table() -> str:
    """A Markdown table: for each room, the other rooms of ``memstrata`` it imports and its third-party
    imports.
    """
    own: dict[str, set[str]] = {}
    third: dict[str, set[str]] = {}
    stdlib = set(getattr(__import__("sys"), "stdlib_module_names", ()))
    for path in sorted((ROOT / "memstrata").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        module = module.removesuffix(".__init__") + (".__init__" if path.name == "__init__.py" else "")
        room = room_of(module)
        own.setdefault(room, set())
        third.setdefault(room, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] == "memstrata":
                    target = room_of(name if name != "memstrata.memory" else "memstrata.memory.__init__")
                    if target != room:
                        own[room].add(target)
                elif name.split(".")[0] not in stdlib and name != "__future__":
                    third[room].add(name.split(".")[0])
    rows = ["| room | imports from memstrata | third-party imports |", "|---|---|---|"]
    for room in sorted(own):
        mine = ", ".join(f"`{r}`" for r in sorted(own[room])) or "nothing"
        theirs = ", ".join(f"`{r}`" for r in sorted(third[room])) or "none"
        rows.append(f"| `{room}` | {mine} | {theirs} |")
    return "\n".join(rows)


# ---- BENCHMARKS.md ----------------------------------------------------------------------------------------------
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")


def _benchmarks_page(config: Any) -> tuple[str, list[str]]:
    """BENCHMARKS.md as a page at the site root, and the repository files its links need copied in."""
    text = (ROOT / "BENCHMARKS.md").read_text()
    docs = Path(config["docs_dir"]).resolve()
    copies: list[str] = []

    def fix(match: re.Match) -> str:
        opening, target = match.group(1), match.group(2)
        if re.match(r"^[a-z]+:|^#|^/", target):
            return match.group(0)
        path, _, anchor = target.partition("#")
        local = (ROOT / path).resolve()
        if local.is_relative_to(docs):  # a docs page: its path inside the site
            path = local.relative_to(docs).as_posix()
        elif local.is_file() and local.suffix.lower() in {".png", ".svg", ".jpg"}:  # a plot: copied into the site
            copies.append(local.relative_to(ROOT).as_posix())
        elif local.exists() and not opening.startswith("!"):  # source or data: named, since the site has no copy
            return f"{opening[1:-2]} (`{path}`)"
        return f"{opening}{path}{'#' + anchor if anchor else ''}{match.group(3)}"

    return LINK.sub(fix, text), copies


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: add BENCHMARKS.md as the page ``results.md`` and copy in the plots it links to."""
    from mkdocs.structure.files import File

    text, copies = _benchmarks_page(config)
    files.append(File.generated(config, "results.md", content=text))
    for rel in dict.fromkeys(copies):
        files.append(File.generated(config, rel, abs_src_path=str(ROOT / rel)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook: replace each ``<!-- gen:... -->`` marker with the text it asks for."""

    def generate(match: re.Match) -> str:
        kind, arg = match.group(1), match.group(2)
        if kind == "mermaid":
            return mermaid(arg)
        if kind == "levels":
            return levels_table()
        if kind == "context":
            return context_tables()
        if kind == "cli":
            return cli_reference()
        if kind == "imports":
            return imports_table()
        msg = f"{page.file.src_uri}: unknown generated block {kind!r}"
        raise ValueError(msg)

    return MARKER.sub(generate, markdown)


ROLE = re.compile(r":(?:class|meth|func|mod|attr|exc|data|obj):<code>~?([\w.]+)</code>")


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """Docstrings use Sphinx roles (``:class:`~x.Y```); mkdocstrings leaves the role's name in the text: drop it."""
    return ROLE.sub(lambda m: f"<code>{m.group(1)}</code>", html)
