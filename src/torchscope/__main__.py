"""``python -m torchscope`` runs the CLI."""

import sys

from torchscope.cli.main import main

sys.exit(main())
