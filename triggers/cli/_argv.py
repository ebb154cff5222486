"""Global options anywhere: `triggers list --database-url X` as `triggers --database-url X list`.

Click reads an option only at the level that declares it: the application's own
options (`--database-url`, `--config`, `--output`, `--local`...) before the
command, a command's options after it. People write both anywhere, so before
parsing, a global option written after the command moves in front of it, and a
global option written before a command that declares the same option itself
(`--json`, `--output`, `--config` of `run`) moves after it. Option values, the
arguments after `--`, and anything unknown stay where they are, for Click to judge.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _options(command: Any) -> dict[str, bool]:
    """Each option name of `command` (`--output`, `-o`), and whether it takes a value."""
    found: dict[str, bool] = {}
    for param in getattr(command, "params", ()):
        if getattr(param, "param_type_name", "") != "option":
            continue
        takes_value = not (param.is_flag or param.count)
        for name in (*param.opts, *param.secondary_opts):
            found[name] = takes_value
    return found


def _option(word: str, known: dict[str, bool]) -> tuple[str, int] | None:
    """The option `word` names among `known` and how many words it spans (1 or 2)."""
    if not word.startswith("-") or word == "-":
        return None
    name, equals, _ = word.partition("=")
    if name not in known:
        return None
    return name, 2 if known[name] and not equals else 1


def arrange(root: Any, args: Sequence[str]) -> list[str]:
    """`args` with global options moved to where Click reads them (see the module doc)."""
    globals_ = _options(root)
    found = _find_command(root, list(args), globals_)
    if found is None:
        return list(args)
    head, path, command, index = found
    own = _options(command)
    kept, for_command = _split(head, globals_, lambda name: name in own)
    rest, for_root = _split(list(args[index:]), own, lambda name: False, shared=globals_)
    return [*kept, *for_root, *path, *for_command, *rest]


def command_path(root: Any, args: Sequence[str]) -> list[str]:
    """The path of the command `args` run (`["runs", "logs"]`), or [] when they run none."""
    found = _find_command(root, list(args), _options(root))
    return [] if found is None else found[1]


def _find_command(
    root: Any, args: list[str], globals_: dict[str, bool]
) -> tuple[list[str], list[str], Any, int] | None:
    """The words before the command, the command's path (`runs`, `logs`), the command,
    and where its own words start; None when there is no command Click would run."""
    head: list[str] = []
    index, command, path = 0, root, []
    while index < len(args):
        word = args[index]
        if word == "--":
            return None
        found = _option(word, globals_)
        span = found[1] if found is not None else 1
        if word.startswith("-"):
            head += args[index : index + span]  # --help, or unknown: Click decides
            index += span
            continue
        commands = getattr(command, "commands", None)
        if not commands or word not in commands:
            return None
        command = commands[word]
        path.append(word)
        index += 1
        if not getattr(command, "commands", None):
            return head, path, command, index
    return None


def _split(
    words: list[str],
    known: dict[str, bool],
    moves: Any,
    *,
    shared: dict[str, bool] | None = None,
) -> tuple[list[str], list[str]]:
    """(words that stay, words that move): an option in `known` moves when `moves(name)`;
    with `shared`, an option not in `known` but in `shared` moves. Stops at `--`."""
    stay: list[str] = []
    move: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":
            stay += words[index:]
            break
        found = _option(word, known)
        if found is not None:
            (move if moves(found[0]) else stay).extend(words[index : index + found[1]])
            index += found[1]
            continue
        other = _option(word, shared) if shared is not None else None
        if other is not None:
            move += words[index : index + other[1]]
            index += other[1]
            continue
        stay.append(word)
        index += 1
    return stay, move


def wants_json_errors(args: Sequence[str]) -> bool:
    """Whether the command line asks for JSON (`--json`, `--output json|jsonl`), so that
    even an error in parsing it is reported as JSON."""
    for index, word in enumerate(args):
        if word == "--":
            return False
        if word == "--json":
            return True
        name, equals, value = word.partition("=")
        if name in ("--output", "-o"):
            if not equals:
                value = args[index + 1] if index + 1 < len(args) else ""
            if value in ("json", "jsonl"):
                return True
    return False
