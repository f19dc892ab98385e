import sys

from pipelink.linker.cli import main

sys.exit(main())
