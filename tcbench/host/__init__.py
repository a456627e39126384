"""This machine: the environment stored with every run, private paths, processes, the peak-FLOPs probe,
installed requirements and ``tcbench doctor``."""
