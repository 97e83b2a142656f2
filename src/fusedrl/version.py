"""The package version, in a module of its own so that submodules can read it without importing
the package's `__init__` (and everything it imports)."""

__version__ = "0.1.0"
