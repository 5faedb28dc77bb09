"""``python -m bot.worker_process --wake-fd N --settings-fd M``: the worker process of
``campaign-bot serve`` (its parent starts it; see :func:`bot.app.worker_main`)."""

from bot.app import worker_main

if __name__ == "__main__":
    raise SystemExit(worker_main())
