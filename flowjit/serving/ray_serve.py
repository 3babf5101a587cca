"""``flowjit serve MODELS --ray [ADDRESS] --replicas N``: the same application as a Ray Serve
deployment of N replicas, each polling the repository, loading and batching on its own;
Ray Serve's proxy spreads the requests over them and its controller replaces a replica that
dies. A local Ray runtime on loopback by default, as ``fj.distributed`` starts one."""

from __future__ import annotations

import signal
import time
from typing import Any

import ray
from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from .server import Config, Metrics, Repository, build_app

# Ray Serve finds a replica dead when a health check fails, and checks every 10 s by default:
# a killed replica's share of requests went unanswered for up to that long before the
# controller started its replacement. A check every 2 s is one cheap actor call.
HEALTH_CHECK_PERIOD_S = 2.0


@serve.deployment(ray_actor_options={"num_cpus": 0}, health_check_period_s=HEALTH_CHECK_PERIOD_S)
class FlowjitReplica:
    """One replica: a repository polled and served by flowjit's ASGI application, called
    with each request Ray Serve's proxy hands it."""

    def __init__(self, models: str, options: dict[str, Any]):
        self.repository = Repository(models, Config(**options), Metrics())
        self.repository.start()
        self.app = build_app(self.repository)

    async def __call__(self, request: Request) -> Response:
        """Run flowjit's application on the request and return its response."""
        started: dict[str, Any] = {}
        body: list[bytes] = []

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                started.update(message)
            elif message["type"] == "http.response.body":
                body.append(message.get("body", b""))
        await self.app(request.scope, request.receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in started.get("headers", [])
                   if k.lower() != b"content-length"}
        return Response(b"".join(body), status_code=started.get("status", 500), headers=headers)


def serve_on_ray(models: str, address: str | None, replicas: int, host: str, port: int,
                 options: dict[str, Any]) -> None:
    """Start (or join, with ``address``) Ray, run ``replicas`` replicas of the application
    behind Ray Serve's proxy on ``host:port``, and block until interrupted."""
    if address:
        ray.init(address=address)
    else:
        ray.init(include_dashboard=False, configure_logging=False, _node_ip_address="127.0.0.1")
    serve.start(http_options={"host": host, "port": port}, detached=False)
    serve.run(FlowjitReplica.options(num_replicas=replicas).bind(models, options), route_prefix="/",
              name="flowjit")
    print(f"flowjit serve: {replicas} replicas of {models} on Ray Serve at http://{host}:{port}", flush=True)

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt   # SIGTERM too shuts the deployment and Ray down, leaving no actor behind
    signal.signal(signal.SIGTERM, stop)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        serve.shutdown()
        ray.shutdown()
