"""`python -m oracle.compare`: the comparison CLI (oracle.compare.cli)."""
import sys

from .cli import main

sys.exit(main())
