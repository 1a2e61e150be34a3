import os
import sys

try:
    from .cli import run
except KeyboardInterrupt:   # Ctrl-C before the command line is even read: one line, not a traceback
    name = " ".join(sys.argv[1:2])
    print(f"rdx{' ' + name if name else ''}: interrupted.", file=sys.stderr)
    os._exit(130)

run()
