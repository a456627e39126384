"""tcbench.widgets: the Jupyter panel (``from tcbench.widgets import Workbench``).

A view over tcbench's public API only: it never imports torch, torch_xla or transformers, so
the panel appears at once and every measured job runs in its own process.
"""

from ._panel import Workbench

__all__ = ["Workbench"]
