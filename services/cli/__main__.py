"""``python -m services.cli``: the ``speedtier`` command without the console script."""

from services.cli import main

if __name__ == "__main__":
    main()
