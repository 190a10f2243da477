"""Command lines for the bundled trainers: an argparse parser built from a dataclass of options.

Every field becomes ``--field-name``; the string literal under a field (its "docstring") is its ``--help``
text. Types: ``bool`` -> ``--flag/--no-flag``; ``int`` accepts ``1e5``; ``float``; ``tuple[...]`` ->
zero or more values; ``dict`` -> JSON; anything else -> ``str``.

>>> from dataclasses import dataclass
>>> @dataclass
... class Opts:
...     steps: int = 10
...     '''how many steps'''
...     fast: bool = False
>>> parse_dataclass(Opts, ["--steps", "1e3", "--fast"], prog="demo")
Opts(steps=1000, fast=True)
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
from typing import Any, TypeVar

T = TypeVar("T")


def field_docs(cls: type) -> dict[str, str]:
    """The string literals written under each field of dataclass ``cls`` (none when its source is unavailable,
    e.g. a class typed into a REPL)."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    docs, last = {}, None
    for line in source.splitlines():
        s = line.strip()
        if ":" in s and "=" in s and not s.startswith(('"""', "'''")):
            last = s.split(":")[0]
        elif s[:3] in ('"""', "'''") and s[-3:] == s[:3] and last and len(s) > 6:
            docs[last] = s[3:-3]
    return docs


def parse_dataclass(cls: type[T], argv: list[str] | None = None, *, prog: str,
                    description: str = "", epilog: str | None = None) -> T:
    """Parse ``argv`` into an instance of dataclass ``cls`` (see the module docstring); ``epilog`` ends the
    ``--help`` text (the extras the command needs)."""
    parser = argparse.ArgumentParser(prog=prog, description=description, epilog=epilog,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    docs = field_docs(cls)
    tuples = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        flag = "--" + f.name.replace("_", "-")
        default: Any = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        kind = str(kind)
        help_ = docs.get(f.name, " ")
        if kind == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=help_)
        elif kind.startswith("tuple"):
            tuples.append(f.name)
            parser.add_argument(flag, nargs="*", default=list(default), help=help_)
        elif kind.startswith("dict"):
            parser.add_argument(flag, type=json.loads, default=default, help=help_)
        elif kind == "int":
            parser.add_argument(flag, type=lambda s: int(float(s)), default=default, help=help_)
        elif kind == "float":
            parser.add_argument(flag, type=float, default=default, help=help_)
        else:
            parser.add_argument(flag, type=str, default=default, help=help_)
    values = vars(parser.parse_args(argv))
    for name in tuples:
        values[name] = tuple(values[name])
    return cls(**values)


def trainer_needs(args: Any, *always: str, extra: str = "examples") -> dict[str, str]:
    """What a bundled trainer run with ``args`` imports: the modules ``always``, plus TensorBoard, matplotlib
    and tqdm when its ``tensorboard``, ``plot`` and ``progress`` options are on; each from ``extra``."""
    optional = {"tensorboard": "tensorboard", "plot": "matplotlib", "progress": "tqdm"}
    return {m: extra for m in [*always, *(m for flag, m in optional.items() if getattr(args, flag, False))]}


def require(modules: dict[str, str], command: str) -> None:
    """Exit at once, naming the extra to install, when a module a command needs later is missing.

    ``modules`` maps an importable module to the extra that installs it (``{"matplotlib": "examples"}``).
    A trainer calls this before training, so a run never ends in an ``ImportError`` after its work is done.
    """
    import importlib.util

    missing: dict[str, list[str]] = {}
    for module, extra in modules.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.setdefault(extra, []).append(module)
    if missing:
        wanted = ",".join(sorted(missing))
        names = ", ".join(m for ms in missing.values() for m in ms)
        raise SystemExit(f"{command} needs {names}, which is not installed: pip install "
                         f"'magister[{wanted}]' (from a source checkout: pip install -e '.[{wanted}]')")
