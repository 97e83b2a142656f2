"""Code that a file names is imported only with the user's say-so.

A run folder's config.json (or a `--config FILE`) may name modules to import: its `imports` (those
that register the run's env, as `fusedrl train --import` recorded them) and the module of its
`network` ("module:function"). Importing a module runs its code, so a folder from elsewhere must not
do that on its own: the readers of such files (`fusedrl.runs.load_run_config` and the functions
built on it, `fusedrl.load`, `fusedrl evaluate`, `fusedrl train --config/--resume`) refuse with
`UntrustedImportsError` unless told to trust them (`trust_imports=True`, `--trust-imports`), before
anything is imported. Modules the user names on the command line (`--import MODULE`, `--set
network=MODULE:FUNCTION`) are trusted as typed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

#: How the command line says "trust it" (`UntrustedImportsError.message`).
CLI_FLAG = "--trust-imports"


class UntrustedImportsError(ValueError):
    """A file names modules to import and the caller did not say to trust it; nothing was imported.

    Attributes:
      source: the file.
      modules: (module, what names it) pairs, e.g. ("myenvs", "imports").
    """

    def __init__(self, source: str, modules: Sequence[tuple[str, str]]):
        self.source, self.modules = str(source), list(modules)
        super().__init__(self.message("trust_imports=True"))

    def message(self, how: str, *, cli: bool = False) -> str:
        """The error text, saying to pass `how` (`trust_imports=True`, or `--trust-imports`)."""
        whys: dict[str, list[str]] = {}
        for m, why in self.modules:
            whys.setdefault(m, []).append(why)
        names = ", ".join(f"{m!r} ({' and '.join(w)})" for m, w in whys.items())
        alternative = (" (or --import MODULE for each of them, which trusts that module)" if cli else "")
        return (f"{self.source} names code to import: module(s) {names}. Importing a module runs its code, "
                f"so fusedrl imports what a file names only when told to: pass {how} if you trust "
                f"this file{alternative}. Nothing was imported.")


def named_modules(fields: Mapping[str, Any], imports: Sequence[str]) -> list[tuple[str, str]]:
    """(module, what names it) for every module a config would import: each of its run's `imports`,
    then the module of its `network` "module:function" (not a built-in network such as "cnn")."""
    # Start-up time: networks loads JAX, and the CLI checks trust before it needs JAX.
    from fusedrl.networks import BUILTIN_NETWORKS, network_module, network_path_error

    named = [(m, "imports") for m in imports]
    network = fields.get("network") if isinstance(fields, Mapping) else None
    if isinstance(network, str) and network not in BUILTIN_NETWORKS and network_path_error(network) is None:
        named.append((network_module(network), f"network {network!r}"))
    return named


def check_trusted(source: str, named: Sequence[tuple[str, str]], *, trust: bool,
                  trusted: Collection[str] = ()) -> None:
    """Raises UntrustedImportsError naming the modules of `named` that are not in `trusted`, unless
    `trust` or there are none."""
    untrusted = [(m, why) for m, why in named if m not in trusted]
    if untrusted and not trust:
        raise UntrustedImportsError(source, untrusted)
