"""What a stale writer is told, built from the outcome itself: the copies a run makes of a FENCED
rejection keep every field they do not change (its next step above all: a fenced git push or file
write names the branch or file to read again, not ``fencemigrate state``).
"""

from __future__ import annotations

import inspect

from fencemigrate.errors import Fenced, newer_token_granted, newer_token_wrote

BRANCH = "git:feature/0042"
GIT_STEP = (
    "fetch feature/0042 from origin, read what is there now and re-plan; a push needs a new lease, whose grant "
    "records the branch afresh."
)


def fields(fenced: Fenced) -> dict[str, object]:
    """Every field of ``fenced``, by the name of the constructor argument that sets it."""
    return {name: getattr(fenced, name) for name in inspect.signature(Fenced).parameters}


def test_each_copy_of_a_rejection_keeps_every_field_it_does_not_change() -> None:
    """After autocommit blocks, at the fence token read back, and "only granted": the branch's next step
    (attribute and message) and every other field survive each copy. Before the fix each copy went back
    to "run `fencemigrate state`"."""
    original = Fenced(BRANCH, 34, 35, newer_token_wrote(35, BRANCH), ("0041",), next_step=GIT_STEP)
    assert fields(original) == {
        "resource": BRANCH,
        "token": 34,
        "fence_token": 35,
        "reason": f"token 35 has since written to {BRANCH}",
        "autocommitted": ("0041",),
        "granted_only": False,
        "next_step": GIT_STEP,
    }
    copies = [
        (original.after_autocommit_blocks(("0042", "0043")), {"autocommitted": ("0042", "0043")}),
        (original.at_fence(36), {"fence_token": 36}),
        (original.granted_not_written(), {"reason": newer_token_granted(35, BRANCH), "granted_only": True}),
    ]
    for copy, changed in copies:
        assert fields(copy) == {**fields(original), **changed}
        lines = str(copy).splitlines()
        assert f"Next step: {GIT_STEP}" in lines, lines
        assert not any("fencemigrate state" in line for line in lines), lines
        assert copy.as_json()["message"] == str(copy)

    granted = original.granted_not_written()
    assert str(granted).splitlines()[:2] == [
        f"FENCED: you no longer own {BRANCH}.",
        "Your lease token (34) is older than token 35, which was granted after yours (it has not written yet).",
    ]
