"""The ``tcbench`` command: ``app`` builds the parser and dispatches; one module per command group."""

from tcbench.cli.app import main

__all__ = ["main"]
