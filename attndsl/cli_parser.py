"""The command line's parser (`Parser`, argparse's with its errors as UsageError, exit 2) and
what it says to a mistyped word: the closest known one (`did_you_mean`), and where an option
written before the command name belongs."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable, Sequence

from .errors import UsageError

__all__ = ["Parser", "did_you_mean"]


class Parser(argparse.ArgumentParser):
    """argparse's parser with UsageError for its errors and a suggestion for each unknown
    option, subcommand or choice. `finish`, where set on the top parser, checks (and may
    complete) the parsed arguments: the options that go together."""

    finish: Callable[[Parser, argparse.Namespace], None] | None = None

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        given = list(sys.argv[1:] if args is None else args)
        self._options_before_the_command(given)
        parsed, extras = self.parse_known_args(given, namespace)
        if extras:  # argparse reports a subcommand's unknown options here, at the top
            known = [*self._option_string_actions]
            if (sub := self._command(getattr(parsed, self._commands().dest, None))) is not None:
                known += sub._option_string_actions
            self.error(f"unrecognized arguments: {' '.join(extras)}" + did_you_mean(
                [a.split("=", 1)[0] for a in extras if a.startswith("-")], known))
        if self.finish is not None:
            self.finish(self, parsed)
        return parsed

    def _options_before_the_command(self, given: list[str]) -> None:
        """Options written before the first word (the command) that the top level does not
        take: argparse would say "the following arguments are required" or drop them. One of
        the command's own is said to go after it; any other gets the closest known word. After
        a first word that is no command, argparse says so (invalid choice, did you mean)."""
        first = next((i for i, a in enumerate(given) if not a.startswith("-")), len(given))
        unknown = [o for a in given[:first]
                   if (o := a.split("=", 1)[0]) not in self._option_string_actions]
        if not unknown or self._commands() is None:
            return
        name = given[first] if first < len(given) else None
        sub = self._command(name)
        theirs = [*sub._option_string_actions] if sub is not None else []
        misplaced = [o for o in unknown if o in theirs]
        if misplaced:
            self.error(f"{', '.join(f'`{o}`' for o in misplaced)} "
                       + ("is an option" if len(misplaced) == 1 else "are options")
                       + f" of `{name}`: put {'it' if len(misplaced) == 1 else 'them'} after "
                       f"the command name (`attndsl {name} ... {' '.join(misplaced)}`)")
        self.error(f"unrecognized arguments: {' '.join(unknown)}" + did_you_mean(
            unknown, [*self._option_string_actions, *self._commands().choices, *theirs]))

    def _commands(self) -> argparse._SubParsersAction | None:
        return next((a for a in self._actions if isinstance(a, argparse._SubParsersAction)),
                    None)

    def _command(self, name: object) -> argparse.ArgumentParser | None:
        commands = self._commands()
        return commands.choices.get(name) if commands is not None and \
            isinstance(name, str) else None

    def _check_value(self, action: argparse.Action, value: object) -> None:
        try:  # an unknown subcommand or choice: name the closest one
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            hint = did_you_mean([str(value)], [str(c) for c in action.choices or ()])
            raise argparse.ArgumentError(action, exc.message + hint) from None


def did_you_mean(given: Sequence[str], known: Sequence[str]) -> str:
    """A help line naming the closest known word to each given one (difflib), or "". A word
    that is known already gets none: it is misplaced, not mistyped."""
    close = {g: m[0] for g in given
             if g not in known and (m := difflib.get_close_matches(g, known, n=1))}
    if not close:
        return ""
    if len(close) == 1 and len(given) == 1:  # as the spec's diagnostics put it
        return f"\n  = help: did you mean `{next(iter(close.values()))}`?"
    return "\n  = help: did you mean " + ", ".join(f"`{m}` (for {g})"
                                                   for g, m in close.items()) + "?"
