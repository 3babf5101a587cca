"""The one error of ``flowjit validate``'s inputs."""

from __future__ import annotations

from flowjit.ir.errors import FlowjitError


class ValidateError(FlowjitError):
    """A validation input is unusable (a file that does not parse, a schema naming a feature
    twice, an artifact that is not a compiled model, a metric that does not apply): the
    message names the file and the problem; the command line exits with status 2 and
    writes nothing."""
