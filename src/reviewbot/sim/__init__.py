"""The forge simulator: a stateful fake of the GitHub and Gitea APIs over real HTTP.

``Simulator`` holds the state and the scenario API; ``SimServer`` serves it on loopback:
GitHub under ``/github``, Gitea under ``/gitea/api/v1``, the control API under ``/_sim``.
"""

from reviewbot.sim.clock import ManualClock
from reviewbot.sim.errors import ApiError, ScenarioError
from reviewbot.sim.faults import FaultRule, Faults
from reviewbot.sim.records import RequestRecord
from reviewbot.sim.server import SimServer, build_app
from reviewbot.sim.simulator import Simulator
from reviewbot.sim.state import SimPull, SimRepo, SimReview
from reviewbot.sim.webhooks import Delivery

__all__ = [
    "ApiError",
    "Delivery",
    "FaultRule",
    "Faults",
    "ManualClock",
    "RequestRecord",
    "ScenarioError",
    "SimPull",
    "SimRepo",
    "SimReview",
    "SimServer",
    "Simulator",
    "build_app",
]
