"""``decentlearn info``: the build configuration (``decentlearn.show_config``)."""

from __future__ import annotations


def cmd_info(args) -> int:
    from decentlearn import show_config
    show_config()
    return 0
