"""`python -m oracle.mutants`: run the suite against every mutant and control
and print the kill matrix (oracle.mutants.killmatrix)."""
import sys

from .killmatrix import main

sys.exit(main())
