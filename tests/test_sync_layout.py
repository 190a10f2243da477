"""The sync layer's module layout: one feed, transports under it, no import cycles, Ray optional."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

SYNC = Path(__file__).resolve().parent.parent / "sync"


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import in ``path``, relative ones resolved within ``magister.sync``."""
    rel = path.relative_to(SYNC.parent).with_suffix("")
    package = ["magister", *rel.parts[:-1]]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            out.append((module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
    return out


ENDPOINTS = ("magister.sync.zmq_server", "magister.sync.ray_server")


def test_transports_never_import_the_feed_nor_an_endpoint():
    for path in sorted((SYNC / "transports").glob("*.py")):
        for module, names in _imports(path):
            assert module not in ("magister.sync.feed", *ENDPOINTS), (path.name, module)
            if module == "magister.sync":
                assert not {"feed", "server", "ray_server"} & set(names), (path.name, names)


def test_the_env_side_never_imports_an_endpoint():
    """The feed, its options and step records, and the env wrappers reach the curriculum side only through
    the core (and the in-process endpoint's registry): never through the ZeroMQ or Ray endpoint modules."""
    paths = [SYNC / "feed.py", SYNC / "options.py", SYNC / "steps.py", SYNC / "core.py",
             SYNC / "transports" / "inprocess.py",
             *(SYNC.parent / "env_wrappers").glob("*.py")]
    for path in paths:
        for module, _ in _imports(path):
            assert module not in ENDPOINTS, (path.name, module)


def test_the_feed_module_imports_neither_ray_nor_the_ray_backend_at_module_level():
    tree = ast.parse((SYNC / "feed.py").read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    for node in top:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        assert not any(n == "ray" or n.startswith("ray.") or "ray_" in n for n in names), ast.dump(node)


def test_ray_backend_imports_no_private_name_from_another_sync_module():
    for module, names in _imports(SYNC / "ray_server.py"):
        if module.startswith("magister.") or module.startswith("."):
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            assert not private, (module, private)
    tree = ast.parse((SYNC / "ray_server.py").read_text())
    for node in ast.walk(tree):  # nor reaches into one through a module attribute (`client._pid`)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            assert not (node.value.id in ("client", "_client") and node.attr.startswith("_")), ast.dump(node)


def test_the_feed_imports_and_works_in_process_without_ray():
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "import magister.sync.feed as c\n"
        "from magister.curricula.base import Curriculum\n"
        "from magister.task_spaces.discrete import Discrete\n"
        "class C(Curriculum):\n"
        "    def sample(self, k=1):\n"
        "        return [0] * k\n"
        "feed = c.connect(C(Discrete(2)))\n"
        "a = feed.next_task(); feed.record_episode(a, 1.0, 1, 1.0); feed.close()\n"
        "assert 'magister.sync.ray_server' not in sys.modules\n"
        "try:\n"
        "    c.connect('ray://cur')\n"
        "except ImportError as exc:\n"
        "    assert 'ray' in str(exc).lower(), exc\n"
        "else:\n"
        "    raise AssertionError('ray:// without ray must raise ImportError')\n"
        "print('ok')\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


# -- issue 39's structural targets, checked with ast ---------------------------------------------------

def _sources() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text())) for p in sorted(SYNC.rglob("*.py"))]


def _length(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the function's end, its docstring not counted."""
    first = fn.body[0]
    doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
        first.value.value, str)
    return fn.end_lineno - fn.lineno + 1 - ((first.end_lineno - first.lineno + 1) if doc else 0)


def test_no_function_in_sync_is_longer_than_40_lines():
    functions = [(p, n) for p, tree in _sources() for n in ast.walk(tree)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    long = [f"{p.name}:{n.lineno} {n.name} ({_length(n)} lines)" for p, n in functions if _length(n) > 40]
    assert not long, long


def test_no_class_in_sync_has_more_than_20_instance_attributes():
    big = {}
    for p, tree in _sources():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            stores = [n for n in ast.walk(cls) if isinstance(n, ast.Attribute) and type(n.ctx) is ast.Store]
            names = {n.attr for n in stores if isinstance(n.value, ast.Name) and n.value.id == "self"}
            names |= {b.target.id for b in cls.body if isinstance(b, ast.AnnAssign)
                      and isinstance(b.target, ast.Name) and "ClassVar" not in ast.unparse(b.annotation)}
            if len(names) > 20:
                big[f"{p.name}:{cls.name}"] = len(names)
    assert not big, big


def test_the_feed_does_not_branch_on_its_transport():
    """No test of a transport's kind in the feed: no capability flags, no address prefix, no transport
    class compared; and the feed calls nothing its transport's interface does not declare."""
    source = (SYNC / "feed.py").read_text()
    feed = next(n for n in ast.walk(ast.parse(source))
                if isinstance(n, ast.ClassDef) and n.name == "TaskFeed")
    body = ast.unparse(feed)
    for tell in ("caps.", "ray://", "isinstance(self.transport", "type(self.transport", "Ray", "Zmq",
                 "InProcess"):
        assert tell not in body, tell
    assert "type: ignore" not in source
