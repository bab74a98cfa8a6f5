import sys

from nsverify.cli import main

sys.exit(main())
