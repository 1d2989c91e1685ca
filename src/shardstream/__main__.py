"""``python -m shardstream``: the ``shardstream`` command line."""

import sys

from shardstream.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
