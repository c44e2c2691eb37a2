import sys

from profscope.cli import main

sys.exit(main())
