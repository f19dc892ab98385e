import sys

from pipelink.cli import main

sys.exit(main())
