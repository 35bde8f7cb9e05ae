"""`python -m pyrmq.metrics`: the metric table as Markdown."""

from pyrmq.metrics.names import markdown_table

print(markdown_table())
