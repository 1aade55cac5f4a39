"""``python -m decentlearn`` runs the command-line interface."""

from decentlearn.cli import main

raise SystemExit(main())
