import sys

from tools.packet_trace.cli import main

sys.exit(main())
