"""The search of the compiled configuration (``tune_compile``): ``search`` holds the entry point and its options,
``space`` the configurations the device supports (``CompileConfig``), ``trials`` the Optuna study and one trial,
``result`` the answer (``CompileSearch``) and its confirmation in alternating rounds."""

from tcbench.tuning.compile_search.search import CompileConfig, CompileSearch, CompileSearchOptions, tune_compile

__all__ = ["tune_compile", "CompileSearchOptions", "CompileSearch", "CompileConfig"]
