import os
import sys

try:
    from .cli import run
except KeyboardInterrupt:   # Ctrl-C before the command line is even read: one line, not a traceback
    print(f"rdx {' '.join(sys.argv[1:2])}: interrupted.", file=sys.stderr)
    os._exit(130)

run()
