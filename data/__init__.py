"""The shipped data: the built-in task (data/task/), its tokenizer and the instance profiles (profiles.json).

In a checkout this is data/ beside the package; a wheel carries it as tcbench/data/ (tcbench.core.profiles.data_dir).
"""
