import sys

from tools.hwlab.cli import main

sys.exit(main())
