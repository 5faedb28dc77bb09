"""One package per feature (config, help, review, screen, header, dashboard), each exporting
one ``register(app, ...)`` that adds its handlers, commands, jobs and settings section to the
application (:class:`bot.registry.Registry`), or a CLI plug-in (the dashboard's ``campaign-bot
report``).  Features never import each other; the composition root (:mod:`bot.app`) adds them
in order and wires what one tells another."""
