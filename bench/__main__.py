"""``python -m bench``: the command line of :mod:`bench.run.cli`."""

from bench.run.cli import main

if __name__ == "__main__":
    main()
