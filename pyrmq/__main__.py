import sys

from pyrmq.cli import main

sys.exit(main())
