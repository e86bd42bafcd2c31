"""Entry point: `python -m oracle.mutants` runs the suite against every mutant
(mutants.catalog) and control and prints the kill matrix (harness.killmatrix)."""
import sys

if __name__ == "__main__":
    from harness.killmatrix import main
    sys.exit(main())
