"""``python -m services.app.cli``: the ``speedtier`` command without the console script."""

from services.app.entry import main

if __name__ == "__main__":
    main()
