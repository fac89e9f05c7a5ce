"""The bundle's entry point: the same ``fireside`` command as ``pip install`` gives."""

from __future__ import annotations

import sys

from app.core.llama import native_check

if __name__ == "__main__":
    if sys.argv[1:2] == [native_check.CHILD_FLAG]:  # the bundle checking its llama.cpp
        sys.exit(native_check.main(sys.argv[1:]))
    from app.main import main

    sys.exit(main())
