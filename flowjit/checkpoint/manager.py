"""``CheckpointManager``: numbered checkpoints in one directory, the newest few kept."""

from __future__ import annotations

import contextlib
import operator
import os
import re
import warnings
from pathlib import Path
from typing import Any

from flowjit.checkpoint.safetensors_format import CheckpointError, CheckpointWarning, CorruptCheckpointError
from flowjit.checkpoint.saving import remove_temporary, restore, save, stale_temporaries

SUFFIX = ".safetensors"


class CheckpointManager:
    """Saves ``<prefix>-<step>.safetensors`` files into ``directory`` and keeps the
    ``max_to_keep`` of highest step (``None`` keeps all). Each save is atomic, so after a
    crash ``latest`` is the last complete save; the directory is the only state (no index
    file to go stale), and hidden temporaries of killed saves are never mistaken for
    checkpoints and are removed by the next save."""

    def __init__(self, directory: str | os.PathLike[str], max_to_keep: int | None = 5, prefix: str = "ckpt"):
        if max_to_keep is not None and operator.index(max_to_keep) < 1:
            raise ValueError(f"max_to_keep must be at least 1 (or None to keep all), not {max_to_keep}")
        if not prefix or "/" in prefix or os.sep in prefix:
            raise ValueError(f"prefix must be a non-empty file name without separators, not {prefix!r}")
        self.directory = Path(directory)
        self.max_to_keep = max_to_keep
        self.prefix = prefix
        self._name_re = re.compile(rf"^{re.escape(prefix)}-(\d+){re.escape(SUFFIX)}$")

    def path_for(self, step: int) -> Path:
        """The file the checkpoint of ``step`` is (or would be) saved to."""
        return self.directory / f"{self.prefix}-{step}{SUFFIX}"

    @property
    def checkpoints(self) -> list[Path]:
        """The checkpoint files present, oldest (lowest step) first."""
        found = []
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.directory):
                m = self._name_re.match(entry.name)
                if m and entry.is_file():
                    found.append((int(m[1]), Path(entry.path)))
        return [path for _, path in sorted(found)]

    @property
    def latest(self) -> Path | None:
        """The checkpoint of highest step, or None when there is none."""
        checkpoints = self.checkpoints
        return checkpoints[-1] if checkpoints else None

    def save(self, state: Any, step: int, metadata: dict[str, Any] | None = None) -> Path:
        """Save ``state`` as the checkpoint of ``step`` (a non-negative int) with ``metadata``,
        then delete the lowest-step checkpoints beyond ``max_to_keep``. Returns its path."""
        step = operator.index(step)
        if step < 0:
            raise ValueError(f"checkpoint steps are non-negative, not {step}")
        for leftover in stale_temporaries(self.directory, self._name_re):
            remove_temporary(leftover)
        path = save(self.path_for(step), state, step=step, metadata=metadata)
        if self.max_to_keep is not None:
            for old in self.checkpoints[:-self.max_to_keep]:
                with contextlib.suppress(FileNotFoundError):  # another process pruned it first
                    old.unlink()
        return path

    def restore(self, state: Any, path: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
        """Restore ``state`` from the newest checkpoint that verifies, or from ``path`` when
        given (that file or an error). Returns the checkpoint's metadata (as
        ``fj.checkpoint.restore``) with ``"path"``, the file restored; or None, ``state``
        untouched, when there is no checkpoint yet.

        A damaged checkpoint (``CorruptCheckpointError``: truncated, not safetensors, a
        tensor failing its checksum) or one that cannot be read (an ``OSError``) is skipped
        for the next older one, with a ``CheckpointWarning`` naming it and why; when none
        verifies, a ``CorruptCheckpointError`` lists them all and nothing is restored. A
        sound checkpoint that does not match ``state`` stops the search (a
        ``CheckpointError``): the program changed, and an older file would not fit either."""
        if path is not None:
            return {**restore(path, state), "path": Path(path)}
        candidates = self.checkpoints[::-1]
        if not candidates:
            return None
        skipped: list[tuple[Path, str]] = []
        for candidate in candidates:
            try:
                metadata = restore(candidate, state)
            except CorruptCheckpointError as e:
                skipped.append((candidate, str(e)))
            except FileNotFoundError:
                skipped.append((candidate, "it was deleted while being restored (a save of another process "
                                           "pruned it)"))
            except OSError as e:
                skipped.append((candidate, f"it cannot be read ({e})"))
            except CheckpointError:
                _warn_skipped(skipped, f"and stopped at {candidate}, which does not match the state")
                raise
            else:
                _warn_skipped(skipped, f"restoring {candidate}, the newest checkpoint that verifies")
                return {**metadata, "path": candidate}
        raise CorruptCheckpointError(
            f"none of the {len(candidates)} checkpoint{'s' if len(candidates) > 1 else ''} in {self.directory} "
            "verifies; nothing was restored:\n  " + "\n  ".join(f"{p}: {why}" for p, why in skipped)
            + "\nrestore one of them by path (CheckpointManager.restore(state, path)) to see its error alone, "
              "or start from scratch")


def _warn_skipped(skipped: list[tuple[Path, str]], then: str) -> None:
    """One ``CheckpointWarning`` per checkpoint ``CheckpointManager.restore`` skipped."""
    for path, why in skipped:
        warnings.warn(CheckpointWarning(f"skipped {path}: {why}; {then}"), stacklevel=3)
