#!/bin/sh
# Exit-code contract probe: 0 good, 1 bad (buffer grew beyond 200 KiB).
python -c "import sys, tinypkg; sys.exit(1 if tinypkg.BUFFER_KIB > 200 else 0)"
