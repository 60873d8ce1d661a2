"""Fenced writes besides the database's: a push to the migration branch and a write to a project file.

Each is a compare-and-swap whose expected value the agent cannot pick: the branch's SHA recorded
when the lease was granted (:mod:`.git_branch`), the hash of the file as the agent read it
(:mod:`.project_files`). A write whose expected value no longer holds is :class:`~fencemigrate.errors.Fenced`.
A push is a fast-forward of the recorded SHA or nothing. Each takes a ``confirm`` callback, called
before the compare-and-swap, with which the MCP server checks that its grant is still the live one.
"""
