"""A probe's arguments as the probe reads them: the last of each flag wins (argparse's rule), so
``--loop=trainer --loop=accelerate`` (the job's setting, then a ``--probe-arg``) is ``--loop=accelerate``.

A flag is ``--name=value``, ``--name value`` (the next word does not start with '-') or a bare switch;
``--no-name`` is the same flag as ``--name`` (argparse's BooleanOptionalAction). Other words are kept
where they stand.
"""
from __future__ import annotations


def _key(flag: str) -> str:
    name = flag[2:]
    return name[3:] if name.startswith("no-") else name


def parsed_args(args: list[str]) -> list[tuple[str, list[str]]]:
    """``args`` as (key, words) items in order: one item per flag occurrence, one per other word."""
    out, i = [], 0
    while i < len(args):
        word = args[i]
        if word.startswith("--") and len(word) > 2:
            flag = word.split("=", 1)[0]
            takes = "=" not in word and i + 1 < len(args) and not args[i + 1].startswith("-")
            out.append((_key(flag), [word, args[i + 1]] if takes else [word]))
            i += 2 if takes else 1
        else:
            out.append((f"\0{i}", [word]))
            i += 1
    return out


def effective_args(args: list[str]) -> list[str]:
    """The arguments with every flag given once, at its first place, with its last value."""
    last: dict[str, list[str]] = {}
    for key, words in parsed_args(args):
        last[key] = words   # a dict keeps a key where it was first put
    return [w for words in last.values() for w in words]
