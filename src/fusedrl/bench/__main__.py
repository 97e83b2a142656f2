"""Entry point of `python -m fusedrl.bench <subcommand> [options]`."""

from fusedrl.bench import main

if __name__ == "__main__":
    raise SystemExit(main())
