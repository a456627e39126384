"""For people: format (the one copy of the value formatters and of the column table), plots (``collect_*``
DataFrames, then ``plot_*`` figures) and the HTML report."""
