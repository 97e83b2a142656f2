"""An ArgumentParser whose usage errors suggest what a mistyped option or command may have meant.

    fusedrl train: error: unrecognized arguments: --num_seeds 4 (did you mean --num-seeds?)
"""

from __future__ import annotations

import argparse
import difflib
import re


def _normal(option: str) -> str:
    return option.lower().replace("_", "-")


def close_options(word: str, options: list[str]) -> list[str]:
    """Options of `options` that `word` may have meant: the one equal up to case and `_` for `-`,
    else the closest spellings (difflib), at most three."""
    key = _normal(word.split("=", 1)[0])
    by_normal = {_normal(o): o for o in options}
    if key in by_normal:  # only `_` for `-` (or case): that one
        return [by_normal[key]]
    out = [by_normal[m] for m in difflib.get_close_matches(key, list(by_normal), n=3, cutoff=0.6)]
    return list(dict.fromkeys(out))[:3]


class SuggestingParser(argparse.ArgumentParser):
    """`parse_args` names, for each unrecognized option, the options it may have meant (the
    subcommand's own, where one was chosen), and an invalid choice (a mistyped command) gets the
    closest choices. Subparsers made by `add_subparsers` are of this class too."""

    def parse_args(self, args=None, namespace=None):
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = self._chosen_subparser(namespace)
            options = [o for o in parser._option_string_actions if o.startswith("--")]
            hints = []
            for word in extras:
                if word.startswith("-") and (close := close_options(word, options)):
                    hints.append(f"{word.split('=', 1)[0]}: did you mean {' or '.join(close)}?")
            text = f"unrecognized arguments: {' '.join(extras)}"
            parser.error(text + (f" ({'; '.join(hints)})" if hints else
                                 f"; see `{parser.prog} --help` for its options"))
        return namespace

    def _chosen_subparser(self, namespace) -> argparse.ArgumentParser:
        """The parser of the subcommand `namespace` chose (nested ones too), else this one."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(namespace, action.dest, None) or "")
                if isinstance(chosen, SuggestingParser):
                    return chosen._chosen_subparser(namespace)
        return self

    def error(self, message: str):
        match = re.search(r"invalid choice: '?([^' ]*)'? \(choose from (.*)\)", message)
        if match and "did you mean" not in message:
            choices = re.findall(r"'([^']*)'", match.group(2)) or match.group(2).split(", ")
            close = difflib.get_close_matches(match.group(1), choices, n=3)
            if close:
                message += f" (did you mean {' or '.join(close)}?)"
        super().error(message)
