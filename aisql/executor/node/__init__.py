"""One AI node at run time: answers by argument tuple, the decision rule, the bound DuckDB function."""
