"""`python -m aisql ...`: the same CLI as `aisql ...`."""

from aisql.cli import main

if __name__ == "__main__":
    main()
