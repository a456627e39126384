"""For people: plots (``collect_*`` DataFrames, then ``plot_*`` figures) and the HTML report."""
