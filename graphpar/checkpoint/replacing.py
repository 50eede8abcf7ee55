"""Replace on commit: saving over an existing checkpoint never leaves fewer complete checkpoints than before.

``save_checkpoint(net, "model.ckpt")`` over an existing ``model.ckpt`` writes the new checkpoint whole under a
sibling name, ``model.ckpt.graphpar-new`` (orbax's temporary directory and rename, then the manifest: from then on
the new checkpoint is committed), and only then swaps it in by two renames, the old one to ``model.ckpt.graphpar-old``
and the new one to ``model.ckpt``; the old one is deleted last. A process killed at any point leaves:

===========================  ===================================================  ===================
killed                       on disk                                              ``committed(name)``
===========================  ===================================================  ===================
while the new one is written the old one at ``name``, an incomplete ``.graphpar-new``  the old one
after the new manifest       the old one at ``name``, the new one ``.graphpar-new``   the new one
between the two renames      the old one ``.graphpar-old``, the new ``.graphpar-new`` the new one
while the old one is deleted the new one at ``name``, part of ``.graphpar-old``       the new one
===========================  ===================================================  ===================

Readers resolve a name with :func:`committed`; :func:`settle` (run by the next save of that name, and by
``ModelCheckpoint``'s clean-up when training begins) finishes an interrupted swap. A name that holds something
other than a graphpar checkpoint (a MindSpore ``.ckpt`` file, an unrelated folder) is never replaced:
:func:`check_replaceable` refuses it by name, where MindSpore's ``save_checkpoint`` would overwrite a file.
"""

from __future__ import annotations

import os
import re
import shutil

from graphpar.checkpoint import manifest
from graphpar.checkpoint.errors import CheckpointError

STAGED = ".graphpar-new"  # the new checkpoint, written whole before it replaces the old one
RETIRED = ".graphpar-old"  # the old checkpoint between the two renames, deleted last
ORBAX_METADATA = "_CHECKPOINT_METADATA"  # orbax writes it into every checkpoint it commits
ORBAX_TMP = ".orbax-checkpoint-tmp"  # orbax writes into ``{name}{ORBAX_TMP}`` and renames it to ``name`` on commit


def committed(path: str) -> str:
    """The directory that holds the committed checkpoint named ``path`` (itself, unless a replacement of it was
    interrupted after the new checkpoint's manifest was written)."""
    if manifest.is_complete(path + STAGED):
        return path + STAGED
    if not os.path.exists(path) and manifest.is_complete(path + RETIRED):
        return path + RETIRED
    return path


def check_replaceable(path: str) -> None:
    """Refuse to save over ``path`` unless it is absent or a graphpar checkpoint (complete, or a save of one that
    was interrupted after orbax committed its files)."""
    if not os.path.lexists(path):
        return
    fix = "Save under another name, or remove it yourself first if it is no longer needed"
    if not os.path.isdir(path) or os.path.islink(path):
        raise CheckpointError(path, "is a file (a MindSpore checkpoint file?), not a graphpar checkpoint directory; "
                              "save_checkpoint replaces only a graphpar checkpoint of that name", fix)
    if not any(os.path.exists(os.path.join(path, name)) for name in (manifest.MANIFEST, ORBAX_METADATA)):
        raise CheckpointError(path, f"is a folder that is not a graphpar checkpoint (it has no {manifest.MANIFEST} "
                              f"and no orbax {ORBAX_METADATA}); save_checkpoint replaces only a graphpar checkpoint "
                              "of that name", fix)


def staging(path: str) -> str:
    """Where the new checkpoint named ``path`` is written: ``path`` itself when nothing is there (orbax's own
    temporary directory and rename make that atomic), else the sibling :data:`STAGED` name."""
    return path + STAGED if os.path.exists(path) else path


def swap(staged: str, path: str) -> None:
    """Put the committed checkpoint ``staged`` at ``path`` (two renames), then delete the one it replaces."""
    retired = path + RETIRED
    if os.path.exists(retired):
        shutil.rmtree(retired)
    if os.path.exists(path):
        os.rename(path, retired)
    os.rename(staged, path)
    shutil.rmtree(retired, ignore_errors=True)


def settle(path: str) -> None:
    """Finish what an interrupted replacement of ``path`` left (call only when no save of ``path`` is in flight):
    a committed new checkpoint is swapped in, an incomplete one removed, a leftover old one deleted."""
    staged, retired = path + STAGED, path + RETIRED
    if manifest.is_complete(staged):
        swap(staged, path)
    elif os.path.exists(staged):
        shutil.rmtree(staged, ignore_errors=True)
    if not os.path.exists(path) and manifest.is_complete(retired):
        os.rename(retired, path)
    elif os.path.exists(retired):
        shutil.rmtree(retired, ignore_errors=True)


def settle_directory(directory: str, pattern: re.Pattern) -> list[str]:
    """:func:`settle` every checkpoint of ``directory`` named like ``pattern`` whose replacement was interrupted
    (and remove orbax's temporary directories of new ones it never committed); returns their paths."""
    if not os.path.isdir(directory):
        return []
    listed = os.listdir(directory)
    for name in listed:
        if STAGED + ORBAX_TMP in name and pattern.match(name.split(STAGED)[0]):
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
    names = sorted({n[:-len(suffix)] for n in listed for suffix in (STAGED, RETIRED)
                    if n.endswith(suffix) and pattern.match(n[:-len(suffix)])})
    for name in names:
        settle(os.path.join(directory, name))
    return [os.path.join(directory, n) for n in names]
