"""What runs inside a job's own process: the worker loop and the messages it sends, ``track()`` and
``tcbench.hf`` for users' scripts, the data-parallel launcher, models, data, factories, compile diagnostics and
the backends (the only place a backend's name is compared). The only package that imports torch at module level."""
