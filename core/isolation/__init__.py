"""toolwire.isolation: the one supervised child process every child of toolwire is.

Untrusted work (a chat template's render, a workspace search's pattern) and native
code that may crash (a model in llama.cpp, its repack probe) run in a child process
that toolwire starts, talks to and ends in one way (:mod:`.supervisor`): started by
one long-lived thread through a launcher that makes it die with toolwire
(:mod:`.launcher`), a JSON-lines pipe away from its standard output, and one
description of how it ended. Jobs of untrusted work run in warm children that are
reused (:mod:`.jobs`, their main loop in :mod:`.job_child`), each job bounded from
the outside: an address-space limit, a CPU limit and a wall deadline, a child that
passes one killed and replaced.
"""
