"""``tf.train.MonitoredTrainingSession`` and session-run hooks: the training loop of TF1
distributed programs (``while not sess.should_stop(): sess.run(train_op)``).

A ``MonitoredSession`` creates a ``tf.Session`` on ``master`` (a ``tf.train.Server``'s
target, or ``""``), initializes the variables or, for a chief with a ``checkpoint_dir``
holding a checkpoint, restores the newest one; runs ``local_variables_initializer``, starts
the graph's queue runners under a Coordinator, and calls the hooks around every ``run``:
``before_run`` may add fetches and feeds, ``after_run`` sees their values and may request
a stop. The chief saves checkpoints (``save_checkpoint_steps`` / ``save_checkpoint_secs``,
and at the end). Leaving the ``with`` block ends the hooks, stops the queue runners and
closes the session; an input pipeline's ``OutOfRangeError`` ends the block quietly, as
in TensorFlow. As in TensorFlow the graph is finalized: build every op first.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from flowjit.v1 import errors
from flowjit.v1.graph import Graph, get_default_graph
from flowjit.v1.session import Session
from flowjit.v1.train.coordinator import Coordinator
from flowjit.v1.train.optimizers import get_global_step
from flowjit.v1.train.queue_runner import start_queue_runners
from flowjit.v1.train.saver import Saver, latest_checkpoint
from flowjit.v1.variables import global_variables_initializer, local_variables_initializer


class SessionRunArgs(NamedTuple):
    """What a hook's ``before_run`` adds to a run: fetches and feeds."""

    fetches: Any
    feed_dict: dict | None = None
    options: Any = None


class SessionRunValues(NamedTuple):
    """The values of a hook's fetches, passed to its ``after_run``."""

    results: Any
    options: Any = None
    run_metadata: Any = None


class SessionRunContext:
    """The run a hook is called around: its ``original_args``, the ``session``, and
    ``request_stop()`` to end the training loop after it."""

    def __init__(self, original_args: SessionRunArgs, session: Session):
        self.original_args = original_args
        self.session = session
        self._stop_requested = False

    def request_stop(self) -> None:
        self._stop_requested = True

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested


class SessionRunHook:
    """A hook of a MonitoredSession; every method is optional."""

    def begin(self) -> None:
        """Called once before the session is created (the graph may still change)."""

    def after_create_session(self, session: Session, coord: Coordinator | None) -> None:
        """Called once the session exists and its variables are initialized or restored."""

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        """Called before each run: fetches and feeds to add to it, or None."""
        return None

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Called after each run with the values of this hook's fetches."""

    def end(self, session: Session) -> None:
        """Called once at the end, before the session closes."""


class StopAtStepHook(SessionRunHook):
    """Request a stop once ``global_step`` reaches ``last_step`` (or ``num_steps`` more than
    when the session started)."""

    def __init__(self, num_steps: int | None = None, last_step: int | None = None):
        if (num_steps is None) == (last_step is None):
            raise ValueError("StopAtStepHook: give exactly one of num_steps and last_step")
        self._num_steps, self._last_step = num_steps, last_step

    def begin(self) -> None:
        self._global_step = get_global_step()
        if self._global_step is None:
            raise RuntimeError("StopAtStepHook needs a global step: tf.train.get_or_create_global_step()")

    def after_create_session(self, session: Session, coord: Coordinator | None) -> None:
        if self._last_step is None:
            self._last_step = int(session.run(self._global_step)) + self._num_steps

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        return SessionRunArgs(self._global_step)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        # The fetched value may precede this run's update: read it again near the end.
        if int(run_values.results) + 1 >= self._last_step and \
                int(run_context.session.run(self._global_step)) >= self._last_step:
            run_context.request_stop()


class CheckpointSaverHook(SessionRunHook):
    """Save the variables to ``checkpoint_dir/model.ckpt-<global step>`` when the session
    starts, every ``save_steps`` runs or ``save_secs`` seconds, and at the end."""

    def __init__(self, checkpoint_dir: str, save_secs: float | None = None, save_steps: int | None = None,
                 saver: Saver | None = None, checkpoint_basename: str = "model.ckpt"):
        if save_secs is None and save_steps is None:
            raise ValueError("CheckpointSaverHook: give save_secs or save_steps")
        self._path = os.path.join(checkpoint_dir, checkpoint_basename)
        self._secs, self._steps, self._saver = save_secs, save_steps, saver

    def begin(self) -> None:
        self._global_step = get_global_step()
        if self._saver is None:
            self._saver = Saver(allow_empty=True)

    def _save(self, session: Session) -> None:
        self._saver.save(session, self._path, global_step=self._global_step)
        self._runs, self._time = 0, time.monotonic()

    def after_create_session(self, session: Session, coord: Coordinator | None) -> None:
        self._save(session)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        self._runs += 1
        if (self._steps is not None and self._runs >= self._steps) or \
                (self._secs is not None and time.monotonic() - self._time >= self._secs):
            self._save(run_context.session)

    def end(self, session: Session) -> None:
        if self._runs:
            self._save(session)


