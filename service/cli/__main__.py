"""``python -m service.cli``: the ``perceptron`` command (as ``python -m service.cli.main``)."""

from service.cli.main import main

raise SystemExit(main())
