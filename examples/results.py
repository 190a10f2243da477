"""Results that regenerate: the commands that measure something write their current figures into the docs.

``docs/results.md`` (and ``benchmarks/README.md``) hold generated sections between two markers::

    <!-- results:sync-latency -->
    _Output of `python benchmarks/sync_latency.py --write-results`, run on 2026-11-25._
    ...tables and plots...
    <!-- /results:sync-latency -->

Only commands write what lies between the markers; everything outside them is prose kept by hand. A
command run with ``--write-results`` calls :func:`write_section` (or, for a script whose printed output *is*
its table, wraps its run in :func:`recording`), which replaces the block with a stamp naming the command
and the date, then the figures. A page shows the current figures only; the previous ones are in git log.

This module writes into the source checkout (the repository root is the package root); from an installed
wheel there is no ``docs/`` folder, and asking to write raises :class:`FileNotFoundError` saying so.
Benchmarks and the bundled trainers import it; the library itself does not.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import io
import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: The repository root (= the package root of a source checkout).
ROOT = Path(__file__).resolve().parents[1]
#: The results page of the documentation site.
RESULTS_PAGE = ROOT / "docs" / "results.md"
#: The benchmarks' own README, which shows the benchmarks' current figures too.
BENCHMARKS_README = ROOT / "benchmarks" / "README.md"
#: Where plots go (the site serves them; ``README.md`` files link them relatively).
IMAGES = ROOT / "docs" / "img"

#: The command-line flag every results-writing command accepts.
FLAG = "--write-results"

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*\Z")
_STAMP = "_Output of `{command}`, run on {date}._"
#: Parses a stamp back into (command, date).
STAMP_RE = re.compile(r"^_Output of `(?P<command>[^`]+)`, run on (?P<date>\d{4}-\d{2}-\d{2})\._$", re.M)
#: What a section says before its command first ran (it names the command that will write it).
PENDING_RE = re.compile(r"^_Not measured yet: `(?P<command>[^`]+)` writes this section\._$", re.M)
#: Environment variables that change what a benchmark measures, recorded in front of the command.
RECORDED_ENV = ("OMP_NUM_THREADS",)


def open_marker(name: str) -> str:
    return f"<!-- results:{name} -->"


def close_marker(name: str) -> str:
    return f"<!-- /results:{name} -->"


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"section name must be lower-case letters, digits, '-' or '_' "
                         f"(e.g. 'sync-latency'), got {name!r}")


def _span(text: str, name: str, where: str) -> tuple[int, int]:
    """Start and end offsets of the content between the markers of section ``name`` (exclusive)."""
    _check_name(name)
    start, end = open_marker(name), close_marker(name)
    n_open, n_close = text.count(start), text.count(end)
    if n_open == 0 or n_close == 0:
        missing = " and ".join(m for m, n in ((start, n_open), (end, n_close)) if n == 0)
        raise ValueError(f"{where} has no results section {name!r}: add the lines {start} and {end} "
                         f"where the section goes (missing: {missing})")
    if n_open > 1 or n_close > 1:
        raise ValueError(f"{where} has {max(n_open, n_close)} results sections named {name!r}; expected one "
                         f"{start} ... {end} pair")
    i, j = text.index(start) + len(start), text.index(end)
    if j < i:
        raise ValueError(f"{where}: {end} comes before {start}; expected the opening marker first")
    return i, j


def section_names(text: str) -> list[str]:
    """Names of the results sections in ``text``, in page order."""
    return re.findall(r"<!-- results:([a-z0-9][a-z0-9_-]*) -->", text)


def read_section(text: str, name: str, where: str = "the page") -> str:
    """The content between the markers of section ``name`` (stamp and figures), stripped."""
    i, j = _span(text, name, where)
    return text[i:j].strip()


def stamp(command: str, date: str) -> str:
    """The first line of a generated section: which command wrote it, and when."""
    if not command or "`" in command or "\n" in command:
        raise ValueError(f"command must be one line without backticks, got {command!r}")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise ValueError(f"date must read YYYY-MM-DD, got {date!r}")
    return _STAMP.format(command=command, date=date)


def replace_section(text: str, name: str, markdown: str, command: str, date: str,
                    where: str = "the page") -> str:
    """``text`` with section ``name``'s content replaced by the stamp and ``markdown``; nothing else changes.

    Raises:
        ValueError: the section's markers are missing, repeated or out of order (the message names the
            markers to add), or the name, command or date is malformed.
    """
    i, j = _span(text, name, where)
    body = f"\n{stamp(command, date)}\n\n{markdown.strip()}\n" if markdown.strip() else \
        f"\n{stamp(command, date)}\n"
    return text[:i] + body + text[j:]


def today() -> str:
    """Today's date (UTC) as YYYY-MM-DD."""
    return _dt.datetime.now(_dt.timezone.utc).date().isoformat()


def _page(page: str | Path) -> Path:
    path = Path(page)
    if not path.is_absolute():
        path = ROOT / path
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: writing results needs a source checkout of magister "
                                f"(the repository root holds docs/ and benchmarks/)")
    return path


