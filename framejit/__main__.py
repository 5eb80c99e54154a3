"""`python -m framejit ...`: the same command line as the `framejit` console script (see cli.py)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
