"""Fail early, with one clear line, on a Python older than tenure supports."""

import sys

if sys.version_info < (3, 11):
    sys.exit(f"tenure needs Python >= 3.11; {sys.executable} is {sys.version.split()[0]}")
