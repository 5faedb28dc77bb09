"""One package per feature (config, help, review, screen, header), each exporting one
``register(app, ...)`` that adds its handlers, commands, jobs and settings section to the
application (:class:`bot.registry.Registry`).  Features never import each other; the
composition root (:mod:`bot.app`) adds them in order and wires what one tells another."""
