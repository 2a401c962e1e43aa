import sys

from rocketstore.cli import main

sys.exit(main())
