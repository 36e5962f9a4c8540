"""A mkdocs hook: the reference pages generated from the code at build time.

The Python API page is written by hand, to group the names, and checked here:
a name of ``tenure.__all__`` that it does not document is a warning.
The CLI page walks the ``tenure`` click group: each command's usage, help and
options, as ``--help`` prints them (defaults included). On the policy page,
each field of :class:`tenure.config.QueuePolicy` is a row with its
default (the dataclass's), its bounds (``POLICY_BOUNDS``) and its description
(the docstring under the field in ``config.py``). So neither page can disagree
with the code. A field without a docstring is a warning, which
``mkdocs build --strict`` turns into a failed build.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import logging
import re
import typing

import click
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

import tenure
from tenure import config

POLICY_PAGE = "reference/policy.md"
CLI_PAGE = "reference/cli.md"
log = logging.getLogger("mkdocs.hooks.reference")

POLICY_INTRO = """# Queue policy

A queue's policy is stored with the queue and read by every worker, so one
change governs the whole fleet: `app.queue("default").set_policy(lease_ttl=30)`
or `tenure policy set --queue default lease_ttl=30`. Times are float seconds.
A value out of its bounds is refused with `InvalidInput`, which names the
field and its bounds; `heartbeat_interval` must also be at most half of
`lease_ttl`.

This table is generated from `tenure.config.QueuePolicy` and `POLICY_BOUNDS`
when the site is built.

| field | default | bounds | what it does |
| --- | --- | --- | --- |
"""


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a class (PEP 257 attribute docstrings)."""
    [body] = ast.parse(inspect.getsource(cls)).body
    assert isinstance(body, ast.ClassDef)
    docs: dict[str, str] = {}
    for node, after in zip(body.body, body.body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = " ".join(inspect.cleandoc(after.value.value).split())
    return docs


def seconds(x: float) -> str:
    if x == config.MAX_SECONDS:
        return "ten years"
    return f"{x:g}"


def bounds(name: str, kind: str) -> str:
    if name == "delivery":
        return " or ".join(f"`{d}`" for d in typing.get_args(config.Delivery))
    if kind == "bool":
        return "`True` or `False`"
    if name not in config.POLICY_BOUNDS:
        return ""
    lo, hi = config.POLICY_BOUNDS[name]
    if kind.startswith("int"):
        return f"an integer in [{lo:,.0f}, {hi:,.0f}]"
    opening = "(" if name in config._ABOVE else "["
    return f"{opening}{seconds(lo)}, {seconds(hi)}]"


def policy_page() -> str:
    docs = field_docs(config.QueuePolicy)
    rows = []
    for field in dataclasses.fields(config.QueuePolicy):
        kind = "str" if field.type == "Delivery" else str(field.type)
        described = docs.get(field.name)
        if described is None:
            log.warning("QueuePolicy.%s has no docstring: write one under it in config.py",
                        field.name)  # fmt: skip
        cells = [f"`{field.name}`", f"`{field.default!r}`", bounds(field.name, kind),
                 (described or "").replace("``", "`")]  # fmt: skip
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return POLICY_INTRO + "\n".join(rows) + "\n"


CLI_INTRO = """# CLI

Generated from the `tenure` command's own definitions when the site is built:
what `tenure COMMAND --help` prints. Every command reads its storage from
`--url`, else `TENURE_URL`, else the URL of the App that `--app` (or
`TENURE_APP`) names, else `sqlite:///tenure.db`. An error is one line on
stderr, `error: ...`, and exit code 2 for a usage error, 1 for anything else;
`TENURE_DEBUG=1` shows the traceback of an unexpected one. Every command
takes `-h` or `--help`.
"""


def command_section(command: click.Command, ctx: click.Context) -> list[str]:
    level = "#" * min(ctx.command_path.count(" ") + 2, 4)
    usage = " ".join([ctx.command_path, *command.collect_usage_pieces(ctx)])
    lines = [f"{level} `{ctx.command_path}`", "", inspect.cleandoc(command.help or ""), "",
             "```", usage, "```", ""]  # fmt: skip
    records = [r for p in command.get_params(ctx)
               if isinstance(p, click.Option) and "--help" not in p.opts
               and (r := p.get_help_record(ctx))]  # fmt: skip
    if records:
        lines += ["| option | what it does |", "| --- | --- |"]
        for opts, text in records:
            # "[default: ...] [1<=x<=9]" would read as a reference link: escaped.
            cells = (f"`{opts}`", " ".join(text.split()).replace("[", "\\["))
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                lines += command_section(sub, click.Context(sub, info_name=name, parent=ctx))
    return lines


def cli_page() -> str:
    from tenure.cli import cli

    ctx = click.Context(cli, info_name="tenure")
    return CLI_INTRO + "\n" + "\n".join(command_section(cli, ctx))


def on_files(files: Files, *, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, POLICY_PAGE, content=policy_page()))
    files.append(File.generated(config, CLI_PAGE, content=cli_page()))
    return files


def on_page_markdown(markdown: str, *, page: Page, **_: object) -> str:
    if page.file.src_uri == "reference/python.md":
        documented = set(re.findall(r"^::: tenure\.(\w+)$", markdown, re.MULTILINE))
        for name in sorted(set(tenure.__all__) - documented):
            log.warning("tenure.%s is public but not in reference/python.md: add it", name)
    return markdown


if __name__ == "__main__":  # print the pages, to read them without building the site
    print(policy_page(), cli_page(), sep="\n")