def check_section(page: str | Path, name: str) -> None:
    """Raise now (before a long run) if ``page`` lacks section ``name``."""
    path = _page(page)
    _span(path.read_text(), name, str(path))


def write_section(page: str | Path, name: str, markdown: str, command: str, *,
                  images: Sequence[str | Path] = (), date: str | None = None) -> Path:
    """Replace section ``name`` of ``page`` by a stamp (``command``, ``date``: today by default),
    ``markdown``, then one image line per file in ``images`` (files under ``docs/img/``, linked relative
    to the page).

    ``page`` may be relative to the repository root (``"docs/results.md"``). Returns the page's path.
    Writing the same figures twice leaves the page unchanged.
    """
    path = _page(page)
    parts = [markdown.strip()] if markdown.strip() else []
    for image in images:
        img = Path(image)
        if not img.is_absolute():
            img = IMAGES / img
        if not img.is_file():
            raise FileNotFoundError(f"image {img} does not exist (write it under {IMAGES} first)")
        rel = os.path.relpath(img, path.parent).replace(os.sep, "/")
        parts.append(f"![{img.stem}]({rel})")
    text = path.read_text()
    new = replace_section(text, name, "\n\n".join(parts), command, date or today(), where=str(path))
    if new != text:
        path.write_text(new)
    return path


def command_line(argv: Sequence[str] | None = None, *, module: str | None = None,
                 python: str = "python") -> str:
    """The command that is running, as a user would type it from the repository root.

    ``python -m <module> args`` when ``module`` is given (a ``python -m`` entry point), else
    ``python <script relative to the root> args``; variables of :data:`RECORDED_ENV` that are set come first
    (``OMP_NUM_THREADS=1 python ...``). ``python`` names the interpreter where it matters (a benchmark's own
    virtualenv).
    """
    argv = list(sys.argv if argv is None else argv)
    if module:
        head = [python, "-m", module]
    else:
        script = Path(argv[0]).resolve() if argv else Path("?")
        with contextlib.suppress(ValueError):
            script = script.relative_to(ROOT)
        head = [python, script.as_posix()]
    env = [f"{k}={shlex.quote(os.environ[k])}" for k in RECORDED_ENV if k in os.environ]
    return " ".join(env + head + [shlex.quote(a) for a in argv[1:]])


def machine() -> str:
    """One line for a benchmark's output: CPUs and load average now (a shared machine's noise shows)."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"


def text_block(text: str) -> str:
    """``text`` as a fenced ``text`` block (trailing spaces trimmed: pages keep no trailing whitespace)."""
    lines = [line.rstrip() for line in text.strip("\n").splitlines()]
    return "```text\n" + "\n".join(lines) + "\n```"


def save_image(source: str | Path, name: str) -> Path:
    """Copy the plot ``source`` to ``docs/img/<name>`` and return the copy's path."""
    src = Path(source)
    if not src.is_file():
        raise FileNotFoundError(f"plot {src} does not exist")
    _page(RESULTS_PAGE)  # a source checkout
    dest = IMAGES / name
    shutil.copyfile(src, dest)
    return dest


class _Tee(io.TextIOBase):
    def __init__(self, stream: io.TextIOBase, buffer: io.StringIO) -> None:
        self.stream, self.buffer = stream, buffer

    def write(self, s: str) -> int:
        self.buffer.write(s)
        return self.stream.write(s)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


@dataclass
class Recording:
    """What a :func:`recording` block collects: the printed output, plots, and text around them."""

    output: str = ""
    images: list[Path] = field(default_factory=list)
    before: str = ""
    after: str = ""

    def add_image(self, source: str | Path, name: str) -> Path:
        """Copy a plot to ``docs/img/<name>``; it is shown under the output."""
        dest = save_image(source, name)
        self.images.append(dest)
        return dest

    def markdown(self) -> str:
        output = text_block(self.output) if self.output.strip() else ""
        parts = [self.before.strip(), output, self.after.strip()]
        return "\n\n".join(p for p in parts if p)


@contextlib.contextmanager
def recording(name: str, *, enabled: bool, command: str | None = None,
              pages: Sequence[str | Path] = (RESULTS_PAGE,)) -> Iterator[Recording]:
    """Run a block whose printed output is its result; with ``enabled``, write that output as section
    ``name`` of every page in ``pages`` when the block finishes without an exception.

    The pages and their markers are checked before the block runs, so a long run cannot end in a missing
    marker. ``command`` defaults to :func:`command_line` for a script.
    """
    rec = Recording()
    if not enabled:
        yield rec
        return
    for page in pages:
        check_section(page, name)
    command = command or command_line()
    buffer = io.StringIO()
    old = sys.stdout
    sys.stdout = _Tee(old, buffer)  # type: ignore[assignment]
    try:
        yield rec
    finally:
        sys.stdout = old
    rec.output = buffer.getvalue()
    for page in pages:
        path = write_section(page, name, rec.markdown(), command, images=rec.images)
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        sys.stderr.write(f"wrote results section {name!r} of {where}\n")
