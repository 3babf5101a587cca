from agpeer.test_util import *  # noqa: F403