class MonitoredSession:
    """A session that initializes or restores its variables, runs hooks around each
    ``run`` and knows when to stop (see the module doc)."""

    def __init__(self, master: str = "", is_chief: bool = True, checkpoint_dir: str | None = None,
                 hooks: Sequence[SessionRunHook] = (), config: Any = None, scaffold: Any = None,
                 graph: Graph | None = None, stop_grace_period_secs: float = 120):
        self.graph = graph if graph is not None else get_default_graph()
        self._hooks = list(hooks)
        self._grace = stop_grace_period_secs
        with self.graph.as_default():
            init_op = getattr(scaffold, "init_op", None) or global_variables_initializer()
            local_init_op = getattr(scaffold, "local_init_op", None) or local_variables_initializer()
            saver = getattr(scaffold, "saver", None)
            if saver is None and checkpoint_dir is not None:
                saver = Saver(allow_empty=True)
            for hook in self._hooks:
                hook.begin()
        self.graph.finalize()
        self._session = Session(master, graph=self.graph, config=config)
        try:
            restore = latest_checkpoint(checkpoint_dir) if checkpoint_dir is not None else None
            # Only the chief's process runs in flowjit, so whoever creates the session initializes it.
            if restore is not None:
                saver.restore(self._session, restore)
            else:
                self._session.run(init_op)
            self._session.run(local_init_op)
            self._coord = Coordinator(clean_stop_exception_types=(errors.OutOfRangeError,))
            self._threads = start_queue_runners(self._session, coord=self._coord)
            for hook in self._hooks:
                hook.after_create_session(self._session, self._coord)
        except BaseException:
            self._session.close()
            raise
        self._stop = False
        self._closed = False

    def run(self, fetches: Any, feed_dict: dict | None = None, options: Any = None, run_metadata: Any = None) -> Any:
        """``Session.run`` with the hooks' fetches and feeds added; returns ``fetches``' values."""
        if self._closed:
            raise RuntimeError("Run called on a closed MonitoredSession")
        context = SessionRunContext(SessionRunArgs(fetches, feed_dict, options), self._session)
        extra = [hook.before_run(context) for hook in self._hooks]
        feeds = dict(feed_dict or {})
        for hook, args in zip(self._hooks, extra):
            for key, value in ((args.feed_dict or {}) if args is not None else {}).items():
                if key in feeds:
                    raise RuntimeError(f"{type(hook).__name__} feeds {key!r}, which is already fed")
                feeds[key] = value
        hook_fetches = [args.fetches if args is not None else [] for args in extra]
        results, hook_values = self._session.run([fetches, hook_fetches], feeds)
        for hook, values in zip(self._hooks, hook_values):
            hook.after_run(context, SessionRunValues(values, options, run_metadata))
        self._stop = self._stop or context.stop_requested
        return results

    def should_stop(self) -> bool:
        """Whether a hook requested a stop, or the coordinator stopped (input exhausted, an error)."""
        return self._stop or self._coord.should_stop()

    def close(self) -> None:
        """End the hooks, stop the queue runners and close the session."""
        if self._closed:
            return
        self._closed = True
        try:
            for hook in self._hooks:
                hook.end(self._session)
        finally:
            self._coord.request_stop()
            try:
                self._coord.join(self._threads, stop_grace_period_secs=self._grace)
            finally:
                self._session.close()

    def __enter__(self) -> MonitoredSession:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        self.close()
        # As TensorFlow: an input pipeline running out ends the training loop quietly.
        return exc_type is not None and issubclass(exc_type, (errors.OutOfRangeError, StopIteration))


def MonitoredTrainingSession(master: str = "", is_chief: bool = True, checkpoint_dir: str | None = None,  # noqa: N802
                             scaffold: Any = None, hooks: Sequence[SessionRunHook] | None = None,
                             chief_only_hooks: Sequence[SessionRunHook] | None = None,
                             save_checkpoint_secs: float | None = 600, save_summaries_steps: Any = None,
                             save_summaries_secs: Any = None, config: Any = None,
                             stop_grace_period_secs: float = 120, log_step_count_steps: int = 100,
                             max_wait_secs: float = 7200, save_checkpoint_steps: int | None = None,
                             summary_dir: str | None = None) -> MonitoredSession:
    """A MonitoredSession for training, as TensorFlow's: on ``master`` (``server.target``);
    the chief (``is_chief``) initializes or restores the variables from ``checkpoint_dir``,
    runs ``chief_only_hooks`` too, and saves checkpoints there every
    ``save_checkpoint_steps`` runs or ``save_checkpoint_secs`` seconds. Summaries are not
    written here (use tf.summary.FileWriter)."""
    all_hooks = list(hooks or [])
    if is_chief:
        all_hooks += list(chief_only_hooks or [])
        if checkpoint_dir is not None and (save_checkpoint_steps is not None or save_checkpoint_secs is not None):
            all_hooks.append(CheckpointSaverHook(checkpoint_dir, save_secs=None if save_checkpoint_steps is not None
                                                 else save_checkpoint_secs, save_steps=save_checkpoint_steps))
    return MonitoredSession(master, is_chief=is_chief, checkpoint_dir=checkpoint_dir, hooks=all_hooks,
                            config=config, scaffold=scaffold, stop_grace_period_secs=stop_grace_period_secs)
