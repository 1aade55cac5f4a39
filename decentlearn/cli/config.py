"""A run's configuration from the command line: the ``--config`` TOML file, then the flags.

``run`` (both backends) and ``sweep`` read config files through here, so a file means the same to
both: its ``[run]`` table, or its top-level keys when it has no table.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from decentlearn.cli.parser import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


def run_fields() -> dict[str, dataclasses.Field]:
    """The keys of a run's configuration by name: RunConfig's fields and every algorithm's
    options (flags, config-file keys)."""
    from decentlearn.runner.config import config_keys
    return config_keys()


def load_toml(path: Path, what: str) -> dict:
    """The parsed TOML file ``path``; UsageError (``{what}: no such file``, ``not valid
    TOML``, ``not UTF-8 text``, ``nested too deeply``, one line) otherwise."""
    if not path.is_file():
        raise UsageError(f"{what}: no such file")
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{what}: not valid TOML ({e})") from None
    except UnicodeDecodeError as e:  # TOML is UTF-8 text
        raise UsageError(f"{what}: not valid TOML: not UTF-8 text (byte {e.object[e.start]:#04x} "
                         f"at offset {e.start})") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise UsageError(f"{what}: not valid TOML: arrays or tables nested too deeply") from None
    except OSError as e:
        raise UsageError(f"{what}: cannot be read ({e.strerror})") from None


def config_options(loaded: dict, path: str) -> dict:
    """The options of a config file: its ``[run]`` table, or its top-level keys when it has no
    table. Top-level keys beside ``[run]`` and any other table are errors naming the key."""
    tables = [k for k, v in loaded.items() if isinstance(v, dict)]
    unknown = [k for k in tables if k != "run"]
    if unknown:
        raise UsageError(f"--config {path}: unknown section [{unknown[0]}]; options go at the top "
                         "level or in a [run] table")
    if "run" not in loaded:
        return loaded
    outside = [k for k in loaded if k != "run"]
    if outside:
        raise UsageError(f"--config {path}: key {outside[0]!r} is outside the [run] table; put "
                         "every option in [run] (or use no table at all)")
    return loaded["run"]


def resolve_run_config(args):
    """The RunConfig of ``run``'s arguments: defaults, overridden by ``--config``'s options,
    overridden by the flags given (UsageError, one line, for an unknown or invalid option)."""
    from decentlearn.sim import RunConfig
    fields = run_fields()
    values: dict = {}
    if args.config:
        loaded = load_toml(Path(args.config), f"--config {args.config}")
        for key, value in config_options(loaded, args.config).items():
            name = key.replace("-", "_")
            if name == "options" and isinstance(value, dict):  # [run.options]
                values.update({k.replace("-", "_"): v for k, v in value.items()})
                continue
            if name not in fields:
                from decentlearn.registry import closest
                guess = closest(name, fields)
                hint = f"; did you mean {guess!r}?" if guess else ";"
                raise UsageError(f"--config {args.config}: unknown option {key!r}{hint} expected "
                                 f"one of {', '.join(sorted(fields))}")
            values[name] = value
    for name in fields:
        value = getattr(args, name, None)
        if value is not None:
            values[name] = value
    if getattr(args, "error_feedback", False):
        spec = values.get("compress", "none")
        if spec == "none":
            raise UsageError("--error-feedback needs a compressor: pass --compress SPEC")
        if not str(spec).startswith("ef:"):
            values["compress"] = f"ef:{spec}"
    try:
        return RunConfig.from_dict(values)
    except (TypeError, ValueError) as e:
        raise UsageError(str(e)) from None
