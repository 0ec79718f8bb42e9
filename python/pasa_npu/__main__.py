"""``python -m pasa_npu``: the same as the ``pasa-npu`` command."""

import sys

from .cli import main

sys.exit(main())
