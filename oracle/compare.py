"""Entry point: `python -m oracle.compare --optimizer adamw` (see harness.cli)."""
import sys

if __name__ == "__main__":
    from harness.cli import main
    sys.exit(main())
