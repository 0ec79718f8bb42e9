"""``python -m pasa_npu``: the same as the ``pasa-npu`` command."""

import sys

from .cli import main

if __name__ == "__main__":  # guarded: spawned accuracy workers import this module again
    sys.exit(main())
