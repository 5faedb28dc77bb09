"""``campaign-bot sandbox``: the whole product on one machine, without GitHub.

A local GitHub (:mod:`sandbox.github_double`, a real HTTP server with real git), a campaign
repository on it, ``campaign-bot serve`` and a runner that executes screens against the
stand-in model server (:mod:`runners.standin`), driven from a small local web page
(:mod:`sandbox.page`).  It composes ``bot`` and ``runners`` through their public command
lines only (subprocesses), so it imports neither.
"""
