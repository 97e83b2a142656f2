"""fusedrl.bench: throughput benchmarks, run as `python -m fusedrl.bench <subcommand> [options]`.

Every public module of this package (`envs.py`, and later `ppo.py`, `sweep.py`, `profile.py`, ...)
is a subcommand: it exposes `main(argv) -> int | None`, and the first line of its docstring is the
one-line description shown in the usage message. Modules whose name starts with `_` are helpers,
not subcommands. Subcommand modules are imported only when run, so listing them stays cheap.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Sequence

PROG = "python -m fusedrl.bench"


def subcommands() -> list[str]:
    """Names of the available subcommands (the package's public modules), sorted."""
    return sorted(
        m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_") and not m.ispkg
    )


def _summary(name: str) -> str:
    """First line of a subcommand module's docstring, read without importing it."""
    spec = importlib.util.find_spec(f"{__name__}.{name}")
    if spec is None or spec.origin is None:
        return ""
    try:
        with open(spec.origin, encoding="utf-8") as f:
            doc = ast.get_docstring(ast.parse(f.read())) or ""
    except (OSError, SyntaxError):
        return ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def usage() -> str:
    lines = [f"usage: {PROG} <subcommand> [options]", "", "subcommands:"]
    names = subcommands()
    width = max((len(n) for n in names), default=0)
    lines += [f"  {n:<{width}}  {_summary(n)}".rstrip() for n in names]
    lines += ["", f"Run `{PROG} <subcommand> --help` for a subcommand's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatches `argv[0]` to `fusedrl.bench.<argv[0]>.main(argv[1:])`; returns an exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        stream = sys.stdout if argv else sys.stderr
        print(usage(), file=stream)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    valid = subcommands()
    if name not in valid:
        print(
            f"{PROG}: unknown subcommand {name!r}; valid subcommands: {', '.join(valid)}.\n\n{usage()}",
            file=sys.stderr,
        )
        return 2
    module = importlib.import_module(f"{__name__}.{name}")
    entry = getattr(module, "main", None)
    if not callable(entry):
        print(f"{PROG}: subcommand module {module.__name__} has no main(argv).", file=sys.stderr)
        return 2
    code = entry(rest)
    return 0 if code is None else int(code)


__all__ = ["main", "subcommands", "usage"]
