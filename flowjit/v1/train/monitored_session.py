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

``MonitoredTrainingSession``'s chief also writes TensorBoard files into ``summary_dir``
(default: ``checkpoint_dir``), as TensorFlow's does: the merged summaries every
``save_summaries_steps`` global steps (100 by default; ``SummarySaverHook``) and the
training speed, ``global_step/sec``, every ``log_step_count_steps`` (``StepCounterHook``).
``LoggingTensorHook`` logs tensors' values every so many runs or seconds, and
``NanTensorHook`` stops training (or raises ``NanLossDuringTrainingError``) at a NaN loss.
Hooks log through the ``flowjit.v1`` logger.
"""


from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from flowjit.summary.writer import scalar_summary
from flowjit.v1 import errors
from flowjit.v1.graph import Graph, get_default_graph
from flowjit.v1.session import Session
from flowjit.v1.summary import FileWriter, FileWriterCache, merge_all
from flowjit.v1.train.coordinator import Coordinator
from flowjit.v1.train.optimizers import get_global_step
from flowjit.v1.train.queue_runner import start_queue_runners
from flowjit.v1.train.saver import Saver, latest_checkpoint
from flowjit.v1.variables import global_variables_initializer, local_variables_initializer

_log = logging.getLogger("flowjit.v1")
USE_DEFAULT = object()   # MonitoredTrainingSession's default for the summaries' period, as TensorFlow's


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


class SecondOrStepTimer:
    """Triggers once every ``every_secs`` seconds or every ``every_steps`` steps (exactly one),
    and at the first step it is asked about."""

    def __init__(self, every_secs: float | None = None, every_steps: int | None = None):
        if (every_secs is None) == (every_steps is None):
            raise ValueError("SecondOrStepTimer: give exactly one of every_secs and every_steps")
        if every_steps is not None and every_steps <= 0:
            raise ValueError(f"SecondOrStepTimer(every_steps={every_steps!r}): give a number of steps above 0")
        self._secs, self._steps = every_secs, every_steps
        self.reset()

    def reset(self) -> None:
        self._last_step: int | None = None
        self._last_time: float | None = None

    def should_trigger_for_step(self, step: int) -> bool:
        """Whether ``step`` is due: the first one asked about, or the period has passed since
        the last triggered one (never the same step twice)."""
        if self._last_step is None:
            return True
        if step == self._last_step:
            return False
        if self._secs is not None:
            return time.monotonic() >= self._last_time + self._secs
        return step >= self._last_step + self._steps

    def update_last_triggered_step(self, step: int) -> tuple[float | None, int | None]:
        """Record ``step`` as triggered now: the seconds and steps since the last one (None, None at the first)."""
        now = time.monotonic()
        since = (None, None) if self._last_time is None else (now - self._last_time, step - self._last_step)
        self._last_step, self._last_time = step, now
        return since

    def last_triggered_step(self) -> int | None:
        return self._last_step


class LoggingTensorHook(SessionRunHook):
    """Log the values of ``tensors`` (a dict of tag -> tensor or tensor name, or a list of
    them) every ``every_n_iter`` runs or ``every_n_secs`` seconds, and with ``at_end`` once
    more at the end: ``loss = 0.25, step = 10 (0.131 sec)``; ``formatter(values)`` makes the
    line instead."""

    def __init__(self, tensors: dict[str, Any] | Sequence[Any], every_n_iter: int | None = None,
                 every_n_secs: float | None = None, at_end: bool = False,
                 formatter: Callable[[dict[str, Any]], str] | None = None):
        only_at_end = at_end and every_n_iter is None and every_n_secs is None
        if not only_at_end and (every_n_iter is None) == (every_n_secs is None):
            raise ValueError("LoggingTensorHook: give at_end and/or exactly one of every_n_iter and every_n_secs")
        if every_n_iter is not None and every_n_iter <= 0:
            raise ValueError(f"LoggingTensorHook(every_n_iter={every_n_iter!r}): give a number of runs above 0")
        if isinstance(tensors, dict):
            self._order, self._tensors = sorted(tensors), dict(tensors)
        else:
            self._order = [t if isinstance(t, str) else t.name for t in tensors]
            self._tensors = dict(zip(self._order, tensors))
        self._timer = None if only_at_end else SecondOrStepTimer(every_secs=every_n_secs, every_steps=every_n_iter)
        self._at_end, self._formatter = at_end, formatter

    def begin(self) -> None:
        graph = get_default_graph()
        self._fetches = {tag: graph.as_graph_element(t) for tag, t in self._tensors.items()}
        self._iter = 0
        if self._timer is not None:
            self._timer.reset()

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        self._due = self._timer is not None and self._timer.should_trigger_for_step(self._iter)
        return SessionRunArgs(self._fetches) if self._due else None

    def _log(self, values: dict[str, Any]) -> None:
        elapsed = self._timer.update_last_triggered_step(self._iter)[0] if self._timer is not None else None
        if self._formatter is not None:
            _log.info("%s", self._formatter(values))
            return
        with np.printoptions(suppress=True):
            line = ", ".join(f"{tag} = {values[tag]}" for tag in self._order)
        if elapsed is None:
            _log.info("%s", line)
        else:
            _log.info("%s (%.3f sec)", line, elapsed)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        if self._due:
            self._log(run_values.results)
        self._iter += 1

    def end(self, session: Session) -> None:
        if self._at_end:
            self._log(session.run(self._fetches))


class NanLossDuringTrainingError(RuntimeError):
    """Raised by ``NanTensorHook`` when the loss it watches is NaN."""

    def __str__(self) -> str:
        return "NaN loss during training."


class NanTensorHook(SessionRunHook):
    """Watch ``loss_tensor`` at every run; when it is NaN, raise ``NanLossDuringTrainingError``
    (``fail_on_nan_loss``) or log a warning and request a stop."""

    def __init__(self, loss_tensor: Any, fail_on_nan_loss: bool = True):
        self._loss, self._fail = loss_tensor, fail_on_nan_loss

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        return SessionRunArgs(self._loss)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        if np.isnan(run_values.results).any():
            if self._fail:
                _log.error("Model diverged with loss = NaN.")
                raise NanLossDuringTrainingError
            _log.warning("Model diverged with loss = NaN.")
            run_context.request_stop()


def _writer_for(output_dir: str | None, summary_writer: FileWriter | None) -> FileWriter | None:
    if summary_writer is not None:
        return summary_writer
    return FileWriterCache.get(output_dir) if output_dir is not None else None


def _global_step_of(hook: str) -> Any:
    step = get_global_step()
    if step is None:
        raise RuntimeError(f"{hook} needs a global step: tf.train.get_or_create_global_step() (a "
                           "MonitoredTrainingSession with a checkpoint_dir or summary_dir adds it to write "
                           "summaries there; pass save_summaries_steps=0 and log_step_count_steps=0 to write none)")
    return step


class StepCounterHook(SessionRunHook):
    """Write the training speed, ``global_step/sec``, into ``output_dir`` (or
    ``summary_writer``) and the log every ``every_n_steps`` global steps (or
    ``every_n_secs`` seconds)."""

    def __init__(self, every_n_steps: int | None = 100, every_n_secs: float | None = None,
                 output_dir: str | None = None, summary_writer: FileWriter | None = None):
        if (every_n_steps is None) == (every_n_secs is None):
            raise ValueError("StepCounterHook: give exactly one of every_n_steps and every_n_secs")
        self._timer = SecondOrStepTimer(every_steps=every_n_steps, every_secs=every_n_secs)
        self._output_dir, self._given_writer = output_dir, summary_writer

    def begin(self) -> None:
        self._writer = _writer_for(self._output_dir, self._given_writer)
        self._step = _global_step_of("StepCounterHook")
        self._tag = self._step.op.name + "/sec"
        self._timer.reset()

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        return SessionRunArgs(self._step)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        # The fetched step may precede this run's update: read it again when one is due.
        if not self._timer.should_trigger_for_step(int(run_values.results) + 1):
            return
        step = int(run_context.session.run(self._step))
        if self._timer.should_trigger_for_step(step):
            seconds, steps = self._timer.update_last_triggered_step(step)
            if seconds:
                rate = steps / seconds
                if self._writer is not None:
                    self._writer.add_summary(scalar_summary(self._tag, rate), step)
                _log.info("%s: %g", self._tag, rate)

    def end(self, session: Session) -> None:
        if self._writer is not None:
            self._writer.flush()


class SummarySaverHook(SessionRunHook):
    """Run ``summary_op`` (or the ``scaffold``'s, by default ``tf.summary.merge_all()``) every
    ``save_steps`` global steps or ``save_secs`` seconds, and at the first run, and write it
    into ``output_dir`` (or ``summary_writer``) at the global step after that run."""

    def __init__(self, save_steps: int | None = None, save_secs: float | None = None, output_dir: str | None = None,
                 summary_writer: FileWriter | None = None, scaffold: Any = None, summary_op: Any = None):
        if (scaffold is None) == (summary_op is None):
            raise ValueError("SummarySaverHook: give exactly one of scaffold and summary_op")
        self._timer = SecondOrStepTimer(every_steps=save_steps, every_secs=save_secs)
        self._output_dir, self._given_writer = output_dir, summary_writer
        self._scaffold, self._op = scaffold, summary_op

    def begin(self) -> None:
        self._writer = _writer_for(self._output_dir, self._given_writer)
        self._step = _global_step_of("SummarySaverHook")
        if self._op is None:
            self._op = getattr(self._scaffold, "summary_op", None)
            if self._op is None:
                self._op = merge_all()
        self._next: int | None = None
        self._timer.reset()

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        self._due = self._next is None or self._timer.should_trigger_for_step(self._next)
        fetches = {"global_step": self._step}
        if self._due and self._op is not None:
            fetches["summary"] = self._op
        return SessionRunArgs(fetches)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        step = int(run_values.results["global_step"]) + 1
        if self._next is None or self._due:
            step = int(run_context.session.run(self._step))
        if self._due:
            self._timer.update_last_triggered_step(step)
            if "summary" in run_values.results and self._writer is not None:
                self._writer.add_summary(run_values.results["summary"], step)
        self._next = step + 1

    def end(self, session: Session) -> None:
        if self._writer is not None:
            self._writer.flush()


class Scaffold:
    """``tf.train.Scaffold``: what a MonitoredSession initializes and saves with: ``init_op``
    (default: every global variable's initializer), ``local_init_op``, ``saver`` and
    ``summary_op`` (default: ``tf.summary.merge_all()``), filled in by ``finalize``."""

    def __init__(self, init_op: Any = None, init_feed_dict: Any = None, init_fn: Any = None, ready_op: Any = None,
                 ready_for_local_init_op: Any = None, local_init_op: Any = None, summary_op: Any = None,
                 saver: Saver | None = None, copy_from_scaffold: Scaffold | None = None):
        base = copy_from_scaffold
        self.init_op = init_op if init_op is not None else getattr(base, "init_op", None)
        self.local_init_op = local_init_op if local_init_op is not None else getattr(base, "local_init_op", None)
        self.summary_op = summary_op if summary_op is not None else getattr(base, "summary_op", None)
        self.saver = saver if saver is not None else getattr(base, "saver", None)
        self.init_feed_dict, self.init_fn = init_feed_dict, init_fn
        self.ready_op, self.ready_for_local_init_op = ready_op, ready_for_local_init_op
        self._finalized = False

    def finalize(self) -> None:
        """Make the ops not given (before the graph is finalized)."""
        if self._finalized:
            return
        if self.init_op is None:
            self.init_op = global_variables_initializer()
        if self.local_init_op is None:
            self.local_init_op = local_variables_initializer()
        if self.summary_op is None:
            self.summary_op = merge_all()
        if self.saver is None:
            self.saver = Saver(allow_empty=True)
        self._finalized = True


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
            if hasattr(scaffold, "finalize"):
                scaffold.finalize()
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
                self._session.run(init_op, getattr(scaffold, "init_feed_dict", None))
                if getattr(scaffold, "init_fn", None) is not None:
                    scaffold.init_fn(scaffold, self._session)
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
                             save_checkpoint_secs: float | None = 600, save_summaries_steps: Any = USE_DEFAULT,
                             save_summaries_secs: Any = USE_DEFAULT, config: Any = None,
                             stop_grace_period_secs: float = 120, log_step_count_steps: int = 100,
                             max_wait_secs: float = 7200, save_checkpoint_steps: int | None = None,
                             summary_dir: str | None = None) -> MonitoredSession:
    """A MonitoredSession for training, as TensorFlow's: on ``master`` (``server.target``);
    the chief (``is_chief``) initializes or restores the variables from ``checkpoint_dir``,
    runs ``chief_only_hooks`` too, and saves checkpoints there every
    ``save_checkpoint_steps`` runs or ``save_checkpoint_secs`` seconds; into ``summary_dir``
    (default: ``checkpoint_dir``) it writes the merged summaries every
    ``save_summaries_steps`` global steps (100 unless ``save_summaries_secs`` is given) and
    ``global_step/sec`` every ``log_step_count_steps``."""
    if save_summaries_steps is USE_DEFAULT and save_summaries_secs is USE_DEFAULT:
        save_summaries_steps, save_summaries_secs = 100, None
    elif save_summaries_secs is USE_DEFAULT:
        save_summaries_secs = None
    elif save_summaries_steps is USE_DEFAULT:
        save_summaries_steps = None
    scaffold = scaffold if scaffold is not None else Scaffold()
    summary_dir = summary_dir if summary_dir is not None else checkpoint_dir
    all_hooks = list(hooks or [])
    if is_chief:
        all_hooks += list(chief_only_hooks or [])
        if summary_dir is not None and ((save_summaries_steps or 0) > 0 or (save_summaries_secs or 0) > 0):
            all_hooks.append(SummarySaverHook(save_steps=save_summaries_steps or None,
                                              save_secs=None if save_summaries_steps else save_summaries_secs,
                                              output_dir=summary_dir, scaffold=scaffold))
        if checkpoint_dir is not None and (save_checkpoint_steps is not None or save_checkpoint_secs is not None):
            all_hooks.append(CheckpointSaverHook(checkpoint_dir, save_secs=None if save_checkpoint_steps is not None
                                                 else save_checkpoint_secs, save_steps=save_checkpoint_steps))
    if summary_dir is not None and log_step_count_steps and log_step_count_steps > 0:
        all_hooks.append(StepCounterHook(every_n_steps=log_step_count_steps, output_dir=summary_dir))
    return MonitoredSession(master, is_chief=is_chief, checkpoint_dir=checkpoint_dir, hooks=all_hooks,
                            config=config, scaffold=scaffold, stop_grace_period_secs=stop_grace_period_secs)
