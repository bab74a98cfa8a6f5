"""``python -m nsverify.conventions [options]``: the conventions command alone (what ``nsverify releases`` runs in
each release's environment, which holds torch and mpmath only)."""
import sys

from nsverify.conventions.cli import main_conventions

if __name__ == "__main__":
    sys.exit(main_conventions())
