from agpeer.core import make_jvp, make_vjp  # noqa: F401
from agpeer.extend import defjvp, defvjp, primitive, primitive_vjps  # noqa: F401
from agpeer.test_util import VSpace, vspace  # noqa: F401
