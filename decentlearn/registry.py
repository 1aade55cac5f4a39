"""One registry type for everything built from a spec string: algorithms, compressors, topologies,
data sets, partitions (and models).

A ``Registry(kind)`` maps a name to an entry (a class or a builder function).
``@reg.register(name)`` adds one; ``reg.get(name)`` returns it, and an unknown name raises
ValueError with the closest registered name:
``unknown topology 'rnig'; did you mean 'ring'? expected one of complete, ...``.
Specs are ``name`` or ``name:arg1:arg2``; ``reg.split(spec)`` separates them and ``reg.make(spec,
...)`` calls the entry with the spec's arguments. Each family keeps its own public functions
(``available()``, ``make(...)``, ``register``) on top of its registry.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def closest(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The choice most similar to ``word`` (difflib ratio >= cutoff), or None."""
    choices = list(choices)
    match = difflib.get_close_matches(word, choices, n=1, cutoff=cutoff)
    if match:
        return match[0]
    # A prefix typo ("exp" for "exponential") is not similar by ratio but is still a good guess.
    starts = [c for c in choices if word and c.startswith(word)]
    return starts[0] if len(starts) == 1 else None


def unknown_message(kind: str, name: str, choices: Iterable[str],
                    forms: Iterable[str] | None = None, spec: str | None = None) -> str:
    """``unknown {kind} 'x' [in spec 's']; did you mean 'y'? expected one of a, b, c``."""
    choices = list(choices)
    where = f" in spec {spec!r}" if spec is not None and spec != name else ""
    guess = closest(name, choices) if isinstance(name, str) else None
    hint = f"; did you mean {guess!r}?" if guess is not None else ";"
    listed = ", ".join(forms if forms is not None else choices)
    return f"unknown {kind} {name!r}{where}{hint} expected one of {listed}"


class Registry(Generic[T]):
    """Named entries of one ``kind`` ("topology", "compressor", ...), built from spec strings."""

    def __init__(self, kind: str) -> None:
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"kind must be a non-empty str, got {kind!r}")
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._forms: dict[str, str] = {}

    def register(self, name: str, *, form: str | None = None) -> Callable[[T], T]:
        """Decorator registering its argument under ``name``; ``form`` documents the spec's shape
        (e.g. ``"shards:K"``, default the name). Registering a name twice is a ValueError."""
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        if not name or ":" in name or name != name.strip():
            raise ValueError(f"name must be non-empty, without ':' or surrounding spaces, "
                             f"got {name!r}")
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")

        def decorate(entry: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = entry
            self._forms[name] = form or name
            return entry

        return decorate

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def available(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def forms(self) -> list[str]:
        """The spec forms of the registered names, sorted by name."""
        return [self._forms[k] for k in sorted(self._entries)]

    def error(self, name: str, spec: str | None = None) -> ValueError:
        """The ValueError for an unknown ``name`` (with the closest registered name)."""
        return ValueError(unknown_message(self.kind, name, self.available(), self.forms(), spec))

    def get(self, name: str, spec: str | None = None) -> T:
        """The entry registered under ``name``; ValueError (with a suggestion) if there is none."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise self.error(name, spec) from None

    @staticmethod
    def split(spec: str) -> tuple[str, list[str]]:
        """``"topk:0.01"`` -> ``("topk", ["0.01"])``."""
        name, *args = spec.split(":")
        return name, args

    def make(self, spec: str, *args: Any, **kwargs: Any) -> Any:
        """Calls the entry named by ``spec``'s first field with the spec's own arguments (as
        strings) after ``args``: ``make("small-world:4:0.1", n)`` calls
        ``builder(n, "4", "0.1")``."""
        if not isinstance(spec, str) or not spec:
            raise ValueError(f"{self.kind} spec must be a non-empty str, got {spec!r}")
        name, spec_args = self.split(spec)
        return self.get(name, spec)(*args, *spec_args, **kwargs)

    def copy(self) -> Registry[T]:
        """An independent registry with the same entries (for tests that register extras)."""
        new: Registry[T] = Registry(self.kind)
        new._entries = dict(self._entries)
        new._forms = dict(self._forms)
        return new

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.available()})"
