"""`python -m oracle.compare`: the comparison CLI (oracle.compare.cli)."""
from .cli import main
from .isolation.processes import exit_now

# a normal end exits at once (the teardown of torch and the targets' libraries takes a second); a
# crash of main itself still ends through the interpreter, with its traceback
exit_now(main())
