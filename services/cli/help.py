"""Help pages of ``provely``: plain words for people, not Python's types or docstring markup.

Typer derives help from annotations and docstrings, and by default shows ``<bool>`` after a
flag, ``<list[Path]>`` after a repeatable path and the docstrings' reStructuredText literals
(````x````) as they are written. :class:`HelpGroup`, the root group's class, goes once over the
whole command tree when it is built and gives every parameter a metavar in the words of
``--help`` pages everywhere (``PATH``, ``TEXT``, ``INTEGER``, ``NUMBER``, ``a|b|c``; nothing
after a flag, an argument named by its own name), and turns the literals into plain text.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from typer import Context
from typer.core import TyperArgument, TyperGroup, TyperOption

__all__ = ["HelpGroup", "plain_text"]

_LITERAL = re.compile(r"``([^`]+)``")
_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
_WORDS = {int: "INTEGER", float: "NUMBER", str: "TEXT", bool: "BOOLEAN"}


def plain_text(text: str | None) -> str | None:
    """``text`` without reStructuredText literals and roles (````x```` and ``:class:`x``` → x),
    each paragraph on one line (the terminal wraps it; list items keep their own lines)."""
    if text is None:
        return None
    text = _ROLE.sub(r"\1", _LITERAL.sub(r"\1", inspect.cleandoc(text)))
    paragraphs = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in paragraph.splitlines()]
        joined: list[str] = []
        for line in lines:
            if joined and not line.startswith(("- ", "* ")):
                joined[-1] += " " + line
            else:
                joined.append(line)
        paragraphs.append("\n".join(joined))
    return "\n\n".join(paragraphs)


def _value_word(param: TyperOption | TyperArgument) -> str:
    desc = param.type_descriptor
    if desc.is_choice:
        return "|".join(str(c) for c in desc.choices or ())
    if desc.is_path:
        return "PATH"
    annotation: Any = desc.annotation
    if desc.is_list:
        (annotation,) = getattr(annotation, "__args__", (str,))
    if desc.is_datetime:
        return "TIME"
    return _WORDS.get(annotation, "VALUE")


def _no_type(ctx: Any) -> None:
    return None


def _tidy_param(param: Any) -> None:
    param.help = plain_text(param.help)
    if isinstance(param, TyperOption):
        if param.is_flag or param.count:
            param.metavar = ""  # a flag takes no value: nothing to show after it
        elif param.metavar is None:
            param.metavar = _value_word(param)
    elif isinstance(param, TyperArgument):
        if param.metavar is None:
            param.metavar = (param.name or "value").upper() + ("..." if param.nargs != 1 else "")
        name = str(param.metavar)
        usage = name if param.required else f"[{name}]"
        # The argument's name already says what it is; its Python type says nothing more, and
        # the usage line shows it as every other program does (FILE, [PATHS]...).
        setattr(param, "display_type_rich", _no_type)  # noqa: B010
        setattr(param, "_rich_display_name", lambda: name)  # noqa: B010
        setattr(param, "_usage_display_name", lambda: usage)  # noqa: B010


def _tidy(command: Any) -> None:
    command.help = plain_text(command.help)
    command.short_help = plain_text(command.short_help)
    for param in command.params:
        _tidy_param(param)
    # ``--help`` is made on first use and kept: make it now, and tidy it like the others.
    help_option = command.get_help_option(Context(command))
    if help_option is not None:
        _tidy_param(help_option)
    for sub in getattr(command, "commands", {}).values():
        _tidy(sub)


class HelpGroup(TyperGroup):
    """The root group: tidies the help of every command below it once, when it is built."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _tidy(self)
