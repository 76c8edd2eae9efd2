"""Echoes its argv and exits with the code it is given, as a plain Python script would."""

import sys

print("argv:", sys.argv[1:])
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
