"""The inbox: GitHub webhook deliveries in.  The endpoint verifies and stores each delivery
(:mod:`.endpoint`, :mod:`.writer`, :mod:`.delivery`) in the durable store (:mod:`.store`);
the worker (:mod:`.worker`, in its own process: :mod:`.worker_process`) dispatches each one
to the handlers on the router (:mod:`.router`); ``campaign-bot replay`` feeds a saved
delivery through the same check and router (:mod:`.replay`)."""
